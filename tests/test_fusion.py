"""cuflow.fuse: traced chains against NumPy, on every backend; generated kernels compile on a CPU.

The oracle of every chain is the same Python function run by NumPy.  On the
NumPy backend a fused function runs op by op (so it must agree exactly); on
the GPU it runs as one generated kernel (agreement within each dtype's
tolerance, special values kept).  Without a GPU the generated CUDA source is
still compiled with NVRTC for sm_90.
"""

from __future__ import annotations

import math
import subprocess
import sys
import types
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import cuflow
from cuflow.core import _engine

try:
    from cuda.bindings import nvrtc  # noqa: F401

    HAVE_NVRTC = True
except ImportError:  # pragma: no cover - the test extra installs it
    HAVE_NVRTC = False


# --------------------------------------------------------------- the oracle
def _np_erf(x):
    dt = np.exp(np.ones((), x.dtype)).dtype
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(dt)


NP = types.SimpleNamespace(**{n: getattr(np, n) for n in dir(np) if not n.startswith("_")})
NP.erf = _np_erf
NP.sigmoid = lambda x: 1 / (1 + np.exp(-x))
NP.astype = lambda x, d: x.astype(d)


def ns(cf):
    """The namespace a chain is written against: cuflow with fusion's extra functions."""
    return types.SimpleNamespace(**{n: getattr(cf, n) for n in dir(cf) if not n.startswith("_")},
                                 erf=cf.fusion.erf, sigmoid=cf.fusion.sigmoid)


TOL = {np.dtype(np.float16): (2e-3, 2e-3), np.dtype(np.float32): (2e-6, 1e-6),
       np.dtype(np.float64): (1e-13, 1e-14)}


def check(got, want):
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind == "f":
        rtol, atol = TOL[want.dtype]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                                   atol=atol * max(1.0, float(np.nanmax(np.abs(
                                       np.where(np.isfinite(want), want, 0)), initial=0))),
                                   equal_nan=True)
        fin = np.isfinite(want)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(got[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)])
    else:
        np.testing.assert_array_equal(got, want)


def host(x):
    return cuflow.asnumpy(x) if not isinstance(x, (tuple, list)) else [cuflow.asnumpy(y)
                                                                           for y in x]


def rand(rng, shape, dtype, lo=-4.0, hi=4.0):
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.uniform(lo, hi, shape).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)


