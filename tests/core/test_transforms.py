"""Transforms with dst= (core._manipulation and core._general) against NumPy."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

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
        (lambda d: cf.take_along_axis(a, cf.argsort(b, axis=1), 1, dst=d),
         np.take_along_axis(ha, np.argsort(hb, axis=1), 1)),
    ]
    for fn, exp in cases:
        d = cf.full(exp.shape, np.nan, dtype=exp.dtype)
        assert fn(d) is d
        np.testing.assert_allclose(to_host(d), exp, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_accumulating_a_zero_dimensional_array_along_an_axis(cf, name):
    a = cf.asarray(np.array(5.0))
    want = getattr(np, name)(np.array(5.0), axis=0)
    d = cf.full((1,), np.nan)
    assert getattr(cf, name)(a, axis=0, dst=d) is d
    np.testing.assert_array_equal(to_host(d), want)
    with pytest.raises(cuflow.DstShapeError, match=r"\(1,\)"):
        getattr(cf, name)(a, axis=0, dst=cf.empty(()))
    for axis in (-1, None):
        np.testing.assert_array_equal(to_host(getattr(cf, name)(a, axis=axis)),
                                      getattr(np, name)(np.array(5.0), axis=axis))
    with pytest.raises(cuflow.AxisError, match=f"cuflow.{name}: axis 1 .* 0-d"):
        getattr(cf, name)(a, axis=1)


def test_take_along_axis_on_a_stream(cf, rng):
    h = random_array((3, 4), "float32", rng, host=True)
    a, s = cf.asarray(h), cf.Stream()
    r = cf.take_along_axis(a, cf.argsort(a, axis=1, stream=s), stream=s)
    s.synchronize()
    np.testing.assert_array_equal(to_host(r), np.sort(h, axis=1))


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


# ------------------------------------------------- random transforms into dst=
_N = os.environ.get("CUFLOW_FUZZ_EXAMPLES")
_TDTYPES = ["bool", "int8", "uint8", "int32", "float16", "float32", "float64"]
# name -> the call of square n x n inputs a and b and an index array i, on a module m
# (NumPy for the reference; cuflow with dst= among the keywords)
_TRANSFORMS = {
    "transpose": lambda m, a, b, i, **kw: m.transpose(a, **kw),
    "copy": lambda m, a, b, i, **kw: m.copy(a[::-1], **kw),
    "ascontiguousarray": lambda m, a, b, i, **kw: m.ascontiguousarray(a.T, **kw),
    "reshape": lambda m, a, b, i, **kw: m.reshape(a.T, a.shape, **kw),
    "concatenate": lambda m, a, b, i, **kw: m.concatenate([a, b], axis=1, **kw),
    "stack": lambda m, a, b, i, **kw: m.stack([b, a], axis=-1, **kw),
    "matmul": lambda m, a, b, i, **kw: m.matmul(a, b, **kw),
    "dot": lambda m, a, b, i, **kw: m.dot(b, a, **kw),
    "clip": lambda m, a, b, i, **kw: m.clip(a, 0, 100, **kw),
    "cumsum": lambda m, a, b, i, **kw: m.cumsum(a, axis=0, **kw),
    "cumprod": lambda m, a, b, i, **kw: m.cumprod(a, axis=1, **kw),
    "take": lambda m, a, b, i, **kw: m.take(a, i, axis=0, **kw),
    "take_along_axis": lambda m, a, b, i, **kw: m.take_along_axis(
        a, m.argsort(b, axis=1, kind="stable"), axis=1, **kw),
    "where": lambda m, a, b, i, **kw: m.where(a > b, b, a, **kw),
    "around": lambda m, a, b, i, **kw: m.around(a, 1, **kw),
}


@settings(max_examples=int(_N or 150), derandomize=_N is None, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(sorted(_TRANSFORMS)), dtype=st.sampled_from(_TDTYPES),
       n=st.integers(1, 7), dst=st.sampled_from(["new", "strided", "input", "reversed input"]),
       seed=st.integers(0, 2**32 - 1))
def test_transform_into_dst_matches_numpy(cf, name, dtype, n, dst, seed):
    """A transform written into dst= (new, a strided view, or the input itself, as is or
    reversed) leaves dst holding NumPy's result of the inputs as they were, and returns
    dst."""
    rng = np.random.default_rng(seed)
    ha, hb = (random_array((n, n), dtype, rng, host=True) for _ in range(2))
    if name == "cumprod" and ha.dtype.kind == "f":  # magnitudes near 1: no overflow
        with np.errstate(all="ignore"):
            ha = (np.sign(ha) * rng.uniform(0.9, 1.1, ha.shape)).astype(dtype)
    hi = rng.integers(0, n, n)
    call = _TRANSFORMS[name]
    try:
        with np.errstate(all="ignore"):
            want = np.array(call(np, ha, hb, hi))  # a copy: on NumPy, a shares ha's memory
    except TypeError:  # NumPy has no loop for the dtype (bool cumsum into bool is one)
        assume(False)
    if name in ("matmul", "dot", "cumsum", "cumprod") and want.dtype.kind == "f":
        # (float16 sums that overflow in NumPy's float16 stay finite in a float32 accumulator)
        assume(np.isfinite(want).all())
    a, b = cf.asarray(ha), cf.asarray(hb)
    if dst in ("input", "reversed input"):
        assume(want.shape == a.shape and want.dtype == a.dtype)
        out = a if dst == "input" else a[::-1]
    else:
        host = random_array((2 * want.size + 2,), want.dtype, rng, host=True)
        buf = cf.asarray(host.copy())
        written = slice(0, want.size) if dst == "new" else slice(1, 1 + 2 * want.size, 2)
        out = buf[written].reshape(want.shape)
    got = call(cf, a, b, cf.asarray(hi), dst=out)
    assert got is out
    g = to_host(out)
    assert g.dtype == want.dtype and g.shape == want.shape
    if name == "around" and want.dtype.kind == "f":
        # NumPy scales by 10 in the array's dtype, where an inexact product can land on a
        # half (cuflow.around's notes); CuPy scales in higher precision: one unit of the
        # last decimal apart on such values
        np.testing.assert_allclose(g, want, rtol=1e-3, atol=0.1 + 1e-6)
    elif name in ("matmul", "dot", "cumsum", "cumprod") and want.dtype.kind == "f":
        np.testing.assert_allclose(g, want, rtol=2e-2 if want.dtype == np.float16 else 1e-5,
                                   atol=1e-3 * (np.abs(want).max() if want.size else 1),
                                   equal_nan=True)
    else:
        np.testing.assert_array_equal(g, want)
    if dst in ("new", "strided"):  # the buffer's other elements stayed as they were
        kept = np.ones(host.size, bool)
        kept[written] = False
        np.testing.assert_array_equal(to_host(buf)[kept], host[kept])



@pytest.mark.parametrize("dtype", ["bool", "int8", "float16"])
def test_products_of_small_dtypes_with_and_without_dst(cf, rng, dtype):
    """CuPy's dot calls methods of its operands and out (a sum into out for booleans);
    on darrays those are cuflow's, which must not change CuPy's result."""
    small = {"low": -4, "high": 4} if dtype == "float16" else {}  # float16 sums stay finite
    ha, hb = (random_array((3, 3), dtype, rng, host=True, **small) for _ in range(2))
    a, b = cf.asarray(ha), cf.asarray(hb)
    for name in ("dot", "matmul"):
        fn, np_fn = getattr(cf, name), getattr(np, name)
        with np.errstate(all="ignore"):
            cases = [(fn(a, b), np_fn(ha, hb)),
                     (fn(a, b, dst=cf.empty_like(a)), np_fn(ha, hb)),
                     (fn(a[:1, :1], b[:1, :1], dst=cf.empty((1, 1), dtype)),
                      np_fn(ha[:1, :1], hb[:1, :1]))]
        for got, want in cases:
            g = to_host(got)
            assert g.dtype == want.dtype and g.shape == want.shape
            np.testing.assert_allclose(g.astype(np.float64), want.astype(np.float64),
                                       rtol=2e-2 if dtype == "float16" else 0)


@pytest.mark.parametrize("order", ["C", "F", "A"])
def test_reshape_without_a_copy_reads_the_order(cf, rng, order):
    for h in (random_array((3, 4), "float32", rng, host=True),
              np.asfortranarray(random_array((3, 4), "float32", rng, host=True))):
        a = cf.asarray(h)
        try:
            want = np.reshape(h, (4, 3), order=order, copy=False)
        except ValueError:  # NumPy needs a copy: so must cuflow refuse
            with pytest.raises(cuflow.ArgumentError, match="copy=False"):
                cf.reshape(a, (4, 3), order=order, copy=False)
            continue
        v = cf.reshape(a, (4, 3), order=order, copy=False)
        np.testing.assert_array_equal(to_host(v), want)
        v[0, 0] = 7.0  # a view
        assert to_host(a).ravel(order="K")[0] == 7.0
    with pytest.raises(cuflow.ArgumentError, match="cuflow.reshape"):
        cf.reshape(cf.arange(12), (5,), copy=False)
    with pytest.raises(cuflow.ArgumentTypeError, match="list"):
        cf.reshape([1, 2], (2,), copy=False)


@pytest.mark.parametrize("fn", ["flatten", "ravel"])
@pytest.mark.parametrize("order", ["C", "F", "A", "K"])
def test_flatten_into_dst_reads_the_order_of_the_input(cf, rng, fn, order):
    h = np.asfortranarray(random_array((3, 5), "float32", rng, host=True))
    d = cf.full((15,), np.nan, dtype="float64")
    assert getattr(cf, fn)(cf.asarray(h), order=order, dst=d) is d
    np.testing.assert_array_equal(to_host(d), np.ravel(h, order=order))


def test_take_into_a_dst_of_another_dtype(cf, rng):
    h = random_array((3, 4), "int32", rng, host=True)
    d = cf.full((3, 2), np.nan, dtype="float64")
    assert cf.take(cf.asarray(h), [0, 2], axis=1, dst=d) is d
    np.testing.assert_array_equal(to_host(d), np.take(h, [0, 2], axis=1).astype(np.float64))


def test_descending_sort_keeps_equal_values_in_order(cf):
    h = np.array([0.0, -0.0, 1.0, -0.0, 0.0], np.float32)
    got = to_host(cf.sort(cf.asarray(h), descending=True))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(h[[2, 0, 1, 3, 4]]))
    np.testing.assert_array_equal(to_host(cf.sort(cf.asarray(h), axis=None, descending=True)),
                                  got)


def test_transpose_axes_name_every_axis_once(cf, rng):
    h = random_array((2, 3, 4), "float32", rng, host=True)
    a = cf.asarray(h)
    for axes in ([], (), (1, 0), (0, 1, 2, 0)):  # (CuPy would read () as no axes given)
        with pytest.raises(cuflow.ArgumentError, match="axes must name each of the 3 axes"):
            cf.transpose(a, axes)
    np.testing.assert_array_equal(to_host(cf.transpose(a, (2, 0, 1))), h.transpose(2, 0, 1))
    assert cf.transpose(cf.asarray(np.float32(2.5)), ()).shape == ()


@pytest.mark.parametrize("descending", [False, True])
def test_sort_and_argsort_write_into_dst(cf, rng, descending):
    h = random_array((5, 7), "float32", rng, host=True)
    a = cf.asarray(h)
    want = -np.sort(-h, axis=1) if descending else np.sort(h, axis=1)
    d = cf.full((5, 7), np.nan, dtype="float64")  # (a dtype the result casts to)
    assert cf.sort(a, axis=1, descending=descending, dst=d) is d
    np.testing.assert_array_equal(to_host(d), want.astype(np.float64))
    i = cf.full((5, 7), -1, dtype="int64")
    assert cf.argsort(a, axis=1, descending=descending, dst=i) is i
    np.testing.assert_array_equal(np.take_along_axis(h, to_host(i), 1), want)
    flat = cf.empty((35,), dtype="float32")
    assert cf.sort(a, axis=None, descending=descending, dst=flat) is flat
    np.testing.assert_array_equal(
        to_host(flat), -np.sort(-h.ravel()) if descending else np.sort(h.ravel()))
    with pytest.raises(cuflow.DstShapeError, match=r"cuflow.sort: dst.shape must equal the "
                                                   r"result shape \(5, 7\)"):
        cf.sort(a, dst=cf.empty((7, 5), dtype="float32"))
    with pytest.raises(cuflow.DstDtypeError):
        cf.argsort(a, dst=cf.empty((5, 7), dtype="bool"))
    with pytest.raises(cuflow.DstTypeError):
        cf.sort(a, dst=3)


def test_reductions_of_a_zero_dimensional_array_along_an_axis(cf):
    a = cf.asarray(np.array(5.0))
    for name in ("sum", "prod", "max", "min", "mean", "argmax", "any", "all"):
        want = np.asarray(getattr(np, name)(np.array(5.0)))
        d = cf.empty((), dtype=want.dtype)
        for axis in (0, -1, (0,), ()):
            assert getattr(cf, name)(a, axis=axis, dst=d) is d
            np.testing.assert_array_equal(to_host(d), want)
            assert getattr(cf, name)(a, axis=axis, keepdims=True).shape == ()
        with pytest.raises(cuflow.AxisError, match=f"cuflow.{name}: axis 1 .* 0-d"):
            getattr(cf, name)(a, axis=(0, 1))


def test_a_read_only_dst_is_a_dst_error(cf):
    if cf.get_backend().is_gpu:
        pytest.skip("CuPy arrays cannot be made read-only")
    d = cf.zeros(4)
    d.flags.writeable = False
    for call in (lambda: cf.add(cf.ones(4), 1, dst=d), lambda: cf.sum(cf.ones((3, 4)), 0, dst=d),
                 lambda: cf.copy(cf.ones(4), dst=d)):
        with pytest.raises(cuflow.DstError, match="writable"):
            call()


def test_a_join_whose_inputs_do_not_cast_to_its_dtype_blames_the_dtype(cf):
    d = cf.empty(4, dtype="int64")
    for call in (lambda: cf.concatenate([cf.ones(2), cf.arange(2)], dtype="int64", dst=d),
                 lambda: cf.concatenate([cf.ones(2), cf.arange(2)], dtype="int64")):
        with pytest.raises(cuflow.ArgumentTypeError, match="cuflow.concatenate") as e:
            call()
        assert not isinstance(e.value, cuflow.DstDtypeError)


@pytest.mark.parametrize("name", ["concatenate", "stack"])
def test_a_join_takes_arrays_of_the_backend_only(cf, rng, name):
    """NumPy's join makes an object or text array of a sequence among the inputs; CuPy's
    refuses it: cuflow refuses it on every backend, with or without dst."""
    a = cf.asarray(rng.integers(0, 256, 3))
    for other in ((object(), 3.5e38, float("nan")), ("a", "b", "c"), [1.5, 2.0, 3.0]):
        for kw in ({}, {"dst": cf.empty(6 if name == "concatenate" else (2, 3))}):
            with pytest.raises(TypeError, match=rf"cuflow\.{name}: inputs must be arrays") as e:
                getattr(cf, name)([a, other], **kw)
            assert isinstance(e.value, cuflow.CuflowError)


def test_two_output_ufuncs_check_each_dst_dtype(cf, rng):
    a = cf.asarray(random_array((4,), "float32", rng, host=True))
    i4 = cf.empty(4, dtype="int32")
    with pytest.raises(cuflow.DstDtypeError, match="cuflow.divmod"):
        cf.divmod(a, a, dst=(i4, cf.empty(4, dtype="int32")))
    with pytest.raises(cuflow.DstDtypeError, match="cuflow.frexp"):
        cf.frexp(a, dst=(cf.empty(4, dtype="float32"), cf.empty(4, dtype="bool")))
    m, e = cf.empty(4, dtype="float64"), cf.empty(4, dtype="int64")  # wider: same_kind
    assert cf.frexp(a, dst=(m, e)) == (m, e)
    hm, he = np.frexp(to_host(a))
    np.testing.assert_array_equal(to_host(m), hm)
    np.testing.assert_array_equal(to_host(e), he)
    with pytest.raises(cuflow.DstError, match=r"pair of arrays, got an array of shape \(4,\)"):
        cf.divmod(a, a, dst=cf.empty(4))


def test_inputs_that_do_not_broadcast_are_the_inputs_fault(cf):
    for call in (lambda: cf.add(cf.ones(4), cf.ones(3), dst=cf.empty(4)),
                 lambda: cf.add(cf.ones(4), cf.ones(3))):
        with pytest.raises(cuflow.ArgumentError, match="broadcast"):
            call()


def test_where_of_one_argument_takes_no_dst(cf):
    with pytest.raises(cuflow.ArgumentError, match="cuflow.where: the one-argument form"):
        cf.where(cf.asarray([True, False]), dst=cf.zeros(2))


# ---------------------------------------------------------------- stream= of the views
def test_views_and_their_copies_take_stream(cf, rng):
    """reshape, transpose and ravel give the same results with stream=, a view where they
    give one without it, and a copy queued on the stream otherwise."""
    h = random_array((6, 8), "float32", rng, host=True)
    a = cf.asarray(h)
    d1, d2, d3 = (cf.full(shape, np.nan) for shape in ((48,), (8, 6), (48,)))
    s = cf.Stream()
    s.wait_stream(cf.current_stream())  # (a and the dsts were written there)
    shares = cf.get_backend().xp.shares_memory
    cases = [
        (lambda: cf.reshape(a, (8, 6), stream=s), h.reshape(8, 6), True),
        (lambda: cf.reshape(a.T, (-1,), stream=s), h.T.reshape(-1), False),
        (lambda: cf.reshape(a, (8, 6), copy=True, stream=s), h.reshape(8, 6), False),
        (lambda: cf.reshape(a.T, (48,), dst=d1, stream=s), h.T.ravel(), False),
        (lambda: cf.transpose(a, stream=s), h.T, True),
        (lambda: cf.transpose(a, dst=d2, stream=s), h.T, False),
        (lambda: cf.ravel(a, stream=s), h.ravel(), True),
        (lambda: cf.ravel(a.T, stream=s), h.T.ravel(), False),
        (lambda: cf.ravel(a, "F", dst=d3, stream=s), h.ravel("F"), False),
    ]
    for i, (call, want, view) in enumerate(cases):
        got = call()
        s.synchronize()
        np.testing.assert_array_equal(to_host(got), want, err_msg=f"case {i}")
        assert bool(shares(got, a)) == view, f"case {i}: a view is {view}"


@pytest.mark.parametrize("name, call", [
    ("reshape", lambda cf, a, v: cf.reshape(a, (-1,), stream=v)),
    ("transpose", lambda cf, a, v: cf.transpose(a, stream=v)),
    ("ravel", lambda cf, a, v: cf.ravel(a, stream=v)),
    ("flatten", lambda cf, a, v: cf.flatten(a, stream=v)),
    ("take", lambda cf, a, v: cf.take(a, [0], stream=v)),
    ("concatenate", lambda cf, a, v: cf.concatenate([a, a], stream=v)),
])
def test_a_bad_stream_is_refused_by_name(cf, name, call):
    a = cf.ones((2, 3))
    with pytest.raises(cuflow.ArgumentTypeError,
                       match=rf"cuflow\.{name}: stream= must be .* got int 123$"):
        call(cf, a, 123)


# name -> (the op on a, into d, on stream s; its result from the host copy h; d's shape)
_COPIES_ON_A_STREAM = {
    "reshape-needs-copy": (lambda cf, a, d, s: cf.reshape(a.T, (-1,), stream=s),
                           lambda h: h.T.reshape(-1), None),
    "reshape-copy": (lambda cf, a, d, s: cf.reshape(a, (-1,), copy=True, stream=s),
                     lambda h: h.reshape(-1), None),
    "reshape-dst": (lambda cf, a, d, s: cf.reshape(a.T, (-1,), dst=d, stream=s),
                    lambda h: h.T.reshape(-1), lambda h: (h.size,)),
    "transpose-dst": (lambda cf, a, d, s: cf.transpose(a, dst=d, stream=s),
                      lambda h: h.T, lambda h: h.shape[::-1]),
    "ravel-copy": (lambda cf, a, d, s: cf.ravel(a.T, stream=s), lambda h: h.T.ravel(), None),
}


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(_COPIES_ON_A_STREAM))
def test_the_copies_run_on_the_stream_given(gpu_cf, rng, case, spin):
    """With the current stream held busy, the op's result read on its own stream is right:
    a copy queued on the current stream instead would not have run yet (the result would
    hold dst's NaN, or whatever the memory the pool handed out held)."""
    import cupy

    cf = gpu_cf
    op, ref, dst_shape = _COPIES_ON_A_STREAM[case]
    s = cf.Stream()
    for _ in range(2):  # the first run compiles (longer than the spin on a fresh machine)
        h = random_array((192, 256), "float32", rng, host=True)
        a = cf.asarray(h)
        d = None if dst_shape is None else cf.full(dst_shape(h), np.nan, dtype=cf.float32)
        cf.synchronize()
        busy = cupy.cuda.Stream(non_blocking=True)
        spin(busy)
        with busy:  # the current stream, with earlier work queued
            r = op(cf, a, d, s)
            with s:
                got = cf.asnumpy(r, stream=s)
            running = not busy.done
        busy.synchronize()
        np.testing.assert_array_equal(got, ref(h))
    assert running, "the current stream finished first: the test would prove nothing"
