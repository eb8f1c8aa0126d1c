"""cuflow: a GPU array library over CuPy that makes the fast path the default.

* :class:`darray` subclasses ``cupy.ndarray``; every op takes ``dst=`` (write
  into a preallocated output, allocate nothing) and ``stream=``.
* :class:`Stream` is a context manager (``with s:`` makes it current);
  :class:`Event` marks a point in a stream's work.
* ``import cuflow as cp`` runs CuPy code: names cuflow does not define are
  forwarded to CuPy, with array results returned as darrays.
* The namespace follows the Python array API standard (version
  ``__array_api_version__``): ``x.__array_namespace__()`` is this module.

Importing cuflow imports neither CuPy nor touches the GPU; the backend (CuPy
when a GPU is usable, else NumPy with a warning, or ``CUFLOW_BACKEND``) is
chosen on first use.
"""

from __future__ import annotations

import sys as _sys

import numpy as _np

from . import debug, fusion, graph, image, kernels, memory, testing
from ._errors import (
    ArgumentError, ArgumentIndexError, ArgumentOverflowError, ArgumentTypeError,
    ArgumentZeroDivisionError, AxisError, BackendError, CudaError, CuflowError, DeviceError,
    DLPackCopyError, DstDtypeError, DstError, DstShapeError, DstTypeError, KernelCompileError,
    LinAlgError, OutOfMemoryError,
)
from ._forward import forward as _forward
from ._forward import install_submodules as _install_submodules
from ._info import backend_info
from ._instrument import annotate
from ._instrument import from_environment as _instrument_from_env
from .core import (  # noqa: A004
    add, subtract, multiply, divide, true_divide, floor_divide, remainder, mod, fmod, divmod,
    power, pow, float_power, negative, positive, absolute, abs, fabs, sign, reciprocal, square,
    sqrt, cbrt, maximum, minimum, fmax, fmin, heaviside, gcd, lcm, copysign, nextafter,
    spacing, ldexp, frexp, modf, hypot, rint, floor, ceil, trunc, conjugate, conj, exp, exp2,
    expm1, log, log2, log10, log1p, logaddexp, logaddexp2, sin, cos, tan, arcsin, asin, arccos,
    acos, arctan, atan, arctan2, atan2, sinh, cosh, tanh, arcsinh, asinh, arccosh, acosh,
    arctanh, atanh, deg2rad, rad2deg, degrees, radians, equal, not_equal, less, less_equal,
    greater, greater_equal, logical_and, logical_or, logical_xor, logical_not, bitwise_and,
    bitwise_or, bitwise_xor, invert, bitwise_invert, bitwise_not, left_shift,
    bitwise_left_shift, right_shift, bitwise_right_shift, bitwise_count, isfinite, isinf,
    isnan, isnat, signbit, where, sum, prod, mean, std, var, min, max, argmin, argmax, any, all,
    empty, zeros, ones, full, empty_like, zeros_like, ones_like, full_like, arange, linspace,
    eye, identity, asarray, array, from_dlpack, asnumpy, as_darray, copy, astype, flatten,
    ravel, reshape, transpose, ascontiguousarray, concatenate, stack, matmul, dot, clip,
    around, round, cumsum, cumprod, sort, argsort, take, take_along_axis,
)
from .core import (
    Device, Event, Stream, current_stream, get_backend, set_backend, streams, synchronize,
)
from .core import _fft as _core_fft
from .core import _linalg as _core_linalg
from .core._info import (
    __array_namespace_info__, can_cast, finfo, iinfo, isdtype, result_type,
)
from .fusion import FuseOptions, TraceError, fuse
from .pipeline import Bufferizer, BufferizerError, Pipeline, PipelineOptions

__version__ = "0.1.0"
__array_api_version__ = "2025.12"
__array_api_versions__ = ("2023.12", "2024.12", "2025.12")

# dtypes and constants are NumPy's own objects (as in CuPy)
from numpy import (  # noqa: E402
    bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, float32, float64,
    complex64, complex128, intp, uintp, byte, ubyte, short, ushort, intc, uintc, longlong,
    ulonglong, half, single, double, csingle, cdouble, dtype, generic, number, integer,
    signedinteger, unsignedinteger, floating, complexfloating, inexact, newaxis, pi, e, inf,
    nan, euler_gamma, promote_types, issubdtype, ndim, shape, size,
)
bool = _np.bool_  # noqa: A001  (the array API's name for the boolean dtype)

_SUBMODULES = _install_submodules(__name__, {"linalg": _core_linalg, "fft": _core_fft,
                                             "random": None})
linalg = _SUBMODULES["linalg"]
fft = _SUBMODULES["fft"]
random = _SUBMODULES["random"]


def get_array_module(*args: object) -> object:
    """``cuflow`` if any argument is an array of the GPU backend (or a darray), else ``numpy``.

    Code written as ``xp = cp.get_array_module(x)`` then gets darray results.

    Parameters
    ----------
    *args
        Arrays or other values.

    Returns
    -------
    module
        ``cuflow`` or ``numpy``.
    """
    b = get_backend()
    for a in args:
        if isinstance(a, b.darray) or (b.is_gpu and isinstance(a, b.ndarray)):
            return _sys.modules[__name__]
    return _np


