"""cuflow's test kit: random full-range inputs, poisoned outputs, a CUDA-correct timer.

Names this module does not define are forwarded to the backend's own testing
module (``cupy.testing`` or ``numpy.testing``), so drop-in code that uses
``cp.testing.assert_allclose`` keeps working.
"""

from __future__ import annotations

import math
import numbers
import reprlib
import sys
from typing import Any

import numpy

from .._checks import as_flag, is_integer
from .._errors import ArgumentError, ArgumentTypeError
from ..core import asarray, get_backend
from ..core._contract import check_dtype
from ..core._creation import check_shape
from ._timer import Timing, copy_bandwidth_tbps, device_time_us, host_time_us

__all__ = ["random_array", "poisoned", "to_host", "assert_equal_host", "Timing", "host_time_us",
           "device_time_us", "copy_bandwidth_tbps", "DTYPES"]

#: One dtype of every family cuflow supports.
DTYPES = (numpy.bool_, numpy.int8, numpy.int32, numpy.int64, numpy.uint8, numpy.uint16,
          numpy.float16, numpy.float32, numpy.float64, numpy.complex64, numpy.complex128)


def random_array(shape: Any, dtype: Any, rng: numpy.random.Generator | None = None, *,
                 host: bool = False, low: float | None = None, high: float | None = None) -> Any:
    """Random values over the dtype's full range, never all zeros (a nonempty array holds a
    nonzero element wherever its range has one).

    Integers cover ``[min, max]``, or ``[low, high)``; floats are normal with a wide spread
    and mixed signs, or uniform in ``[low, high)`` when both are given; complex has random
    real and imaginary parts (each uniform in ``[low, high)`` when both are given); bools are
    random and take no bounds.  Float bounds must lie in the dtype's finite range, ``high -
    low`` must be finite in float64, and ``[low, high)`` must hold a value of the dtype.
    Returns a darray of the active backend unless ``host``.

    Parameters
    ----------
    shape : int or sequence of ints
        The array's shape, of ints >= 0 (a bool or a float is not an int).
    dtype : dtype-like
        Bool, an integer, real or complex dtype.
    rng : numpy.random.Generator, optional
        The generator the values are drawn from (on the host); default: a new, unseeded
        ``numpy.random.default_rng()``.  Pass a seeded one for reproducible values.
    host : bool, default False
        Return the NumPy array drawn on the host instead of copying it to a darray: True
        or False (or 1 or 0).
    low, high : number, optional
        Bounds of the values, ``[low, high)``.  For an integer dtype, ints; either may be
        left out (the dtype's least value, and one past its greatest).  For a real or
        complex dtype, finite real numbers, given together.  Bools take neither.

    Returns
    -------
    darray or numpy.ndarray
        A new array of ``shape`` and ``dtype``: a darray of the active backend, or with
        ``host=True`` a ``numpy.ndarray``.

    Raises
    ------
    cuflow.ArgumentTypeError
        ``rng`` is not a ``numpy.random.Generator``; ``dtype`` is None, names no dtype or a
        dtype of no numbers; ``shape`` is not an int or a sequence of ints; ``host`` is not
        a bool; an integer dtype's ``low`` or ``high`` is not an int.
    cuflow.ArgumentError
        A negative size in ``shape``; bounds given for bools; a real or complex dtype's
        bound missing, not a finite real number, outside the dtype's finite range, or
        ``high - low`` not finite in float64; a range ``[low, high)`` that is empty, holds
        no value of the dtype, or (for integers) leaves the dtype's range.
    cuflow.OutOfMemoryError
        ``shape`` of ``dtype`` needs more bytes than any address space holds.

    Notes
    -----
    Stream semantics: the values are drawn on the host; without ``host``, their copy to
    the device (on the GPU backend) is queued on the current stream (:func:`cuflow.asarray`).
    """
    if rng is None:
        rng = numpy.random.default_rng()
    elif not isinstance(rng, numpy.random.Generator):
        raise ArgumentTypeError(f"cuflow.testing.random_array: rng must be a "
                                f"numpy.random.Generator or None, got {type(rng).__name__}")
    dt = _dtype("random_array", dtype)
    shape = check_shape("testing.random_array", shape, dt)
    host = as_flag("testing.random_array", "host", host)
    bounds = low is not None or high is not None
    if bounds and dt.kind == "b":
        raise ArgumentError("cuflow.testing.random_array: bools take no low and high")
    if bounds and dt.kind in "fc":
        for what, v in (("low", low), ("high", high)):
            # (an int is finite however large: math.isfinite of one past float64 overflows)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not (
                    isinstance(v, numbers.Integral) or math.isfinite(v)):
                raise ArgumentError(f"cuflow.testing.random_array: {dt} takes a finite low and "
                                    f"high together, got {what}={v!r}")
        if not low < high:
            raise ArgumentError(f"cuflow.testing.random_array: [low, high) must be a nonempty "
                                f"range, got [{low}, {high})")
        bot, top = _float_bounds(dt, low, high)
    if dt.kind == "b":
        a = rng.integers(0, 2, size=shape).astype(dt)
    elif dt.kind in "iu":
        info = numpy.iinfo(dt)
        lo = info.min if low is None else low
        hi = info.max + 1 if high is None else high
        for what, v in (("low", lo), ("high", hi)):
            if not is_integer(v):
                raise ArgumentTypeError(f"cuflow.testing.random_array: {what} must be an int, "
                                        f"got {v!r}")
        if not info.min <= lo < hi <= info.max + 1:
            raise ArgumentError(f"cuflow.testing.random_array: [low, high) must be a nonempty "
                                f"range within {dt}'s [{info.min}, {info.max}], got [{lo}, {hi})")
        a = rng.integers(lo, hi, size=shape, dtype=dt)
    else:
        pt = numpy.finfo(dt).dtype  # the dtype of the real and imaginary parts

        def part():
            v = numpy.asarray(rng.uniform(low, high, shape) if bounds
                              else rng.standard_normal(shape) * 100).astype(pt)
            # rounding a float64 draw to the dtype can reach high (or fall below low)
            return numpy.clip(v, bot, top, out=v) if bounds else v

        a = numpy.empty(shape, dt)
        if dt.kind == "f":
            a[...] = part()
        else:
            a.real[...] = part()
            a.imag[...] = part()
    if a.size and not a.any():  # (a small bool, integer or narrow float draw: all zeros)
        a.flat[rng.integers(a.size)] = (True if dt.kind == "b" else (hi - 1 or lo)
                                        if dt.kind in "iu" else _least_nonzero(bot, top)
                                        if bounds else 1)
    if host:
        return a
    return asarray(a)  # ``a`` is new: the NumPy backend may use it without a copy


