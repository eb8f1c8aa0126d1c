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


def test_take_edge_cases_as_numpy(cf, rng):
    h = random_array((3, 4), "float32", rng, host=True)
    a = cf.asarray(h)
    assert to_host(cf.take(a, [], axis=0)).shape == (0, 4)  # ([] is float64 to NumPy)
    z = np.float32(rng.standard_normal())
    for axis in (None, 0, -1):  # a 0-d array is taken from as a 1-d one
        np.testing.assert_array_equal(to_host(cf.take(cf.asarray(np.array(z)), [0, 0], axis=axis)),
                                      [z, z])
    with pytest.raises(cuflow.ArgumentError, match="rectangular"):
        cf.take(a, [[1], [1, 2]])
    with pytest.raises(cuflow.ArgumentIndexError, match=str(2**70)):
        cf.take(a, [2**70])
    for bad in ([True, False], 1.0):  # NumPy casts these; the array API takes integers
        with pytest.raises(cuflow.ArgumentTypeError, match="indices must be integers"):
            cf.take(a, bad)


def test_axes_and_shapes_may_be_numpy_arrays_and_index_objects(cf, rng):
    import collections

    h = random_array((3, 4), "float32", rng, host=True)
    a = cf.asarray(h)
    assert cf.reshape(a, np.array([4, 3])).shape == (4, 3)
    assert cf.reshape(a, range(2, 8, 4)).shape == (2, 6)
    np.testing.assert_array_equal(to_host(cf.transpose(a, np.argsort([1, 0]))), h.T)
    pair = collections.namedtuple("pair", "x y")
    np.testing.assert_allclose(to_host(cf.sum(a, axis=pair(0, 1))), h.sum(),
                               rtol=1e-5, atol=1e-5 * np.abs(h).sum())
    np.testing.assert_allclose(to_host(cf.sum(a, axis=np.array(1))), h.sum(axis=1),
                               rtol=1e-5, atol=1e-5 * np.abs(h).sum())


@pytest.mark.parametrize("call", [
    lambda cf, a: cf.cumsum(a, axis=False), lambda cf, a: cf.cumprod(a, axis="0"),
    lambda cf, a: cf.sort(a, axis=False), lambda cf, a: cf.argsort(a, axis=1.0),
    lambda cf, a: cf.concatenate([a, a], axis=False), lambda cf, a: cf.stack([a, a], axis=[0]),
    lambda cf, a: cf.take_along_axis(a, cf.asarray(np.zeros((3, 4), np.int64)), axis=True),
])
def test_other_axis_arguments_are_integers_too(cf, rng, call):
    # CuPy would read False as axis 0
    a = cf.asarray(random_array((3, 4), "float32", rng, host=True))
    with pytest.raises(cuflow.ArgumentTypeError, match="axis must be an integer"):
        call(cf, a)
