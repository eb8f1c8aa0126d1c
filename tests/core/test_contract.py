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