# ------------------------------------------------------- the named chains
def gelu(m, x):
    return 0.5 * x * (1 + m.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


def axpby_relu(m, a, x, b, y):
    return m.maximum(a * x - b * y, 0) ** 2


def img_gamma(m, img, scale, offset):
    f = m.astype(img, m.float32) / 255
    lin = m.where(f > 0.04045, ((f + 0.055) / 1.055) ** 2.4, f / 12.92)
    return m.clip(lin * scale + offset, 0.0, 1.0)


def u8_normalize(m, img, mean, inv_std):
    return (m.astype(img, m.float32) * (1 / 255) - mean) * inv_std


def normalize_channels(m, x, mean, std):
    return (x - mean) / std


def half_chain(m, x, y):
    return m.sqrt(m.abs(x * y) + 1) - x


def erf_chain(m, x):
    return 0.5 * x * (1 + m.erf(x * 0.7071067811865476))


def sq_diff_sum(m, a, b):
    return ((a - b) ** 2).sum()


def row_max(m, x):
    return m.exp(x - 1).max(axis=-1)


def col_mean(m, x):
    return (x * 2).mean(axis=0)


def argmax_rows(m, x):
    return m.sigmoid(x).argmax(axis=1)


def argmax_ties(m, x):
    return m.floor(x).argmax(axis=-1)  # many equal maxima: the first one's index


def lut_two_outputs(m, img, k):
    f = m.astype(img, m.float16) * k
    return m.tanh(f), img > 100


def two_outputs(m, x, y):
    s = x + y
    return s * 2, m.logical_and(s > 0, x < y)


def ints(m, a, b):
    return (a * 3 + b) // 7, a % (b | 1), a >> 2, m.minimum(a, b), -a


CHAINS = {
    "gelu": (gelu, lambda r: (rand(r, (257, 33), np.float32),)),
    "axpby_relu": (axpby_relu, lambda r: (1.5, rand(r, (1000,), np.float32), 0.25,
                                          rand(r, (1000,), np.float32))),
    "img_gamma": (img_gamma, lambda r: (rand(r, (31, 17, 3), np.uint8),
                                        rand(r, (3,), np.float32, 0.5, 2),
                                        rand(r, (3,), np.float32))),
    "img_gamma_table": (img_gamma, lambda r: (rand(r, (128, 201, 3), np.uint8),
                                              rand(r, (3,), np.float32, 0.5, 2),
                                              rand(r, (3,), np.float32))),
    "u8_normalize_hwc": (u8_normalize, lambda r: (rand(r, (45, 67, 3), np.uint8),
                                                  rand(r, (3,), np.float32, 0.3, 0.6),
                                                  rand(r, (3,), np.float32, 3, 5))),
    "int8_table_two_outputs": (lut_two_outputs, lambda r: (rand(r, (70001,), np.int8), 0.03)),
    "normalize_channels": (normalize_channels,
                           lambda r: (rand(r, (2, 3, 9, 11), np.float32),
                                      rand(r, (3, 1, 1), np.float32),
                                      rand(r, (3, 1, 1), np.float32, 0.5, 2))),
    "half": (half_chain, lambda r: (rand(r, (999,), np.float16), rand(r, (999,), np.float16))),
    "erf": (erf_chain, lambda r: (rand(r, (64, 65), np.float32),)),
    "sq_diff_sum": (sq_diff_sum, lambda r: (rand(r, (10001,), np.float32),
                                            rand(r, (10001,), np.float32))),
    "row_max": (row_max, lambda r: (rand(r, (37, 129), np.float32),)),
    "col_mean": (col_mean, lambda r: (rand(r, (37, 129), np.float64),)),
    "argmax_rows": (argmax_rows, lambda r: (rand(r, (13, 70), np.float32),)),
    # rows long enough for a block each: vectors of 4 and, with an odd length, of 1
    "row_max_long": (row_max, lambda r: (rand(r, (5, 2048), np.float32),)),
    "argmax_long_ties": (argmax_ties, lambda r: (rand(r, (6, 1031), np.float32),)),
    "two_outputs": (two_outputs, lambda r: (rand(r, (5, 64), np.float32),
                                            rand(r, (64,), np.float32))),
    "ints": (ints, lambda r: (rand(r, (300,), np.int32), rand(r, (300,), np.int32))),
}


def _device_args(cf, args):
    return tuple(cf.asarray(a) if isinstance(a, np.ndarray) else a for a in args)


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_chain_matches_numpy(cf, rng, name):
    chain, make = CHAINS[name]
    args = make(rng)
    m = ns(cf)
    fused = cf.fuse(lambda *a: chain(m, *a))
    got = fused(*_device_args(cf, args))
    with np.errstate(all="ignore"):
        want = chain(NP, *args)
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            check(host(g), w)
    else:
        check(host(got), want)


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_chain_into_dst(cf, rng, poisons, name):
    chain, make = CHAINS[name]
    args = make(rng)
    m = ns(cf)
    fused = cf.fuse(lambda *a: chain(m, *a))
    dargs = _device_args(cf, args)
    first = fused(*dargs)
    outs = first if isinstance(first, tuple) else (first,)
    for dst in zip(*(poisons(o.shape, o.dtype) for o in outs)):
        r = fused(*dargs, dst=dst if len(dst) > 1 else dst[0])
        r = r if isinstance(r, tuple) else (r,)
        assert len(r) == len(dst) and all(a is b for a, b in zip(r, dst))
        for d, o in zip(dst, outs):
            np.testing.assert_array_equal(host(d), host(o))


def test_in_place_and_stream(cf, rng):
    x = cf.asarray(rand(rng, (4096 + 3,), np.float32))
    want = host(x) * 2 + 1
    f = cf.fuse(lambda v: v * 2 + 1)
    s = cf.Stream()
    r = f(x, dst=x, stream=s)
    s.synchronize()
    assert r is x
    np.testing.assert_array_equal(host(x), want)


@pytest.mark.parametrize("case", ["transpose", "reversed", "column", "keyword", "reduce"])
def test_an_input_overlapping_dst_in_another_layout_is_read_as_it_was(cf, rng, case):
    """An input that shares memory with dst= in another layout is copied first: the kernel
    reads the copy with the copy's own strides, so the result is NumPy's."""
    xa = rand(rng, (64, 64), np.float32)
    x = cf.asarray(xa.copy())
    if case == "transpose":
        r, want = cf.fuse(lambda a, b: (a + b) * 0.5)(x, x.T, dst=x), (xa + xa.T) * 0.5
    elif case == "reversed":
        r, want = cf.fuse(lambda a: a * 1)(x[::-1], dst=x), xa[::-1] * 1
    elif case == "column":
        r, want = cf.fuse(lambda a, c: a / c)(x, x[:, :1], dst=x), xa / xa[:, :1]
    elif case == "keyword":
        f = cf.fuse(lambda a, *, other: a - other)
        r, want = f(x, other=x.T, dst=x), xa - xa.T
    else:
        d = x[0]
        r, want = cf.fuse(lambda a: (a * 1).sum(axis=1))(x.T, dst=d), (xa.T * 1).sum(axis=1)
        assert r is d
        check(host(d), want)
        np.testing.assert_array_equal(host(x)[1:], xa[1:])  # only dst's row was written
        return
    assert r is x
    check(host(x), want)


def test_uint64_compares_with_signed_integers_exactly(cf, rng):
    """NumPy compares uint64 with int64 exactly (its qQ->? loops): a negative is less than
    any unsigned value, where C's conversion to unsigned would make -1 the largest."""
    big = np.iinfo(np.uint64).max
    ua = np.concatenate([np.array([0, 5, big, 2**63, 2**63 - 1], np.uint64),
                         rng.integers(0, big, 59, dtype=np.uint64, endpoint=True)])
    ia = np.concatenate([np.array([-1, -1, -1, -(2**63), 2**63 - 1], np.int64),
                         rng.integers(-(2**63), 2**63 - 1, 59, dtype=np.int64)])
    f = cf.fuse(lambda u, i: (u < i, u <= i, u == i, u != i, u > i, u >= i,
                              i < u, i >= u, cuflow.where(u > i, u, 0)))
    for got, want in zip(f(cf.asarray(ua), cf.asarray(ia)),
                         (ua < ia, ua <= ia, ua == ia, ua != ia, ua > ia, ua >= ia,
                          ia < ua, ia >= ua, np.where(ua > ia, ua, 0))):
        np.testing.assert_array_equal(host(got), want)
    if HAVE_NVRTC:
        assert _engine.compile_cubin(f.cuda_source(ua, ia), 90)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_a_scalar_power_of_one_half_is_numpys_sqrt(cf, dtype):
    """NumPy's x ** s takes sqrt where s is 0.5, with sqrt's special values (-inf ** 0.5 is
    NaN, -0.0 ** 0.5 is -0.0), for a constant and for a scalar argument alike."""
    xa = np.array([-np.inf, -0.0, 0.0, 4.0, 2.0, np.inf, np.nan, -1.0], dtype)
    x = cf.asarray(xa)
    with np.errstate(invalid="ignore"):
        want = xa ** 0.5
        for got in (cf.fuse(lambda a: a ** 0.5)(x), cf.fuse(lambda a, e: a ** e)(x, 0.5),
                    x ** 0.5):
            np.testing.assert_array_equal(host(got), want)
            num = ~np.isnan(want)  # (the sign of a NaN differs between C libraries)
            assert np.array_equal(np.signbit(host(got))[num], np.signbit(want)[num])
        check(host(cf.fuse(lambda a, e: a ** e)(x, 2.5)), xa ** 2.5)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_cubes_and_fourth_powers_round_once(cf, rng, dtype):
    """x ** 3 and x ** 4 are multiplied out (a float16 one in float32, rounded once at the
    end), within the dtype's tolerance of NumPy's pow."""
    xa = rand(rng, (4096,), dtype, lo=-6.0, hi=6.0)
    got3, got4 = cf.fuse(lambda a: (a ** 3, a ** 4))(cf.asarray(xa))
    check(host(got3), xa ** 3)
    check(host(got4), xa ** 4)
    if dtype == np.float16:  # at most one rounding away from the exact power
        exact = xa.astype(np.float64) ** 3
        spacing = np.spacing(np.abs(exact).astype(np.float16)).astype(np.float64)
        assert np.all(np.abs(host(got3).astype(np.float64) - exact) <= spacing)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_multiply_then_an_add_rounds_twice_as_in_numpy(cf, rng, dtype):
    """``x * k + y`` rounds the product, then the sum, as NumPy does: the kernel is compiled
    without contraction into a fused multiply-add, which rounds once (and differs from NumPy
    in the last bit for about a quarter of float32 inputs)."""
    xa, ya = rand(rng, (4099,), dtype), rand(rng, (4099,), dtype)
    k = dtype(3.0000002)
    got = cf.fuse(lambda a, b, s: a * s + b)(cf.asarray(xa), cf.asarray(ya), float(k))
    np.testing.assert_array_equal(host(got), xa * k + ya)
    got = cf.fuse(lambda a, b: b - a * a)(cf.asarray(xa), cf.asarray(ya))
    np.testing.assert_array_equal(host(got), ya - xa * xa)


def test_out_is_numpys_spelling_of_dst(cf, rng):
    xa = rand(rng, (64,), np.float32)
    x, o = cf.asarray(xa), cf.empty((64,), dtype=cf.float32)
    f = cf.fuse(lambda a, k: a * k + 1)
    assert f(x, 2.0, out=o) is o
    np.testing.assert_array_equal(host(o), xa * np.float32(2.0) + 1)
    a, b = cf.empty_like(x), cf.empty_like(x)
    r = cf.fuse(lambda v: (v + 1, v * 2))(x, out=(a, b))
    assert r[0] is a and r[1] is b
    with pytest.raises(cuflow.DstError, match="both dst= and out="):
        f(x, 2.0, dst=o, out=o)
    # a function with an out parameter of its own gets it
    np.testing.assert_array_equal(host(cf.fuse(lambda v, out: v + out)(x, out=x)), xa + xa)


def test_dst_dtype_cast_and_contract(cf, rng):
    x = cf.asarray(rand(rng, (100,), np.float32))
    f = cf.fuse(lambda v: v * 3)
    d = cf.empty((100,), cf.float64)
    f(x, dst=d)
    np.testing.assert_allclose(host(d), host(x).astype(np.float64) * 3, rtol=1e-6)
    with pytest.raises(cuflow.DstShapeError):
        f(x, dst=cf.empty((99,), cf.float32))
    with pytest.raises(cuflow.DstDtypeError):
        f(x, dst=cf.empty((100,), cf.int32))


@pytest.mark.parametrize("fn", [lambda a, b, t: a * (1 - t) + b * t,  # lerp by a Python float
                                lambda a, b, t: a * (-t) ** 2 + abs(t) * b,
                                lambda a, b, t: (a + (t + 1)) * b])
def test_python_arithmetic_on_scalar_arguments_stays_weakly_typed(cf, rng, fn):
    """Python computes ``1 - t`` of a Python float ``t`` as a Python float, which NumPy types
    weakly: ``a * (1 - t)`` keeps ``a``'s float32, and so does the kernel (its output is not
    float64)."""
    xa, ya = rand(rng, (64,), np.float32), rand(rng, (64,), np.float32)
    f = cf.fuse(fn)
    for t in (0.25, 3, -1.5):
        got = f(cf.asarray(xa), cf.asarray(ya), t)
        want = fn(xa, ya, t)
        assert want.dtype == np.float32 and got.dtype == want.dtype
        check(host(got), want)
    if HAVE_NVRTC:
        assert "float *__restrict__ q0" in f.cuda_source(xa, ya, 0.25)  # (NumPy stand-ins)
    # a ufunc call gives a NumPy scalar, strongly typed: float64, as NumPy's
    g = cf.fuse(lambda a, t: a * cf.exp(t))
    assert g(cf.asarray(xa), 0.5).dtype == (xa * np.exp(0.5)).dtype == np.float64
    with pytest.raises(cuflow.TraceError, match="does not depend on an array argument"):
        cf.fuse(lambda s, t: s * (1 - t))(2.0, 0.5)


def test_subclasses_of_python_numbers_are_numpys_strong_scalars(cf, rng):
    """Only Python's own int and float are weak to NumPy: an IntEnum member or a float
    subclass is int64 or float64 there (x * Mode.A is float64 for a float32 x), constant or
    argument; it was a TraceError."""
    import enum

    class Mode(enum.IntEnum):
        A = 2

    class Half(float):
        pass

    xa, ua = rand(rng, (8,), np.float32), rng.integers(0, 100, 8).astype(np.uint8)
    x, u = cf.asarray(xa), cf.asarray(ua)
    for got, want in [(cf.fuse(lambda v: v * Mode.A)(x), xa * Mode.A),
                      (cf.fuse(lambda v, m: v * m)(x, Mode.A), xa * Mode.A),
                      (cf.fuse(lambda v, m: v * m)(x, Half(0.5)), xa * Half(0.5)),
                      (cf.fuse(lambda v: v + Mode.A)(u), ua + Mode.A)]:
        assert got.dtype == want.dtype
        check(host(got), want)


def test_where_refuses_a_python_int_the_result_dtype_cannot_hold_as_outside_fuse(cf, rng):
    """NumPy's where would wrap where(c, uint8, 300) to 44; cuflow.where refuses it, and a
    fused where does too, on every backend, for a constant and for an argument."""
    ua = rng.integers(0, 256, 16).astype(np.uint8)
    u = cf.asarray(ua)
    with pytest.raises(cuflow.ArgumentOverflowError, match="300 is out of the range"):
        cf.where(u > 100, u, 300)
    with pytest.raises(cuflow.ArgumentOverflowError, match="300 out of bounds for uint8"):
        cf.fuse(lambda x: cf.where(x > 100, x, 300))(u)
    f = cf.fuse(lambda x, s: cf.where(x > 100, x, s))
    with pytest.raises(cuflow.ArgumentOverflowError, match="300 out of bounds for uint8"):
        f(u, 300)
    check(host(f(u, 7)), np.where(ua > 100, ua, 7))
    check(host(cf.fuse(lambda x: cf.where(x > 100, x * 1.5, 300))(u)),
          np.where(ua > 100, ua * 1.5, 300))


def test_astype_copies_keeps_casting_and_shape_facts_trace(cf, rng):
    """``astype`` copies, as NumPy's does (an in-place update of the copy leaves the argument
    alone), and keeps its ``casting=``; ``numpy.ndim``/``shape``/``size`` of a traced array
    are static, so control flow on them traces; a 0-d array reduces along its axis 0."""
    xa = rand(rng, (6,), np.float32)

    def double(img):
        y = img.astype(np.float32)
        y *= 2
        return y

    check(host(cf.fuse(double)(cf.asarray(xa))), double(xa))
    with pytest.raises(cuflow.TraceError, match=r"cannot cast float32 to int8 under "
                                                r"casting='safe' \(at .*test_fusion"):
        cf.fuse(lambda v: v.astype(np.int8, casting="safe"))(cf.asarray(xa))
    with pytest.raises(cuflow.TraceError, match="casting='same_kind'"):
        cf.fuse(lambda v: cuflow.astype(v, np.int16, casting="same_kind"))(cf.asarray(xa))
    shaped = cf.fuse(lambda v: v * np.ndim(v) + np.size(v) if np.shape(v)[0] > 2 else v)
    check(host(shaped(cf.asarray(xa))), xa * 1 + 6)
    zero_d = np.float32(2.5)
    for axis in (0, -1):
        got = cf.fuse(lambda v, axis=axis: (v * 2).sum(axis=axis))(cf.asarray(zero_d))
        check(host(got), np.asarray((zero_d * 2).sum(axis=axis)))


@pytest.mark.parametrize("fallback", ["error", "unfused"])
def test_outputs_into_one_dst_or_overlapping_ones_are_refused_writing_nothing(cf, rng,
                                                                             fallback):
    """Two outputs into the same bytes would overwrite each other: refused, as for a
    two-output ufunc; a dst of the wrong shape is refused before any dst is written."""
    xa = rand(rng, (6,), np.float32)
    x = cf.asarray(xa)
    two = cf.fuse(lambda v: (v + 1, v * 2), fallback=fallback)
    seed = rand(rng, (12,), np.float32)
    d = cf.asarray(seed)
    for dsts in [(d[:6], d[:6]), (d[:6], d[3:9])]:
        with pytest.raises(cuflow.DstError, match=r"outputs in dst must not share memory.*"
                                                  r"dst\[0\].*dst\[1\]"):
            two(x, dst=dsts)
    np.testing.assert_array_equal(host(d), seed)
    ok = cf.asarray(rand(rng, (6,), np.float32))
    before = host(ok).copy()
    with pytest.raises(cuflow.DstShapeError):
        two(x, dst=(ok, cf.empty((7,), cf.float32)))
    np.testing.assert_array_equal(host(ok), before)
    a, b = cf.empty((6,), cf.float32), cf.empty((6,), cf.float32)
    r = two(x, dst=(a, b))
    assert r[0] is a and r[1] is b
    check(host(a), xa + 1)
    check(host(b), xa * 2)


def test_a_complex_dst_is_refused_or_runs_unfused(cf, rng):
    """No kernel writes complex: a complex dst= (which same_kind casting allows) is a
    TraceError naming the rule on every backend, or, with fallback="unfused", the op by op
    run."""
    xa = rand(rng, (5, 6), np.float32)
    x = cf.asarray(xa)
    f = cf.fuse(lambda v: v * 2)
    check(host(f(x)), xa * 2)  # (a signature traced before without dst=)
    with pytest.raises(cuflow.TraceError, match=r"dst= has dtype complex64; fused kernels "
                                                r"write bool, integer and float.*test_fusion"):
        f(x, dst=cf.empty((5, 6), np.complex64))
    red = cf.fuse(lambda v: (v * 2).sum())
    with pytest.raises(cuflow.TraceError, match="dst= has dtype complex128"):
        red(x, dst=cf.empty((), np.complex128))
    with pytest.raises(cuflow.TraceError, match="dst= has dtype complex64"):
        f.cuda_source(xa, dst=np.empty((5, 6), np.complex64))  # the GPU's generator
    g = cf.fuse(lambda v: v * 2, fallback="unfused")
    d = cf.empty((5, 6), np.complex64)
    with pytest.warns(RuntimeWarning, match="dst= has dtype complex64.*unfused"):
        assert g(x, dst=d) is d
    np.testing.assert_array_equal(host(d), (xa * 2).astype(np.complex64))


def test_closures_kwargs_and_shape_control_flow(cf, rng):
    k = 3.0

    def body(x, bias=None, *, square=False):
        if x.ndim == 2 and x.shape[1] > 4:  # shape-dependent: fine
            x = x * k
        if bias is not None:
            x = x + bias
        if square:
            x = x * x
        if x.dtype == np.float32:
            x = x - 1
        return x

    f = cf.fuse(body)
    xa = rand(rng, (6, 8), np.float32)
    b = rand(rng, (8,), np.float32)
    x = cf.asarray(xa)
    check(host(f(x)), body(xa))
    check(host(f(x, cf.asarray(b), square=True)), body(xa, b, square=True))
    check(host(f(x, bias=2.5)), body(xa, 2.5))


@cuflow.fuse
def _decorated(x, y):
    return cuflow.where(x > y, x - y, cuflow.float32(0))


def test_decorator_numpy_ufuncs_and_scalars(cf, rng):
    xa, ya = rand(rng, (50,), np.float32), rand(rng, (50,), np.float32)
    check(host(_decorated(cf.asarray(xa), cf.asarray(ya))),
          np.where(xa > ya, xa - ya, np.float32(0)))
    f = cf.fuse(lambda x: np.exp(x) + np.float32(1))  # NumPy's ufuncs trace too
    check(host(f(cf.asarray(xa))), np.exp(xa) + np.float32(1))


def test_numpys_clip_keywords_trace(cf, rng):
    xa = rand(rng, (50,), np.float32)
    x = cf.asarray(xa)
    for fn in (lambda a: np.clip(a, a_min=-1, a_max=1), lambda a: np.clip(a, min=-1, max=1),
               lambda a: np.clip(a, -1, 1, out=None), lambda a: np.clip(a, -1, a_max=1)):
        check(host(cf.fuse(fn)(x)), np.clip(xa, -1, 1))
    check(host(cf.fuse(lambda a: np.clip(a, max=1))(x)), np.minimum(xa, 1))
    with pytest.raises(cuflow.TraceError, match=r"numpy.clip's out at .*test_fusion.py:\d+"
                                                r".*pass dst= to its call"):
        cf.fuse(lambda a: np.clip(a, -1, 1, out=a))(x)


def test_captured_numpy_scalars_are_strongly_typed(cf, rng):
    """A captured NumPy scalar keeps its dtype, as in NumPy (np.float64 is also a Python
    float, but not a weak one)."""
    xa = rand(rng, (50,), np.float32)
    for fn in (lambda x: x * np.float64(2.5), lambda x: x * np.sqrt(2.0),
               lambda x: np.where(x > 0, x, np.float64(0.5)), lambda x: x + np.int64(3),
               lambda x: x * np.float16(2), lambda x: x - 1.5):
        check(host(cf.fuse(fn)(cf.asarray(xa))), fn(xa))


PROMOTIONS = [(np.uint8, 2), (np.uint8, 2.5), (np.float16, 3), (np.float16, np.float32(1)),
              (np.int32, np.float32(1)), (np.int8, np.uint8(1)), (np.float16, 1e-3),
              (np.int64, 1.5), (np.bool_, 1), (np.uint16, np.int16(-1))]


@pytest.mark.parametrize("dtype,scalar", PROMOTIONS)
def test_promotion_is_numpys(cf, rng, dtype, scalar):
    xa = rand(rng, (33,), dtype)
    f = cf.fuse(lambda x, s: x * s + x)
    with np.errstate(all="ignore"):
        want = xa * scalar + xa
    check(host(f(cf.asarray(xa), scalar)), want)


SPECIAL_F = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e-30, -3.5, 65504.0,
                      2.0, -2.0, 0.5], np.float64)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("op", ["maximum", "minimum", "floor_divide", "remainder", "fmod",
                                "copysign", "arctan2", "power", "logaddexp", "heaviside",
                                "divide", "hypot"])