def _float_bounds(dt: numpy.dtype, low: Any, high: Any) -> tuple[Any, Any]:
    """The least and the greatest value of ``dt`` (of its parts, for complex) in
    ``[low, high)``: the draw is clipped to them.  Bounds past the dtype's finite range, a
    width ``high - low`` past float64's (the draw's dtype), and a range that holds no value
    of the dtype are refused."""
    info = numpy.finfo(dt)
    big = float(info.max)
    if not -big <= low < high <= big:
        raise ArgumentError(f"cuflow.testing.random_array: low and high must lie in {dt}'s "
                            f"finite range [{-big}, {big}], got [{low}, {high})")
    width = float(high) - float(low)
    if not math.isfinite(width):
        raise ArgumentError(f"cuflow.testing.random_array: high - low must be finite in "
                            f"float64 (the values are drawn in float64), got [{low}, {high}), "
                            f"a width of {width}")
    pt = info.dtype.type
    # (compared as Python numbers: a float16 compared with a Python float rounds the float)
    bot, top = pt(float(low)), pt(float(high))
    if float(bot) < low:
        bot = numpy.nextafter(bot, pt(numpy.inf))
    if float(top) >= high:
        top = numpy.nextafter(top, pt(-numpy.inf))
    if bot > top:
        raise ArgumentError(f"cuflow.testing.random_array: [low, high) must hold a value of "
                            f"{dt}, got [{low}, {high})")
    return bot, top


def _least_nonzero(bot: Any, top: Any) -> Any:
    """The nonzero value of least magnitude in ``[bot, top]`` (0 when there is none)."""
    pt = type(bot)
    for v in (numpy.nextafter(pt(0), pt(numpy.inf)), numpy.nextafter(pt(0), pt(-numpy.inf))):
        if bot <= v <= top:
            return v
    return pt(0)


def poisoned(shape: Any, dtype: Any) -> Any:
    """An output array filled with a value no correct kernel writes (NaN, or the dtype's max);
    ``shape`` as for :func:`random_array`.

    Parameters
    ----------
    shape : int or sequence of ints
        The array's shape, of ints >= 0, as for :func:`random_array`.
    dtype : dtype-like
        Bool, an integer, real or complex dtype.

    Returns
    -------
    darray
        A new darray of the active backend, filled with NaN (real and complex dtypes; a
        complex one holds ``nan+0j``), the dtype's greatest value (integers) or True (bool).

    Raises
    ------
    cuflow.ArgumentTypeError
        ``dtype`` is None, names no dtype or a dtype of no numbers, or ``shape`` is not an
        int or a sequence of ints.
    cuflow.ArgumentError
        A negative size in ``shape``.
    cuflow.OutOfMemoryError
        ``shape`` of ``dtype`` needs more bytes than any address space holds.

    Notes
    -----
    Stream semantics: the array is filled on the host; its copy to the device (on the GPU
    backend) is queued on the current stream (:func:`cuflow.asarray`).
    """
    dt = _dtype("poisoned", dtype)
    shape = check_shape("testing.poisoned", shape, dt)
    if dt.kind in "fc":
        fill = numpy.nan
    elif dt.kind == "b":
        fill = True
    else:
        fill = numpy.iinfo(dt).max
    return asarray(numpy.full(shape, fill, dtype=dt))


