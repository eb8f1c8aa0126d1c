"""Single ops through the elementwise engine: NumPy's results and dtypes, on every backend.

On the GPU these calls run the engine's generated kernels from the compiled
launcher (scalars, comparisons, where, clip, astype, copy, mixed dtypes,
reflected operators); on the NumPy backend they are NumPy's own.  Either way
the values and dtypes are NumPy's.
"""

from __future__ import annotations

import numpy as np
import pytest

import cuflow
from cuflow.core import _fastpath
from cuflow.testing import to_host

OPS = {
    "x * 2": lambda m, x, y, b: x * 2,
    "x + 1": lambda m, x, y, b: x + 1,
    "2.5 - x": lambda m, x, y, b: 2.5 - x,
    "1 / x": lambda m, x, y, b: 1 / x,
    "x ** 2": lambda m, x, y, b: x ** 2,
    "x / 3": lambda m, x, y, b: x / 3,
    "x > 0.5": lambda m, x, y, b: x > 0.5,
    "x == y": lambda m, x, y, b: x == y,
    "x <= y": lambda m, x, y, b: x <= y,
    "tanh(x)": lambda m, x, y, b: m.tanh(x),
    "sqrt(|x|)": lambda m, x, y, b: m.sqrt(m.abs(x)),
    "exp(x)": lambda m, x, y, b: m.exp(x),
    "log(|x| + 1)": lambda m, x, y, b: m.log(m.abs(x) + 1),
    "maximum(x, 0.0)": lambda m, x, y, b: m.maximum(x, 0.0),
    "minimum(x, y)": lambda m, x, y, b: m.minimum(x, y),
    "clip(x, 0, 1)": lambda m, x, y, b: m.clip(x, 0, 1),
    "where(b, x, y)": lambda m, x, y, b: m.where(b, x, y),
    "where(b, x, 0.0)": lambda m, x, y, b: m.where(b, x, 0.0),
    "logical_and(b, x > y)": lambda m, x, y, b: m.logical_and(b, x > y),
    "x.astype(float16)": lambda m, x, y, b: x.astype(np.float16),
    "x.astype(int32)": lambda m, x, y, b: x.astype(np.int32),
    "x.copy()": lambda m, x, y, b: x.copy(),
    "x + y16": lambda m, x, y, b: x + y.astype(np.float16),
    "arctan2(x, y)": lambda m, x, y, b: m.arctan2(x, y),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("name", sorted(OPS))
def test_single_ops_match_numpy(cf, rng, name, dtype):
    xa = rng.uniform(-3, 3, (37, 29)).astype(dtype)
    ya = rng.uniform(-3, 3, (37, 29)).astype(dtype)
    ba = rng.integers(0, 2, (37, 29)).astype(bool)
    with np.errstate(all="ignore"):
        want = np.asarray(OPS[name](np, xa, ya, ba))
    got = OPS[name](cf, cf.asarray(xa), cf.asarray(ya), cf.asarray(ba))
    assert isinstance(got, cf.darray)
    got = cf.asnumpy(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind == "f":
        tol = {2: 1e-3, 4: 2e-6, 8: 1e-13}[want.dtype.itemsize]
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(got, want)


def test_dst_and_in_place_scalar_ops(cf, rng):
    xa = rng.uniform(-3, 3, 1001).astype(np.float32)
    x = cf.asarray(xa.copy())  # the NumPy backend would share xa's memory
    d = cf.empty((1001,), cf.float64)
    assert cf.multiply(x, 3.0, dst=d) is d
    np.testing.assert_allclose(cf.asnumpy(d), xa.astype(np.float64) * np.float32(3.0), rtol=1e-7)
    x += 1.5
    x *= 2
    np.testing.assert_allclose(cf.asnumpy(x), (xa + np.float32(1.5)) * 2, rtol=1e-6)
    with pytest.raises(cuflow.DstDtypeError):
        cf.multiply(x, 3.0, dst=cf.empty((1001,), cf.int32))


@pytest.mark.gpu
@pytest.mark.skipif(not _fastpath.ENGINE_LAUNCH, reason="the engine's C launch of single ops is "
                    "off (CUFLOW_EW_ENGINE=0)")
def test_scalar_ops_take_the_engine(gpu_cf):
    cf = gpu_cf
    x = cf.asarray(np.linspace(-1, 1, 64, dtype=np.float32))
    want = np.tanh(np.linspace(-1, 1, 64, dtype=np.float32) * 2 + 5.0) > 0.25
    np.testing.assert_array_equal(cf.asnumpy(cf.tanh(x * 2 + 5.0) > 0.25), want)  # plans kept
    before = cf.fusion.stats()["plans"]
    for _ in range(3):
        np.testing.assert_array_equal(cf.asnumpy(cf.tanh(x * 2 + 5.0) > 0.25), want)
    assert cf.fusion.stats()["plans"] == before  # every call launched from C with a kept plan
    from cuflow.core._engine import ew_op

    assert any(p is not None for p in ew_op("multiply").plans.values())


@pytest.mark.gpu
def test_integer_and_strided_calls_keep_cupys_path(gpu_cf, rng):
    cf = gpu_cf
    xi = cf.asarray(rng.integers(-100, 100, 50).astype(np.int16))
    np.testing.assert_array_equal(cf.asnumpy(xi * 3), cf.asnumpy(xi) * 3)
    m = cf.asarray(rng.uniform(-1, 1, (20, 30)).astype(np.float32))
    np.testing.assert_allclose(cf.asnumpy(cf.tanh(m.T)), np.tanh(cf.asnumpy(m).T), rtol=1e-6)


REDUCE = ["sum", "mean", "max", "min", "prod", "argmax", "argmin"]


def _reduction_input(rng, shape, dtype, name, spread):
    """Signed values over a wide range; for ``prod``, signed factors within ``spread`` of 1
    in magnitude, so that a product of every element stays finite and non-zero."""
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(dtype)
    sign = rng.choice([-1.0, 1.0], shape)
    if name == "prod":
        return (sign * rng.uniform(1 - spread, 1 + spread, shape)).astype(dtype)
    return (rng.standard_normal(shape) * 100).astype(dtype)


def _assert_reduction_close(got, want, xa, name, axis, rtol):
    """``got`` within ``rtol`` of ``want``; a sum or mean also within ``rtol`` of the sum (or
    mean) of magnitudes, since signed terms may cancel to a result near 0."""
    atol = 0
    if name in ("sum", "mean"):
        atol = rtol * getattr(np.abs(xa.astype(np.float64)), name)(axis=axis)
    err = np.abs(got.astype(np.float64) - want)
    assert (err <= atol + rtol * np.abs(want)).all(), (err.max(), got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.bool_])
@pytest.mark.parametrize("axis", [None, -1, 1])
@pytest.mark.parametrize("name", REDUCE)
def test_small_reductions_match_numpy(cf, rng, name, axis, dtype):
    if dtype == np.bool_ and name in ("mean",):
        pytest.skip("not meaningful for bool")
    xa = _reduction_input(rng, (16, 64), dtype, name, 0.03)
    xa.flat[77] = xa.flat[5]  # a tie for the arg-reductions: the first index wins
    want = np.asarray(getattr(xa, name)(axis=axis))
    assert np.isfinite(want).all()
    if name == "prod" and dtype != np.bool_:
        assert (want != 0).all()
    got = getattr(cf.asarray(xa), name)(axis=axis)
    assert isinstance(got, cf.darray)
    got = cf.asnumpy(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind == "f":
        rtol = {2: 2e-3, 4: 1e-5, 8: 1e-12}[want.dtype.itemsize]
        if name == "prod" and dtype == np.float16:
            # NumPy rounds to float16 after each of the 64 products, the kernel once at the
            # end: they may differ by up to 64 half-precision roundings
            rtol = 64 * 2.0 ** -11
        _assert_reduction_close(got, want, xa, name, axis, rtol)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.bool_])
