"""Transforms with dst= (core._manipulation and core._general) against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import cuflow
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


@pytest.mark.parametrize("axes", [False, "", "10", [0.0, 1.0], (1, True)])
def test_transpose_refuses_axes_that_are_not_integers(cf, rng, axes):
    a = cf.asarray(random_array((3, 4), "float32", rng, host=True))
    with pytest.raises(cuflow.ArgumentTypeError, match="axes must be an integer"):
        cf.transpose(a, axes)


def test_transpose_takes_a_list_of_axes_as_numpy_does(cf, rng):
    h = random_array((2, 3, 4), "float32", rng, host=True)
    np.testing.assert_array_equal(to_host(cf.transpose(cf.asarray(h), [2, 0, 1])),
                                  np.transpose(h, [2, 0, 1]))


@pytest.mark.parametrize("name", ["matmul", "dot"])
@pytest.mark.parametrize("other", [None, "x", [1.0, 2.0, 3.0]])
def test_matrix_products_refuse_operands_that_are_not_arrays(cf, rng, name, other):
    # (CuPy's matmul of an array and None ends the process instead of raising)
    a = cf.asarray(random_array((3,), "float32", rng, host=True))
    with pytest.raises(cuflow.CuflowError) as ei:
        getattr(cf, name)(a, other)
    assert isinstance(ei.value, TypeError | ValueError)


def test_matmul_refuses_a_scalar_operand_as_numpy_does(cf, rng):
    a = cf.asarray(random_array((3, 3), "float32", rng, host=True))
    with pytest.raises(cuflow.ArgumentError, match="at least 1-D"):
        cf.matmul(a, 2.0)
    with pytest.raises(ValueError):
        np.matmul(to_host(a), 2.0)


def test_astype_refuses_an_array_as_its_dtype(cf, rng):
    a = cf.asarray(random_array((3,), "float32", rng, host=True))
    with pytest.raises(cuflow.ArgumentTypeError, match="dtype must name a dtype"):
        cf.astype(a, cf.asarray(random_array((2,), "int32", rng, host=True)))


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_take_matches_numpy_with_host_and_device_indices(cf, rng, axis):
    h = random_array((4, 5), "float32", rng, host=True)
    a = cf.asarray(h)
    n = h.size if axis is None else h.shape[axis]
    idx = rng.integers(-n, n, size=(2, 3))
    want = np.take(h, idx, axis=axis)
    for ind in (idx, idx.tolist(), cf.asarray(idx)):
        np.testing.assert_array_equal(to_host(cf.take(a, ind, axis=axis)), want)
    dst = cf.full(want.shape, np.nan, dtype="float32")
    assert cf.take(a, idx, axis=axis, dst=dst) is dst
    np.testing.assert_array_equal(to_host(dst), want)
    i = int(idx[0, 0])  # a single index: the axis drops out
    np.testing.assert_array_equal(to_host(cf.take(a, i, axis=axis)), np.take(h, i, axis=axis))
    one = cf.full(np.take(h, i, axis=axis).shape, np.nan, dtype="float32")
    assert cf.take(a, i, axis=axis, dst=one) is one  # a single index into dst
    np.testing.assert_array_equal(to_host(one), np.take(h, i, axis=axis))


def test_take_refuses_indices_that_are_not_integers_or_past_the_axis(cf, rng):
    a = cf.asarray(random_array((4, 5), "float32", rng, host=True))
    with pytest.raises(cuflow.ArgumentTypeError, match="indices must be integers"):
        cf.take(a, [0.5, 1.5])
    with pytest.raises(cuflow.ArgumentTypeError, match="indices must be integers"):
        cf.take(a, cf.asarray(np.array([0.5], np.float16)))
    with pytest.raises(cuflow.ArgumentIndexError, match=r"\[-5, 5\) along axis 1.* 5 to 5"):
        cf.take(a, [5], axis=1)
    with pytest.raises(cuflow.ArgumentIndexError, match="axis must be in"):
        cf.take(a, 0, axis=2)
    with pytest.raises(cuflow.ArgumentTypeError, match="axis must be an integer"):
        cf.take(a, 0, axis=(0,))


@pytest.mark.gpu
def test_take_wraps_device_indices_past_the_end_on_the_gpu(gpu_cf, rng):
    # device indices are not read back (that would synchronize): CuPy's rule, they wrap
    h = random_array((6,), "float32", rng, host=True)
    got = gpu_cf.take(gpu_cf.asarray(h), gpu_cf.asarray(np.array([7, -8])))
    np.testing.assert_array_equal(to_host(got), np.take(h, [7, -8], mode="wrap"))
