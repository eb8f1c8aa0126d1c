"""cuflow.linalg's own functions (cuflow/core/_linalg.py): the array API's ``outer`` and
``cross``, which refuse what the backend's top-level functions of those names take."""

from __future__ import annotations

import numpy as np
import pytest

import cuflow
from cuflow.testing import random_array, to_host

DTYPES = (np.int8, np.int32, np.int64, np.uint8, np.float32, np.float64, np.complex64)


def _close(got, want):
    """Integers exactly (their products wrap alike everywhere); floats to a tolerance of the
    operands' scale (the GPU may fuse a multiply and a subtract)."""
    got = to_host(got)
    assert isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)
    else:
        scale = float(np.abs(want).max(initial=1))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("m", "n"), [(1, 1), (5, 7), (0, 3), (64, 33)])
def test_outer_of_1d_arrays(cf, rng, dtype, m, n):
    x1, x2 = random_array((m,), dtype, rng), random_array((n,), dtype, rng)
    got = cf.linalg.outer(x1, x2)
    assert isinstance(got, cf.darray)
    np.testing.assert_array_equal(to_host(got), np.linalg.outer(to_host(x1), to_host(x2)))


@pytest.mark.parametrize(("s1", "s2", "bad"), [
    ((2, 3), (4,), "x1"), ((4,), (2, 3), "x2"), ((), (4,), "x1"), ((4,), (), "x2"),
    ((1, 1, 4), (4,), "x1")])
def test_outer_refuses_arrays_that_are_not_1d(cf, rng, s1, s2, bad):
    """The backend's top-level outer flattens them; the array API's takes 1-D arrays."""
    x1, x2 = random_array(s1, np.float32, rng), random_array(s2, np.float32, rng)
    shape = s1 if bad == "x1" else s2
    with pytest.raises(cf.ArgumentError) as e:
        cf.linalg.outer(x1, x2)
    assert str(e.value) == (f"cuflow.linalg.outer: {bad} must be a 1-D array, got an array "
                            f"of shape {shape}")
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize("other", [2.0, [1.0, 2.0], np.float32(3)])
def test_outer_refuses_what_is_not_an_array(cf, rng, other):
    x = random_array((3,), np.float32, rng)
    for args in ((x, other), (other, x)):
        with pytest.raises(cf.DstTypeError, match=r"cuflow\.linalg\.outer: inputs must be arrays"):
            cf.linalg.outer(*args)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("s1", "s2", "axis"), [
    ((3,), (3,), -1), ((5, 3), (5, 3), -1), ((4, 3), (2, 1, 3), -1), ((1, 3), (6, 3), -1),
    ((3, 4), (3, 4), 0), ((3, 4), (3, 4), -2), ((2, 3, 5), (3, 1), -2), ((0, 3), (1, 3), -1),
    ((2, 3, 5), (2, 3, 5), 1)])
def test_cross_of_3_element_vectors_broadcasts_the_other_axes(cf, rng, dtype, s1, s2, axis):
    x1, x2 = random_array(s1, dtype, rng), random_array(s2, dtype, rng)
    got = cf.linalg.cross(x1, x2, axis=axis)
    assert isinstance(got, cf.darray)
    _close(got, np.linalg.cross(to_host(x1), to_host(x2), axis=axis))


