"""``cuflow.fft``'s own functions; everything else in it is the backend's ``fft``.

Stream semantics: asynchronous; queued on ``stream`` or the current stream.
"""

from __future__ import annotations

import numbers

import numpy

from .._errors import ArgumentError, ArgumentTypeError, ArgumentZeroDivisionError
from ._contract import as_dtype
from ._dispatch import call, run_on
from ._info import check_device
from ._runtime import runtime

__all__ = ["fftfreq", "rfftfreq"]


def fftfreq(n, /, d=1.0, *, dtype=None, device=None, stream=None):
    """Sample frequencies of a length-``n`` FFT with sample spacing ``d`` (array API)."""
    return _freq("fftfreq", n, d, dtype, device, stream)


def rfftfreq(n, /, d=1.0, *, dtype=None, device=None, stream=None):
    """Sample frequencies of a length-``n`` real FFT with sample spacing ``d`` (array API)."""
    return _freq("rfftfreq", n, d, dtype, device, stream)


def _freq(name, n, d, dtype, device, stream):
    # (CuPy computes a grid for a float or negative length, where NumPy refuses both)
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise ArgumentTypeError(f"cuflow.fft.{name}: n must be a positive integer, got "
                                f"{type(n).__name__} {n!r}")
    if n < 1:
        raise ArgumentError(f"cuflow.fft.{name}: n must be a positive integer, got {n!r}")
    n = int(n)
    if isinstance(d, numbers.Number) and d == 0:
        raise ArgumentZeroDivisionError(f"cuflow.fft.{name}: d, the sample spacing, must be "
                                        f"nonzero (the frequencies are 1/(n*d)), got {d!r}")
    if device is not None:
        check_device(f"fft.{name}", device)
    if stream is not None:
        return run_on(stream, f"fft.{name}", _freq, name, n, d, dtype, None, None)
    xp = runtime().xp

    if dtype is not None and as_dtype(f"fft.{name}", dtype).kind != "f":
        raise ArgumentTypeError(f"cuflow.fft.{name}: dtype must be a real floating dtype (the "
                                f"frequencies are fractions), got {numpy.dtype(dtype)}")

    def run():
        r = getattr(xp.fft, name)(n, d)
        return r if dtype is None else r.astype(dtype, copy=False)

    return call(f"fft.{name}", run)
