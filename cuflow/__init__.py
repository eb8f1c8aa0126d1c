"""cuflow: a GPU array library over CuPy that makes the fast path the default.

* :class:`darray` subclasses ``cupy.ndarray``; every op takes ``dst=`` (write
  into a preallocated output, allocate nothing) and ``stream=``.
* :class:`Stream` / :class:`Event` are context managers and objects.
* ``import cuflow as cp`` runs CuPy code: names cuflow does not define are
  forwarded to CuPy, with array results returned as darrays.

Importing cuflow imports neither CuPy nor touches the GPU; the backend (CuPy
when a GPU is usable, else NumPy with a warning, or ``CUFLOW_BACKEND``) is
chosen on first use.
"""

from __future__ import annotations

import numpy as _np

from .core import _ops
from ._info import backend_info
from .core._runtime import get_backend, set_backend
from .pipeline._bufferizer import Bufferizer, BufferizerError
from .pipeline._pipeline import Pipeline, PipelineOptions
from ._errors import (
    BackendError,
    CudaError,
    CuflowError,
    DstDtypeError,
    DstError,
    DstShapeError,
    DstTypeError,
    KernelCompileError,
    OutOfMemoryError,
)
from ._forward import forward as _forward
from ._instrument import annotate
from ._instrument import from_environment as _instrument_from_env
from ._forward import install_submodules as _install_submodules
from .core._ops import (
    around,
    as_darray,
    asarray,
    ascontiguousarray,
    asnumpy,
    astype,
    array,
    clip,
    concatenate,
    copy,
    cumprod,
    cumsum,
    dot,
    flatten,
    from_dlpack,
    matmul,
    ravel,
    reshape,
    stack,
    transpose,
)
from .core._streams import Event, Stream, current_stream, streams, synchronize

__version__ = "0.1.0"

# Elementwise (every NumPy ufunc name), reductions and creation functions.
globals().update(_ops.UFUNCS)
globals().update(_ops.REDUCTIONS)
globals().update(_ops.CREATION)
round = _ops.round  # noqa: A001

# dtypes and constants are NumPy's own objects (as in CuPy).
_NUMPY_NAMES = (
    "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128", "intp", "uintp", "byte",
    "ubyte", "short", "ushort", "intc", "uintc", "longlong", "ulonglong", "half", "single",
    "double", "csingle", "cdouble", "dtype", "generic", "number", "integer",
    "signedinteger", "unsignedinteger", "floating", "complexfloating", "inexact", "newaxis",
    "pi", "e", "inf", "nan", "euler_gamma", "finfo", "iinfo", "can_cast", "result_type",
    "promote_types", "issubdtype", "ndim", "shape", "size",
)
for _n in _NUMPY_NAMES:
    if hasattr(_np, _n):
        globals()[_n] = getattr(_np, _n)
del _n

_SUBMODULES = _install_submodules(__name__, ("linalg", "fft", "random"))
linalg = _SUBMODULES["linalg"]
fft = _SUBMODULES["fft"]
random = _SUBMODULES["random"]


def get_array_module(*args):
    """``cuflow`` if any argument is an array of the GPU backend (or a darray), else ``numpy``.

    Code written as ``xp = cp.get_array_module(x)`` then gets darray results.
    """
    import sys  # noqa: PLC0415

    b = get_backend()
    for a in args:
        if isinstance(a, b.darray) or (b.is_gpu and isinstance(a, b.ndarray)):
            return sys.modules[__name__]
    return _np


_LAZY_SUBMODULES = ("testing", "kernels", "memory", "graph", "image", "debug")


def __getattr__(name: str):
    if name == "darray":
        return get_backend().darray
    if name == "ndarray":
        return get_backend().ndarray
    if name in _LAZY_SUBMODULES:
        import importlib  # noqa: PLC0415

        return importlib.import_module(f"{__name__}.{name}")
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
    # arrays and backends
    "darray", "ndarray", "backend_info", "get_backend", "set_backend", "get_array_module",
    "asarray", "array", "as_darray", "asnumpy", "from_dlpack",
    # batching
    "Bufferizer", "BufferizerError", "Pipeline", "PipelineOptions",
    # profiling
    "annotate",
    # streams
    "Stream", "Event", "current_stream", "synchronize", "streams",
    # transforms with dst=
    "copy", "astype", "flatten", "ravel", "reshape", "transpose", "ascontiguousarray",
    "concatenate", "stack", "matmul", "dot", "clip", "cumsum", "cumprod", "around", "round",
    # errors
    "CuflowError", "BackendError", "DstError", "DstShapeError", "DstDtypeError", "DstTypeError",
    "CudaError", "OutOfMemoryError", "KernelCompileError",
    # submodules
    "linalg", "fft", "random", "testing", "kernels", "memory", "graph", "image",
    "debug", *_ops.UFUNC_NAMES, *_ops.REDUCTION_NAMES, *_ops.CREATION_NAMES, *_NUMPY_NAMES,
]

_instrument_from_env()