def test_special_values_binary(cf, dtype, op):
    a = np.repeat(SPECIAL_F, len(SPECIAL_F)).astype(dtype)
    b = np.tile(SPECIAL_F, len(SPECIAL_F)).astype(dtype)
    f = cf.fuse(lambda x, y: getattr(np, op)(x, y))
    with np.errstate(all="ignore"):
        want = getattr(np, op)(a, b)
    got = host(f(cf.asarray(a), cf.asarray(b)))
    check(got, want)
    z = want == 0
    if op in ("floor_divide", "remainder", "copysign", "divide"):
        np.testing.assert_array_equal(np.signbit(got[z]), np.signbit(want[z]))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("op", ["negative", "absolute", "sign", "sqrt", "exp", "log", "log1p",
                                "expm1", "tanh", "floor", "rint", "isnan", "isinf", "signbit",
                                "reciprocal", "cbrt", "arctan", "sinh"])
def test_special_values_unary(cf, dtype, op):
    a = SPECIAL_F.astype(dtype)
    f = cf.fuse(lambda x: getattr(np, op)(x))
    with np.errstate(all="ignore"):
        want = getattr(np, op)(a)
    got = host(f(cf.asarray(a)))
    check(got, want)
    if want.dtype.kind == "f":
        z = want == 0
        np.testing.assert_array_equal(np.signbit(got[z]), np.signbit(want[z]))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.int64, np.uint64])
