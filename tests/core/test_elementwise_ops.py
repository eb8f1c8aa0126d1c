"""Elementwise ops (core._arithmetic, _transcendental, _logical) against NumPy, with and without dst=."""

from __future__ import annotations

import numpy as np
import pytest

import cuflow
from cuflow.testing import DTYPES, assert_equal_host, random_array, to_host

BINARY = ["add", "subtract", "multiply", "maximum", "minimum", "equal", "less", "logical_and"]
UNARY = ["negative", "absolute", "square", "logical_not"]


def _np_ref(name, *args, **kw):
    with np.errstate(all="ignore"):
        return getattr(np, name)(*args, **kw)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", BINARY)
def test_binary_all_dtypes(cf, rng, poisons, name, dtype):
    if name in ("subtract",) and np.dtype(dtype) == np.bool_:
        pytest.skip("NumPy defines no boolean subtract")
    if name == "logical_and" and np.dtype(dtype).kind == "c" and cf.get_backend().name == "cupy":
        pytest.skip("CuPy has no complex logical_and")
    ha = random_array((7, 9), dtype, rng, host=True)
    hb = random_array((7, 9), dtype, rng, host=True)
    a, b = cf.asarray(ha), cf.asarray(hb)
    exp = _np_ref(name, ha, hb)
    with np.errstate(all="ignore"):
        got = getattr(cf, name)(a, b)
        assert_equal_host(got, exp)
        for dst in poisons(exp.shape, exp.dtype):
            assert getattr(cf, name)(a, b, dst=dst) is dst
            assert_equal_host(dst, exp)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "float16", "float32", "float64", "complex128"])
