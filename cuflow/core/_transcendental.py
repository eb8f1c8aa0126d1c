"""Elementwise exponentials, logarithms and trigonometric functions.

NumPy's ufuncs of the same names (array API names are aliases), with ``dst=``,
``stream=``, ``casting=`` and ``dtype=`` as :mod:`cuflow.core._dispatch` describes.
"""

from __future__ import annotations

from typing import Any

from . import _runtime
from ._dispatch import fast_call, ufunc1, ufunc2, ufunc_methods
from ._docs import complete
from ._streams import use_stream

__all__ = ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "logaddexp", "logaddexp2", "sin",
           "cos", "tan", "arcsin", "asin", "arccos", "acos", "arctan", "atan", "arctan2",
           "atan2", "sinh", "cosh", "tanh", "arcsinh", "asinh", "arccosh", "acosh",
           "arctanh", "atanh", "deg2rad", "rad2deg", "degrees", "radians"]


@fast_call(1)
def exp(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
        casting: str = "same_kind", dtype: Any = None) -> Any:
    """Exponential, elementwise (array API)."""
    return ufunc1("exp", src, dst, out, stream, casting, dtype)


@fast_call(1)
def exp2(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
         casting: str = "same_kind", dtype: Any = None) -> Any:
    """``2**src``, elementwise."""
    return ufunc1("exp2", src, dst, out, stream, casting, dtype)


@fast_call(1)
def expm1(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
          casting: str = "same_kind", dtype: Any = None) -> Any:
    """``exp(src) - 1``, exact near 0, elementwise (array API)."""
    if getattr(src, "dtype", None) is None or src.dtype.kind != "c":
        return ufunc1("expm1", src, dst, out, stream, casting, dtype)
    with use_stream(stream, "expm1"):  # expm1(±0 + 0j) is exactly 0 + 0j, as the standard says
        xp = _runtime.runtime().xp
        at_zero = (src.real == 0) & (src.imag == 0) & ~xp.signbit(src.imag)
    r = ufunc1("expm1", src, dst, out, stream, casting, dtype)
    with use_stream(stream):
        xp.copyto(r, xp.zeros((), r.dtype), where=at_zero)
    return r


@fast_call(1)
def log(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
        casting: str = "same_kind", dtype: Any = None) -> Any:
    """Natural logarithm, elementwise (array API)."""
    return ufunc1("log", src, dst, out, stream, casting, dtype)


@fast_call(1)
def log2(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
         casting: str = "same_kind", dtype: Any = None) -> Any:
    """Base-2 logarithm, elementwise (array API)."""
    return ufunc1("log2", src, dst, out, stream, casting, dtype)


@fast_call(1)
def log10(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
          casting: str = "same_kind", dtype: Any = None) -> Any:
    """Base-10 logarithm, elementwise (array API)."""
    return ufunc1("log10", src, dst, out, stream, casting, dtype)


@fast_call(1)
def log1p(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
          casting: str = "same_kind", dtype: Any = None) -> Any:
    """``log(1 + src)``, exact near 0, elementwise (array API)."""
    return ufunc1("log1p", src, dst, out, stream, casting, dtype)


