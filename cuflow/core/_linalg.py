"""``cuflow.linalg``'s own functions; everything else in it is the backend's ``linalg``.

Stream semantics: the eigen-decompositions synchronize (the solvers return on the host).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy

from ._dispatch import call
from ._runtime import runtime

__all__ = ["eig", "eigvals", "EigResult"]


class EigResult(NamedTuple):
    """``eig``'s result (array API)."""

    eigenvalues: Any
    eigenvectors: Any


def _dtype(a: Any) -> numpy.dtype:
    """``a``'s dtype (host data, which NumPy takes and CuPy refuses: NumPy's reading)."""
    return a.dtype if hasattr(a, "dtype") else numpy.asarray(a).dtype


def _complex(dtype: numpy.dtype) -> numpy.dtype:
    return numpy.result_type(dtype, numpy.complex64)


def eig(x, /):
    """Eigenvalues and right eigenvectors of square matrices, always complex (array API).

    NumPy returns real arrays when every eigenvalue is real; the array API asks
    for the complex dtype matching ``x`` (float32 -> complex64) in every case.
    """
    xp = runtime().xp

    def run(a):
        ct = _complex(_dtype(a))
        return tuple(r.astype(ct, copy=False) for r in xp.linalg.eig(a))

    return EigResult(*call("linalg.eig", run, x))


def eigvals(x, /):
    """Eigenvalues of square matrices, always complex (array API)."""
    xp = runtime().xp

    def run(a):
        return xp.linalg.eigvals(a).astype(_complex(_dtype(a)), copy=False)

    return call("linalg.eigvals", run, x)
