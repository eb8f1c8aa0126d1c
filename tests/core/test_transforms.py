"""Transforms with dst= (core._manipulation and core._general) against NumPy."""

from __future__ import annotations

import numpy as np

from cuflow.testing import random_array, to_host


def test_transforms_with_dst(cf, rng):
    ha = random_array((3, 4), "float32", rng, host=True)
    hb = random_array((3, 4), "float32", rng, host=True)
    a, b = cf.asarray(ha), cf.asarray(hb)
    cases = [
        (lambda d: cf.concatenate([a, b], dst=d), np.concatenate([ha, hb])),
        (lambda d: cf.concatenate([a, b], axis=1, out=d), np.concatenate([ha, hb], axis=1)),
        (lambda d: cf.stack([a, b], dst=d), np.stack([ha, hb])),
        (lambda d: cf.matmul(a, b.T, dst=d), ha @ hb.T),
        (lambda d: cf.dot(a, b.T, dst=d), ha.dot(hb.T)),
        (lambda d: cf.clip(a, -1, 1, dst=d), np.clip(ha, -1, 1)),
        (lambda d: cf.cumsum(a, axis=1, dst=d), np.cumsum(ha, axis=1)),
        (lambda d: cf.around(a, 1, dst=d), np.around(ha, 1)),
        (lambda d: cf.transpose(a, dst=d), ha.T.copy()),
        (lambda d: cf.reshape(a, (4, 3), dst=d), ha.reshape(4, 3)),
        (lambda d: cf.ravel(a.T, dst=d), ha.T.ravel()),
        (lambda d: cf.ascontiguousarray(a.T, dst=d), np.ascontiguousarray(ha.T)),
        (lambda d: cf.copy(a, dst=d), ha.copy()),
    ]
    for fn, exp in cases:
        d = cf.full(exp.shape, np.nan, dtype=exp.dtype)
        assert fn(d) is d
        np.testing.assert_allclose(to_host(d), exp, rtol=1e-5, atol=1e-5)
