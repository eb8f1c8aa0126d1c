"""Array creation: ``empty``, ``zeros``, ``ones``, ``full``, their ``*_like`` forms, ``arange``,
``linspace``, ``eye``, ``identity``.

Each is the backend's function of the same name with its NumPy/CuPy arguments,
returning a darray, plus keyword-only ``stream=`` (where any initialization
runs) and the array API's ``device=`` (None or the current device).

Shapes are an int or a sequence of ints >= 0 (``ArgumentTypeError`` /
``ArgumentError`` otherwise); an int may be a 0-d integer array, as NumPy and
CuPy take one (``cuflow.zeros(mask.sum())``), not a bool or a float.  A request
that cannot be met raises :class:`~cuflow.OutOfMemoryError` (also a
``MemoryError``) naming the shape, dtype and bytes asked for.

Stream semantics: asynchronous; any initialization is queued on ``stream`` or
the current stream.  A size given as a device array is read first: the host
waits for its value, as in CuPy.
"""

from __future__ import annotations

import functools
import inspect
import math
import sys
from collections.abc import Callable
from typing import Any

import numpy

from .._checks import as_index
from ._docs import complete, creation_sections
from .._errors import (ArgumentError, ArgumentOverflowError, ArgumentTypeError, CuflowError,
                       OutOfMemoryError)
from ._contract import check_dtype, check_in_range, check_int_fits_64_bits, parse_dtype
from ._dispatch import call, reraise, run_on
from ._fastpath import EMPTY, ZEROS, FastCall
from ._info import check_device
from . import _runtime
from ._runtime import runtime

__all__ = ["empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like",
           "full_like", "arange", "linspace", "eye", "identity"]


def _make(name: str, device: Any, stream: Any, *args: Any, **kwargs: Any) -> Any:
    if device is not None:
        check_device(name, device)
    if stream is not None:
        return run_on(stream, name, _make, name, None, None, *args, **kwargs)
    try:
        return call(name, getattr(runtime().xp, name), *args, **kwargs)
    except CuflowError:
        raise
    except MemoryError as e:
        raise OutOfMemoryError(f"cuflow.{name}: out of memory: {e}; free memory or ask for "
                               "less") from e
    except (ZeroDivisionError, OverflowError) as e:
        # the backend's own check (a step of 0, a negative count, a value its dtype cannot
        # hold): its words, as a cuflow error
        raise ArgumentError(f"cuflow.{name}: {e}") from e
    except TypeError as e:
        raise ArgumentTypeError(f"cuflow.{name}: {e}") from e


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if n < 1024 or unit == "EiB":
            return f"{n:.4g} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def check_fill_value(name: str, value: Any, dtype: Any = None) -> Any:
    """A fill value is a number (or a 0-d array of one): text or objects make no array of
    numbers; with ``dtype``, one that it holds (bool: True, False, 0 or 1; integers: whole
    numbers in range; reals: finite values in range, or inf and nan as given).  Returns the
    value to fill with: a complex number of zero imaginary part for a real dtype becomes its
    real part (the backend's cast would warn that it discards one)."""
    try:
        # (result_type(None) is float64, and of a tuple the dtype it spells: neither is a
        # number; a Python int past int64 is one, where result_type says object)
        kind = ("O" if value is None or isinstance(value, list | tuple) else
                "U" if isinstance(value, str | bytes) else
                "i" if isinstance(value, int) and not isinstance(value, bool) else
                numpy.result_type(value).kind)
    except TypeError:
        kind = "O"
    if kind not in "biufc":
        raise ArgumentTypeError(f"cuflow.{name}: fill_value must be a number, got "
                                f"{type(value).__name__} {value!r}")
    if dtype is None:
        check_int_fits_64_bits(name, "fill_value", value)
    if dtype is None or numpy.ndim(value) != 0:
        return value
    check_dtype(name, dtype)
    dt = numpy.dtype(dtype)
    if dt.kind in "fc" and kind == "i":  # (CuPy's scalar of a Python int is a C long)
        try:
            value = float(value)
        except OverflowError:
            raise ArgumentOverflowError(f"cuflow.{name}: fill_value {value!r} is out of the "
                                        f"range of {dt}") from None
        kind = "f"
    if dt.kind == "b":
        # True/False (NumPy's too) or the ints 0 and 1; a cast would make 2.5 or 1j True
        if kind == "b" or (kind in "iu" and value in (0, 1)):
            return value
        raise ArgumentError(f"cuflow.{name}: fill_value for bool must be True, False, 0 or 1, "
                            f"got {value!r}")
    if dt.kind == "c" or kind == "b":
        return value
    v = complex(value) if kind == "c" else value
    if kind == "c":
        if v.imag:
            raise ArgumentTypeError(f"cuflow.{name}: fill_value {value!r} is complex, and "
                                    f"{dt} holds real numbers; take .real first")
        v = v.real
    v = float(v) if kind in "fc" else int(v)
    if dt.kind in "iu":
        if isinstance(v, float) and not (math.isfinite(v) and v == int(v)):
            raise ArgumentError(f"cuflow.{name}: fill_value must be a whole number for {dt}, "
                                f"got {value!r}")
    check_in_range(name, [("fill_value", v)], dt)
    return v if kind == "c" else value


