"""CuPy ufuncs that cuflow replaces, where CuPy's results differ from NumPy's and the standard.

``remainder``: CuPy computes ``a - floor(a / b) * b``, which gives NaN for a finite
``a`` and an infinite ``b`` (NumPy: ``a`` or ``b``, by sign) and loses the sign of a
zero result.  This one follows NumPy's ``npy_divmod``: ``fmod``, then a shift by
``b`` when the signs differ, and a zero signed as ``b``.  Floats compute in double,
which is exact for ``fmod`` and rounds the shifted sum once, as float arithmetic
would.  Integers keep CuPy's rule (0 for a zero divisor).  ``divmod`` and ``floor_divide``
remain CuPy's.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

__all__ = ["make_remainder"]

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