@pytest.mark.parametrize("name", UNARY)
def test_unary(cf, rng, poisons, name, dtype):
    if name == "logical_not" and np.dtype(dtype).kind == "c" and cf.get_backend().name == "cupy":
        pytest.skip("CuPy has no complex logical_not")
    h = random_array((33,), dtype, rng, host=True)
    exp = _np_ref(name, h)
    for dst in poisons(exp.shape, exp.dtype):
        with np.errstate(all="ignore"):
            assert getattr(cf, name)(cf.asarray(h), dst) is dst
        if exp.dtype.kind in "fc":  # |z| of complex may differ by an ulp between implementations
            tol = {2: 1e-3, 4: 1e-6, 8: 1e-14}[np.finfo(exp.dtype).bits // 8]
            np.testing.assert_allclose(to_host(dst), exp, rtol=tol)
        else:
            assert_equal_host(dst, exp)


def test_every_numpy_ufunc_name_exists():
    for name in cuflow.core.UFUNC_NAMES:
        f = getattr(cuflow, name)
        assert callable(f) and f.__name__ in (name, getattr(np, name).__name__)  # aliases
        assert "dst" in f.__doc__ and "Stream semantics" in f.__doc__


def test_non_contiguous_and_transposed_inputs_and_outputs(cf, rng):
    ha = random_array((8, 10), "float32", rng, host=True)
    hb = random_array((10, 8), "float32", rng, host=True)
    a, b = cf.asarray(ha), cf.asarray(hb)
    big = cf.zeros((16, 20), dtype="float32")
    dst = big[::2, ::2]  # strided output view
    cf.multiply(a, b.T, dst=dst)
    exp_big = np.zeros((16, 20), np.float32)
    exp_big[::2, ::2] = ha * hb.T
    assert_equal_host(big, exp_big)
    # offset view input
    out = cf.add(a[1:, 2:], 1.5, dst=cf.empty((7, 8), "float32"))
    assert_equal_host(out, ha[1:, 2:] + np.float32(1.5))
    assert_equal_host(cf.add(a[1:, 2:], 1.5), ha[1:, 2:] + np.float32(1.5))


def test_broadcast_inputs_into_exact_dst(cf, rng):
    ha = random_array((4, 1), "float64", rng, host=True)
    hb = random_array((1, 5), "float64", rng, host=True)
    dst = cf.empty((4, 5))
    cf.add(cf.asarray(ha), cf.asarray(hb), dst=dst)
    assert_equal_host(dst, ha + hb)


def test_in_place_dst_identical_to_input(cf, rng):
    h = random_array((50,), "float32", rng, host=True)
    a = cf.array(h)
    assert cf.multiply(a, 2, dst=a) is a
    assert_equal_host(a, h * 2)
    a2 = cf.array(h)
    cf.add(a2, a2, out=a2)
    assert_equal_host(a2, h + h)


@pytest.mark.parametrize("shift", [1, -1, 3])
def test_partial_overlap_gives_the_right_answer(cf, rng, shift):
    h = random_array((64,), "float32", rng, host=True)
    a = cf.array(h)
    n = 64 - abs(shift)
    src = a[:n] if shift > 0 else a[-shift:]
    dst = a[shift:] if shift > 0 else a[:n]
    exp = h.copy()
    srch = h[:n].copy() if shift > 0 else h[-shift:].copy()
    if shift > 0:
        exp[shift:] = srch + srch
    else:
        exp[:n] = srch + srch
    cf.add(src, src, dst=dst)
    assert_equal_host(a, exp)


def test_broadcast_input_overlapping_dst(cf, rng):
    h = random_array((3, 4), "float32", rng, host=True)
    a = cf.asarray(h)
    row = a[0:1]  # broadcast over dst while dst's first row is being written
    exp = h + h[0:1]
    cf.add(a, row, dst=a)
    assert_equal_host(a, exp)


def test_multi_output_ufuncs(cf, rng):
    h = random_array((10,), "float64", rng, host=True)
    a = cf.asarray(h)
    f, i = cf.modf(a)
    ef, ei = np.modf(h)
    assert_equal_host(f, ef)
    assert_equal_host(i, ei)
    d1, d2 = cf.empty(10), cf.empty(10)
    r = cf.divmod(a, 3.0, dst=(d1, d2))
    assert r[0] is d1 and r[1] is d2
    assert_equal_host(d1, np.divmod(h, 3.0)[0])
    assert_equal_host(d2, np.divmod(h, 3.0)[1])


def test_ufunc_methods_forwarded(cf, rng):
    h = random_array((5,), "float64", rng, host=True)
    a = cf.asarray(h)
    np.testing.assert_allclose(float(cf.add.reduce(a)), np.add.reduce(h), rtol=1e-12)
    outer = cf.multiply.outer(a, a)
    assert isinstance(outer, cf.darray) and outer.shape == (5, 5)
    np.testing.assert_array_equal(to_host(outer), np.multiply.outer(h, h))
    assert cf.add.nin == 2 and cf.negative.nin == 1


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "uint8", "int64"])
def test_remainder_matches_numpy_on_special_values(cf, rng, dtype):
    """NumPy's remainder, with the signs of zeros and infinite divisors, on every backend."""
    if np.dtype(dtype).kind == "f":
        vals = np.array([0.0, -0.0, 1.5, -1.5, 7.0, -7.0, np.inf, -np.inf, np.nan], dtype)
    else:
        vals = np.concatenate([[1, 2, 7], random_array((6,), dtype, rng, host=True)]).astype(dtype)
    ha, hb = np.meshgrid(vals, vals)
    ha, hb = ha.ravel(), hb.ravel()
    if np.dtype(dtype).kind in "iu":
        hb = np.where(hb == 0, 1, hb).astype(dtype)
    a, b = cf.asarray(ha), cf.asarray(hb)
    with np.errstate(all="ignore"):
        want = np.remainder(ha, hb)
    for got in (cf.remainder(a, b), a % b, cf.mod(a, b)):
        np.testing.assert_array_equal(to_host(got), want)
        np.testing.assert_array_equal(np.signbit(to_host(got)), np.signbit(want))
    c = a.copy()
    c %= b
    np.testing.assert_array_equal(to_host(c), want)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "uint16", "int64"])
