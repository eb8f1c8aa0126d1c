"""cuflow.image and the output contract: dst= checks and the dst dtype rule."""

from __future__ import annotations

import numpy as np
import pytest

import cuflow
from cuflow import image
from cuflow.testing import to_host
from image_helpers import poisoned, u8_frames


def test_dst_contract(cf, rng):
    x = cf.asarray(u8_frames(rng, (2, 5, 6, 3)))
    with pytest.raises(cuflow.DstShapeError, match=r"\(2, 3, 5, 6\)"):
        image.normalize(x, dst=cf.empty((2, 5, 6, 3), dtype="float32"))
    with pytest.raises(cuflow.DstDtypeError, match="float16"):
        image.normalize(x, dtype="float16", dst=cf.empty((2, 3, 5, 6), dtype="float32"))
    with pytest.raises(cuflow.DstError, match="C-contiguous"):
        image.normalize(x, dst=cf.empty((2, 6, 5, 3), dtype="float32").transpose(0, 3, 2, 1))
    with pytest.raises(cuflow.DstError, match="overlaps an input"):
        image.cvt_color(x, "RGB", "BGR", dst=x)
    d = cf.empty((2, 3, 5, 6), dtype="float32")
    assert image.normalize(x, dst=d) is d


@pytest.mark.parametrize("dtype", ["float16", "uint8", "float32"])
def test_dst_dtype_decides_the_output_dtype_when_dtype_is_not_given(cf, rng, dtype):
    x = u8_frames(rng, (2, 12, 16, 3))
    d = cf.asarray(x)
    boxes = cf.asarray(np.array([[0, 0, 16, 12], [2, 1, 10, 9]], np.float32))
    kw = dict(mean=(10, 20, 30), std=(2, 3, 4), scale=1.0)
    calls = {
        "normalize": (lambda **k: image.normalize(d, **k), (2, 3, 12, 16)),
        "resize_normalize": (lambda **k: image.resize_normalize(d, (6, 8), **k), (2, 3, 6, 8)),
        "letterbox": (lambda **k: image.letterbox(d, (6, 8), **k)[0], (2, 3, 6, 8)),
        "crop_resize": (lambda **k: image.crop_resize(d, boxes, (6, 8), **k), (2, 3, 6, 8)),
    }
    for name, (fn, shape) in calls.items():
        dst = poisoned(cf, shape, dtype)
        got = fn(dst=dst, **kw)
        assert got is dst, name
        want = fn(dtype=dtype, **kw)  # the same call with the dtype named
        assert to_host(got).dtype == np.dtype(dtype), name
        np.testing.assert_array_equal(to_host(got), to_host(want), err_msg=name)


def test_a_dst_dtype_the_kernels_cannot_write_is_refused_by_the_contract(cf, rng):
    x = cf.asarray(u8_frames(rng, (2, 5, 6, 3)))
    with pytest.raises(cuflow.DstDtypeError, match="float32"):
        image.normalize(x, dst=cf.empty((2, 3, 5, 6), dtype="float64"))


def test_a_read_only_dst_is_refused(cf, rng):
    # the output contract's DstError, checked before the reference writes part of it
    if cf.get_backend().is_gpu:
        pytest.skip("CuPy arrays cannot be made read-only")
    x = cf.asarray(u8_frames(rng, (2, 5, 6, 3)))
    boxes = np.array([[0, 0, 6, 5]], np.float32)
    calls = {
        "normalize": (lambda d: image.normalize(x, dst=d), (2, 3, 5, 6), "float32"),
        "resize": (lambda d: image.resize(x, (4, 4), dst=d), (2, 4, 4, 3), "uint8"),
        "cvt_color": (lambda d: image.cvt_color(x, "RGB", "BGR", dst=d), (2, 5, 6, 3), "uint8"),
        "letterbox": (lambda d: image.letterbox(x, 4, dst=d), (2, 3, 4, 4), "float32"),
        "crop_resize": (lambda d: image.crop_resize(x, boxes, 4, dst=d), (1, 3, 4, 4),
                        "float32"),
        "denormalize": (lambda d: image.denormalize(image.normalize(x), dst=d), (2, 5, 6, 3),
                        "uint8"),
    }
    for name, (call, shape, dtype) in calls.items():
        d = cf.zeros(shape, dtype=dtype)
        d.flags.writeable = False
        with pytest.raises(cuflow.DstError, match="writable") as e:
            call(d)
        assert f"image.{name}" in str(e.value)