def check_shape(name: str, shape: Any, dtype: Any) -> tuple[int, ...]:
    """``shape`` checked: ints >= 0 whose product fits the address space, as a tuple of
    Python ints.  An int is anything :func:`~cuflow._checks.as_index` takes (a 0-d integer
    array too, read to the host as CuPy reads it), never a bool or a float.

    The bytes are checked before the backend sees the shape, so a request no memory can hold
    is an :class:`OutOfMemoryError` giving its size (NumPy would say "array is too big").
    """
    check_dtype(name, dtype)
    n = as_index(shape)
    if n is not None:
        dims: tuple = (n,)
    else:
        try:
            dims = tuple(shape)
        except TypeError:
            raise ArgumentTypeError(f"cuflow.{name}: shape must be an int or a sequence of "
                                    f"ints, got {type(shape).__name__} {shape!r}") from None
        dims = tuple(as_index(d) for d in dims)
        if None in dims:
            raise ArgumentTypeError(f"cuflow.{name}: shape must hold ints (sizes are whole "
                                    f"numbers), got {shape!r}")
    if any(d < 0 for d in dims):
        raise ArgumentError(f"cuflow.{name}: shape must hold sizes >= 0, got {shape!r}")
    dt = parse_dtype(dtype) if dtype is not None else numpy.dtype(numpy.float64)
    itemsize = 1 if dt is None else max(dt.itemsize, 1)  # (None: the backend names it)
    nbytes = math.prod(dims) * itemsize
    if nbytes > sys.maxsize:
        raise OutOfMemoryError(f"cuflow.{name}: out of memory: shape {dims} of "
                               f"{dt if dt is not None else repr(dtype)} needs "
                               f"{nbytes} bytes ({_fmt_bytes(nbytes)}), more than any "
                               "address space holds")
    return dims


def _like(name: str, a: Any, dtype: Any, order: str, subok: Any, shape: Any) -> dict[str, Any]:
    check_dtype(name, dtype)
    try:  # (a prototype without a dtype is host data: a number or a nest of them)
        kind = numpy.dtype(getattr(a, "dtype", None) or numpy.asarray(a).dtype).kind
    except (TypeError, ValueError):
        kind = "O"
    if kind not in "biufc":
        raise ArgumentTypeError(f"cuflow.{name}: a must be an array of numbers (or numbers), "
                                f"got {type(a).__name__} {a!r:.60}")
    if shape is not None:
        shape = check_shape(name, shape, dtype if dtype is not None else getattr(a, "dtype", None))
    kw = {"dtype": dtype, "order": order, "shape": shape}
    if subok is not None:
        kw["subok"] = subok
    return kw


_REAL = (int, float, numpy.integer, numpy.floating)  # the numbers a range's ends may be


def _fast_empty(name: str, shape: Any, dtype: Any, order: str, device: Any,
                stream: Any) -> Any:
    """A new C-contiguous array from the compiled launcher, or None (the checked path)."""
    rt = _runtime._current
    if rt is None or rt.fast is None or device is not None or stream is not None or \
            order != "C":
        return None
    try:
        return rt.fast.empty(shape, dtype)
    except Exception as e:  # the allocation's own errors, as cuflow's (OutOfMemoryError)
        reraise(name, e)


def _fast_like(name: str, a: Any, dtype: Any, order: str, subok: Any, shape: Any,
               device: Any, stream: Any) -> Any:
    """``_fast_empty`` of a C-contiguous device array's shape and dtype, or None."""
    if dtype is not None or shape is not None or subok is not None or \
            order not in ("K", "A", "C") or not getattr(a, "_c_contiguous", False):
        return None
    return _fast_empty(name, a.shape, a.dtype, "C", device, stream)