@fast_call(2)
def logaddexp(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
              casting: str = "same_kind", dtype: Any = None) -> Any:
    """``log(exp(src) + exp(other))``, elementwise (array API)."""
    return ufunc2("logaddexp", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def logaddexp2(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
               casting: str = "same_kind", dtype: Any = None) -> Any:
    """``log2(2**src + 2**other)``, elementwise."""
    return ufunc2("logaddexp2", src, other, dst, out, stream, casting, dtype)


@fast_call(1)
def sin(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
        casting: str = "same_kind", dtype: Any = None) -> Any:
    """Sine, elementwise (array API)."""
    return ufunc1("sin", src, dst, out, stream, casting, dtype)


@fast_call(1)
def cos(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
        casting: str = "same_kind", dtype: Any = None) -> Any:
    """Cosine, elementwise (array API)."""
    return ufunc1("cos", src, dst, out, stream, casting, dtype)


@fast_call(1)
def tan(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
        casting: str = "same_kind", dtype: Any = None) -> Any:
    """Tangent, elementwise (array API)."""
    return ufunc1("tan", src, dst, out, stream, casting, dtype)


@fast_call(1)
def arcsin(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
           casting: str = "same_kind", dtype: Any = None) -> Any:
    """Inverse sine, elementwise (array API ``asin``)."""
    return ufunc1("arcsin", src, dst, out, stream, casting, dtype)


@fast_call(1)
def arccos(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
           casting: str = "same_kind", dtype: Any = None) -> Any:
    """Inverse cosine, elementwise (array API ``acos``)."""
    return ufunc1("arccos", src, dst, out, stream, casting, dtype)


@fast_call(1)
def arctan(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
           casting: str = "same_kind", dtype: Any = None) -> Any:
    """Inverse tangent, elementwise (array API ``atan``)."""
    return ufunc1("arctan", src, dst, out, stream, casting, dtype)


@fast_call(2)
def arctan2(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
            casting: str = "same_kind", dtype: Any = None) -> Any:
    """Angle of the point ``(other, src)``, elementwise (array API ``atan2``)."""
    return ufunc2("arctan2", src, other, dst, out, stream, casting, dtype)


@fast_call(1)
def sinh(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
         casting: str = "same_kind", dtype: Any = None) -> Any:
    """Hyperbolic sine, elementwise (array API)."""
    return ufunc1("sinh", src, dst, out, stream, casting, dtype)


@fast_call(1)
def cosh(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
         casting: str = "same_kind", dtype: Any = None) -> Any:
    """Hyperbolic cosine, elementwise (array API)."""
    return ufunc1("cosh", src, dst, out, stream, casting, dtype)


@fast_call(1)
def tanh(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
         casting: str = "same_kind", dtype: Any = None) -> Any:
    """Hyperbolic tangent, elementwise (array API).

    For a complex ``src`` with an infinite real part and a finite imaginary part the result is
    the standard's ``±1 ± 0j`` (the zero signed as ``imag``), where NumPy's and
    CuPy's ``tanh`` can give NaN.
    """
    rt = _runtime.runtime()
    # the GPU's complex kernel sets those values itself (_cupy_ufuncs)
    if rt.is_gpu or getattr(src, "dtype", None) is None or src.dtype.kind != "c":
        return ufunc1("tanh", src, dst, out, stream, casting, dtype)
    with use_stream(stream, "tanh"):  # read src before an in-place call overwrites it
        xp = rt.xp
        re, im = src.real, src.imag
        at_inf = xp.isinf(re) & xp.isfinite(im)
        limit = xp.empty(src.shape, src.dtype)
        limit.real = xp.sign(re)  # set apart: 1j * -0.0 would lose the zero's sign
        limit.imag = xp.copysign(xp.zeros_like(im), im)
    r = ufunc1("tanh", src, dst, out, stream, casting, dtype)
    with use_stream(stream):  # (cast as the call's result was: into a real dst, the real part)
        xp.copyto(r, limit, where=at_inf, casting="unsafe")
    return r


@fast_call(1)
def arcsinh(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
            casting: str = "same_kind", dtype: Any = None) -> Any:
    """Inverse hyperbolic sine, elementwise (array API ``asinh``)."""
    return ufunc1("arcsinh", src, dst, out, stream, casting, dtype)


@fast_call(1)
def arccosh(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
            casting: str = "same_kind", dtype: Any = None) -> Any:
    """Inverse hyperbolic cosine, elementwise (array API ``acosh``)."""
    return ufunc1("arccosh", src, dst, out, stream, casting, dtype)


@fast_call(1)
def arctanh(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
            casting: str = "same_kind", dtype: Any = None) -> Any:
    """Inverse hyperbolic tangent, elementwise (array API ``atanh``)."""
    return ufunc1("arctanh", src, dst, out, stream, casting, dtype)


@fast_call(1)
def deg2rad(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
            casting: str = "same_kind", dtype: Any = None) -> Any:
    """Degrees to radians, elementwise."""
    return ufunc1("deg2rad", src, dst, out, stream, casting, dtype)


@fast_call(1)
def rad2deg(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
            casting: str = "same_kind", dtype: Any = None) -> Any:
    """Radians to degrees, elementwise."""
    return ufunc1("rad2deg", src, dst, out, stream, casting, dtype)


@fast_call(1)
def degrees(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
            casting: str = "same_kind", dtype: Any = None) -> Any:
    """Radians to degrees, elementwise."""
    return ufunc1("degrees", src, dst, out, stream, casting, dtype)


@fast_call(1)
def radians(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
            casting: str = "same_kind", dtype: Any = None) -> Any:
    """Degrees to radians, elementwise."""
    return ufunc1("radians", src, dst, out, stream, casting, dtype)


asin = arcsin
acos = arccos
atan = arctan
atan2 = arctan2
asinh = arcsinh
acosh = arccosh
atanh = arctanh

complete(globals(), __all__)
ufunc_methods(globals())
