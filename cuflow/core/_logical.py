"""Elementwise comparisons, logical and bitwise functions, and classification.

NumPy's ufuncs of the same names (array API names are aliases), with ``dst=``,
``stream=``, ``casting=`` and ``dtype=`` as :mod:`cuflow.core._dispatch` describes.
"""

from __future__ import annotations

from typing import Any

import numpy

from .._errors import ArgumentError, ArgumentOverflowError
from ._contract import prepare_out
from . import _runtime
from ._dispatch import call, fast_call, reraise, run_on, ufunc1, ufunc2, ufunc_methods
from ._docs import complete
from ._engine import ew_op
from ._expr import Expr
from ._expr import where as traced_where
from ._runtime import runtime

_WHERE = ew_op("where")

__all__ = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
           "logical_or", "logical_xor", "logical_not", "bitwise_and", "bitwise_or",
           "bitwise_xor", "invert", "bitwise_invert", "bitwise_not", "left_shift",
           "bitwise_left_shift", "right_shift", "bitwise_right_shift", "bitwise_count",
           "isfinite", "isinf", "isnan", "isnat", "signbit", "where"]


def where(condition: Any, x1: Any = None, x2: Any = None, /, *, dst: Any = None,
          stream: Any = None) -> Any:
    """``x1`` where ``condition`` is true, else ``x2`` (array API ``where``).

    With only ``condition``, NumPy's ``where(condition)``: the indices of the true elements.
    In ``cuflow.fuse`` it fuses into the kernel.

    Parameters
    ----------
    condition : darray
        Booleans (any other dtype is tested against 0), broadcast with ``x1`` and ``x2``.
    x1, x2 : darray or scalar, optional
        The values taken where ``condition`` is true and where it is false; both or neither
        (:class:`~cuflow.ArgumentError` otherwise).  A Python int must fit the dtype of the
        other operand (:class:`~cuflow.ArgumentOverflowError`).
    dst : darray, optional
        Where the result is written, of exactly the broadcast shape and a dtype the result
        casts to; not with the one-argument form, whose size depends on the data.
    stream : cuflow.Stream, optional
        The stream the work is queued on; the current stream when omitted.

    Returns
    -------
    darray or tuple of darrays
        ``dst`` when given, else a new array; with only ``condition``, one index array per
        axis.

    Notes
    -----
    Stream semantics: with ``x1`` and ``x2``, asynchronous, queued on ``stream`` or the
    current stream.  The one-argument form waits for the GPU: its result's size is the
    number of true elements, which the host reads before it allocates.
    """
    if (x1 is None) != (x2 is None):
        raise ArgumentError(f"cuflow.where takes both x1 and x2 or neither; got only "
                            f"{'x1' if x2 is None else 'x2'}")
    if x1 is None and dst is not None:
        raise ArgumentError("cuflow.where: the one-argument form (the indices of the true "
                            "elements, a tuple of arrays of data-dependent size) takes no dst=")
    if isinstance(condition, Expr) or isinstance(x1, Expr) or isinstance(x2, Expr):
        return traced_where(condition, x1, x2)
    if stream is None and x2 is not None:
        rt = _runtime._current
        if rt is not None and rt.fast is not None:
            r = rt.fast.ew(_WHERE, (condition, x1, x2), dst)
            if r is not None:
                return r
    if stream is not None:
        return run_on(stream, "where", where, condition, x1, x2, dst=dst)
    rt = runtime()
    if isinstance(condition, (bool, int, float, complex, numpy.generic)):
        condition = rt.xp.asarray(condition)  # CuPy's where takes only array conditions
    if x1 is None and x2 is None:
        return call("where", rt.xp.where, condition)
    _int_scalars_fit(rt, x1, x2)
    if dst is None:
        return call("where", rt.xp.where, condition, x1, x2)
    try:
        r = rt.xp.where(condition, x1, x2)
        prepare_out("where", dst, r.shape, r.dtype)
        rt.xp.copyto(dst, r, casting="same_kind")
        return dst
    except Exception as e:
        reraise("where", e, dst)


def _int_scalars_fit(rt: Any, x1: Any, x2: Any) -> None:
    """A Python int beside an integer array (or NumPy integer) must fit the result dtype, as
    in every other op (NumPy's where would wrap ``where(c, uint8_array, 300)`` to 44)."""
    for s, other in ((x1, x2), (x2, x1)):
        if type(s) is int and isinstance(other, rt.ndarray | numpy.integer) and \
                other.dtype.kind in "iu":
            info = numpy.iinfo(other.dtype)
            if not info.min <= s <= info.max:
                raise ArgumentOverflowError(
                    f"cuflow.where: Python integer {s} is out of the range of the other "
                    f"operand's dtype {other.dtype}, [{info.min}, {info.max}]")


