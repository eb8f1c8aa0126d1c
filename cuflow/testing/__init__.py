"""cuflow's test kit: random full-range inputs, poisoned outputs, a CUDA-correct timer.

Names this module does not define are forwarded to the backend's own testing
module (``cupy.testing`` or ``numpy.testing``), so drop-in code that uses
``cp.testing.assert_allclose`` keeps working.
"""

from __future__ import annotations

from typing import Any

import numpy

from .._errors import ArgumentTypeError
from ..core import asarray, get_backend
from ._timer import Timing, copy_bandwidth_tbps, device_time_us, host_time_us

__all__ = ["random_array", "poisoned", "to_host", "assert_equal_host", "Timing", "host_time_us",
           "device_time_us", "copy_bandwidth_tbps", "DTYPES"]

#: One dtype of every family cuflow supports.
DTYPES = (numpy.bool_, numpy.int8, numpy.int32, numpy.int64, numpy.uint8, numpy.uint16,
          numpy.float16, numpy.float32, numpy.float64, numpy.complex64, numpy.complex128)


def random_array(shape, dtype, rng: numpy.random.Generator | None = None, *, host: bool = False,
                 low=None, high=None):
    """Random values over the dtype's full range (never all zeros).

    Integers cover ``[min, max]`` (or ``[low, high)``), floats are normal with a wide
    spread and mixed signs, complex has random real and imaginary parts, bools are
    random.  Returns a darray of the active backend unless ``host``.
    """
    rng = numpy.random.default_rng() if rng is None else rng
    dt = numpy.dtype(dtype)
    shape = tuple(shape) if not isinstance(shape, int) else (shape,)
    if dt.kind == "b":
        a = rng.integers(0, 2, size=shape).astype(dt)
    elif dt.kind in "iu":
        info = numpy.iinfo(dt)
        lo = info.min if low is None else low
        hi = info.max if high is None else high - 1
        a = rng.integers(lo, hi, size=shape, dtype=dt, endpoint=True)
    elif dt.kind == "f":
        a = (rng.standard_normal(shape) * 100).astype(dt)
    elif dt.kind == "c":
        a = (rng.standard_normal(shape) * 100 + 1j * rng.standard_normal(shape) * 100).astype(dt)
    else:
        raise ArgumentTypeError(f"random_array: unsupported dtype {dt}")
    if host:
        return a
    return asarray(a)  # ``a`` is new: the NumPy backend may use it without a copy


def poisoned(shape, dtype):
    """An output array filled with a value no correct kernel writes (NaN, or the dtype's max)."""
    dt = numpy.dtype(dtype)
    if dt.kind in "fc":
        fill = numpy.nan
    elif dt.kind == "b":
        fill = True
    else:
        fill = numpy.iinfo(dt).max
    return asarray(numpy.full(shape, fill, dtype=dt))


def to_host(x) -> numpy.ndarray:
    """Any array (darray, CuPy, NumPy, scalar) as a plain NumPy array."""
    if hasattr(x, "get") and not isinstance(x, numpy.ndarray):
        return x.get()
    return numpy.array(x, copy=True, subok=False)


def assert_equal_host(actual, expected, **kw):
    """``numpy.testing.assert_array_equal`` on host copies, dtype and shape checked too."""
    a, e = to_host(actual), to_host(expected)
    assert a.dtype == e.dtype, f"dtype {a.dtype} != expected {e.dtype}"
    assert a.shape == e.shape, f"shape {a.shape} != expected {e.shape}"
    numpy.testing.assert_array_equal(a, e, **kw)


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    b = get_backend()
    return getattr(b.xp.testing, name)
