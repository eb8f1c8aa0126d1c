"""Shared helpers of the image tests.

Inputs are random over the full uint8 range; every output given as ``dst`` is
poisoned first (NaN or 0xAB) so unwritten elements show.  Tolerances are the
ones :mod:`cuflow.image` documents: float32 within ``1e-3 * max|a|`` (``a =
scale / std``), float16 within that plus one float16 rounding, uint8 within 1.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import cuflow
from cuflow.testing import to_host

MEAN = (0.485, 0.456, 0.406)

STD = (0.229, 0.224, 0.225)



def u8_frames(rng, shape):
    return rng.integers(0, 256, shape, dtype=np.uint8)



def poisoned(cf, shape, dtype):
    d = np.dtype(dtype)
    return cf.full(shape, np.nan if d.kind == "f" else 0xAB, dtype=d)



def _tol(kw, dtype):
    a = max(abs(kw.get("scale", 1 / 255) / s) for s in np.atleast_1d(kw.get("std", 1.0)))
    if np.dtype(dtype) == np.uint8:
        return dict(atol=1, rtol=0)
    if np.dtype(dtype) == np.float16:
        return dict(atol=1e-3 * a, rtol=2e-3)
    return dict(atol=1e-3 * a, rtol=1e-6)



def close(got, want, dtype, kw):
    got = to_host(got).astype(np.float64)
    want = np.asarray(want).astype(np.float64)
    assert got.shape == want.shape
    assert np.isfinite(got).all(), "unwritten (poisoned) elements in the output"
    np.testing.assert_allclose(got, want, **_tol(kw, dtype))



def on_numpy(fn, *host_args, **kw):
    """Run ``fn`` on the NumPy backend (the reference) with host inputs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cuflow.set_backend("numpy")
    try:
        conv = [cuflow.asarray(a) if isinstance(a, np.ndarray) else a for a in host_args]
        r = fn(*conv, **kw)
        return to_host(r[0] if isinstance(r, tuple) else r)
    finally:
        cuflow.set_backend("cupy")


# ------------------------------------------------------------------ torchvision
def torchvision_or_skip():
    tv = pytest.importorskip("torchvision.transforms.v2.functional")
    import torch  # noqa: PLC0415  (optional dependency)

    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    return torch, tv