def _entry(kind: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator of ``empty`` and ``zeros``: ``f(shape)`` and ``f(shape, dtype)`` (dtype
    positional or keyword) make the array from C (``FastCall``, no Python frame: bench op
    zoo ``empty(1000)``); every other call, and each one the launcher declines, runs the
    function."""
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        if FastCall is None:
            return fn
        default = inspect.signature(fn).parameters["dtype"].default
        return functools.update_wrapper(FastCall(default, fn, 1, _runtime, kind), fn)
    return wrap


@_entry(EMPTY)
def empty(shape: Any, dtype: Any = float, order: str = "C", *, device: Any = None,
          stream: Any = None) -> Any:
    """New array of ``shape``, uninitialized (array API ``empty``)."""
    r = _fast_empty("empty", shape, dtype, order, device, stream)
    if r is not None:
        return r
    return _make("empty", device, stream, check_shape("empty", shape, dtype), dtype, order)


@_entry(ZEROS)
def zeros(shape: Any, dtype: Any = float, order: str = "C", *, device: Any = None,
          stream: Any = None) -> Any:
    """New array of ``shape`` filled with 0 (array API ``zeros``)."""
    r = _fast_empty("zeros", shape, dtype, order, device, stream)
    if r is not None:
        r.fill(0)  # one memset on the current stream, as CuPy's zeros
        return r
    return _make("zeros", device, stream, check_shape("zeros", shape, dtype), dtype, order)


def ones(shape: Any, dtype: Any = float, order: str = "C", *, device: Any = None,
         stream: Any = None) -> Any:
    """New array of ``shape`` filled with 1 (array API ``ones``)."""
    return _make("ones", device, stream, check_shape("ones", shape, dtype), dtype, order)


def full(shape: Any, fill_value: Any, dtype: Any = None, order: str = "C", *, device: Any = None,
         stream: Any = None) -> Any:
    """New array of ``shape`` filled with ``fill_value`` (array API ``full``)."""
    fill_value = check_fill_value("full", fill_value, dtype)
    dims = check_shape("full", shape, dtype if dtype is not None else numpy.result_type(fill_value))
    return _make("full", device, stream, dims, fill_value, dtype, order)


def empty_like(a: Any, dtype: Any = None, order: str = "K", subok: bool | None = None,
               shape: Any = None, *, device: Any = None, stream: Any = None) -> Any:
    """Uninitialized array like ``a`` (array API ``empty_like``)."""
    r = _fast_like("empty_like", a, dtype, order, subok, shape, device, stream)
    if r is not None:
        return r
    return _make("empty_like", device, stream, a,
                 **_like("empty_like", a, dtype, order, subok, shape))


def zeros_like(a: Any, dtype: Any = None, order: str = "K", subok: bool | None = None,
               shape: Any = None, *, device: Any = None, stream: Any = None) -> Any:
    """Array like ``a`` filled with 0 (array API ``zeros_like``)."""
    r = _fast_like("zeros_like", a, dtype, order, subok, shape, device, stream)
    if r is not None:
        r.fill(0)
        return r
    return _make("zeros_like", device, stream, a,
                 **_like("zeros_like", a, dtype, order, subok, shape))


def ones_like(a: Any, dtype: Any = None, order: str = "K", subok: bool | None = None,
              shape: Any = None, *, device: Any = None, stream: Any = None) -> Any:
    """Array like ``a`` filled with 1 (array API ``ones_like``)."""
    return _make("ones_like", device, stream, a,
                 **_like("ones_like", a, dtype, order, subok, shape))


def full_like(a: Any, fill_value: Any, dtype: Any = None, order: str = "K",
              subok: bool | None = None, shape: Any = None, *, device: Any = None,
              stream: Any = None) -> Any:
    """Array like ``a`` filled with ``fill_value`` (array API ``full_like``)."""
    fill_value = check_fill_value("full_like", fill_value,
                             dtype if dtype is not None else getattr(a, "dtype", None))
    return _make("full_like", device, stream, a, fill_value,
                 **_like("full_like", a, dtype, order, subok, shape))


def arange(start: Any = None, stop: Any = None, step: Any = 1, dtype: Any = None, *,
           device: Any = None, stream: Any = None) -> Any:
    """Evenly spaced values in ``[start, stop)`` (array API ``arange``; ``arange(n)`` and
    ``arange(stop=n)`` are ``[0, n)``)."""
    if start is None and stop is None:
        raise ArgumentTypeError("cuflow.arange: give stop (or start and stop)")
    if stop is None:
        start, stop = 0, start
    elif start is None:
        start = 0
    if isinstance(step, int | float | numpy.number) and step == 0:
        raise ArgumentError(f"cuflow.arange: step must be non-zero, got {step!r}")
    check_dtype("arange", dtype)
    if dtype is None:
        for what, v in (("start", start), ("stop", stop), ("step", step)):
            check_int_fits_64_bits("arange", what, v)
    if all(isinstance(v, _REAL) and not isinstance(v, bool) for v in (start, stop, step)):
        # the length is checked here: CuPy computes a size past 2**63 bytes as a small one
        # and its kernel then writes past the allocation
        fl = any(isinstance(v, float | numpy.floating) for v in (start, stop, step))
        if fl:
            if not all(math.isfinite(v) for v in (start, stop, step)):
                raise ArgumentError(f"cuflow.arange: start, stop and step must be finite, got "
                                    f"{start!r}, {stop!r}, {step!r}")
            n = math.ceil((float(stop) - float(start)) / float(step))
        else:
            n = -((int(start) - int(stop)) // int(step))
        if n > 0:
            check_shape("arange", (n,), dtype if dtype is not None else
                   (numpy.float64 if fl else numpy.int64))
            if dtype is not None:
                check_in_range("arange", [("start", start), ("the last value", _arange_last(
                    start, step, n, fl, numpy.dtype(dtype)))], dtype)
    return _make("arange", device, stream, start, stop, step, dtype=dtype)


def _arange_last(start: Any, step: Any, n: int, fl: bool, dt: numpy.dtype) -> Any:
    """The last of ``n`` values of ``arange(start, ..., step)`` in ``dt``: NumPy makes an
    integer dtype's range of float arguments from ``start`` and ``start + step`` cast to it,
    so its step is the difference of the two truncated values."""
    if not fl:
        return int(start) + (n - 1) * int(step)
    if dt.kind in "iu":
        first = math.trunc(float(start))
        return first + (n - 1) * (math.trunc(float(start) + float(step)) - first)
    return float(start) + (n - 1) * float(step)


def linspace(start: Any, stop: Any, num: int = 50, endpoint: bool = True, retstep: bool = False,
             dtype: Any = None, axis: int = 0, *, device: Any = None, stream: Any = None) -> Any:
    """``num`` evenly spaced values from ``start`` to ``stop`` (array API ``linspace``)."""
    check_dtype("linspace", dtype)
    if isinstance(num, int | numpy.integer) and num > 0:
        check_shape("linspace", (num,), dtype if dtype is not None else numpy.float64)
    if dtype is not None and numpy.dtype(dtype).kind != "c":
        dt = numpy.dtype(dtype)
        for what, v in (("start", start), ("stop", stop)):
            if isinstance(v, complex | numpy.complexfloating) and v.imag:
                raise ArgumentTypeError(f"cuflow.linspace: {what} {v!r} is complex, and {dt} "
                                        f"holds real numbers; take .real first")
        # a complex endpoint of zero imaginary part is its real part (CuPy refuses it)
        start, stop = (v.real if isinstance(v, complex | numpy.complexfloating) else v
                       for v in (start, stop))
        for what, v in (("start", start), ("stop", stop)):
            if dt.kind in "biu" and isinstance(v, float | numpy.floating) \
                    and not math.isfinite(v):  # (a cast makes garbage of inf and nan)
                raise ArgumentError(f"cuflow.linspace: {what} must be finite for {dt}, got "
                                    f"{v!r}")
    if dtype is not None and isinstance(num, int | numpy.integer) and num > 0 and all(
            isinstance(v, _REAL) and not isinstance(v, bool) and math.isfinite(v)
            for v in (start, stop)):
        # the values lie between the first and the last (stop only with endpoint); NumPy
        # rounds them down for an integer dtype
        last = (float(stop) if endpoint else
                float(start) + (num - 1) * (float(stop) - float(start)) / num) if num > 1 \
            else start
        check_in_range("linspace", [("start", start), ("the last value", last)], dtype,
                       math.floor)
    r = _make("linspace", device, stream, start, stop, num, endpoint, retstep, dtype, axis)
    if retstep and getattr(r[1], "ndim", 1) == 0:  # a Python number, as CuPy's (host) step
        return r[0], r[1].item()
    return r


def eye(N: int, M: int | None = None, k: int = 0, dtype: Any = float,  # noqa: N803
        order: str = "C", *, device: Any = None, stream: Any = None) -> Any:
    """2-D array of ``N`` rows and ``M`` columns (``N`` when omitted), ones on diagonal ``k``
    (array API ``eye``, whose ``n_rows, n_cols`` are these positional ``N, M``)."""
    check_dtype("eye", dtype)
    if isinstance(N, int | numpy.integer) and isinstance(M, int | numpy.integer | None) and N > 0 \
            and (M is None or M > 0):
        check_shape("eye", (N, N if M is None else M), dtype)
    return _make("eye", device, stream, N, M, k, dtype, order)


def identity(n: int, dtype: Any = float, *, device: Any = None, stream: Any = None) -> Any:
    """Square identity matrix."""
    check_dtype("identity", dtype)
    return _make("identity", device, stream, n, dtype)


complete(globals(), __all__, creation_sections)
