"""Elementwise arithmetic.

NumPy's ufuncs of the same names (array API names are aliases), with ``dst=``,
``stream=``, ``casting=`` and ``dtype=`` as :mod:`cuflow.core._dispatch` describes.
"""

from __future__ import annotations

from typing import Any

from ._dispatch import fast_call, ufunc1, ufunc2, ufunc_methods, ufunc_multi
from ._docs import complete

__all__ = ["add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "remainder",
           "mod", "fmod", "divmod", "power", "pow", "float_power", "negative", "positive",
           "absolute", "abs", "fabs", "sign", "reciprocal", "square", "sqrt", "cbrt",
           "maximum", "minimum", "fmax", "fmin", "heaviside", "gcd", "lcm", "copysign",
           "nextafter", "spacing", "ldexp", "frexp", "modf", "hypot", "rint", "floor",
           "ceil", "trunc", "conjugate", "conj"]


@fast_call(2)
def add(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
        casting: str = "same_kind", dtype: Any = None) -> Any:
    """Sum, ``src + other``, elementwise (array API)."""
    return ufunc2("add", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def subtract(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
             casting: str = "same_kind", dtype: Any = None) -> Any:
    """Difference, ``src - other``, elementwise (array API)."""
    return ufunc2("subtract", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def multiply(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
             casting: str = "same_kind", dtype: Any = None) -> Any:
    """Product, ``src * other``, elementwise (array API)."""
    return ufunc2("multiply", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def divide(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
           casting: str = "same_kind", dtype: Any = None) -> Any:
    """True quotient, ``src / other``, elementwise (array API)."""
    return ufunc2("divide", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def floor_divide(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
                 casting: str = "same_kind", dtype: Any = None) -> Any:
    """Floor quotient, ``src // other``, elementwise (array API)."""
    return ufunc2("floor_divide", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def remainder(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
              casting: str = "same_kind", dtype: Any = None) -> Any:
    """Remainder of floor division, ``src % other`` (Python's sign rule), elementwise (array API).
    """
    return ufunc2("remainder", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def fmod(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
         casting: str = "same_kind", dtype: Any = None) -> Any:
    """Remainder of truncated division (C's ``fmod``), elementwise."""
    return ufunc2("fmod", src, other, dst, out, stream, casting, dtype)


def divmod(src: Any, other: Any, *dst_pair: Any, dst: Any = None, out: Any = None,  # noqa: A001
           stream: Any = None, casting: str = "same_kind", dtype: Any = None) -> Any:
    """``(src // other, src % other)``, elementwise; ``dst`` is a pair."""
    return ufunc_multi("divmod", (src, other), dst, out, stream, casting, dtype,
                       dst_pair)


@fast_call(2)
def power(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
          casting: str = "same_kind", dtype: Any = None) -> Any:
    """``src ** other``, elementwise (array API ``pow``)."""
    return ufunc2("power", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def float_power(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
                casting: str = "same_kind", dtype: Any = None) -> Any:
    """``src ** other`` computed in at least float64, elementwise."""
    return ufunc2("float_power", src, other, dst, out, stream, casting, dtype)


@fast_call(1)
def negative(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
             casting: str = "same_kind", dtype: Any = None) -> Any:
    """Negation, ``-src``, elementwise (array API)."""
    return ufunc1("negative", src, dst, out, stream, casting, dtype)


@fast_call(1)
def positive(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
             casting: str = "same_kind", dtype: Any = None) -> Any:
    """``+src``, elementwise (array API)."""
    return ufunc1("positive", src, dst, out, stream, casting, dtype)


@fast_call(1)
def absolute(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
             casting: str = "same_kind", dtype: Any = None) -> Any:
    """Absolute value, ``abs(src)``, elementwise (array API ``abs``)."""
    return ufunc1("absolute", src, dst, out, stream, casting, dtype)


@fast_call(1)
def fabs(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
         casting: str = "same_kind", dtype: Any = None) -> Any:
    """Absolute value of a real input, elementwise."""
    return ufunc1("fabs", src, dst, out, stream, casting, dtype)


@fast_call(1)
def sign(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
         casting: str = "same_kind", dtype: Any = None) -> Any:
    """Sign (-1, 0, 1; NaN for NaN), elementwise (array API)."""
    return ufunc1("sign", src, dst, out, stream, casting, dtype)


@fast_call(1)
def reciprocal(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
               casting: str = "same_kind", dtype: Any = None) -> Any:
    """``1 / src``, elementwise (array API)."""
    return ufunc1("reciprocal", src, dst, out, stream, casting, dtype)


@fast_call(1)
def square(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
           casting: str = "same_kind", dtype: Any = None) -> Any:
    """``src * src``, elementwise (array API)."""
    return ufunc1("square", src, dst, out, stream, casting, dtype)


@fast_call(1)
def sqrt(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
         casting: str = "same_kind", dtype: Any = None) -> Any:
    """Square root, elementwise (array API)."""
    return ufunc1("sqrt", src, dst, out, stream, casting, dtype)


@fast_call(1)
def cbrt(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
         casting: str = "same_kind", dtype: Any = None) -> Any:
    """Cube root, elementwise."""
    return ufunc1("cbrt", src, dst, out, stream, casting, dtype)


@fast_call(2)
def maximum(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
            casting: str = "same_kind", dtype: Any = None) -> Any:
    """Larger of two values (NaN propagates), elementwise (array API)."""
    return ufunc2("maximum", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def minimum(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
            casting: str = "same_kind", dtype: Any = None) -> Any:
    """Smaller of two values (NaN propagates), elementwise (array API)."""
    return ufunc2("minimum", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def fmax(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
         casting: str = "same_kind", dtype: Any = None) -> Any:
    """Larger of two values (NaN ignored), elementwise."""
    return ufunc2("fmax", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def fmin(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
         casting: str = "same_kind", dtype: Any = None) -> Any:
    """Smaller of two values (NaN ignored), elementwise."""
    return ufunc2("fmin", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def heaviside(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
              casting: str = "same_kind", dtype: Any = None) -> Any:
    """Heaviside step function, elementwise."""
    return ufunc2("heaviside", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def gcd(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
        casting: str = "same_kind", dtype: Any = None) -> Any:
    """Greatest common divisor, elementwise."""
    return ufunc2("gcd", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def lcm(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
        casting: str = "same_kind", dtype: Any = None) -> Any:
    """Least common multiple, elementwise."""
    return ufunc2("lcm", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def copysign(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
             casting: str = "same_kind", dtype: Any = None) -> Any:
    """Magnitude of ``src`` with the sign of ``other``, elementwise (array API)."""
    return ufunc2("copysign", src, other, dst, out, stream, casting, dtype)


@fast_call(2)
def nextafter(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
              casting: str = "same_kind", dtype: Any = None) -> Any:
    """Next float after ``src`` towards ``other``, elementwise (array API)."""
    return ufunc2("nextafter", src, other, dst, out, stream, casting, dtype)


@fast_call(1)
def spacing(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
            casting: str = "same_kind", dtype: Any = None) -> Any:
    """Distance to the next larger float, elementwise."""
    return ufunc1("spacing", src, dst, out, stream, casting, dtype)


@fast_call(2)
def ldexp(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
          casting: str = "same_kind", dtype: Any = None) -> Any:
    """``src * 2**other``, elementwise."""
    return ufunc2("ldexp", src, other, dst, out, stream, casting, dtype)


def frexp(src: Any, *dst_pair: Any, dst: Any = None, out: Any = None, stream: Any = None,
          casting: str = "same_kind", dtype: Any = None) -> Any:
    """Mantissa and exponent, elementwise; ``dst`` is a pair."""
    return ufunc_multi("frexp", (src,), dst, out, stream, casting, dtype,
                       dst_pair)


def modf(src: Any, *dst_pair: Any, dst: Any = None, out: Any = None, stream: Any = None,
         casting: str = "same_kind", dtype: Any = None) -> Any:
    """Fractional and integral parts, elementwise; ``dst`` is a pair."""
    return ufunc_multi("modf", (src,), dst, out, stream, casting, dtype,
                       dst_pair)


@fast_call(2)
def hypot(src: Any, other: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
          casting: str = "same_kind", dtype: Any = None) -> Any:
    """``sqrt(src**2 + other**2)`` without overflow, elementwise (array API)."""
    return ufunc2("hypot", src, other, dst, out, stream, casting, dtype)


@fast_call(1)
def rint(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
         casting: str = "same_kind", dtype: Any = None) -> Any:
    """Round to the nearest integer (ties to even), elementwise."""
    return ufunc1("rint", src, dst, out, stream, casting, dtype)


@fast_call(1)
def floor(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
          casting: str = "same_kind", dtype: Any = None) -> Any:
    """Round down, elementwise (array API)."""
    return ufunc1("floor", src, dst, out, stream, casting, dtype)


@fast_call(1)
def ceil(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
         casting: str = "same_kind", dtype: Any = None) -> Any:
    """Round up, elementwise (array API)."""
    return ufunc1("ceil", src, dst, out, stream, casting, dtype)


@fast_call(1)
def trunc(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
          casting: str = "same_kind", dtype: Any = None) -> Any:
    """Round towards zero, elementwise (array API)."""
    return ufunc1("trunc", src, dst, out, stream, casting, dtype)


@fast_call(1)
def conjugate(src: Any, dst: Any = None, *, out: Any = None, stream: Any = None,
              casting: str = "same_kind", dtype: Any = None) -> Any:
    """Complex conjugate, elementwise (array API ``conj``)."""
    return ufunc1("conjugate", src, dst, out, stream, casting, dtype)


true_divide = divide
mod = remainder
pow = power
abs = absolute
conj = conjugate

complete(globals(), __all__)
ufunc_methods(globals())
