"""Reductions (core._statistical) against NumPy, with and without dst=."""

from __future__ import annotations

import numpy as np
import pytest

import cuflow
from cuflow.testing import assert_equal_host, random_array, to_host


REDUCTIONS = ["sum", "mean", "min", "max", "argmin", "argmax", "prod", "std", "var", "any", "all"]


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int32", "float32", "float64", "complex64"])
@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1)])
def test_reductions(cf, rng, name, dtype, axis):
    if dtype == "complex64" and name in ("min", "max", "argmin", "argmax"):
        pytest.skip("complex ordering differs between NumPy and CuPy")
    if dtype == "bool" and name in ("std", "var", "mean"):
        pytest.skip("not meaningful for bool")
    # integer factors 1..3: a product of 30 of them (at most 3**30) neither wraps nor is 0
    kw = {"low": 1, "high": 4} if name == "prod" and dtype in ("uint8", "int32") else {}
    h = random_array((6, 5), dtype, rng, host=True, **kw)
    if name == "prod" and h.dtype.kind in "fc":
        # the drawn signs (or phases) with magnitudes 0.5..2: a product of 30 stays finite
        # and non-zero in float32
        h = (h / np.abs(h) * rng.uniform(0.5, 2, h.shape)).astype(dtype)
    if name == "prod" and dtype == "bool":
        # mostly True, so that products (the ``all`` of each lane) come out both 0 and 1
        h = rng.random(h.shape) < 0.95
    a = cf.asarray(h)
    with np.errstate(all="ignore"):
        exp = np.asarray(getattr(np, name)(h, axis=axis)) if name not in ("argmin", "argmax") or axis != (0, 1) else None
    if exp is None:
        pytest.skip("arg-reductions take one axis")
    assert np.isfinite(exp).all()
    if name == "prod" and dtype != "bool":
        assert (exp != 0).all()
    got = getattr(cf, name)(a, axis=axis)
    assert isinstance(got, cf.darray)
    np.testing.assert_allclose(to_host(got), exp, rtol=2e-5 if dtype != "float32" else 1e-3)
    dst = cf.empty(exp.shape, dtype=exp.dtype)
    r = getattr(cf, name)(a, axis=axis, dst=dst)
    assert r is dst
    np.testing.assert_allclose(to_host(dst), exp, rtol=2e-5 if dtype != "float32" else 1e-3)
    # method spelling with out=
    dst2 = cf.empty(exp.shape, dtype=exp.dtype)
    assert getattr(a, name)(axis=axis, out=dst2) is dst2


def test_reduction_positional_out_matches_numpy_signatures(cf):
    a = cf.asarray(np.arange(12, dtype=np.float64).reshape(3, 4))
    d = cf.empty(4)
    assert cf.sum(a, 0, None, d) is d  # sum(a, axis, dtype, out)
    m = cf.empty(4)
    assert cf.max(a, 0, m) is m  # amax(a, axis, out)
    s = cf.empty(4)
    assert cf.std(a, 0, None, s, 1) is s  # std(a, axis, dtype, out, ddof)
    np.testing.assert_allclose(to_host(s), np.std(np.arange(12.).reshape(3, 4), 0, ddof=1))


def test_reduction_into_overlapping_dst(cf):
    h = np.arange(12, dtype=np.float64).reshape(3, 4)
    a = cf.array(h)
    cf.sum(a, axis=0, dst=a[0])
    exp = h.copy()
    exp[0] = h.sum(axis=0)
    assert_equal_host(a, exp)


@pytest.mark.parametrize("name", ["sum", "prod", "mean", "std", "min", "argmax", "any"])
@pytest.mark.parametrize("axis", [False, True, [], [0], "", "0", 1.0, (0, False)])
def test_reductions_refuse_an_axis_that_is_not_an_integer(cf, rng, name, axis):
    # NumPy refuses these; CuPy would read False as axis 0 and [] as no axis at all
    a = cf.asarray(random_array((4, 3), "float32", rng, host=True))
    with pytest.raises(cuflow.ArgumentTypeError, match="axis must be an integer") as ei:
        getattr(cf, name)(a, axis=axis)
    assert repr(axis) in str(ei.value)
    with pytest.raises(TypeError):  # NumPy agrees that there is no such axis
        getattr(np, name)(np.ones((4, 3)), axis=axis)


@pytest.mark.parametrize("axis", [np.int64(1), (np.int32(0), -1), -2])
def test_reductions_take_numpy_integer_axes(cf, rng, axis):
    h = random_array((4, 3), "float32", rng, host=True)
    np.testing.assert_allclose(to_host(cf.sum(cf.asarray(h), axis=axis)), h.sum(axis=axis),
                               rtol=1e-5, atol=1e-5 * np.abs(h).sum())