@pytest.mark.parametrize("rlen", [2048, 1031])
@pytest.mark.parametrize("name", REDUCE)
def test_long_row_reductions_match_numpy(cf, rng, name, rlen, dtype):
    # float rows long enough for a block each (4-element vectors, and 1 at an odd length);
    # bool rows of 2048 (16-element vectors) stay a warp per row, of 1031 a block
    if dtype == np.bool_ and name == "mean":
        pytest.skip("not meaningful for bool")
    xa = _reduction_input(rng, (8, rlen), dtype, name, 0.001)
    xa[:, rlen - 3] = xa.max(axis=1) if dtype != np.bool_ else True  # ties across warps
    xa[:, 700] = xa[:, rlen - 3]
    want = np.asarray(getattr(xa, name)(axis=-1))
    assert np.isfinite(want).all()
    if name == "prod" and dtype != np.bool_:
        assert (want != 0).all()
    got = cf.asnumpy(getattr(cf.asarray(xa), name)(axis=-1))
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind == "f":
        _assert_reduction_close(got, want, xa, name, -1,
                                {4: 1e-5, 8: 1e-12}[want.dtype.itemsize])
    else:
        np.testing.assert_array_equal(got, want)


def test_where_with_a_python_scalar_keeps_the_array_dtype(cf, rng):
    for dt in (np.float16, np.float32):
        x = cf.asarray(rng.uniform(-1, 1, 64).astype(dt))
        m = x > 0
        assert cf.where(m, x, 0.0).dtype == dt
        f = cf.fuse(lambda c, v: cf.where(c, v, 0.0))
        assert f(m, x).dtype == dt


def test_where_takes_a_scalar_condition(cf, rng):
    x = cf.asarray(rng.uniform(-1, 1, 5).astype(np.float32))
    y = cf.asarray(rng.uniform(2, 3, 5).astype(np.float32))
    np.testing.assert_array_equal(to_host(cf.where(True, x, y)), to_host(x))
    np.testing.assert_array_equal(to_host(cf.where(np.False_, x, y)), to_host(y))
    dst = cf.empty((5,), dtype=cf.float32)
    assert cf.where(0, x, y, dst=dst) is dst
    np.testing.assert_array_equal(to_host(dst), to_host(y))
