"""The dst= contract: every error path, before any launch, and property-based checks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuflow
from cuflow.testing import to_host


def test_wrong_shape_is_never_broadcast(cf):
    a, b = cf.ones((4, 5)), cf.ones((4, 5))
    dst = cf.full((2, 4, 5), 9.0)
    with pytest.raises(cuflow.DstShapeError, match=r"result shape \(4, 5\).*dst.shape=\(2, 4, 5\)"):
        cf.add(a, b, dst=dst)
    assert (to_host(dst) == 9).all()  # nothing was written
    with pytest.raises(ValueError):  # also a ValueError
        cf.add(a, b, dst=cf.empty((5, 4)))


def test_wrong_dtype_same_kind(cf):
    a = cf.ones((3,), dtype="float64")
    dst = cf.full((3,), 7, dtype="int32")
    with pytest.raises(cuflow.DstDtypeError) as ei:
        cf.add(a, a, dst=dst)
    assert isinstance(ei.value, TypeError) and "int32" in str(ei.value)
    assert (to_host(dst) == 7).all()
    cf.add(a, a, dst=dst, casting="unsafe")
    assert (to_host(dst) == 2).all()


def test_wrong_array_type(cf):
    a = cf.ones((3,))
    with pytest.raises(cuflow.DstTypeError, match="dst must be an array of the active"):
        cf.add(a, a, dst=[0, 0, 0])
    if cf.get_backend().name == "cupy":
        with pytest.raises(cuflow.DstTypeError, match="numpy.ndarray"):
            cf.add(a, a, dst=np.zeros(3))


def test_dst_and_out_both_given(cf):
    a = cf.ones((3,))
    with pytest.raises(cuflow.DstError, match="both dst= and out="):
        cf.add(a, a, dst=a, out=a)
    with pytest.raises(cuflow.DstError, match="both dst= and out="):
        cf.sum(a, dst=a[0], out=a[0])


def test_reduction_dst_errors(cf):
    a = cf.ones((3, 4))
    with pytest.raises(cuflow.DstShapeError, match=r"\(4,\)"):
        cf.sum(a, axis=0, dst=cf.empty((3,)))
    with pytest.raises(cuflow.DstDtypeError):
        cf.mean(a, axis=0, dst=cf.empty((4,), dtype="int64"))
    with pytest.raises(cuflow.ArgumentIndexError):  # an IndexError, as NumPy's AxisError
        cf.sum(a, axis=2, dst=cf.empty((3,)))


def test_transform_dst_errors(cf):
    a = cf.ones((3, 4), dtype="float32")
    with pytest.raises(cuflow.DstShapeError):
        a.copy(dst=cf.empty((4, 3), dtype="float32"))
    with pytest.raises(cuflow.DstDtypeError, match="dst.dtype must be float16"):
        a.astype("float16", dst=cf.empty((3, 4), dtype="float32"))
    with pytest.raises(cuflow.DstShapeError):
        cf.concatenate([a, a], dst=cf.empty((6, 5), dtype="float32"))
    with pytest.raises(cuflow.DstShapeError):
        cf.matmul(a, a.T, dst=cf.empty((4, 4), dtype="float32"))


def test_input_of_wrong_backend_is_a_clear_error(cf):
    if cf.get_backend().name != "cupy":
        pytest.skip("on the NumPy backend host arrays are the backend's arrays")
    with pytest.raises(cuflow.DstTypeError, match="cuflow.asarray"):
        cf.add(np.ones(3), cf.ones(3))


_DT = st.sampled_from(["bool", "int8", "int32", "uint8", "float16", "float32", "float64", "complex64"])
_SHAPE = st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sa=_SHAPE, sb=_SHAPE, sd=_SHAPE, da=_DT, db=_DT, dd=_DT,
       casting=st.sampled_from(["no", "safe", "same_kind", "unsafe"]))
def test_add_dst_validation_property(cf, sa, sb, sd, da, db, dd, casting):
    """cuflow raises exactly when NumPy's rules (plus 'never broadcast dst') say so."""
    rng = np.random.default_rng(0)
    ha = (rng.standard_normal(sa) * 10).astype(da)
    hb = (rng.standard_normal(sb) * 10).astype(db)
    a, b = cf.asarray(ha), cf.asarray(hb)
    dst = cf.full(sd, True if dd == "bool" else 3, dtype=dd)  # (a bool takes no 3)
    try:
        rshape = np.broadcast_shapes(sa, sb)
    except ValueError:
        rshape = None
    with np.errstate(all="ignore"):
        try:
            expected = np.add(ha, hb, casting=casting) if rshape is not None else None
        except TypeError:
            expected = None
    if rshape is None or rshape != sd:  # (inputs that do not broadcast: their own fault)
        with pytest.raises(cuflow.DstShapeError if rshape is not None else cuflow.ArgumentError):
            cf.add(a, b, dst=dst, casting=casting)
        assert (to_host(dst) == np.asarray(3).astype(dd)).all()
        return
    can = expected is not None and np.can_cast(expected.dtype, np.dtype(dd), casting)
    if not can:
        with pytest.raises(cuflow.DstDtypeError):
            cf.add(a, b, dst=dst, casting=casting)
        return
    with np.errstate(all="ignore"):
        assert cf.add(a, b, dst=dst, casting=casting) is dst
        want = expected.astype(dd)
    got = to_host(dst)
    if expected.dtype.kind in "fc" and np.dtype(dd).kind in "iu":
        # A float that does not fit the integer type has no defined conversion
        # (C/CUDA leave it undefined: x86 NumPy wraps -4.0 to 252, the GPU
        # saturates to 0), so only representable values are compared.
        info = np.iinfo(dd)
        real = expected.real
        ok = np.isfinite(real) & (real > info.min - 1) & (real < info.max + 1)
        got, want = got[ok], want[ok]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["U8", "S8", object, "V8", "m8[s]"])