def test_integer_overflow_wraps(cf, dtype):
    info = np.iinfo(dtype)
    vals = np.array([info.min, info.max, 0, 1, info.max // 2 + 1, 7], dtype)
    a = np.repeat(vals, len(vals))
    b = np.tile(vals, len(vals))
    f = cf.fuse(lambda x, y: (x + y, x * y, x - y, np.floor_divide(x, y), np.remainder(x, y)))
    with np.errstate(all="ignore"):
        want = (a + b, a * b, a - b, np.floor_divide(a, b), np.remainder(a, b))
    for g, w in zip(host(f(cf.asarray(a), cf.asarray(b))), want):
        check(g, w)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint16, np.uint32])
def test_integer_power_wraps_and_what_follows_sees_the_wrapped_value(cf, rng, dtype):
    """A power that overflows wraps as NumPy's does, and the ops after it (a maximum, an
    absolute value, a floor division) take the wrapped value: a compiler that assumed the
    signed product cannot overflow would fold them away."""
    info = np.iinfo(dtype)
    root = int(np.sqrt(float(info.max)))
    a = np.concatenate([np.array([root + 1, root + 7, -(root + 3) if info.min else root + 3,
                                  info.max, 3], dtype),
                        rng.integers(max(info.min, -root * 4), root * 4, 59, dtype=dtype)])
    f = cf.fuse(lambda x: (np.maximum(x ** 2, 0), np.abs(x ** 3) if info.min else x ** 3,
                           (x ** 2) // 2))
    with np.errstate(all="ignore"):
        want = (np.maximum(a ** 2, 0), np.abs(a ** 3) if info.min else a ** 3, (a ** 2) // 2)
    for g, w in zip(host(f(cf.asarray(a))), want):
        check(g, w)


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod", "argmax", "argmin"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16, np.uint8])
def test_trailing_reductions(cf, rng, name, axis, dtype):
    xa = rand(rng, (23, 45), dtype, -2, 2)
    if name == "prod":
        if dtype in (np.float32, np.float16):
            # factors x + 1 in 0.9..1.1 keep a product of up to 1035 of them finite and
            # non-zero even in float16 (an inf oracle would compare equal to an inf result)
            xa = rand(rng, (23, 45), dtype, -0.1, 0.1)
        else:
            # even x makes every factor x + 1 odd (and uint8's never wrap to 0), so no
            # wrapped integer product is 0
            xa = xa - xa % 2
    f = cf.fuse(lambda x: getattr(x + 1, name)(axis=axis))
    want = np.asarray(getattr(xa + 1, name)(axis=axis))
    assert np.isfinite(want).all()
    if name == "prod":
        assert (want != 0).all()
    got = host(f(cf.asarray(xa)))
    if want.dtype.kind == "f":
        rtol = 2e-3 if dtype == np.float16 else 1e-5
        slack = 0
        if name == "prod":
            # NumPy rounds a float16 product to float16 after every factor along a strided
            # axis, the kernel accumulates in float32: the oracle's own rounding error (its
            # distance from the float64 product of the same factors) is allowed on top
            exact = (xa + 1).astype(np.float64).prod(axis=axis)
            slack = np.abs(want.astype(np.float64) - exact)
        err = np.abs(got.astype(np.float64) - want.astype(np.float64))
        assert (err <= slack + rtol * np.abs(want) + 1e-3).all(), err.max()
        assert got.dtype == want.dtype
    else:
        check(got, want)


def test_reduction_keepdims_nan_and_dst(cf, rng):
    xa = rand(rng, (8, 16), np.float32)
    xa[3, 5] = np.nan
    f = cf.fuse(lambda x: (x * 2).max(axis=1, keepdims=True))
    check(host(f(cf.asarray(xa))), (xa * 2).max(axis=1, keepdims=True))
    g = cf.fuse(lambda x: x.argmax())
    check(host(g(cf.asarray(xa))), np.asarray(xa.argmax()))
    d = cf.empty((), cf.float64)
    h = cf.fuse(lambda x: cuflow.sum(x * x))
    r = h(cf.asarray(np.nan_to_num(xa)), dst=d)
    assert r is d
    np.testing.assert_allclose(float(host(d)), float((np.nan_to_num(xa) ** 2).sum()),
                               rtol=1e-5)


def test_numpy_reductions_keep_dtype_and_positional_keepdims(cf, rng):
    xa = rng.integers(100, 256, (4, 5)).astype(np.uint8)
    x = cf.asarray(xa)
    for fn in (lambda a: np.sum(a + 1, dtype=np.uint8), lambda a: np.mean(a * 1, dtype=np.float32),
               lambda a: np.max(a * 1, 0, None, True), lambda a: np.prod(a > 9, 1, np.int16)):
        check(host(cf.fuse(fn)(x)), fn(xa))
    with pytest.raises(cuflow.TraceError, match="numpy.sum's initial"):
        cf.fuse(lambda a: np.sum(a * 1, initial=3))(x)


@pytest.mark.parametrize("name", ["var", "std", "any", "all"])
def test_reductions_that_do_not_fuse_are_named(cf, rng, name):
    x = cf.asarray(rand(rng, (8, 8), np.float32))
    with pytest.raises(cuflow.TraceError, match=f"cannot fuse {name} at .*test_fusion.py"):
        cf.fuse(lambda a: getattr(cuflow, name)(a + 1))(x)


def test_an_output_that_is_an_argument_is_a_copy(cf, rng):
    """As a kernel's outputs are: the old state survives being written into its own dst,
    and a returned argument does not change with it."""
    h = rand(rng, (16,), np.float32)
    state, prev, one = cf.asarray(h.copy()), cf.empty(16, cf.float32), cf.ones(16, cf.float32)
    step = cf.fuse(lambda s, x: (s + x, s))
    assert step(state, one, dst=(state, prev)) == (state, prev)
    check(host(state), h + 1)
    check(host(prev), h)
    swap = cf.fuse(lambda a, b: (b, a))
    a, b = cf.asarray(h.copy()), cf.asarray(h * 2)
    swap(a, b, dst=(a, b))
    check(host(a), h * 2)
    check(host(b), h)
    y, same = cf.fuse(lambda u, k: (u * k, u))(a, 2.0)
    same[0] = 7.0
    assert host(a)[0] == h[0] * 2


def test_a_fused_function_calls_another(cf, rng):
    """Called while another fused function is traced, a fused function is part of its
    kernel, as a plain helper would be."""
    inner = cf.fuse(lambda a, b: a * b + 1)
    outer = cf.fuse(lambda a, b: inner(a, b) * 2)
    xa, ya = rand(rng, (64,), np.float32), rand(rng, (64,), np.float32)
    check(host(outer(cf.asarray(xa), cf.asarray(ya))), (xa * ya + 1) * 2)
    check(host(inner(cf.asarray(xa), cf.asarray(ya))), xa * ya + 1)  # and still on its own
    with pytest.raises(cuflow.TraceError, match="takes no dst= or stream="):
        cf.fuse(lambda a: inner(a, a, dst=a) * 2)(cf.asarray(xa))


# ------------------------------------------------------------ what fails
def test_data_dependent_branch_names_the_line(cf):
    def f(x):
        if x * 2 > 1:  # the traced value is unknown
            return x
        return -x

    with pytest.raises(cuflow.TraceError, match=r"truth test.*test_fusion.py:\d+: if x \* 2"):
        cf.fuse(f)(cf.asarray(np.ones(4, np.float32)))

    def g(x):
        return x - x.sum()  # a reduction inside the chain, not trailing

    with pytest.raises(cuflow.TraceError, match="trailing reduction"):
        cf.fuse(g)(cf.asarray(np.ones(4, np.float32)))


def test_unsupported_function_names_it(cf):
    f = cf.fuse(lambda x: np.sort(x) + 1)
    with pytest.raises(cuflow.TraceError, match="numpy.sort"):
        f(cf.asarray(np.ones(4, np.float32)))
    g = cf.fuse(lambda x: x[1:] + 1)
    with pytest.raises(cuflow.TraceError, match="indexing"):
        g(cf.asarray(np.ones(4, np.float32)))
    h = cf.fuse(lambda x: cuflow.cumsum(x) + 1)
    with pytest.raises(cuflow.TraceError, match=r"cannot trace .*test_fusion.py:\d+"):
        h(cf.asarray(np.ones(4, np.float32)))


def _add_in_place(a, b):
    a += b
    return a * 2


def _assign_slice(a, b):
    a[...] = b
    return a


def _scale_in_place(a, k):
    a *= k
    return a


@pytest.mark.parametrize("fn", [_add_in_place, _assign_slice, _scale_in_place])
def test_in_place_update_of_a_traced_array_is_refused_and_leaves_it_unchanged(cf, fn):
    """An in-place update inside the function cannot write its argument (Python rebinds the
    name), so it is an error on every backend, and the argument keeps its values."""
    xa = np.random.default_rng(1).standard_normal(5).astype(np.float32)
    a, b = cf.asarray(xa.copy()), cf.asarray(xa[::-1].copy())
    with pytest.raises(cuflow.TraceError,
                       match=r"(in-place update|item assignment) .*test_fusion.py:\d+.*dst="):
        cf.fuse(fn)(a, b if fn is not _scale_in_place else 3.0)
    check(host(a), xa)
    f = cf.fuse(lambda a, b: (a + b) * 2)  # the suggested form
    f(a, b, dst=a)
    check(host(a), (xa + xa[::-1]) * 2)


def test_augmented_assignment_of_an_intermediate_traces(cf, rng):
    """``s += b`` on a value the function computed rebinds a local name, as in Python: it
    fuses (Horner's scheme, accumulations)."""
    xa = rand(rng, (257,), np.float32, lo=-2.0, hi=2.0)

    def horner(x):
        acc = x * 0.5
        acc += 1.0
        acc *= x
        acc -= 0.25
        return acc

    check(host(cf.fuse(horner)(cf.asarray(xa))), horner(xa))


@pytest.mark.parametrize("fallback", ["error", "unfused"])
def test_operands_that_do_not_broadcast_are_the_ops_error(cf, rng, fallback):
    """The ValueError cuflow.add raises, naming the shapes and the line, whatever the
    fallback: bad input is no construct the tracer cannot handle."""
    f = cf.fuse(lambda x, y: x + y, fallback=fallback)
    a, b = (cf.asarray(rng.uniform(-9, 9, n)) for n in ((2, 3), 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (no fallback warning either)
        with pytest.raises(cuflow.ArgumentError, match=r"operands of add do not broadcast "
                                                       r"together: \(2, 3\), \(4,\) .*test_fusion"):
            f(a, b)


def test_a_value_the_op_refuses_raises_the_ops_cuflow_error(cf):
    # NumPy refuses integers to negative powers (cuflow.power: ArgumentError); CuPy computes
    # them: the fused function does what the unfused op does, on each backend
    i = cf.asarray(np.arange(1, 5, dtype=np.int32))
    e = cf.asarray(np.array([1, -1, 2, 3], np.int32))
    cases = [(cf.fuse(lambda x: x ** -1), (i,), lambda: cf.power(i, -1)),
             (cf.fuse(lambda x, y: x ** y), (i, e), lambda: cf.power(i, e)),
             (cf.fuse(lambda x, k: x ** k), (i, -2), lambda: cf.power(i, -2))]
    for f, args, unfused in cases:
        try:
            want = host(unfused())
        except cuflow.CuflowError as err:
            assert not cf.get_backend().is_gpu
            assert type(err) is cuflow.ArgumentError
            with pytest.raises(cuflow.ArgumentError,
                               match=r"cuflow.fuse\(<lambda>\): Integers to negative integer "
                                     r"powers.*test_fusion.py:\d+"):
                f(*args)
        else:
            assert cf.get_backend().is_gpu
            np.testing.assert_array_equal(host(f(*args)), want)


def test_a_list_argument_says_to_convert_it(cf):
    f = cf.fuse(lambda x, y: x + y)
    x = cf.asarray(np.ones(3, np.float32))
    with pytest.raises(cuflow.TraceError, match=r"Python list as an array at .*test_fusion.py"
                                                r".*not array arguments.*cuflow.asarray"):
        f(x, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(host(f(x, cf.asarray([1.0, 2.0, 3.0], dtype=np.float32))),
                                  np.array([2, 3, 4], np.float32))


def test_the_functions_own_exception_propagates_as_itself(cf, rng):
    """A raise or assert in the function (a shape check) is the plain function's error, not
    a TraceError; with fallback="unfused" the plain function runs and raises it."""
    def scale(x, k):
        if x.ndim != 2:
            raise ValueError("scale expects a 2-D image")
        return x * k

    def checked(x):
        assert x.shape[-1] == 3, "three channels"
        return x + 1

    ya = rand(rng, (4, 3), np.float32)
    for fallback in ("error", "unfused"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(ValueError, match="expects a 2-D") as err:
                cf.fuse(scale, fallback=fallback)(cf.asarray(ya[0]), 2.0)
            assert type(err.value) is ValueError
            with pytest.raises(AssertionError, match="three channels"):
                cf.fuse(checked, fallback=fallback)(cf.asarray(ya.T.copy()))
        check(host(cf.fuse(scale, fallback=fallback)(cf.asarray(ya), 2.0)), ya * 2.0)
        check(host(cf.fuse(checked, fallback=fallback)(cf.asarray(ya))), ya + 1)


def test_an_array_of_another_dtype_runs_unfused_or_is_named(cf, rng):
    za = (rand(rng, (7,), np.float32) + 1j * rand(rng, (7,), np.float32)).astype(np.complex64)
    z = cf.asarray(za)
    g = cf.fuse(lambda a: a * 2 + 1, fallback="unfused")
    with pytest.warns(RuntimeWarning, match="argument 0 has dtype complex64.*unfused"):
        r = g(z)
    np.testing.assert_array_equal(host(r), za * 2 + 1)
    f = cf.fuse(lambda a, b: a * b)
    x = cf.asarray(rand(rng, (7,), np.float32))
    with pytest.raises(cuflow.TraceError, match=r"argument 'b' has dtype complex64; fused "
                                                r"kernels take bool, integer and float arrays "
                                                r"\(at .*test_fusion.py:\d+"):
        f(x, b=z)


def test_fallback_runs_unfused_with_one_warning(cf):
    def f(x):
        return x * 2 if float(x.sum()) > 0 else x

    g = cf.fuse(f, fallback="unfused")
    x = cf.asarray(np.arange(1, 5, dtype=np.float32))
    with pytest.warns(RuntimeWarning, match="unfused"):
        r1 = g(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r2 = g(x)
    np.testing.assert_array_equal(host(r1), np.arange(1, 5, dtype=np.float32) * 2)
    np.testing.assert_array_equal(host(r2), host(r1))


def test_options_are_checked():
    with pytest.raises(cuflow.ArgumentError, match="fallback"):
        cuflow.FuseOptions(fallback="maybe")
    with pytest.raises(cuflow.ArgumentTypeError, match="fn must be callable, got int"):
        cuflow.fuse(3)
    with pytest.raises(cuflow.ArgumentTypeError, match="options must be a cuflow.FuseOptions"):
        cuflow.fuse(abs, options={"fallback": "unfused"})
    with pytest.raises(cuflow.ArgumentTypeError, match="kernel_name must be a str, got int"):
        cuflow.fuse(abs, kernel_name=3)


def test_cupy_fuse_kernel_name_names_the_function(cf):
    f = cf.fuse(kernel_name="squared_diff")(lambda a, b: (a - b) ** 2)
    assert f.name == "squared_diff" and "squared_diff" in repr(f)
    xa = np.random.default_rng(2).standard_normal(6).astype(np.float32)
    check(host(f(cf.asarray(xa), cf.asarray(xa[::-1].copy()))), (xa - xa[::-1]) ** 2)
    g = cf.fuse(abs, options=cuflow.FuseOptions(fallback="unfused"), kernel_name="k")
    assert g.name == "k" and g.options.fallback == "unfused"


# ------------------------------------------- hypothesis: random chains
UNARY = ["negative", "absolute", "exp", "log1p", "sqrt", "tanh", "sin", "floor", "square",
         "expm1", "arctan", "sign"]
BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "hypot",
          "arctan2", "fmod", "less", "equal", "logical_and"]
DTYPES = [np.float32, np.float16, np.float64, np.int32, np.uint8, np.int16, np.bool_]


@st.composite
def chains(draw):
    nin = draw(st.integers(1, 3))
    dts = [draw(st.sampled_from(DTYPES)) for _ in range(nin)]
    shapes = draw(st.sampled_from([[(37,)] * 3, [(5, 8), (8,), (5, 1)], [(3, 4, 6), (4, 1),
                                   (1, 1, 6)], [(), (7,), (2, 7)]]))[:nin]
    steps = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            steps.append(("u", draw(st.sampled_from(UNARY)), draw(st.integers(0, 9))))
        else:
            steps.append(("b", draw(st.sampled_from(BINARY)), draw(st.integers(0, 9)),
                          draw(st.one_of(st.integers(0, 9), st.sampled_from([2, 0.5, -1.25])))))
    red = draw(st.sampled_from([None, None, "sum", "max", "argmin"]))
    return dts, shapes, steps, red


def _build(spec, seen=None):
    """The chain of spec as a function of its inputs; with ``seen`` (a list), each call
    appends its intermediate values there."""
    dts, shapes, steps, red = spec

    def fn(*xs):
        vals = list(xs)
        for s in steps:
            if s[0] == "u":
                a = vals[s[2] % len(vals)]
                if s[1] in ("negative",) and getattr(a, "dtype", None) == np.bool_:
                    continue
                vals.append(getattr(np, s[1])(a))
            else:
                a = vals[s[2] % len(vals)]
                b = s[3] if not isinstance(s[3], int) or s[3] > 8 else vals[s[3] % len(vals)]
                vals.append(getattr(np, s[1])(a, b))
        if seen is not None:
            seen.extend(vals)
        out = vals[-1]
        if red is not None and len(xs) and np.dtype(out.dtype).kind in "fiu":
            out = getattr(out, red)()
        return out

    return fn


def _inputs(spec, seed):
    rng = np.random.default_rng(seed)
    dts, shapes, _, _ = spec
    return [rand(rng, sh, dt, -3, 3) if np.dtype(dt).kind == "f" else
            (rng.integers(-20, 20, sh).astype(dt) if np.dtype(dt).kind != "b"
             else rng.integers(0, 2, sh).astype(bool)) for dt, sh in zip(dts, shapes)]


def _oracle(fn, xs):
    """NumPy's result of the chain; the chain is thrown away where NumPy refuses a value
    (an integer to a negative power), and must raise TraceError where NumPy refuses the
    dtypes (no loop), since the tracer resolves the same loops."""
    try:
        with np.errstate(all="ignore"):
            return fn(*xs), None
    except TypeError as e:
        return None, e
    except ValueError:
        assume(False)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(spec=chains(), seed=st.integers(0, 1000))
@pytest.mark.skipif(not HAVE_NVRTC, reason="needs cuda-bindings' NVRTC (test extra)")
def test_random_chains_compile_for_sm90(spec, seed):
    fn = _build(spec)
    xs = _inputs(spec, seed)
    want, err = _oracle(fn, xs)
    f = cuflow.fuse(fn)
    if err is not None:
        with pytest.raises(cuflow.TraceError):
            f.cuda_source(*xs)
        return
    assume(isinstance(want, (np.ndarray, np.generic)))
    src = f.cuda_source(*xs)
    assert _engine.compile_cubin(src, 90)


@pytest.mark.gpu
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(spec=chains(), seed=st.integers(0, 1000))
# float32 exps summed into a float64 result: within float32's ulps of NumPy's, not float64's
@example(spec=([np.float32, np.float64, np.float32], [(37,), (37,), (37,)],
               [("u", "negative", 0), ("b", "add", 0, 0), ("u", "exp", 0), ("b", "add", 0, 0),
                ("u", "negative", 0), ("b", "add", 1, 5)], None), seed=0)
# fmod of -2 * expm1(19) (about -3.6e8) by an int: one ulp of expm1 between NumPy's and CUDA's
# math is 6e-8 of absolute error in a result near 5
@example(spec=([np.int32], [(37,)], [("u", "expm1", 0), ("b", "add", 0, 0),
                                     ("u", "negative", 0), ("b", "fmod", 1, 0)], None), seed=1)
# an int32 max-reduction of maximum(x, -x): NVRTC folded it to the maximum of x
@example(spec=([np.int32], [(37,)], [("u", "negative", 0), ("u", "negative", 0),
                                     ("b", "maximum", 0, 1)], "max"), seed=0)
def test_random_chains_match_numpy_on_gpu(spec, seed):
    cuflow.set_backend("cupy")
    fn = _build(spec)
    xs = _inputs(spec, seed)
    want, err = _oracle(fn, xs)
    if err is not None:
        with pytest.raises(cuflow.TraceError):
            cuflow.fuse(fn)(*[cuflow.asarray(x) for x in xs])
        return
    want = np.asarray(want)
    assume(want.dtype.kind in "biuf" and any(np.ndim(x) for x in xs))
    got = host(cuflow.fuse(fn)(*[cuflow.asarray(x) for x in xs]))
    got = np.asarray(got)
    assert got.dtype == want.dtype
    if want.dtype.kind == "f":
        # to the narrowest float in the chain: its math functions differ by a few ulps between
        # NumPy's loops and CUDA's (a float32 exp added into a float64 result agrees to 1e-6)
        widths = [np.asarray(x).dtype.itemsize for x in xs if np.asarray(x).dtype.kind == "f"]
        rtol = {2: 4e-3, 4: 1e-5, 8: 1e-12}[min(widths + [want.dtype.itemsize])]
        # and absolute errors carry through the chain: an add or fmod that cancels a large
        # intermediate keeps that intermediate's ulps, so atol scales with the largest one
        seen = []
        with np.errstate(all="ignore"):
            _build(spec, seen)(*xs)
        big = [np.abs(v[np.isfinite(v)]).max() for v in map(np.asarray, seen)
               if v.dtype.kind == "f" and np.isfinite(v).any()]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=rtol, atol=rtol * max([1.0, *big]), equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(not HAVE_NVRTC, reason="needs cuda-bindings' NVRTC (test extra)")
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_named_chains_compile_for_sm90(name):
    chain, make = CHAINS[name]
    args = make(np.random.default_rng(0))
    m = types.SimpleNamespace(**vars(NP).copy())
    m.erf, m.sigmoid = cuflow.fusion.erf, cuflow.fusion.sigmoid
    src = cuflow.fuse(lambda *a: chain(m, *a)).cuda_source(*args)
    assert "cf_fused" in src
    assert _engine.compile_cubin(src, 90)


@pytest.mark.skipif(not HAVE_NVRTC, reason="needs cuda-bindings' NVRTC (test extra)")
def test_per_channel_chain_past_2_to_the_31_compiles_for_sm90():
    # 3 * 2**30 elements, described and never allocated: the 64-bit channel divisions
    x = np.lib.stride_tricks.as_strided(np.empty(1, np.float32), (2, 3, 1 << 29),
                                        (3 << 31, 1 << 31, 4))
    m = np.ones((3, 1), np.float32)
    src = cuflow.fuse(lambda a, b: (a - b) * b).cuda_source(x, m)
    assert "cf_chan((unsigned long long)base" in src
    assert _engine.compile_cubin(src, 90)


@pytest.mark.skipif(not HAVE_NVRTC, reason="needs cuda-bindings' NVRTC (test extra)")
@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.uint32, np.int64])
def test_integer_powers_compile_for_sm90(dtype):
    x = np.arange(1, 65, dtype=dtype)
    src = cuflow.fuse(lambda a: np.maximum(a ** 3, 0)).cuda_source(x)
    assert "cf_ipow" in src
    assert _engine.compile_cubin(src, 90)


# ------------------------------------------------------------ GPU only
@pytest.mark.gpu
def test_an_int32_max_of_maximum_with_its_negation(gpu_cf, rng):
    """NVRTC folds an int32 max-reduction of maximum(x, -x) to the maximum of x where it sees
    the negation (_ewgen's cf_neg32 hides it); the largest magnitude here is a negative
    element's."""
    cf = gpu_cf
    x = rng.integers(-2**31 + 2, 2**31 - 2, 4099, dtype=np.int32)
    x[7] = -2**31 + 1
    chains = [lambda a: np.maximum(a, np.negative(a)).max(),
              lambda a: np.maximum(np.negative(a), a).max(),
              lambda a: np.minimum(a, -a).min(),
              lambda a: np.maximum(a, np.negative(a)).argmax()]
    for fn in chains:
        assert int(host(cf.fuse(fn)(cf.asarray(x)))) == int(fn(x))
    small = np.array([-20, 5, 19], np.int32)
    assert int(host(cf.fuse(chains[0])(cf.asarray(small)))) == 20


@pytest.mark.gpu
def test_graph_capture_replays_the_fused_kernel(gpu_cf, rng):
    cf = gpu_cf
    f = cf.fuse(lambda v: 0.5 * v * (1 + cf.tanh(v)))
    g = cf.graph.capture(lambda v: f(v), cf.asarray(rand(rng, (1 << 12,), np.float32)))
    xa = rand(rng, (1 << 12,), np.float32)
    y = g(cf.asarray(xa))  # copies into the static input, replays the captured kernel
    cf.synchronize()
    check(host(y), 0.5 * xa * (1 + np.tanh(xa)))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["sum", "max", "argmin"])
def test_full_reductions_of_many_blocks_replay_and_take_streams(gpu_cf, rng, monkeypatch,
                                                               name):
    # enough elements for many blocks: the partials' kernel and the one-block last step
    # (a programmatic dependent launch on compute capability 9.0 and later), eager on a
    # stream of its own and replayed from a graph with new inputs
    from cuflow.core import _engine

    cf = gpu_cf
    dependent = []
    launch = _engine._launch_dependent
    monkeypatch.setattr(_engine, "_launch_dependent",
                        lambda *a: (dependent.append(a), launch(*a))[1])
    f = cf.fuse(lambda a, b: getattr(cf, name)((a - b) * (a + 1.5)))
    want = lambda a, b: getattr(np, name)((a - b) * (a + np.float32(1.5)))  # noqa: E731
    xs = [rand(rng, (_engine.DEPENDENT_MIN,), np.float32) for _ in range(4)]
    with cf.Stream() as s:
        got = f(cf.asarray(xs[0]), cf.asarray(xs[1]), stream=s)
        s.synchronize()
    check(host(got), want(xs[0], xs[1]))
    g = cf.graph.capture(f, cf.asarray(xs[0]), cf.asarray(xs[1]))
    for a, b in ((xs[2], xs[3]), (xs[1], xs[0])):
        y = g(cf.asarray(a), cf.asarray(b))
        cf.synchronize()
        check(host(y), want(a, b))
    # where the driver and the device have it, the last steps were dependent launches
    assert bool(dependent) == (_engine._launch_ex(cf.Device().id) is not None)


@pytest.mark.gpu
def test_unaligned_and_strided_inputs(gpu_cf, rng):
    cf = gpu_cf
    base = cf.asarray(rand(rng, (1001,), np.float32))
    x = base[1:]  # 4 bytes off: the scalar kernel
    f = cf.fuse(lambda v: v * 2 + 1)
    check(host(f(x)), host(x) * 2 + 1)
    m = cf.asarray(rand(rng, (40, 30), np.float32))
    check(host(f(m.T)), host(m).T * 2 + 1)
    check(host(f(m[::2, 1::3])), host(m)[::2, 1::3] * 2 + 1)


@pytest.mark.gpu
def test_second_process_loads_from_disk(gpu_cf, tmp_path):
    code = (
        "import cuflow as cf, numpy as np\n"
        "f = cf.fuse(lambda x: cf.tanh(x) * 3 + 0.125)\n"
        "f(cf.ones((10,), cf.float32))\n"
        "print(cf.fusion.stats()['compiles'], cf.fusion.stats()['disk_hits'])\n")
    env = {"CUFLOW_KERNEL_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"}
    import os

    env = {**os.environ, **env}
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, check=True).stdout.split()
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, check=True).stdout.split()
    assert first == ["1", "0"]
    assert second == ["0", "1"]


def test_captured_array_must_be_an_argument(cf, rng):
    w = cf.asarray(rand(rng, (8,), np.float32))
    f = cf.fuse(lambda x: x * w)
    with pytest.raises(cuflow.TraceError, match="argument"):
        f(cf.asarray(rand(rng, (8,), np.float32)))


# ------------------------------------------------ Python ints past a dtype
U8 = np.array([0, 1, 255], np.uint8)


def _body_of(src):
    """The per-element function of a generated kernel (its operations, no prelude)."""
    body = src[src.index("void cf_body("):]
    return body[:body.index("\n}")]


@pytest.mark.parametrize("fn", [lambda x: x < 300, lambda x: x == -1, lambda x: -1 < x,
                                lambda x: x != 2 ** 70, lambda x: x >= -(2 ** 70)],
                         ids=["<300", "==-1", "-1<", "!=2**70", ">=-2**70"])
def test_comparison_with_an_int_past_the_dtype_is_numpys(cf, fn):
    # NumPy compares such a constant exactly: one answer for every element
    f = cf.fuse(fn)
    check(host(f(cf.asarray(U8))), fn(U8))
    src = f.cuda_source(U8)
    assert "(unsigned char)44" not in src and "(unsigned char)255ULL" not in src
    assert ("(x0 == x0)" if fn(U8).all() else "(x0 != x0)") in src


def test_comparison_with_an_int_past_int64_is_numpys(cf):
    big = np.array([-5, 2 ** 62], np.int64)
    g = cf.fuse(lambda x: x < 2 ** 63)
    check(host(g(cf.asarray(big))), big < 2 ** 63)
    assert "9223372036854775808LL" not in g.cuda_source(big)  # (a literal that wraps)


@pytest.mark.parametrize("fn,value,dtype", [
    (lambda x: x + 300, 300, "uint8"), (lambda x: np.maximum(x, -1), -1, "uint8"),
    (lambda x: x & 256, 256, "uint8"), (lambda x: np.clip(x, 300, 400), 300, "uint8"),
    (lambda x: x.astype(np.int64) * 2 ** 63, 2 ** 63, "int64")],
    ids=["+300", "maximum-1", "&256", "clip", "int64*2**63"])
def test_arithmetic_with_an_int_past_the_dtype_overflows(cf, fn, value, dtype):
    with pytest.raises(OverflowError):  # NumPy's answer
        fn(U8)
    f = cf.fuse(fn)
    pattern = rf"Python integer {value} out of bounds for {dtype}.*test_fusion.py:\d+"
    with pytest.raises(cuflow.ArgumentOverflowError, match=pattern):
        f(cf.asarray(U8))
    with pytest.raises(cuflow.ArgumentOverflowError, match=pattern):
        f.cuda_source(U8)  # refused by the tracer, not wrapped into the kernel
    with pytest.raises(cuflow.ArgumentOverflowError):  # not run op by op instead
        cf.fuse(fn, fallback="unfused")(cf.asarray(U8))


def test_python_int_arguments_are_checked_against_the_dtype_they_meet(cf):
    x = cf.asarray(U8)
    less = cf.fuse(lambda a, s: a < s)
    check(host(less(x, 255)), U8 < 255)
    with pytest.raises(cuflow.ArgumentOverflowError,
                       match=r"argument 1: Python integer 300 out of bounds for uint8.*"
                             r"test_fusion.py:\d+"):
        less(x, 300)  # one kernel for every value: it would compare against 300 % 256
    add = cf.fuse(lambda a, s: a + s)
    with pytest.raises(cuflow.ArgumentOverflowError, match="-1 out of bounds for uint8"):
        add(x, -1)
    u64 = np.array([0, 5, 2 ** 63], np.uint64)
    check(host(add(cf.asarray(u64), 2 ** 63 - 1)), u64 + (2 ** 63 - 1))
    check(host(add(cf.asarray(u64[:2]), 2 ** 63)), u64[:2] + 2 ** 63)  # past int64
    with pytest.raises(cuflow.ArgumentOverflowError, match="-1 out of bounds for uint64"):
        add(cf.asarray(u64), -1)
    f32 = np.array([1.5, -2], np.float32)
    check(host(add(cf.asarray(f32), 2 ** 62)), f32 + 2 ** 62)
    with pytest.raises(cuflow.ArgumentOverflowError, match="int64.*float()"):
        add(cf.asarray(f32), 2 ** 63)  # a Python int travels as a 64-bit integer
    mul = cf.fuse(lambda a, s: a * s)
    for s in (np.bool_(True), np.bool_(False)):
        check(host(mul(cf.asarray(f32), s)), f32 * s)


# ------------------------------------------------------------ dtype= inside
def test_ufunc_dtype_runs_the_loop_in_it(cf):
    i8 = np.array([100, -100, 7], np.int8)
    x = cf.asarray(i8)
    add16 = cf.fuse(lambda a: np.add(a, a, dtype=np.int16))
    check(host(add16(x)), np.add(i8, i8, dtype=np.int16))  # 200, not 200 wrapped in int8
    (line,) = [ln for ln in _body_of(add16.cuda_source(i8)).splitlines() if " + " in ln]
    assert line.strip().startswith("const short")  # the sum itself in int16
    small = np.array([3, -3, 7], np.int8)
    exp32 = cf.fuse(lambda a: np.exp(a, dtype=np.float32))
    check(host(exp32(cf.asarray(small))), np.exp(small, dtype=np.float32))
    assert "cf_rh(expf" not in exp32.cuda_source(small)  # float32, not float16's
    f32 = np.array([1.5, 2.7], np.float32)
    unsafe = cf.fuse(lambda a: np.add(a, a, dtype=np.int16, casting="unsafe"))
    check(host(unsafe(cf.asarray(f32))), np.add(f32, f32, dtype=np.int16, casting="unsafe"))
    with pytest.raises(cuflow.TraceError, match=r"numpy.add has no loop.*same_kind"):
        cf.fuse(lambda a: np.add(a, a, dtype=np.int16))(cf.asarray(f32))
    with pytest.raises(cuflow.ArgumentOverflowError, match="100000 out of bounds for int16"):
        cf.fuse(lambda a: np.add(a, 100000, dtype=np.int16))(x)
    with pytest.raises(cuflow.TraceError, match=r"numpy.add's where at .*test_fusion.py"):
        cf.fuse(lambda a: np.add(a, 1, where=a > 0))(x)


@pytest.mark.parametrize("fn", [lambda a, xp=np: (a * 1).sum(dtype=np.int16),
                                lambda a, xp=cuflow: xp.sum(a * 1, dtype=np.int16),
                                lambda a, xp=np: np.prod(a + 1, axis=0, dtype=np.int32),
                                lambda a, xp=np: (a * 1).mean(axis=-1, dtype=np.float32)],
                         ids=["method", "cuflow.sum", "numpy.prod", "mean"])
def test_reduction_dtype_casts_each_element_first(cf, fn):
    xa = np.full((2, 4), 0.5)
    want = fn(xa, xp=np)  # (NumPy's result: cuflow.sum takes the backend's arrays only)
    check(host(cf.fuse(fn)(cf.asarray(xa))), want)  # sum in int16: 0, not int16(4.0)
    src = cf.fuse(fn).cuda_source(xa)
    assert "double y;" not in src  # the reduced values are in the requested dtype


# ------------------------------------------------------ erf & co. of ints
@pytest.mark.parametrize("name", ["erf", "erfc", "sigmoid", "rsqrt"])
@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.bool_])
def test_special_functions_of_integers_compute_in_float(cf, name, dtype):
    xa = np.array([0, 1, 3, 5], dtype) if dtype != np.bool_ else np.array([0, 1, 1, 0], bool)
    f = cf.fuse(lambda a: getattr(cf.fusion, name)(a))
    ft = np.exp(np.ones((), dtype)).dtype  # NumPy's float for the integer dtype
    oracle = {"erf": np.vectorize(math.erf), "erfc": np.vectorize(math.erfc),
              "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "rsqrt": lambda v: 1 / np.sqrt(v)}
    with np.errstate(divide="ignore"):  # (rsqrt(0))
        want = np.asarray(oracle[name](xa.astype(np.float64))).astype(ft)
    check(host(f(cf.asarray(xa))), want)
    body = _body_of(f.cuda_source(xa))  # a float kernel: no integer negation
    fn, arg = ("exp", "(-v1)") if name == "sigmoid" else (name, "(v1)")
    f64 = np.dtype(dtype).itemsize >= 4  # (a float64 result; bool's is float16)
    assert f"{fn}{'' if f64 else 'f'}{arg}" in body  # of the input cast to float (v1)
    if HAVE_NVRTC:
        assert _engine.compile_cubin(f.cuda_source(xa), 90)


# ----------------------------------------------------- static arguments
def test_static_arguments_trace_per_value_and_type(cf):
    """A static argument is told apart by its value and type: a trace that would fail for
    one value fails for it, whatever traced before (the same object mutated, a tuple of an
    equal value of another type, an unhashable value)."""
    x = cf.asarray(np.arange(4, dtype=np.int32))

    def pick(a, cfg):
        return a + 1 if cfg[0] == "add" else a[0]  # indexing: a TraceError

    f = cf.fuse(pick)
    names = ["add"]
    check(host(f(x, names)), np.arange(4, dtype=np.int32) + 1)
    names[0] = "index"  # the same list (id), another value
    with pytest.raises(cuflow.TraceError, match="indexing"):
        f(x, names)
    cfg = [{"op": "add"}]  # unhashable: traced at every call
    g = cf.fuse(lambda a, c: a + 1 if c[0]["op"] == "add" else a[0])
    check(host(g(x, cfg)), np.arange(4, dtype=np.int32) + 1)
    cfg[0]["op"] = "index"
    with pytest.raises(cuflow.TraceError, match="indexing"):
        g(x, cfg)
    h = cf.fuse(lambda a, t: a * t[0] if isinstance(t[0], int) else a[0])
    check(host(h(x, (2,))), np.arange(4, dtype=np.int32) * 2)
    with pytest.raises(cuflow.TraceError, match="indexing"):
        h(x, (2.0,))  # (2,) == (2.0,), but it traces as a float


def test_static_floats_are_told_apart_by_their_bits(cf, rng):
    """-0.0 == 0.0, but they trace to different constants; a NaN, equal to nothing, traces
    once."""
    xa = rand(rng, (9,), np.float32)
    x = cf.asarray(xa)
    f = cf.fuse(lambda a, t: a * t[0] if math.copysign(1, t[0]) > 0 else a[0])
    check(host(f(x, (0.0,))), xa * 0.0)
    with pytest.raises(cuflow.TraceError, match="indexing"):
        f(x, (-0.0,))  # not the kernel of +0.0
    traced = []

    def add_first(a, t):
        traced.append(not isinstance(a, type(x)))
        return a + t[0]

    g = cf.fuse(add_first)
    for _ in range(3):
        check(host(g(x, (math.nan,))), xa + np.float32(math.nan))
    assert traced.count(True) == 1


def test_a_fused_method_keeps_no_instance_alive(cf, rng):
    """The instance is a static argument held by a weak reference: each traces once (its
    attributes are baked in), and it is collected with its entries."""
    import gc
    import weakref

    class Scale:
        def __init__(self, k):
            self.k = k
            self.state = np.zeros(1 << 16, np.uint8)

        @cuflow.fuse
        def apply(self, v):
            return v * self.k

    xa = rand(rng, (33,), np.float32)
    x = cf.asarray(xa)
    refs = []
    for k in (2.0, -3.0, 2.0):
        s = Scale(k)
        check(host(s.apply(x)), xa * k)
        check(host(s.apply(x)), xa * k)
        refs.append(weakref.ref(s))
        del s
    gc.collect()
    assert [r() for r in refs] == [None] * 3


# ------------------------------------------------------------ the rest
def test_reduction_inside_takes_no_dst_or_stream(cf):
    x = cf.asarray(np.ones(4, np.float32))
    d = cf.empty((), cf.float32)
    with pytest.raises(cuflow.TraceError,
                       match=r"cuflow.sum\(\.\.\., dst=\) at .*test_fusion.py:\d+"):
        cf.fuse(lambda a: cuflow.sum(a * 2, dst=d))(x)
    with pytest.raises(cuflow.TraceError, match=r"cuflow.max\(\.\.\., stream=\)"):
        cf.fuse(lambda a: cuflow.max(a * 2, stream=cf.Stream()))(x)


@pytest.mark.parametrize("name", ["max", "argmin", "sum"])
def test_empty_reductions(cf, name):
    xa = np.zeros((0, 3), np.float32)
    f = cf.fuse(lambda a: getattr(a * 2, name)(axis=1))
    check(host(f(cf.asarray(xa))), getattr(xa * 2, name)(axis=1))  # an empty result
    g = cf.fuse(lambda a: getattr(a * 2, name)(axis=0))
    if name == "sum":
        check(host(g(cf.asarray(xa))), (xa * 2).sum(axis=0))
    else:  # three results of no elements: no identity
        with pytest.raises(cuflow.ArgumentError, match="empty|zero-size"):
            g(cf.asarray(xa))


def test_a_dst_that_is_not_an_array_is_the_contracts_error(cf):
    f = cf.fuse(lambda a: a * 2)
    x = cf.asarray(np.ones(3, np.float32))
    with pytest.raises(cuflow.DstTypeError, match="dst must be an array"):
        f(x, dst=3)
    with pytest.raises(cuflow.DstTypeError, match="dst must be an array"):
        cf.fuse(lambda a: (a, a + 1))(x, dst=(cf.empty(3, cf.float32), "out"))


def test_fallback_warning_names_the_callers_line(cf):
    g = cf.fuse(lambda a: a * 2 if float(a.sum()) > 0 else a, fallback="unfused")
    with pytest.warns(RuntimeWarning, match="unfused") as rec:
        g(cf.asarray(np.ones(3, np.float32)))
    assert [r.filename for r in rec if "unfused" in str(r.message)] == [__file__]


@pytest.mark.parametrize("op", ["cumsum", "dot", "around"])
def test_an_op_that_does_not_fuse_is_refused_saying_why(cf, rng, op):
    x = cf.asarray(rand(rng, (4, 4), np.float32))
    f = cf.fuse(lambda v: getattr(cf, op)(*([v, v] if op == "dot" else [v])) + 1)
    with pytest.raises(cf.fusion.TraceError, match=rf"cuflow\.{op}: it is not elementwise: .* "
                                                   r"\(call it outside the fused function\) "
                                                   r"at .*test_fusion\.py:\d+"):
        f(x)


def test_a_bool_array_squared_is_int8_as_in_numpy(cf, rng):
    """NumPy's ``x ** 2`` squares (``ndarray.__pow__``'s scalar shortcut), so a bool array
    gives int8, where ``power(x, 2)`` and ``x ** 3`` give int64; fused or not."""
    b = rng.random(1000) < 0.5
    x = cf.asarray(b)
    for got, want in ((x ** 2, b ** 2), (x ** 3, b ** 3), (cf.power(x, 2), np.power(b, 2)),
                      (cf.fuse(lambda u: u ** 2)(x), b ** 2),
                      (cf.fuse(lambda u: (u ** 2) * 3)(x), (b ** 2) * 3)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(cf.asnumpy(got), want)
