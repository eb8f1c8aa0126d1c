"""Reductions (core._statistical) against NumPy, with and without dst=."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuflow
from cuflow.testing import random_array, to_host


REDUCTIONS = ["sum", "mean", "min", "max", "argmin", "argmax", "prod", "std", "var", "any", "all"]


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int32", "float32", "float64", "complex64"])
@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1)])
def test_reductions(cf, rng, poisons, name, dtype, axis):
    if dtype == "complex64" and name in ("min", "max", "argmin", "argmax") \
            and cf.get_backend().is_gpu:
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
    if name in ("any", "all"):
        # zeros (and negative zeros) in most lanes, not in all: random full-range data holds
        # none, and every lane would be True
        z = rng.random(h.shape) < (0.85 if name == "any" else 0.1)
        h = np.where(z, np.where(rng.random(h.shape) < 0.5, -0.0, 0.0), h).astype(dtype)
    a = cf.asarray(h)
    with np.errstate(all="ignore"):
        exp = np.asarray(getattr(np, name)(h, axis=axis)) if name not in ("argmin", "argmax") or axis != (0, 1) else None
    if exp is None:
        pytest.skip("arg-reductions take one axis")
    assert np.isfinite(exp).all()
    if name == "prod" and dtype != "bool":
        assert (exp != 0).all()
    def check(got):  # integer and bool results exactly, real ones within float error
        if exp.dtype.kind in "biu":
            np.testing.assert_array_equal(to_host(got), exp, strict=True)
        else:
            np.testing.assert_allclose(to_host(got), exp,
                                       rtol=2e-5 if dtype != "float32" else 1e-3)

    got = getattr(cf, name)(a, axis=axis)
    assert isinstance(got, cf.darray)
    check(got)
    dst = cf.empty(exp.shape, dtype=exp.dtype)
    r = getattr(cf, name)(a, axis=axis, dst=dst)
    assert r is dst
    check(dst)
    # method spelling with out=, into outputs that show an unwritten element
    for dst2 in poisons(exp.shape, exp.dtype):
        assert getattr(a, name)(axis=axis, out=dst2) is dst2
        check(dst2)


def test_reduction_positional_out_matches_numpy_signatures(cf, rng):
    h = random_array((3, 4), "float64", rng, host=True)
    a = cf.asarray(h)
    d = cf.empty(4)
    assert cf.sum(a, 0, None, d) is d  # sum(a, axis, dtype, out)
    np.testing.assert_allclose(to_host(d), h.sum(0), rtol=1e-12)
    m = cf.empty(4)
    assert cf.max(a, 0, m) is m  # amax(a, axis, out)
    np.testing.assert_array_equal(to_host(m), h.max(0))
    s = cf.empty(4)
    assert cf.std(a, 0, None, s, 1) is s  # std(a, axis, dtype, out, ddof)
    np.testing.assert_allclose(to_host(s), np.std(h, 0, ddof=1), rtol=1e-12)


def test_reduction_into_overlapping_dst(cf, rng):
    h = random_array((3, 4), "float64", rng, host=True)
    a = cf.array(h)
    cf.sum(a, axis=0, dst=a[0])
    exp = h.copy()
    exp[0] = h.sum(axis=0)
    np.testing.assert_allclose(to_host(a), exp, rtol=1e-12)


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


# ------------------------------------------------- random calls against NumPy
_PDTYPES = ["bool", "int8", "uint8", "int32", "int64", "float16", "float32", "float64"]
_N = os.environ.get("CUFLOW_FUZZ_EXAMPLES")


@settings(max_examples=int(_N or 100), derandomize=_N is None, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(["sum", "mean", "max", "min", "prod", "argmax", "argmin"]),
       dtype=st.sampled_from(_PDTYPES),
       shape=st.lists(st.integers(1, 9), min_size=1, max_size=3).map(tuple),
       long_last=st.sampled_from([None, 64, 256, 4099]),
       axis=st.sampled_from(["none", "last", "first", "minus_last"]),
       keepdims=st.booleans(), dst=st.sampled_from(["none", "none", "same", "other"]),
       seed=st.integers(0, 2**32 - 1))
def test_reduction_call_matches_numpy(cf, name, dtype, shape, long_last, axis, keepdims, dst,
                                      seed):
    """Any dtype, axis, keepdims and dst= (of the result's dtype or another): the compiled
    whole-array and last-axis kernels, and CuPy's or NumPy's reductions, give NumPy's result
    (sums within their rounding), or refuse as NumPy does."""
    rng = np.random.default_rng(seed)
    if long_last and not (name == "prod" and dtype == "float16"):
        # (NumPy's float16 product rounds every step to float16: over thousands of
        # factors it drifts by tens of percent, where CuPy accumulates in float32)
        shape = shape[:-1] + (long_last,)
    h = random_array(shape, dtype, rng, host=True)
    if h.dtype.kind == "f" and rng.random() < 0.3:  # special values now and then
        h.flat[rng.integers(0, h.size, 2)] = rng.choice([np.nan, np.inf, -np.inf, -0.0], 2)
    if name == "prod" and h.dtype.kind in "iu":  # odd factors: a wrapped product is never 0
        h |= 1
    elif name == "prod" and h.dtype.kind == "f":  # magnitudes near 1: no overflow, no 0
        with np.errstate(all="ignore"):
            h = (h / np.abs(h) * rng.uniform(0.99, 1.01, h.shape)).astype(dtype)
    kw = {}
    ax = {"none": None, "last": h.ndim - 1, "first": 0, "minus_last": -1}[axis]
    if ax is not None:
        kw["axis"] = ax
    if keepdims and name not in ("argmax", "argmin") or keepdims and ax is not None:
        kw["keepdims"] = True
    fn = getattr(cf, name)
    with np.errstate(all="ignore"):
        want = np.asarray(getattr(np, name)(h, **kw))
    out = None
    if dst != "none":
        odt = want.dtype if dst == "same" else np.dtype(rng.choice(_PDTYPES))
        before = np.array(random_array(want.shape, odt, rng, host=True))  # 0-d: an array
        out = cf.asarray(before.copy())
        if np.can_cast(want.dtype, odt, "same_kind"):
            with np.errstate(all="ignore"):
                want = want.astype(odt)  # the result, then cast (NumPy reduces in odt)
        else:
            with pytest.raises(cuflow.CuflowError):
                fn(cf.asarray(h), dst=out, **kw)
            np.testing.assert_array_equal(to_host(out), before)  # refused before writing
            return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = fn(cf.asarray(h), **kw) if out is None else fn(cf.asarray(h), dst=out, **kw)
    if out is not None:
        assert got is out
    g = to_host(got)
    assert g.dtype == want.dtype and g.shape == want.shape, (g.dtype, g.shape, want.dtype,
                                                             want.shape)
    if name in ("sum", "mean") and want.dtype.kind == "f":
        # summation order differs (pairwise, per block): within the rounding of the sums
        mag = np.sum(np.abs(h.astype(np.float64)), **kw) / (h.size // max(want.size, 1)
                                                           if name == "mean" else 1)
        eps = max(np.finfo(want.dtype).eps, np.finfo(h.dtype).eps if h.dtype.kind == "f" else 0)
        g64, w64 = g.astype(np.float64), want.astype(np.float64)
        assert (np.isnan(g64) == np.isnan(w64)).all(), (g64, w64)
        fin = np.isfinite(w64) & np.isfinite(mag)
        assert (g64[~fin & ~np.isnan(w64)] == w64[~fin & ~np.isnan(w64)]).all(), (g64, w64)
        with np.errstate(all="ignore"):
            err = np.abs(g64 - w64)
        assert (err[fin] <= 4 * eps * np.broadcast_to(mag, w64.shape)[fin]).all(), (g64, w64)
    elif name == "prod" and want.dtype.kind == "f":
        # each product rounds in the dtype it is computed in: NumPy's float16 loop rounds
        # every step to float16, CuPy accumulates float16 in float32
        eps = max(np.finfo(want.dtype).eps, np.finfo(h.dtype).eps if h.dtype.kind == "f" else 0)
        np.testing.assert_allclose(g, want, rtol=min(float(eps) * h.size * 2, 0.5))
    else:
        np.testing.assert_array_equal(g, want)


def test_reduction_into_dst_of_another_dtype_casts_the_result(cf, rng):
    """The result in its own dtype, then cast into dst: NumPy would reduce in dst's dtype
    (max of int64 into int32 wrapping every element first; argmax only into int64)."""
    h = rng.integers(-2**62, 2**62, (3, 40), dtype=np.int64)
    dst = cf.empty((3,), dtype=cf.int32)
    assert cf.max(cf.asarray(h), axis=1, dst=dst) is dst
    np.testing.assert_array_equal(to_host(dst), h.max(axis=1).astype(np.int32))
    f = cf.empty((3,), dtype=cf.float32)
    assert cf.argmax(cf.asarray(h), axis=1, dst=f) is f
    np.testing.assert_array_equal(to_host(f), h.argmax(axis=1).astype(np.float32))
    with pytest.raises(cuflow.DstDtypeError):
        cf.argmax(cf.asarray(h), axis=1, dst=cf.empty((3,), dtype=cf.bool))


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_the_backends_own_argmax_takes_a_darray(cf, rng, name):
    """``cupy.argmax(x)`` calls ``x.argmax(axis=, dtype=, out=, keepdims=)``: the darray
    method takes CuPy's ``dtype``, the integer dtype of the index, as ``cuflow.argmax``
    does; values that truncate to ties still give the index of the real extreme."""
    h = rng.uniform(0.05, 0.95, (5, 7)) + rng.integers(-3, 3, (5, 7))
    x = cf.asarray(h)
    xp = cf.get_backend().xp
    assert int(to_host(getattr(xp, name)(x))) == getattr(np, name)(h)
    np.testing.assert_array_equal(to_host(getattr(xp, name)(x, axis=1)), getattr(np, name)(h, axis=1))
    for got in (getattr(cf, name)(x, axis=0, dtype="int32"), getattr(x, name)(axis=0, dtype=np.int32)):
        assert got.dtype == np.int32
        np.testing.assert_array_equal(to_host(got), getattr(np, name)(h, axis=0))
    with pytest.raises(cuflow.ArgumentTypeError, match="integer dtype"):
        getattr(cf, name)(x, dtype="float32")
    with pytest.raises(cuflow.ArgumentError, match="not both"):
        getattr(cf, name)(x, axis=0, dtype="int64", dst=cf.empty(7, dtype="int64"))
    # an index dtype too narrow for the axis would wrap indices to other ones
    long = cf.asarray(rng.uniform(-1, 1, (2, 300)))
    want = getattr(np, name)(to_host(long), axis=1)
    np.testing.assert_array_equal(to_host(getattr(cf, name)(long, axis=1, dtype="int16")),
                                  want)
    for axis in (1, None):
        with pytest.raises(cuflow.ArgumentOverflowError,
                           match=f"dtype=int8 holds indices up to 127, the indices here go "
                                 f"to {299 if axis else 599}"):
            getattr(cf, name)(long, axis=axis, dtype="int8")
    assert getattr(cf, name)(long, axis=0, dtype="int8").dtype == np.int8
    zero_d = cf.asarray(np.float64(2.5))
    for axis in (None, 0, -1):
        assert int(to_host(getattr(cf, name)(zero_d, axis=axis, dtype="int8"))) == 0
