"""How an op runs: on which stream, which backend function, and which errors come out.

The written-out functions of the namespace (``add``, ``sum``, ``reshape`` ...)
call these helpers; the helpers ask the runtime for the backend at call time.

The elementwise functions (``_arithmetic``, ``_transcendental``, ``_logical``)
are NumPy's ufuncs of the same names, with cuflow's output contract.  On the
CuPy backend a call on same-shape contiguous floating/bool arrays and Python
scalars (integer arrays of one dtype, for arithmetic, comparisons and bitwise
and logical functions) runs the engine's generated kernel for the function
(``rt.fast.ew``, compiled launcher); every other call runs the backend's ufunc:

* ``dst`` (or its NumPy spelling ``out``): the result is written there and
  ``dst`` is returned; its shape must be the broadcast shape and the result
  dtype must cast to ``dst.dtype`` under ``casting``
  (:func:`cuflow.core._contract.prepare_out`);
* ``stream``: the stream to queue the work on (default: the current stream);
* ``casting`` and ``dtype``: NumPy's.

Inputs are darrays (or arrays of the active backend) and Python or NumPy scalars.

Stream semantics (all ops): the work is queued on ``stream=`` when given,
otherwise on the current stream.  Nothing here synchronizes the host.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy

from .._errors import (
    ArgumentError, ArgumentIndexError, ArgumentOverflowError, ArgumentTypeError,
    ArgumentZeroDivisionError, AxisError, BackendError, CudaError, CuflowError, DstTypeError,
    LinAlgError, OutOfMemoryError,
)
from ._contract import (
    bad_input, broadcast_shape, check_out_pair, positional_pair, prepare_out, resolve_out,
    translate_type_error,
)
from . import _runtime
from ._engine import OPS, ew_op
from ._expr import Expr, TraceError, _dtype_of, _resolve, apply, caller_line
from ._fastpath import FastCall
from ._runtime import arrays_in, on_select, runtime
from ._streams import use_stream

__all__ = ["run_on", "reraise", "fast_call", "ufunc1", "ufunc2", "ufunc_multi", "call",
           "traced", "wrap_view", "call_backend", "ufunc_methods"]


def run_on(stream: Any, op: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with ``stream`` current for its launches; a refused ``stream``
    is refused naming ``op``, the op's public name (``add``, ``fft.fftfreq``)."""
    with use_stream(stream, op):
        return fn(*args, **kwargs)


def reraise(name: str, e: BaseException, dst: Any = None):
    """Re-raise a backend exception as the matching cuflow error (original as __cause__)."""
    rt = runtime()
    if isinstance(e, rt.oom_errors):
        raise OutOfMemoryError(f"cuflow.{name}: out of device memory: {e}") from e
    if isinstance(e, rt.cuda_errors):
        raise CudaError(f"cuflow.{name}: CUDA call failed: {e}") from e
    if isinstance(e, rt.compile_errors):  # no kernel of the backend for these dtypes:
        # NumPy's TypeError for arguments it has no loop for
        raise ArgumentTypeError(f"cuflow.{name}: the backend has no kernel for these "
                                f"arguments' dtypes (its compiler refused): {e}") from e
    if isinstance(e, CuflowError):
        raise e
    what = str(e) if str(e).startswith("cuflow.") else f"cuflow.{name}: {e}"
    if isinstance(e, TypeError):
        translate_type_error(name, e, dst)
        raise ArgumentTypeError(what) from e
    if isinstance(e, NotImplementedError):  # (CuPy's and array_api_compat's word for
        # arguments they do not take: a list where they read an array, a dtype they lack)
        raise ArgumentTypeError(f"cuflow.{name}: the {rt.name} backend does not take these "
                                f"arguments: {e}") from e
    if isinstance(e, SyntaxError):  # NumPy parses a dtype string like "f4,," as Python
        raise ArgumentTypeError(f"cuflow.{name}: a dtype string NumPy cannot parse "
                                f"({e.msg}: {e.text!r})") from e
    if isinstance(e, numpy.exceptions.AxisError):  # (an IndexError and a ValueError)
        raise AxisError(what) from e
    if isinstance(e, IndexError):
        raise ArgumentIndexError(what) from e
    if isinstance(e, numpy.linalg.LinAlgError):
        raise LinAlgError(what) from e
    if isinstance(e, ValueError):
        if "too big" in str(e):  # NumPy's words for a size past the address space
            raise OutOfMemoryError(f"cuflow.{name}: out of memory: the result would be larger "
                                   f"than the address space ({e})") from e
        raise ArgumentError(what) from e
    if isinstance(e, OverflowError):  # a Python int past the dtype's range, or C's integers
        raise ArgumentOverflowError(what) from e
    if isinstance(e, ZeroDivisionError):  # (NumPy's split into 0 sections, zero weights)
        raise ArgumentZeroDivisionError(what) from e
    raise e