@pytest.mark.parametrize(("s1", "s2", "axis", "words"), [
    ((2,), (2,), -1, "x1.shape[-1] must be 3 (3-element vectors along axis=-1), got an array "
                     "of shape (2,)"),
    ((3,), (2,), -1, "x2.shape[-1] must be 3 (3-element vectors along axis=-1), got an array "
                     "of shape (2,)"),
    ((4, 2), (4, 3), -1, "x1.shape[-1] must be 3"),
    ((3, 4), (3, 4), -1, "x1.shape[-1] must be 3"),
    ((2, 3, 4), (2, 3, 4), 0, "x1.shape[0] must be 3 (3-element vectors along axis=0)"),
    ((4, 3), (2, 3), -1, "the axes of x1 and x2 other than axis=-1 must broadcast together, "
                         "got shapes (4, 3) and (2, 3)"),
    ((3, 4), (3, 5), -2, "other than axis=-2 must broadcast together"),
])
def test_cross_refuses_other_vectors_and_axes_that_do_not_broadcast(cf, rng, s1, s2, axis,
                                                                   words):
    """NumPy's top-level cross also takes 2-element vectors; the array API's needs 3."""
    x1, x2 = random_array(s1, np.float64, rng), random_array(s2, np.float64, rng)
    with pytest.raises(cf.ArgumentError) as e:
        cf.linalg.cross(x1, x2, axis=axis)
    assert str(e.value).startswith("cuflow.linalg.cross: ") and words in str(e.value)
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize(("s1", "s2", "axis", "words"), [
    ((3,), (3,), 1, "axis must be in [-1, -1] for arrays of 1 and 1 dimensions (or [0, 1) as "
                    "both have 1), got 1"),
    ((3,), (3,), -2, "got -2"),
    ((3,), (2, 3), 0, "axis must be in [-1, -1] for arrays of 1 and 2 dimensions, got 0"),
    ((), (3,), -1, "x1 and x2 must have an axis of 3-element vectors, got shapes () and (3,)"),
])
def test_cross_refuses_an_axis_out_of_range(cf, rng, s1, s2, axis, words):
    """A non-negative axis names the same axis of both inputs only where they have as many
    dimensions."""
    x1, x2 = random_array(s1, np.float32, rng), random_array(s2, np.float32, rng)
    with pytest.raises(cf.AxisError) as e:
        cf.linalg.cross(x1, x2, axis=axis)
    assert words in str(e.value) and isinstance(e.value, ValueError)


@pytest.mark.parametrize("axis", [True, 1.0, None, (0,)])
def test_cross_refuses_an_axis_that_is_not_an_int(cf, rng, axis):
    x = random_array((3,), np.float32, rng)
    with pytest.raises(cf.ArgumentTypeError, match=r"cuflow\.linalg\.cross: axis must be an int"):
        cf.linalg.cross(x, x, axis=axis)


def test_the_top_level_functions_keep_numpys_forms(cf, rng):
    """``cuflow.outer`` and ``cuflow.cross`` stay the backend's (flattening, 2-element
    vectors): only the ``linalg`` versions are the array API's."""
    x = random_array((2, 3), np.float64, rng)
    assert cf.outer(x, x).shape == (6, 6)
    v = random_array((3,), np.int64, rng, low=-1000, high=1000)
    np.testing.assert_array_equal(to_host(cf.cross(v, v[::-1])),
                                  np.cross(to_host(v), to_host(v)[::-1]))


def test_outer_and_cross_write_into_dst_on_a_stream(cf, rng):
    h1, h2 = (random_array((n,), "float32", rng, host=True) for n in (3, 5))
    d = cf.full((3, 5), np.nan, dtype="float64")  # (a dtype the product casts to)
    s = cf.Stream()
    assert cf.linalg.outer(cf.asarray(h1), cf.asarray(h2), dst=d, stream=s) is d
    s.synchronize()
    np.testing.assert_array_equal(to_host(d), np.outer(h1, h2).astype(np.float64))
    v1, v2 = (random_array((4, 3), "float64", rng, host=True) for _ in range(2))
    e = cf.empty((4, 3), dtype="float64")
    assert cf.linalg.cross(cf.asarray(v1), cf.asarray(v2), dst=e, stream=s) is e
    s.synchronize()
    _close(e, np.cross(v1, v2))
    with pytest.raises(cuflow.DstShapeError, match=r"linalg.outer: dst.shape must equal the "
                                                   r"result shape \(3, 5\)"):
        cf.linalg.outer(cf.asarray(h1), cf.asarray(h2), dst=cf.empty((5, 3)))
    with pytest.raises(cuflow.DstDtypeError):
        cf.linalg.cross(cf.asarray(v1), cf.asarray(v2), dst=cf.empty((4, 3), dtype="int32"))