@fast_call(2)
def equal(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
          casting: str = "same_kind", dtype: Any = None) -> Any:
    """``src == other``, elementwise (array API)."""
    return ufunc2("equal", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def not_equal(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
              casting: str = "same_kind", dtype: Any = None) -> Any:
    """``src != other``, elementwise (array API)."""
    return ufunc2("not_equal", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def less(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
         casting: str = "same_kind", dtype: Any = None) -> Any:
    """``src < other``, elementwise (array API)."""
    return ufunc2("less", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def less_equal(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
               casting: str = "same_kind", dtype: Any = None) -> Any:
    """``src <= other``, elementwise (array API)."""
    return ufunc2("less_equal", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def greater(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
            casting: str = "same_kind", dtype: Any = None) -> Any:
    """``src > other``, elementwise (array API)."""
    return ufunc2("greater", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def greater_equal(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
                  casting: str = "same_kind", dtype: Any = None) -> Any:
    """``src >= other``, elementwise (array API)."""
    return ufunc2("greater_equal", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def logical_and(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
                casting: str = "same_kind", dtype: Any = None) -> Any:
    """Logical and, elementwise (array API)."""
    return ufunc2("logical_and", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def logical_or(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
               casting: str = "same_kind", dtype: Any = None) -> Any:
    """Logical or, elementwise (array API)."""
    return ufunc2("logical_or", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def logical_xor(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
                casting: str = "same_kind", dtype: Any = None) -> Any:
    """Logical exclusive or, elementwise (array API)."""
    return ufunc2("logical_xor", src, other, dst, out, stream, casting, dtype)


@fast_call(1)
def logical_not(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
                casting: str = "same_kind", dtype: Any = None) -> Any:
    """Logical not, elementwise (array API)."""
    return ufunc1("logical_not", src, dst, out, stream, casting, dtype)


@fast_call(2)
def bitwise_and(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
                casting: str = "same_kind", dtype: Any = None) -> Any:
    """Bitwise and, ``src & other``, elementwise (array API)."""
    return ufunc2("bitwise_and", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def bitwise_or(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
               casting: str = "same_kind", dtype: Any = None) -> Any:
    """Bitwise or, ``src | other``, elementwise (array API)."""
    return ufunc2("bitwise_or", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def bitwise_xor(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
                casting: str = "same_kind", dtype: Any = None) -> Any:
    """Bitwise exclusive or, ``src ^ other``, elementwise (array API)."""
    return ufunc2("bitwise_xor", src, other, dst, out, stream, casting, dtype)


@fast_call(1)
def invert(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
           casting: str = "same_kind", dtype: Any = None) -> Any:
    """Bitwise not, ``~src``, elementwise (array API ``bitwise_invert``)."""
    return ufunc1("invert", src, dst, out, stream, casting, dtype)


@fast_call(2)
def left_shift(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
               casting: str = "same_kind", dtype: Any = None) -> Any:
    """``src << other``, elementwise (array API ``bitwise_left_shift``)."""
    return ufunc2("left_shift", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def right_shift(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
                casting: str = "same_kind", dtype: Any = None) -> Any:
    """``src >> other``, elementwise (array API ``bitwise_right_shift``)."""
    return ufunc2("right_shift", src, other, dst, out, stream, casting, dtype)


@fast_call(1)
def bitwise_count(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
                  casting: str = "same_kind", dtype: Any = None) -> Any:
    """Number of set bits, elementwise."""
    return ufunc1("bitwise_count", src, dst, out, stream, casting, dtype)


@fast_call(1)
def isfinite(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
             casting: str = "same_kind", dtype: Any = None) -> Any:
    """True where finite, elementwise (array API)."""
    return ufunc1("isfinite", src, dst, out, stream, casting, dtype)


@fast_call(1)
def isinf(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
          casting: str = "same_kind", dtype: Any = None) -> Any:
    """True where infinite, elementwise (array API)."""
    return ufunc1("isinf", src, dst, out, stream, casting, dtype)


@fast_call(1)
def isnan(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
          casting: str = "same_kind", dtype: Any = None) -> Any:
    """True where NaN, elementwise (array API)."""
    return ufunc1("isnan", src, dst, out, stream, casting, dtype)


@fast_call(1)
def isnat(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
          casting: str = "same_kind", dtype: Any = None) -> Any:
    """True where not-a-time, elementwise."""
    return ufunc1("isnat", src, dst, out, stream, casting, dtype)


@fast_call(1)
def signbit(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
            casting: str = "same_kind", dtype: Any = None) -> Any:
    """True where the sign bit is set, elementwise (array API)."""
    return ufunc1("signbit", src, dst, out, stream, casting, dtype)


bitwise_invert = invert
bitwise_not = invert
bitwise_left_shift = left_shift
bitwise_right_shift = right_shift

complete(globals(), [n for n in __all__ if n != "where"])
ufunc_methods(globals())