def test_floor_division_is_numpys_on_finite_operands(cf, rng, dtype):
    """``//``, ``floor_divide`` and ``divmod`` give NumPy's floor of the exact quotient, which
    ``floor(a / b)`` misses where the division rounds up to an integer (1.0 // 0.1 is 9), and
    agree with ``%``; integers follow Python's sign rule with 0 for a zero divisor."""
    if np.dtype(dtype).kind == "f":
        ha = np.concatenate([[1.0, -1.0, 0.0, -0.0, 7.0, 2.0],
                             rng.uniform(-1e4, 1e4, 250)]).astype(dtype)
        hb = np.concatenate([[0.1, 0.1, 3.0, 3.0, -0.7, 0.0],
                             rng.uniform(-10, 10, 250)]).astype(dtype)
    else:
        ha = random_array((256,), dtype, rng, host=True)
        hb = np.concatenate([[0, 1, 7], random_array((253,), dtype, rng, host=True) // 4])
        hb = hb.astype(dtype)
    a, b = cf.asarray(ha), cf.asarray(hb)
    with np.errstate(all="ignore"):
        q, r = np.floor_divide(ha, hb), np.remainder(ha, hb)
    for got in (cf.floor_divide(a, b), a // b, cf.divmod(a, b)[0], divmod(a, b)[0]):
        np.testing.assert_array_equal(to_host(got), q)
        np.testing.assert_array_equal(np.signbit(to_host(got)), np.signbit(q))
    for got in (cf.divmod(a, b)[1], divmod(a, b)[1]):
        np.testing.assert_array_equal(to_host(got), r)
    c = a.copy()
    c //= b
    np.testing.assert_array_equal(to_host(c), q)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(to_host(7 // b), 7 // hb)


@pytest.mark.parametrize("name", ["log", "log1p", "log2", "log10", "tanh", "arccosh", "acosh",
                                  "reciprocal"])
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_special_values_are_numpys(cf, rng, name, dtype):
    """The complex functions whose special values CuPy's (thrust's) functions get wrong
    give NumPy's on every backend (and tanh the standard's where NumPy's differs): over
    signed zeros, infinities, NaN and finite values in both parts, and random values, with
    the signs of zeros."""
    parts = np.concatenate([[0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan],
                            rng.standard_normal(3) * 10])
    re, im = np.meshgrid(parts, parts)
    h = (re + 1j * im).ravel().astype(dtype)
    h.real, h.imag = re.ravel(), im.ravel()  # (1j * inf would make nan real parts)
    with np.errstate(all="ignore"):
        want = getattr(np, name)(h)
        got = to_host(getattr(cf, name)(cf.asarray(h)))
        inplace = cf.asarray(h)  # into dst=, over its own operand
        getattr(cf, name)(inplace, dst=inplace)
    np.testing.assert_array_equal(to_host(inplace), got)
    if name == "tanh":  # the standard's +-1 +- 0j at an infinite real part (cuflow.tanh)
        at_inf = np.isinf(h.real) & np.isfinite(h.imag)
        want.real[at_inf] = np.sign(h.real[at_inf])
        want.imag[at_inf] = np.copysign(0, h.imag[at_inf])
    assert got.dtype == want.dtype
    tol = dict(rtol=1e-5 if dtype == "complex64" else 1e-12, atol=0)
    for g, w in ((got.real, want.real), (got.imag, want.imag)):
        np.testing.assert_allclose(g, w, **tol, err_msg=f"{name} at {h}")
        np.testing.assert_array_equal(np.signbit(g[w == 0]), np.signbit(w[w == 0]))


def test_two_output_ufuncs_take_positional_outputs_and_ufunc_attributes(cf, rng):
    h = random_array((16,), "float64", rng, host=True)
    a = cf.asarray(h)
    q, r = cf.empty(16), cf.empty(16)
    res = cf.divmod(a, 3.0, q, r)
    assert res[0] is q and res[1] is r
    np.testing.assert_array_equal(to_host(q), np.divmod(h, 3.0)[0])
    np.testing.assert_array_equal(to_host(r), np.divmod(h, 3.0)[1])
    f, i = cf.empty(16), cf.empty(16)
    cf.modf(a, f, i)
    np.testing.assert_array_equal(to_host(f), np.modf(h)[0])
    np.testing.assert_array_equal(to_host(i), np.modf(h)[1])
    assert cf.add.identity == 0 and cf.multiply.identity == 1 and len(cf.add.types) > 0
    assert callable(cf.negative.at)


def test_two_outputs_given_twice_or_over_the_same_bytes_are_refused(cf, rng):
    """dst given positionally and as dst= would drop one of them; two outputs over the same
    bytes would each overwrite the other (the quotient read back as the remainder)."""
    a = cf.asarray(random_array((6,), "float64", rng, host=True))
    q, r, d = cf.empty(6), cf.empty(6), cf.empty(6)
    big = cf.empty(7)
    before = to_host(q).copy()
    with pytest.raises(cuflow.DstError, match="give the outputs once"):
        cf.divmod(a, 2.0, q, r, dst=(d, d))
    for pair in ((d, d), (big[:6], big[1:]), (d, d[::-1])):
        with pytest.raises(cuflow.DstError, match="must not share memory"):
            cf.divmod(a, 2.0, dst=pair)
        with pytest.raises(cuflow.DstError, match="must not share memory"):
            cf.modf(a, *pair)
    np.testing.assert_array_equal(to_host(q), before)


@pytest.mark.parametrize("call", [lambda cf, b: cf.sign(b), lambda cf, b: cf.positive(b),
                                  lambda cf, b: cf.gcd(b, b), lambda cf, b: cf.lcm(b, b),
                                  lambda cf, b: cf.sign(True)])
def test_bool_operands_numpy_has_no_loop_for_are_refused(cf, call):
    """CuPy runs these on bools through an integer loop; NumPy (and cuflow) refuse them."""
    with pytest.raises(cuflow.ArgumentTypeError):
        call(cf, cf.asarray(np.array([True, False])))


def test_clip_of_a_scalar(cf):
    lo = cf.asarray(np.array([0, 2, 9], dtype=np.int8))
    got = cf.clip(5, lo, 7)  # a Python int stays weak: the result is int8, as in NumPy
    assert_equal_host(got, np.clip(5, np.array([0, 2, 9], dtype=np.int8), 7))
    assert_equal_host(cf.clip(2.5, 0.0, 1.0), np.asarray(np.clip(2.5, 0.0, 1.0)))


def test_clip_with_nan_bounds_gives_nan_as_numpy(cf, rng):
    """NumPy's clip is minimum(maximum(x, lo), hi): a NaN bound gives NaN there (CuPy's own
    clip keeps x); broadcast per-channel bounds and a bool x promoted by a float bound."""
    hx = rng.uniform(-2, 2, (2, 3, 4)).astype(np.float32)
    hlo = np.array([-1.0, np.nan, -0.5], np.float32).reshape(3, 1)
    hhi = np.array([1.0, 1.0, np.nan], np.float32).reshape(3, 1)
    x, lo, hi = cf.asarray(hx), cf.asarray(hlo), cf.asarray(hhi)
    assert_equal_host(cf.clip(x, lo, hi), np.clip(hx, hlo, hhi))
    assert_equal_host(cf.clip(x, lo, None), np.clip(hx, hlo, None))
    assert_equal_host(cf.clip(x, -1.0, np.nan), np.clip(hx, -1.0, np.nan))
    dst = cf.empty((2, 3, 4), dtype=cf.float64)
    assert cf.clip(x, lo, hi, dst=dst) is dst
    assert_equal_host(dst, np.clip(hx, hlo, hhi).astype(np.float64))
    hb = np.array([True, False])
    assert_equal_host(cf.clip(cf.asarray(hb), False, np.nan), np.clip(hb, False, np.nan))


def test_clip_follows_numpy_where_bounds_cross_or_mix_dtypes(cf, rng):
    """lo > hi gives hi; the three operands share NumPy's clip loop dtype (bool x with a
    float16 bound: float16); a Python int bound past an integer x's range is no bound."""
    hx = rng.uniform(-2, 2, (3, 5)).astype(np.float32)
    hi16 = rng.uniform(-1, 1, (3, 5)).astype(np.float16)
    hb = rng.integers(0, 2, (3, 5)).astype(bool)
    hi8 = rng.integers(-128, 127, (3, 5), dtype=np.int8, endpoint=True)
    x, b, h16, i8 = (cf.asarray(v) for v in (hx, hb, hi16, hi8))
    for got, want in ((cf.clip(x, 1.0, -1.0), np.clip(hx, 1.0, -1.0)),
                      (cf.clip(x[:, ::2], 1.0, -1.0), np.clip(hx[:, ::2], 1.0, -1.0)),
                      (cf.clip(b, 0, h16), np.clip(hb, 0, hi16)),
                      (cf.clip(b[:, ::2], 0, h16[:, ::2]), np.clip(hb[:, ::2], 0, hi16[:, ::2])),
                      (cf.clip(i8, -1000, 5), np.clip(hi8, -1000, 5)),
                      (cf.clip(i8[:, ::2], 3, 1000), np.clip(hi8[:, ::2], 3, 1000))):
        assert_equal_host(got, want)


def test_a_sequence_operand_is_refused_on_every_backend(cf):
    """The GPU refuses host data (the user converts it with asarray), with or without dst,
    and so does the NumPy backend, which would read a list as an array."""
    x = cf.arange(4, dtype=cf.int32)
    d = cf.empty(4, dtype=cf.int64)
    for call in (lambda: cf.add(x, [1, 2, 3, 4], dst=d), lambda: cf.add([1, 2], [3, 4]),
                 lambda: cf.tanh((0.5, 1.0)), lambda: cf.divmod([7, 8], 2)):
        with pytest.raises(cuflow.DstTypeError, match="cuflow.asarray first"):
            call()
    with pytest.raises(cuflow.ArgumentTypeError, match="dtype must name a dtype"):
        cf.sin(cf.ones(4), dst=cf.empty(4), dtype="no such dtype")


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_degrees_and_radians_are_numpys_to_the_last_bit(cf, rng, dtype):
    """NumPy multiplies by 180 / pi (and pi / 180) divided in the dtype, which for float32
    is one unit in the last place below 180 / pi rounded to float32."""
    h = random_array((4096,), dtype, rng, host=True)
    x = cf.asarray(h)
    for name in ("rad2deg", "degrees", "deg2rad", "radians"):
        with np.errstate(all="ignore"):
            want = getattr(np, name)(h)
        np.testing.assert_array_equal(to_host(getattr(cf, name)(x)), want, err_msg=name)


def test_the_division_ufuncs_device_code_compiles():
    """The GPU's floor_divide and divmod loops (``_cupy_ufuncs``), compiled with NVRTC on
    a CPU: every float type and a signed and an unsigned integer type."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="needs cuda-bindings' NVRTC (test extra)")
    from cuflow.core import _cupy_ufuncs, _engine

    body = "".join(
        f"{{ {t} m; q[i] = (double)cf_floordiv_std<{t}>(({t})a[i], ({t})b[i], &m); }}\n"
        for t in ("float", "double")) + "".join(
        f"q[i] += (double)cf_ifloordiv<{t}>(({t})a[i], ({t})b[i]) "
        f"+ (double)cf_imod<{t}>(({t})a[i], ({t})b[i]);\n" for t in ("int", "unsigned char"))
    src = (_cupy_ufuncs._FLOORDIV + 'extern "C" __global__ void k(const double *a, '
           "const double *b, double *q) {\n int i = threadIdx.x;\n" + body + "}\n")
    assert _engine.compile_cubin(src, 90)