def to_host(x: Any) -> numpy.ndarray:
    """Any array (darray, CuPy, NumPy, scalar) as a plain NumPy array.

    Parameters
    ----------
    x : array_like
        A device array (a ``cupy.ndarray``, which a darray of the CuPy backend is), or
        host data that ``numpy.array`` takes as an array of values rather than as one
        object (a NumPy array or darray of the NumPy backend, a scalar, a nested sequence
        of them).

    Returns
    -------
    numpy.ndarray
        A new host array, never a subclass and never ``x`` itself.

    Raises
    ------
    cuflow.ArgumentTypeError
        ``x`` is neither: ``numpy.array`` refuses it with a TypeError (a device array of
        another library, such as a CUDA tensor), or makes an object array of it (a dict,
        None, an arbitrary object).
    cuflow.ArgumentError
        ``numpy.array`` refuses ``x`` with a ValueError (a ragged nested sequence).

    Notes
    -----
    Stream semantics: a device array's copy is queued on the current stream, after the
    work queued there, and the host waits for it.
    """
    if isinstance(x, numpy.ndarray):
        return numpy.array(x, copy=True, subok=False)
    # a device array by its class, not by a get method: a dict's, a pandas Series', any
    # mapping's get takes a key (a CuPy array exists only once cupy is imported)
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(x, cupy.ndarray):
        return x.get()
    rule = ("x must be a device array (CuPy's, a darray) or host data (an array, a scalar or a "
            "nested sequence of them)")
    try:
        a = numpy.array(x, copy=True, subok=False)
    except TypeError as e:
        raise ArgumentTypeError(f"cuflow.testing.to_host: {rule}, got {type(x).__name__}, "
                                f"which numpy.array refuses: {e}") from e
    except ValueError as e:
        raise ArgumentError(f"cuflow.testing.to_host: {rule}, got {type(x).__name__}, which "
                            f"numpy.array refuses: {e}") from e
    if a.dtype == object:  # (what NumPy does not read as numbers, it wraps as objects)
        raise ArgumentTypeError(f"cuflow.testing.to_host: {rule}, got {type(x).__name__} "
                                f"{reprlib.repr(x)}, which numpy.array makes an object array")
    return a


def assert_equal_host(actual: Any, expected: Any, **kw: Any) -> None:
    """``numpy.testing.assert_array_equal`` on host copies, dtype and shape checked too.

    Parameters
    ----------
    actual : array_like
        The array under test, anything :func:`to_host` takes.
    expected : array_like
        The reference, anything :func:`to_host` takes; its dtype and shape must be
        ``actual``'s exactly (no broadcasting, no casting).
    **kw
        Passed to ``numpy.testing.assert_array_equal`` (``err_msg``, ``verbose``...).

    Raises
    ------
    cuflow.ArgumentTypeError, cuflow.ArgumentError
        ``actual`` or ``expected`` is not array data :func:`to_host` takes.
    AssertionError
        The dtypes differ, the shapes differ, or an element differs (NaNs in the same
        places are equal, as for ``numpy.testing.assert_array_equal``).  The dtype and
        shape checks are raised, not asserted, so they hold under ``python -O``.

    Notes
    -----
    Stream semantics: as :func:`to_host`'s: device arrays are copied to the host on the
    current stream, and the host waits for them.
    """
    a, e = to_host(actual), to_host(expected)
    if a.dtype != e.dtype:  # (raised, not asserted: python -O keeps the check)
        raise AssertionError(f"dtype {a.dtype} != expected {e.dtype}")
    if a.shape != e.shape:
        raise AssertionError(f"shape {a.shape} != expected {e.shape}")
    numpy.testing.assert_array_equal(a, e, **kw)


def _dtype(name: str, dtype: Any) -> numpy.dtype:
    """A dtype of numbers (bool, integers, reals, complex): the creation functions' rule,
    without their default (``numpy.dtype(None)`` is float64: a test names its dtype)."""
    if dtype is None:
        raise ArgumentTypeError(f"cuflow.testing.{name}: dtype must be a bool, integer, real "
                                f"or complex dtype, got None")
    check_dtype(f"testing.{name}", dtype)
    return numpy.dtype(dtype)


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    b = get_backend()
    try:
        return getattr(b.xp.testing, name)
    except AttributeError:
        raise AttributeError(f"module 'cuflow.testing' has no attribute {name!r} (not in "
                             f"cuflow.testing nor in {b.xp.__name__}.testing, where it forwards "
                             f"the names it does not define)") from None
