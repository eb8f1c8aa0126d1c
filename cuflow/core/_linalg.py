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


def _complex(dtype: numpy.dtype) -> numpy.dtype:
    return numpy.result_type(dtype, numpy.complex64)


def eig(x, /):
    """Eigenvalues and right eigenvectors of square matrices, always complex (array API).

    NumPy returns real arrays when every eigenvalue is real; the array API asks
    for the complex dtype matching ``x`` (float32 -> complex64) in every case.
    """
    rt = runtime()
    res = call("linalg.eig", rt.xp.linalg.eig, x)
    ct = _complex(x.dtype)
    w, v = (rt.wrap(r.astype(ct, copy=False)) for r in res)
    return EigResult(w, v)


def eigvals(x, /):
    """Eigenvalues of square matrices, always complex (array API)."""
    xp = runtime().xp
    w = xp.linalg.eigvals(x)
    return call("linalg.eigvals", lambda: w.astype(_complex(x.dtype), copy=False))
