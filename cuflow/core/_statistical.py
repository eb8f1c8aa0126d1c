"""Reductions with ``dst=``: ``sum``, ``prod``, ``mean``, ``std``, ``var``, ``min``, ``max``,
``argmin``, ``argmax``, ``any``, ``all``.

NumPy semantics; a full reduction returns a 0-d darray, as CuPy does.  With
``dst`` the result (of exactly the reduced shape) is written there and ``dst``
is returned; an input that overlaps ``dst`` is read from a private copy.

Stream semantics: asynchronous; queued on ``stream`` or the current stream.
Reading the value on the host (``float(x)``, ``to_numpy``) synchronizes.
"""

from __future__ import annotations

from typing import Any

import numpy

from .._checks import as_flag
from .._errors import ArgumentError, ArgumentOverflowError, ArgumentTypeError
from ._contract import may_share, prepare_out, reduced_shape, resolve_out
from ._contract import bad_input, check_dtype, check_ints, one_element_axis
from ._dispatch import reraise, run_on
from ._docs import complete, reduction_sections
from ._interop import astype
from ._engine import ew_op
from ._expr import Expr, TraceError, caller_line
from ._expr import reduce as _traced_reduce
from ._runtime import runtime

__all__ = ["sum", "prod", "mean", "std", "var", "min", "max", "argmin", "argmax", "any", "all"]

_RES_DTYPE: dict = {}
_ENGINE = {n: ew_op(f"reduce:{n}") for n in ("sum", "mean", "max", "min", "prod", "argmax",
                                              "argmin")}
_LAST_AXIS = {n: ew_op(f"reduce:{n}:-1") for n in _ENGINE}


def _result_dtype(name: str, dtype: Any, kwdtype: Any) -> numpy.dtype:
    """Result dtype of reduction ``name`` on ``dtype`` (NumPy as the oracle, cached)."""
    key = (name, dtype, kwdtype)
    r = _RES_DTYPE.get(key)
    if r is None:
        probe = numpy.ones((2,), dtype=dtype)
        kw = {} if kwdtype is None else {"dtype": kwdtype}
        with numpy.errstate(all="ignore"):
            r = numpy.asarray(getattr(probe, name)(**kw)).dtype
        if name in ("argmin", "argmax"):
            r = numpy.dtype(numpy.int64)
        _RES_DTYPE[key] = r
    return r


def _reduce(name: str, a: Any, axis: Any, dtype: Any, dst: Any, keepdims: bool, ddof: Any,
            stream: Any) -> Any:
    if isinstance(a, Expr):  # inside cuflow.fuse: a trailing reduction
        if dst is not None or stream is not None:
            raise TraceError(f"cuflow.fuse cannot trace cuflow.{name}(..., "
                             f"{'dst' if dst is not None else 'stream'}=) at {caller_line()}: "
                             "give it to the fused call instead")
        return _traced_reduce(name, a, axis, keepdims, dtype)
    if keepdims is not False and keepdims is not True:
        keepdims = as_flag(name, "keepdims", keepdims)  # ("no" is true)
    rt = runtime()
    if (rt.fast is not None and stream is dst is dtype is None and not keepdims and not ddof
            and name in _ENGINE and type(axis) is int and axis in (-1, getattr(a, "ndim", 0) - 1)):
        r = rt.fast.ew(_LAST_AXIS[name], (a,), None)  # the last axis: a warp per row, from C
        if r is not None:
            return r
    if stream is not None:
        return run_on(stream, name, _reduce, name, a, axis, dtype, dst, keepdims, ddof, None)
    rt = runtime()
    if not isinstance(a, rt.ndarray):
        bad_input(name, a, scalars=False)
    axis = check_ints(name, axis)
    if a.ndim == 0 and axis is not None:  # one of one element, on either backend
        for ax in axis if isinstance(axis, tuple) else (axis,):
            one_element_axis(name, a, ax, "reduced")
        axis = None
    if rt.multi:
        rt.check_devices(name, a)
    base = getattr(rt.ndarray, name)
    kw: dict[str, Any] = {}
    if axis is not None:
        kw["axis"] = axis
    if keepdims:
        kw["keepdims"] = True
    if dtype is not None:
        kw["dtype"] = dtype = check_dtype(name, dtype)
        if name in ("var", "std") and dtype.kind not in "fc":
            raise ArgumentTypeError(f"cuflow.{name}: dtype must be a real or complex floating "
                                    f"dtype (the spread is computed in it), got {dtype}")
    if ddof:
        kw["ddof"] = ddof
    try:
        if dst is None:
            return rt.wrap(base(a, **kw))
        shape = reduced_shape(name, a.shape, axis, keepdims)
        rdt = _result_dtype(name, a.dtype, dtype)
        prepare_out(name, dst, shape, rdt)
        if may_share(a, dst):
            a = a.copy()  # never reduce into memory that is still being read
        if dst.dtype != rdt or (rt.is_gpu and name == "min"):
            # The result in its own dtype, then cast into dst (the contract; NumPy would
            # reduce in dst's dtype: max of int64 into int32 would wrap every element
            # first, and its argmax takes only int64).  CuPy's ndarray.min(out=) fails
            # its CUB dtype check, and minimum.reduce is not implemented.
            rt.xp.copyto(dst, base(a, **kw))
        else:
            base(a, out=dst, **kw)
        return dst
    except Exception as e:
        reraise(name, e, dst)