def test_a_dst_that_holds_no_numbers_is_refused(cf, rng, dtype):
    """A host array of text, bytes, objects or time is no dst on any backend (NumPy would
    write float64 results into it as text)."""
    a = cf.asarray(rng.standard_normal((2, 3)))
    for call in (lambda d: cf.add(a, a, dst=d), lambda d: cf.sum(a, axis=0, dst=d[0]),
                 lambda d: cf.copy(a, dst=d), lambda d: cf.concatenate([a[:1], a[1:]], dst=d)):
        # (on the GPU a host array is no dst at all: DstTypeError)
        with pytest.raises((cuflow.DstDtypeError, cuflow.DstTypeError)):
            call(np.empty((2, 3), dtype=dtype))


@pytest.mark.parametrize("dtype", ["U8", object, "V8"])
def test_a_dtype_that_holds_no_numbers_is_refused(cf, rng, dtype):
    a = cf.asarray(rng.standard_normal((2, 3)))
    for call in (lambda: cf.astype(a, dtype), lambda: a.astype(dtype),
                 lambda: cf.sum(a, dtype=dtype), lambda: a.sum(dtype=dtype),
                 lambda: cf.concatenate([a, a], dtype=dtype)):
        with pytest.raises(cuflow.ArgumentTypeError, match="integer, real or complex"):
            call()


def test_join_with_a_dtype_into_dst(cf, rng):
    """dtype= and dst= together: the inputs are cast to dtype, the result written to dst."""
    h = rng.standard_normal((2, 3))
    a = cf.asarray(h)
    for fn, np_fn, shape in ((cf.concatenate, np.concatenate, (4, 3)),
                             (cf.stack, np.stack, (2, 2, 3))):
        for dt in ("float32", "float64"):
            d = cf.empty(shape, dtype="float64")
            assert fn([a, a], dst=d, dtype=dt) is d
            np.testing.assert_array_equal(to_host(d), np_fn([h, h], dtype=dt).astype("float64"))


@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
def test_a_spread_in_an_integer_dtype_is_refused(cf, rng, dtype):
    """var and std are computed in floating point; NumPy would truncate the result."""
    a = cf.asarray(rng.integers(-1000, 1000, 16))
    for call in (lambda: cf.std(a, dtype=dtype), lambda: cf.var(a, dtype=dtype, dst=cf.empty(())),
                 lambda: a.std(dtype=dtype)):
        with pytest.raises(cuflow.ArgumentTypeError, match="floating dtype"):
            call()
    assert float(to_host(cf.std(a, dtype="float64"))) == pytest.approx(np.std(to_host(a)))


def test_inputs_that_are_not_arrays_are_refused_where_an_array_is_copied(cf):
    d3 = cf.empty(3)
    for call in (lambda: cf.flatten([1.0, 2.0, 3.0], dst=d3), lambda: cf.ravel([1.0, 2.0, 3.0], dst=d3),
                 lambda: cf.ascontiguousarray([1.0, 2.0, 3.0], dst=d3),
                 lambda: cf.copy([1.0, 2.0, 3.0], d3), lambda: cf.take_along_axis([1.0, 2.0], [0])):
        with pytest.raises(cuflow.DstTypeError, match="cuflow.asarray first"):
            call()


def test_a_host_out_must_be_writable_and_the_order_a_letter(cf, rng):
    a = cf.asarray(rng.standard_normal(3))
    ro = np.zeros(3)
    ro.flags.writeable = False
    for call in (lambda: cf.asnumpy(a, out=ro), lambda: a.get(out=ro)):
        with pytest.raises(cuflow.DstError, match="writable"):
            call()
    assert not ro.any()
    for order in ("X", "K"):  # (CuPy's get takes C, F and A)
        with pytest.raises(cuflow.ArgumentError, match="order must be one of"):
            cf.asnumpy(a, order=order)


def test_reshape_needs_a_shape(cf):
    with pytest.raises(cuflow.ArgumentTypeError, match="shape is required"):
        cf.reshape(cf.ones(6))


@pytest.mark.parametrize("value", [300, -1])
def test_where_refuses_a_python_int_its_integer_operand_cannot_hold(cf, value):
    """As every other op does (NumPy's where would wrap 300 to 44)."""
    c = cf.asarray(np.array([True, False, True]))
    u = cf.asarray(np.array([1, 2, 3], np.uint8))
    for call in (lambda: cf.where(c, u, value), lambda: cf.where(c, value, u),
                 lambda: cf.where(c, np.uint8(5), value),
                 lambda: cf.where(c, u, value, dst=cf.empty(3, dtype=cf.uint8))):
        with pytest.raises(cuflow.ArgumentOverflowError, match=str(value)):
            call()
    assert to_host(cf.where(c, u, 255)).tolist() == [1, 255, 3]