def _ufunc(rt: Any, name: str, xs: tuple) -> Any:
    uf = rt.ufuncs.get(name)
    if uf is None:
        raise BackendError(f"cuflow.{name} is not available on the {rt.name} backend")
    if xs and name in _NUMPY_REFUSES and rt.is_gpu:
        try:  # NumPy's loop table, as the engine's tracing reads it
            _resolve(name, tuple(x.dtype if isinstance(x, rt.ndarray) else _dtype_of(x)
                                 for x in xs))
        except TraceError as e:
            raise ArgumentTypeError(f"cuflow.{name}: {e}") from None
    return uf


#: ufuncs with loops in CuPy that NumPy refuses: CuPy casts bool operands to an integer
#: loop (``sign(True)``, ``gcd`` of bools), where NumPy raises a TypeError
_NUMPY_REFUSES = frozenset(("sign", "positive", "gcd", "lcm"))


def _shape(nd: type, x: Any) -> tuple:
    return x.shape if isinstance(x, nd) else ()


def _host_operands(name: str, rt: Any, args: tuple) -> None:
    """CuPy's rule on the NumPy backend too: an operand is an array of the backend or a
    scalar.  NumPy would take a list, which CuPy refuses; the CPU oracle takes only what the
    GPU takes."""
    for x in args:
        if not isinstance(x, rt.ndarray | numpy.generic | int | float | complex):
            bad_input(name, x)