def _full(name: str, a: Any) -> Any:
    """The common call, ``a.sum()``: the backend's method, nothing else."""
    if isinstance(a, Expr):
        return _traced_reduce(name, a)
    rt = runtime()
    if rt.fast is not None and name in _ENGINE:  # small arrays: one block, launched from C
        r = rt.fast.ew(_ENGINE[name], (a,), None)
        if r is not None:
            return r
    if not isinstance(a, rt.ndarray):
        bad_input(name, a, scalars=False)
    if rt.multi:
        rt.check_devices(name, a)
    try:
        return rt.wrap(getattr(rt.ndarray, name)(a))
    except Exception as e:
        reraise(name, e)


def _ddof(name: str, ddof: Any, correction: Any) -> Any:
    if correction is None:
        return ddof
    if ddof:
        raise ArgumentError(f"cuflow.{name}: give correction= (array API) or ddof= (NumPy), "
                          f"not both (got ddof={ddof!r}, correction={correction!r})")
    return correction


def sum(a: Any, axis: int | tuple[int, ...] | None = None, dtype: Any = None,  # noqa: A001
        dst: Any = None, keepdims: bool = False, *, out: Any = None, stream: Any = None) -> Any:
    """Sum of elements over ``axis`` (array API ``sum``)."""
    if dst is out is stream is axis is dtype is None and not keepdims:
        return _full("sum", a)
    return _reduce("sum", a, axis, dtype, resolve_out(dst, out, "sum"), keepdims, 0, stream)


def prod(a: Any, axis: int | tuple[int, ...] | None = None, dtype: Any = None, dst: Any = None,
         keepdims: bool = False, *, out: Any = None, stream: Any = None) -> Any:
    """Product of elements over ``axis`` (array API ``prod``)."""
    if dst is out is stream is axis is dtype is None and not keepdims:
        return _full("prod", a)
    return _reduce("prod", a, axis, dtype, resolve_out(dst, out, "prod"), keepdims, 0, stream)


def mean(a: Any, axis: int | tuple[int, ...] | None = None, dtype: Any = None, dst: Any = None,
         keepdims: bool = False, *, out: Any = None, stream: Any = None) -> Any:
    """Arithmetic mean over ``axis`` (array API ``mean``)."""
    if dst is out is stream is axis is dtype is None and not keepdims:
        return _full("mean", a)
    return _reduce("mean", a, axis, dtype, resolve_out(dst, out, "mean"), keepdims, 0, stream)


def std(a: Any, axis: int | tuple[int, ...] | None = None, dtype: Any = None, dst: Any = None,
        ddof: float = 0, keepdims: bool = False, *, correction: float | None = None,
        out: Any = None, stream: Any = None) -> Any:
    """Standard deviation over ``axis`` (array API ``std``; ``correction`` is NumPy's ``ddof``)."""
    return _reduce("std", a, axis, dtype, resolve_out(dst, out, "std"), keepdims,
                   _ddof("std", ddof, correction), stream)


