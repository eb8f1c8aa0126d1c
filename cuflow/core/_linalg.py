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


def _complex(r: Any) -> numpy.dtype:
    """The complex dtype of the backend's result ``r`` (an integer or bool matrix is computed
    in float64, so its eigenvalues are complex128, as NumPy's)."""
    return numpy.result_type(r.dtype, numpy.complex64)


def eig(x, /):
    """Eigenvalues and right eigenvectors of square matrices, always complex (array API).

    NumPy returns real arrays when every eigenvalue is real; the array API asks
    for the complex dtype matching ``x`` (float32 -> complex64) in every case.
    """
    xp = runtime().xp

    def run(a):
        w, v = xp.linalg.eig(a)
        return w.astype(_complex(w), copy=False), v.astype(_complex(v), copy=False)

    return EigResult(*call("linalg.eig", run, x))


def eigvals(x, /):
    """Eigenvalues of square matrices, always complex (array API)."""
    xp = runtime().xp

    def run(a):
        w = xp.linalg.eigvals(a)
        return w.astype(_complex(w), copy=False)

    return call("linalg.eigvals", run, x)