def is_available() -> bool:
    """Whether arrays live on a GPU: CuPy's ``is_available()`` on the CuPy backend, False on
    the NumPy backend (so CuPy code that picks a CPU fallback with it picks one there).

    Returns
    -------
    bool
    """
    b = get_backend()
    return b.is_gpu and b.xp.is_available()  # (``bool`` here is the array API's dtype)


def get_default_memory_pool() -> object:
    """The pool that serves CuPy's allocations, with CuPy's ``MemoryPool`` methods
    (``used_bytes``, ``total_bytes``, ``free_bytes``, ``n_free_blocks``,
    ``free_all_blocks``, ``set_limit``, ``get_limit``).

    cuflow's pool (:func:`cuflow.memory.get_pool`, of the current device) where it is
    CuPy's allocator, which it is unless ``CUFLOW_POOL=off``: CuPy's own default pool then
    sits idle, and its figures and limits would be of nothing.  With ``CUFLOW_POOL=off``
    (or where the pool could not be installed) this is CuPy's own pool, and on the NumPy
    backend cuflow's host pool, whose figures stay at zero.

    Returns
    -------
    cuflow.memory.Pool or cupy.cuda.MemoryPool
    """
    b = get_backend()
    if b.is_gpu and not memory._INSTALLED:
        return b.xp.get_default_memory_pool()
    return memory.get_pool()


def __getattr__(name: str):
    if name == "darray":
        return get_backend().darray
    if name == "ndarray":
        return get_backend().ndarray
    if name == "cuda":
        b = get_backend()
        if not b.is_gpu:
            raise AttributeError("cuflow.cuda is CuPy's cupy.cuda and needs the CuPy backend; "
                                 "use cuflow.Stream / cuflow.Event, which work on both backends")
        return b.xp.cuda
    if name.startswith("__"):
        raise AttributeError(name)
    return _forward(name)


__all__ = [
    # arrays, backends and the array API
    "darray", "ndarray", "backend_info", "get_backend", "set_backend", "get_array_module",
    "is_available", "get_default_memory_pool",
    "__array_api_version__", "__array_namespace_info__", "isdtype", "finfo", "iinfo",
    "result_type", "can_cast", "bool",
    # fused kernels
    "fuse", "FuseOptions", "TraceError", "fusion",
    # batching
    "Bufferizer", "BufferizerError", "Pipeline", "PipelineOptions",
    # profiling
    "annotate",
    # devices and streams
    "Device", "Stream", "Event", "current_stream", "synchronize", "streams",
    # errors
    "CuflowError", "ArgumentError", "ArgumentIndexError", "ArgumentTypeError", "BackendError", "DeviceError", "DstError", "DstShapeError", "DstDtypeError", "DstTypeError",
    "CudaError", "OutOfMemoryError", "KernelCompileError", "DLPackCopyError", "AxisError",
    "ArgumentOverflowError", "ArgumentZeroDivisionError", "LinAlgError",
    # submodules
    "linalg", "fft", "random", "testing", "kernels", "memory", "graph", "image", "debug",
    # array operations, with dst= and stream=
    "add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "remainder", "mod",
    "fmod", "divmod", "power", "pow", "float_power", "negative", "positive", "absolute", "abs",
    "fabs", "sign", "reciprocal", "square", "sqrt", "cbrt", "maximum", "minimum", "fmax",
    "fmin", "heaviside", "gcd", "lcm", "copysign", "nextafter", "spacing", "ldexp", "frexp",
    "modf", "hypot", "rint", "floor", "ceil", "trunc", "conjugate", "conj", "exp", "exp2",
    "expm1", "log", "log2", "log10", "log1p", "logaddexp", "logaddexp2", "sin", "cos", "tan",
    "arcsin", "asin", "arccos", "acos", "arctan", "atan", "arctan2", "atan2", "sinh", "cosh",
    "tanh", "arcsinh", "asinh", "arccosh", "acosh", "arctanh", "atanh", "deg2rad", "rad2deg",
    "degrees", "radians", "equal", "not_equal", "less", "less_equal", "greater",
    "greater_equal", "logical_and", "logical_or", "logical_xor", "logical_not", "bitwise_and",
    "bitwise_or", "bitwise_xor", "invert", "bitwise_invert", "bitwise_not", "left_shift",
    "bitwise_left_shift", "right_shift", "bitwise_right_shift", "bitwise_count", "isfinite",
    "isinf", "isnan", "isnat", "signbit", "where", "sum", "prod", "mean", "std", "var", "min", "max",
    "argmin", "argmax", "any", "all", "empty", "zeros", "ones", "full", "empty_like",
    "zeros_like", "ones_like", "full_like", "arange", "linspace", "eye", "identity", "asarray",
    "array", "from_dlpack", "asnumpy", "as_darray", "copy", "astype", "flatten", "ravel",
    "reshape", "transpose", "ascontiguousarray", "concatenate", "stack", "matmul", "dot",
    "clip", "around", "round", "cumsum", "cumprod", "sort", "argsort",
    "take", "take_along_axis",
    # NumPy's dtypes and constants
    "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128", "intp", "uintp", "byte",
    "ubyte", "short", "ushort", "intc", "uintc", "longlong", "ulonglong", "half", "single",
    "double", "csingle", "cdouble", "dtype", "generic", "number", "integer", "signedinteger",
    "unsignedinteger", "floating", "complexfloating", "inexact", "newaxis", "pi", "e", "inf",
    "nan", "euler_gamma", "promote_types", "issubdtype", "ndim", "shape", "size",
]

_instrument_from_env()