def var(a: Any, axis: int | tuple[int, ...] | None = None, dtype: Any = None, dst: Any = None,
        ddof: float = 0, keepdims: bool = False, *, correction: float | None = None,
        out: Any = None, stream: Any = None) -> Any:
    """Variance over ``axis`` (array API ``var``; ``correction`` is NumPy's ``ddof``)."""
    return _reduce("var", a, axis, dtype, resolve_out(dst, out, "var"), keepdims,
                   _ddof("var", ddof, correction), stream)


def min(a: Any, axis: int | tuple[int, ...] | None = None, dst: Any = None,  # noqa: A001
        keepdims: bool = False, *, out: Any = None, stream: Any = None) -> Any:
    """Minimum over ``axis`` (array API ``min``)."""
    if dst is out is stream is axis is None and not keepdims:
        return _full("min", a)
    return _reduce("min", a, axis, None, resolve_out(dst, out, "min"), keepdims, 0, stream)


def max(a: Any, axis: int | tuple[int, ...] | None = None, dst: Any = None,  # noqa: A001
        keepdims: bool = False, *, out: Any = None, stream: Any = None) -> Any:
    """Maximum over ``axis`` (array API ``max``)."""
    if dst is out is stream is axis is None and not keepdims:
        return _full("max", a)
    return _reduce("max", a, axis, None, resolve_out(dst, out, "max"), keepdims, 0, stream)


def _arg(name: str, a: Any, axis: Any, dst: Any, keepdims: bool, dtype: Any, out: Any,
         stream: Any) -> Any:
    """``argmin`` / ``argmax``.  ``dtype``, CuPy's argument (``cupy.argmax(x)`` passes it to
    the array's method), is the integer dtype of the returned index."""
    if dtype is not None:
        dt = check_dtype(name, dtype)
        if dt.kind not in "iu":
            raise ArgumentTypeError(f"cuflow.{name}: dtype is the index's, an integer dtype, "
                                    f"got {dt}")
        if dst is not None or out is not None:
            raise ArgumentError(f"cuflow.{name}: the index's dtype comes from dtype= or from "
                                f"dst's dtype, not both; got dtype={dt} and a dst")
        r = _arg(name, a, axis, None, keepdims, None, None, stream)
        # (axis is valid: the call above ran; a 0-d array's only index is 0)
        n = a.size if axis is None or not a.ndim else a.shape[axis]
        if n - 1 > numpy.iinfo(dt).max:  # the cast would wrap an index to another one
            raise ArgumentOverflowError(f"cuflow.{name}: dtype={dt} holds indices up to "
                                        f"{numpy.iinfo(dt).max}, the indices here go to {n - 1}")
        return r if r.dtype == dt else astype(r, dt, stream=stream)
    if dst is out is stream is axis is None and not keepdims:
        return _full(name, a)
    return _reduce(name, a, axis, None, resolve_out(dst, out, name), keepdims, 0, stream)


def argmin(a: Any, axis: int | None = None, dst: Any = None, keepdims: bool = False, *,
           dtype: Any = None, out: Any = None, stream: Any = None) -> Any:
    """Index of the minimum over ``axis`` (array API ``argmin``); ``dtype``, CuPy's, is the
    index's (an integer dtype)."""
    return _arg("argmin", a, axis, dst, keepdims, dtype, out, stream)


def argmax(a: Any, axis: int | None = None, dst: Any = None, keepdims: bool = False, *,
           dtype: Any = None, out: Any = None, stream: Any = None) -> Any:
    """Index of the maximum over ``axis`` (array API ``argmax``); ``dtype``, CuPy's, is the
    index's (an integer dtype)."""
    return _arg("argmax", a, axis, dst, keepdims, dtype, out, stream)


def any(a: Any, axis: int | tuple[int, ...] | None = None, dst: Any = None,  # noqa: A001
        keepdims: bool = False, *, out: Any = None, stream: Any = None) -> Any:
    """True where any element over ``axis`` is true (array API ``any``)."""
    return _reduce("any", a, axis, None, resolve_out(dst, out, "any"), keepdims, 0, stream)


def all(a: Any, axis: int | tuple[int, ...] | None = None, dst: Any = None,  # noqa: A001
        keepdims: bool = False, *, out: Any = None, stream: Any = None) -> Any:
    """True where every element over ``axis`` is true (array API ``all``)."""
    return _reduce("all", a, axis, None, resolve_out(dst, out, "all"), keepdims, 0, stream)


complete(globals(), __all__, reduction_sections)