def fast_call(nin: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator of an elementwise function of ``nin`` operands named as its ufunc: a call
    with only the operands and ``dst`` (positional or keyword) goes from C straight to the
    engine's launch (``_ewlaunch.FastCall``), without the function's Python frames (bench op
    zoo: ``tanh(x)``, ``minimum(x, y)``); every other call, and every call the launch
    declines, runs the function.  Without the compiled extension the function is returned
    as it is."""
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        if FastCall is None:
            return fn
        entry = FastCall(OPS.get(fn.__name__) or ew_op(fn.__name__), fn, nin, _runtime)
        functools.update_wrapper(entry, fn)
        return entry
    return wrap


def ufunc2(name: str, src: Any, other: Any, dst: Any, out: Any, stream: Any, casting: str,
           dtype: Any) -> Any:
    """The backend's ufunc ``name`` on two inputs, under the output contract (the engine's
    kernel first, where its launch applies)."""
    rt = _runtime._current
    # first cuflow's own launch (it declines anything else, traced operands included)
    if rt is not None and out is stream is dtype is None and casting == "same_kind":
        fast = rt.fast
        if fast is not None:
            try:
                r = fast.ew(OPS.get(name) or ew_op(name), (src, other), dst)
            except Exception as e:  # the result's allocation or the launch failed
                reraise(name, e, dst)
            if r is not None:
                return r
    if isinstance(src, Expr) or isinstance(other, Expr):
        return traced(name, (src, other), dst, out, dtype)
    if out is not None:
        dst = resolve_out(dst, out, name)
    if stream is not None:
        return run_on(stream, name, ufunc2, name, src, other, dst, None, None, casting, dtype)
    rt = runtime()
    if not rt.is_gpu:
        _host_operands(name, rt, (src, other))
    uf = _ufunc(rt, name, (src, other) if dtype is None else ())
    if rt.multi:
        rt.check_devices(name, src, other)
    try:
        if dst is None:
            if dtype is None and casting == "same_kind":
                return rt.wrap(uf(src, other))
            return rt.wrap(uf(src, other, casting=casting, dtype=dtype))
        nd = rt.ndarray
        shape = dst.shape if isinstance(dst, nd) else ()
        if (isinstance(src, nd) and src.shape != shape) or (
                isinstance(other, nd) and other.shape != shape) or (
                shape and not isinstance(src, nd) and not isinstance(other, nd)):
            shape = broadcast_shape(name, _shape(nd, src), _shape(nd, other))
        src, other = prepare_out(name, dst, shape, dtype, inputs=(src, other), casting=casting,
                                 overlap="elementwise", ufunc=True)
        if dtype is None and casting == "same_kind":
            if rt.is_gpu:
                uf(src, other, dst)  # positional out: CuPy parses no kwargs dict
            else:
                uf(src, other, out=dst)
        else:
            uf(src, other, out=dst, casting=casting, dtype=dtype)
        return dst
    except Exception as e:
        reraise(name, e, dst)


def ufunc1(name: str, src: Any, dst: Any, out: Any, stream: Any, casting: str,
           dtype: Any) -> Any:
    """The backend's ufunc ``name`` on one input, under the output contract (the engine's
    kernel first, as for :func:`ufunc2`)."""
    rt = _runtime._current
    # first cuflow's own launch (it declines anything else, traced operands included)
    if rt is not None and out is stream is dtype is None and casting == "same_kind":
        fast = rt.fast
        if fast is not None:
            try:
                r = fast.ew(OPS.get(name) or ew_op(name), (src,), dst)
            except Exception as e:  # the result's allocation or the launch failed
                reraise(name, e, dst)
            if r is not None:
                return r
    if isinstance(src, Expr):
        return traced(name, (src,), dst, out, dtype)
    if out is not None:
        dst = resolve_out(dst, out, name)
    if stream is not None:
        return run_on(stream, name, ufunc1, name, src, dst, None, None, casting, dtype)
    rt = runtime()
    if not rt.is_gpu:
        _host_operands(name, rt, (src,))
    uf = _ufunc(rt, name, (src,) if dtype is None else ())
    if rt.multi:
        rt.check_devices(name, src)
    try:
        if dst is None:
            if dtype is None and casting == "same_kind":
                return rt.wrap(uf(src))
            return rt.wrap(uf(src, casting=casting, dtype=dtype))
        nd = rt.ndarray
        shape = dst.shape if isinstance(dst, nd) else ()
        if _shape(nd, src) != shape:
            shape = broadcast_shape(name, _shape(nd, src))
        src, = prepare_out(name, dst, shape, dtype, inputs=(src,), casting=casting,
                           overlap="elementwise", ufunc=True)
        if dtype is None and casting == "same_kind":
            uf(src, out=dst)
        else:
            uf(src, out=dst, casting=casting, dtype=dtype)
        return dst
    except Exception as e:
        reraise(name, e, dst)


def traced(name: str, args: tuple, dst: Any, out: Any, dtype: Any) -> Any:
    """An elementwise function called on a traced array inside ``cuflow.fuse``: a node."""
    if dst is not None or out is not None:
        raise TraceError(f"cuflow.fuse cannot trace cuflow.{name}(..., dst=) at "
                         f"{caller_line()}: give dst= to the fused call instead")
    return apply(name, *args, dtype=dtype)  # (the loop runs in dtype, as NumPy's)


def ufunc_multi(name: str, args: tuple, dst: Any, out: Any, stream: Any, casting: str,
                dtype: Any, dst_pair: tuple = ()) -> Any:
    """Ufuncs with two outputs (``modf``, ``frexp``, ``divmod``): ``dst`` is a pair, given
    as ``dst=`` or ``out=`` or positionally (``dst_pair``, NumPy's spelling)."""
    dst = resolve_out(positional_pair(name, dst_pair, dst, out), out, name)
    if stream is not None:
        return run_on(stream, name, ufunc_multi, name, args, dst, None, None, casting, dtype)
    rt = runtime()
    if not rt.is_gpu:
        _host_operands(name, rt, args)
    uf = _ufunc(rt, name, ())
    if rt.multi:
        rt.check_devices(name, *args)
    try:
        if dst is None:
            return rt.wrap(uf(*args, casting=casting, dtype=dtype))
        check_out_pair(name, dst)
        shape = broadcast_shape(name, *(_shape(rt.ndarray, a) for a in args))
        ins = tuple(args)
        for d, dt in zip(dst, _multi_dtypes(rt, name, args, dtype)):
            ins = prepare_out(name, d, shape, dt, inputs=ins, casting=casting,
                              overlap="elementwise")
        uf(*ins, out=tuple(dst), casting=casting, dtype=dtype)
        return tuple(dst)
    except Exception as e:
        reraise(name, e)


def _multi_dtypes(rt: Any, name: str, args: tuple, dtype: Any) -> tuple:
    """The dtypes of a two-output ufunc's results: NumPy's answer on 0-d host stand-ins of
    the arrays (Python scalars as they are, NEP 50's weak scalars)."""
    probe = [numpy.ones((), a.dtype) if isinstance(a, rt.ndarray) else a for a in args]
    with numpy.errstate(all="ignore"):
        return tuple(r.dtype for r in getattr(numpy, name)(*probe, dtype=dtype))


def call(name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` of the backend, its errors as cuflow's, its result a darray."""
    rt = runtime()
    if rt.multi:
        rt.check_devices(name, *arrays_in(args))
    try:
        return rt.wrap(fn(*args, **kwargs))
    except Exception as e:
        reraise(name, e)


def wrap_view(r: Any, *inputs: Any) -> Any:
    """A backend result as darrays, where it may be one of the inputs: that one, in place
    or in a returned tuple or list, is the caller's object (a darray as it is, an array of
    the backend's own type viewed as a darray), never re-classed."""
    return _own_result(runtime(), r, inputs)


def _own_result(rt: Any, r: Any, inputs: tuple) -> Any:
    t = type(r)
    if t is rt.ndarray:
        for x in inputs:
            if r is x:
                return rt.as_darray(r)
        return rt.wrap(r)
    if t is tuple or t is list:
        return t(_own_result(rt, e, inputs) for e in r)
    if isinstance(r, tuple) and hasattr(t, "_make"):  # a named tuple
        return t._make(_own_result(rt, e, inputs) for e in r)
    return rt.wrap(r)


def call_backend(name: str, fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Any:
    """``fn(*args, **kwargs)`` of the backend: its errors as cuflow's, its result as
    :func:`wrap_view` has it (an argument passed by keyword included).

    The function runs on the darrays themselves, so the methods CuPy's Python code calls on
    its operands are cuflow's: its reductions, for one, faster than CuPy's and adding in
    another order (tests/core/test_namespace.py).
    """
    rt = runtime()
    if rt.multi:  # (NumPy's __array_function__ would check only on the NumPy backend)
        rt.check_devices(name, *arrays_in(args), *arrays_in(kwargs.values()))
    try:
        r = fn(*args, **kwargs)
    except Exception as e:  # the backend's own errors, as cuflow's (reraise's table)
        if _raised_in_callback(e, (*args, *kwargs.values())):
            raise  # a bug of the caller's function (apply_along_axis's func1d), as it is
        if isinstance(e, AttributeError):
            _refuse_non_array(rt, name, e, args, kwargs)
        reraise(name, e)
    return _own_result(rt, r, (*args, *kwargs.values()))


def _raised_in_callback(e: BaseException, args: tuple) -> bool:
    """Whether ``e`` passed through a Python function given among ``args`` (a callback the
    backend calls): that error is the function's, not a bad argument of the op."""
    codes = {c for c in (getattr(a, "__code__", None) for a in args) if c is not None}
    tb = e.__traceback__ if codes else None
    while tb is not None:
        if tb.tb_frame.f_code in codes:
            return True
        tb = tb.tb_next
    return False


def _refuse_non_array(rt: Any, name: str, e: AttributeError, args: tuple,
                      kwargs: dict[str, Any]) -> None:
    """The input error for a function that read an array attribute (``x.ndim``) of an
    argument that is no array: array-api-compat's functions take arrays only, and say so
    with a bare AttributeError (``nonzero([1, 0, 2])``); CuPy's own functions refuse such
    arguments with a TypeError, which becomes the same error."""
    # the object whose attribute was missing, where Python says; compiled code (CuPy's
    # Cython) may leave it unset, and its message names the object's type
    obj = getattr(e, "obj", None)
    msg = str(e)
    for a in (*args, *kwargs.values()):
        named = obj is None and msg.startswith(f"'{type(a).__name__}' object has no attribute ")
        if ((obj is not None and a is obj) or named) and not isinstance(a, rt.ndarray):
            try:
                bad_input(name, a, scalars=False)
            except DstTypeError as refused:
                raise refused from e


_UFUNC_METHODS = ("reduce", "accumulate", "outer", "reduceat", "at")


class _Method:
    """``cuflow.add.reduce`` & co.: the backend ufunc's method, results as darrays."""

    __slots__ = ("name", "method")

    def __init__(self, name: str, method: str) -> None:
        self.name, self.method = name, method

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        rt = runtime()
        return call_backend(f"{self.name}.{self.method}",
                            getattr(_ufunc(rt, self.name, ()), self.method), args, kwargs)


_UFUNC_FUNCTIONS: list[Callable[..., Any]] = []


def ufunc_methods(fns: dict[str, Callable[..., Any]]) -> None:
    """Give each elementwise function of a module NumPy's ufunc attributes.

    ``nin``, ``nout`` and ``nargs`` come from NumPy; ``reduce``, ``accumulate``,
    ``outer``, ``reduceat`` and ``at`` call the backend ufunc's method (which raises
    where the ufunc has none, as NumPy's do); ``identity`` is NumPy's (CuPy's ufuncs
    have none, and the value is the same); ``types`` are the backend ufunc's, set when a
    runtime becomes active.
    """
    for f in fns.values():
        if not callable(f) or not hasattr(numpy, f.__name__):
            continue
        ref = getattr(numpy, f.__name__)
        if not isinstance(ref, numpy.ufunc) or f in _UFUNC_FUNCTIONS:
            continue
        f.nin, f.nout, f.nargs, f.identity = ref.nin, ref.nout, ref.nargs, ref.identity
        for m in _UFUNC_METHODS:
            setattr(f, m, _Method(f.__name__, m))
        _UFUNC_FUNCTIONS.append(f)


def _backend_ufunc_attributes(rt: Any) -> None:
    for f in _UFUNC_FUNCTIONS:
        uf = rt.ufuncs.get(f.__name__)
        f.types = getattr(uf, "types", None)


on_select(_backend_ufunc_attributes)
