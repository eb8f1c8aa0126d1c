"""CuPy ufuncs that cuflow replaces, where CuPy's results differ from NumPy's and the standard.

``remainder``: CuPy computes ``a - floor(a / b) * b``, which gives NaN for a finite
``a`` and an infinite ``b`` (NumPy: ``a`` or ``b``, by sign) and loses the sign of a
zero result.  This one follows NumPy's ``npy_divmod``: ``fmod``, then a shift by
``b`` when the signs differ, and a zero signed as ``b``.  Floats compute in double,
which is exact for ``fmod`` and rounds the shifted sum once, as float arithmetic
would.  Integers keep CuPy's rule (0 for a zero divisor).  ``divmod`` and ``floor_divide``
remain CuPy's.

``log``, ``log1p``, ``tanh`` and ``arccosh`` of complex numbers: CuPy's (thrust's)
functions, except at the special values where they differ from NumPy and the array API
standard (``log(inf + nan j)`` is ``inf + nan j``, ``tanh(0 + inf j)`` is ``0 + nan j``,
``arccosh(0 + nan j)`` is ``nan + pi/2 j``, ``log1p(-inf - 0j)`` is ``inf - pi j``).
Their real loops are CuPy's code.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

__all__ = ["make_remainder", "make_complex_special"]

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


def make_remainder(cupy: ModuleType) -> Any:
    """The ``remainder`` ufunc for ``cupy`` (NumPy's results, one kernel)."""
    # NumPy's loop order: the first loop both inputs cast to safely is taken, so uint8
    # must come before int16 (or uint8 % uint8 would compute in int16)
    ops = [(f"{c}{c}->{c}", _FLOAT if c in "efd" else _SIGNED if c.islower() else _UNSIGNED)
           for c in "bBhHiIlLqQefd"]
    return cupy._core.create_ufunc("cuflow_remainder", ops, doc=__doc__)


# the complex loops' special values (in0 complex<float> or complex<double>), as NumPy's
_INF = "__longlong_as_double(0x7ff0000000000000LL)"
_NAN = "__longlong_as_double(0x7ff8000000000000LL)"
_LOG_SPECIAL = f"""
double re = in0.real(), im = in0.imag();
out0_type r = ((isinf(re) && isnan(im)) || (isnan(re) && isinf(im)))
    ? out0_type({_INF}, {_NAN}) : %s(in0);
"""
_COMPLEX_SPECIAL = {
    "log": _LOG_SPECIAL % "log" + "out0 = r;",
    # and log1p(conj(z)) == conj(log1p(z)) on the real axis, where CuPy loses the sign of
    # a zero imaginary part (log1p(-inf - 0j) is inf - pi j)
    "log1p": _LOG_SPECIAL % "log1p"
    + "out0 = im == 0 ? out0_type(r.real(), copysign((double)r.imag(), im)) : r;",
    "tanh": f"""
double re = in0.real(), im = in0.imag();
if (re == 0 && !isfinite(im)) out0 = out0_type(re, {_NAN});
else out0 = tanh(in0);  /* (cuflow.tanh sets the standard's values at infinite re) */
""",
    "arccosh": f"""
double re = in0.real(), im = in0.imag();
if (re == 0 && isnan(im)) out0 = out0_type({_NAN}, 1.5707963267948966);
else out0 = acosh(in0);
""",
}
_CUDA_NAME = {"arccosh": "acosh"}


def make_complex_special(cupy: ModuleType) -> dict[str, Any]:
    """``log``, ``log1p``, ``tanh`` and ``arccosh`` for ``cupy``: CuPy's loops, with NumPy's
    complex special values (one kernel, as CuPy's)."""
    out = {}
    for name, code in _COMPLEX_SPECIAL.items():
        real = f"out0 = {_CUDA_NAME.get(name, name)}(in0)"
        # CuPy's loops of NumPy's types (its bfloat16 loop needs ml_dtypes's type objects)
        ops = [(t, code if t[0] in "FD" else real) for t in getattr(cupy, name).types
               if set(t) <= set("efdFD->")]
        out[name] = cupy._core.create_ufunc(f"cuflow_{name}", ops, real,
                                            doc=getattr(cupy, name).__doc__)
    return out
