"""CuPy ufuncs that cuflow replaces, where CuPy's results differ from NumPy's and the standard.

``remainder``: CuPy computes ``a - floor(a / b) * b``, which gives NaN for a finite
``a`` and an infinite ``b`` (NumPy: ``a`` or ``b``, by sign) and loses the sign of a
zero result.  This one follows NumPy's ``npy_divmod``: ``fmod``, then a shift by
``b`` when the signs differ, and a zero signed as ``b``.  Floats compute in double,
which is exact for ``fmod`` and rounds the shifted sum once, as float arithmetic
would.  Integers keep CuPy's rule (0 for a zero divisor).

``floor_divide`` and ``divmod``: CuPy computes the quotient as ``floor(a / b)``, whose
rounded division can land on the next integer (``1.0 // 0.1`` is 10, where the exact
quotient is 9.99...), so that ``a // b`` and ``a % b`` disagree.  These compute NumPy's
``npy_divmod`` (the generated kernels' code, ``_ewgen.DIVMOD``) in the operands' float
type (float16 in float, rounded once, as NumPy's half loops do), except where an operand
is infinite: there the quotient is the array API standard's, which ``floor(a / b)`` gives
(``inf // 2`` is ``inf`` where NumPy's is NaN, ``-1.0 // inf`` is ``-0.0`` where NumPy's is
-1).  The remainder stays NumPy's.  Integers take Python's sign rule with 0 for a zero
divisor, as CuPy's do.

``log``, ``log1p``, ``log2``, ``log10``, ``tanh``, ``arccosh`` and ``reciprocal`` of complex
numbers: CuPy's (thrust's) functions, except at the special values where they differ from
NumPy and the array API standard (``log(inf + nan j)`` is ``inf + nan j``, ``tanh(0 + inf
j)`` is ``0 + nan j``, ``arccosh(0 + nan j)`` is ``nan + pi/2 j``, ``log1p(-inf - 0j)`` is
``inf - pi j``, ``log2(inf + 1j)`` is ``inf + 0j``, ``reciprocal(inf + 0j)`` is ``0 - 0j``;
``tanh`` at an infinite real part and a finite imaginary part is the standard's ``±1 ± 0j``,
the zero signed as the imaginary part, where NumPy's and CuPy's can give NaN):
``log2`` and ``log10`` scale the log's parts, and ``reciprocal`` divides as NumPy does.
Their real loops are CuPy's code.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ._ewgen import DIVMOD

__all__ = ["make_remainder", "make_floor_divide", "make_divmod", "make_complex_special"]

_FLOAT = """
double x = in0, y = in1;
double r = fmod(x, y);
if (r != 0) { if ((y < 0) != (r < 0)) r += y; } else { r = copysign(0.0, y); }
out0 = (out0_type)r;
"""
_SIGNED = """
if (in1 == 0 || in1 == -1) { out0 = 0; } else {  /* x % -1 is 0; INT_MIN % -1 would trap */
  out0 = in0 % in1;
  if (out0 != 0 && ((out0 < 0) != (in1 < 0))) out0 += in1;
}
"""
_UNSIGNED = "out0 = in1 == 0 ? 0 : in0 % in1;"


#: NumPy's loop order of floor_divide, divmod and remainder (unsigned before the next signed)
_LOOPS = "bBhHiIlLqQefd"


def make_remainder(cupy: ModuleType) -> Any:
    """The ``remainder`` ufunc for ``cupy`` (NumPy's results, one kernel)."""
    # NumPy's loop order: the first loop both inputs cast to safely is taken, so uint8
    # must come before int16 (or uint8 % uint8 would compute in int16)
    ops = [(f"{c}{c}->{c}", _FLOAT if c in "efd" else _SIGNED if c.islower() else _UNSIGNED)
           for c in _LOOPS]
    return cupy._core.create_ufunc("cuflow_remainder", ops, doc=__doc__)


def _float_t(c: str) -> str:
    return "double" if c == "d" else "float"


_FLOORDIV = DIVMOD + """
template <typename T> __device__ __forceinline__ T cf_floordiv_std(T a, T b, T *modp) {
    T q = cf_divmod<T>(a, b, modp);
    return (isinf(a) || isinf(b)) ? cf_floor(a / b) : q; }
"""


def _division(cupy: ModuleType, name: str, remainder: bool) -> Any:
    """The floor quotient (and, with ``remainder``, NumPy's remainder beside it) per loop."""
    ops = []
    for c in _LOOPS:
        t = _float_t(c)
        if c in "efd":
            code = f"{t} m; out0 = (out0_type)cf_floordiv_std<{t}>(({t})in0, ({t})in1, &m);"
            code += " out1 = (out1_type)m;" if remainder else ""
        else:
            code = "out0 = cf_ifloordiv<in0_type>(in0, in1);"
            code += " out1 = cf_imod<in0_type>(in0, in1);" if remainder else ""
        ops.append((f"{c}{c}->{c}{c if remainder else ''}", code))
    return cupy._core.create_ufunc(name, ops, preamble=_FLOORDIV, doc=__doc__)


def make_floor_divide(cupy: ModuleType) -> Any:
    """The ``floor_divide`` ufunc for ``cupy`` (NumPy's results, one kernel)."""
    return _division(cupy, "cuflow_floor_divide", False)


def make_divmod(cupy: ModuleType) -> Any:
    """The ``divmod`` ufunc for ``cupy``: ``(a // b, a % b)`` of :func:`make_floor_divide`
    and :func:`make_remainder`, in one kernel."""
    return _division(cupy, "cuflow_divmod", True)


# the complex loops' special values (in0 complex<float> or complex<double>), as NumPy's
_INF = "__longlong_as_double(0x7ff0000000000000LL)"
_NAN = "__longlong_as_double(0x7ff8000000000000LL)"
_LOG_SPECIAL = f"""
double re = in0.real(), im = in0.imag();
out0_type r = ((isinf(re) && isnan(im)) || (isnan(re) && isinf(im)))
    ? out0_type({_INF}, {_NAN}) : %s(in0);
"""


def _scaled_log(c: float) -> str:
    """The complex log's parts scaled by ``c``, as NumPy's log2 and log10 compute them."""
    return _LOG_SPECIAL % "log" + (
        f"typedef decltype(in0.real()) T; out0 = out0_type(r.real() * T({c!r}), "
        f"r.imag() * T({c!r}));")


_COMPLEX_SPECIAL = {
    "log": _LOG_SPECIAL % "log" + "out0 = r;",
    # and log1p(conj(z)) == conj(log1p(z)) on the real axis, where CuPy loses the sign of
    # a zero imaginary part (log1p(-inf - 0j) is inf - pi j)
    "log1p": _LOG_SPECIAL % "log1p"
    + "out0 = im == 0 ? out0_type(r.real(), copysign((double)r.imag(), im)) : r;",
    # CuPy's divide by a complex log(2) or log(10), which makes NaNs of infinities
    "log2": _scaled_log(1.4426950408889634),
    "log10": _scaled_log(0.4342944819032518),
    "tanh": f"""
double re = in0.real(), im = in0.imag();
if (re == 0 && !isfinite(im)) out0 = out0_type(re, {_NAN});
else if (isinf(re) && isfinite(im)) out0 = out0_type(copysign(1.0, re), copysign(0.0, im));
else out0 = tanh(in0);
""",
    "arccosh": f"""
double re = in0.real(), im = in0.imag();
if (re == 0 && isnan(im)) out0 = out0_type({_NAN}, 1.5707963267948966);
else out0 = acosh(in0);
""",
    # NumPy's (Smith's) division, in the element's precision: CuPy's 1 / z gives NaN for
    # an infinite z and loses the signs of zeros
    "reciprocal": """
typedef decltype(in0.real()) T;
T re = in0.real(), im = in0.imag();
if (fabs(im) <= fabs(re)) { T q = im / re, d = re + im * q; out0 = out0_type(T(1) / d, -q / d); }
else { T q = re / im, d = re * q + im; out0 = out0_type(q / d, T(-1) / d); }
""",
}


def _real_code(name: str, t: str) -> str:
    """CuPy's code of the real loop of types ``t``."""
    if name == "reciprocal":
        return "out0 = 1 / in0" if t[0] in "efd" else "out0 = in0 == 0 ? 0 : (1 / in0)"
    return f"out0 = {'acosh' if name == 'arccosh' else name}(in0)"


def make_complex_special(cupy: ModuleType) -> dict[str, Any]:
    """The functions of ``_COMPLEX_SPECIAL`` for ``cupy``: CuPy's loops, with NumPy's
    complex special values (one kernel, as CuPy's)."""
    out = {}
    for name, code in _COMPLEX_SPECIAL.items():
        # CuPy's loops of NumPy's types (its bfloat16 loop needs ml_dtypes's type objects)
        ops = [(t, code if t[0] in "FD" else _real_code(name, t))
               for t in getattr(cupy, name).types if set(t) <= set("?bBhHiIlLqQefdFD->")]
        out[name] = cupy._core.create_ufunc(f"cuflow_{name}", ops, _real_code(name, "d"),
                                            doc=getattr(cupy, name).__doc__)
    return out
