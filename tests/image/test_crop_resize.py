"""cuflow.image.crop_resize: boxes, frame indices and the GPU against the reference."""

from __future__ import annotations

import numpy as np
import pytest

from cuflow import image
from cuflow.testing import to_host
from image_helpers import MEAN, STD, close, on_numpy, poisoned, u8_frames


def test_crop_resize_boxes_andframes(cf, rng):
    x = u8_frames(rng, (3, 12, 16, 3))
    boxes = np.array([[0, 0, 16, 12], [4, 2, 8, 6], [-4, -4, 4, 4]], np.float32)
    fidx = np.array([2, 0, 1], np.int32)
    out = image.crop_resize(cf.asarray(x), cf.asarray(boxes), (6, 8), frame_index=cf.asarray(fidx),
                            scale=1.0, layout="NHWC", dst=poisoned(cf, (3, 6, 8, 3), "float32"))
    o = to_host(out)
    full = x[2].astype(np.float32).reshape(6, 2, 8, 2, 3).mean(axis=(1, 3))
    close(o[0], full, "float32", dict(scale=1.0))  # whole frame halved = 2x2 mean
    # a 4x4 box to 6x8 samples inside it only
    assert o[1].min() >= x[0, 2:6, 4:8].min() - 1e-3 and o[1].max() <= x[0, 2:6, 4:8].max() + 1e-3
    # a box that leaves the frame repeats the border: its top-left quarter is pixel (0, 0)
    np.testing.assert_allclose(o[2, :3, :4], np.broadcast_to(x[1, 0, 0], (3, 4, 3)), atol=1e-3)
    # boxes from an unbatched frame; single box still gives a batch
    one = image.crop_resize(cf.asarray(x[0]), cf.asarray(boxes[:1]), 4)
    assert one.shape == (1, 3, 4, 4)



@pytest.mark.gpu
@pytest.mark.parametrize("interpolation", ["bilinear", "nearest", "area"])
def test_crop_resize_matches_reference(gpu_cf, rng, interpolation):
    x = u8_frames(rng, (4, 50, 70, 3))
    k = 9
    xy = rng.uniform(-10, 60, (k, 2))
    wh = rng.uniform(1, 50, (k, 2))
    boxes = np.concatenate([xy, xy + wh], 1).astype(np.float32)
    fidx = rng.integers(0, 4, k).astype(np.int32)
    kw = dict(mean=MEAN, std=STD, interpolation=interpolation)
    got = image.crop_resize(gpu_cf.asarray(x), gpu_cf.asarray(boxes), (13, 11),
                            frame_index=gpu_cf.asarray(fidx), **kw)
    want = on_numpy(image.crop_resize, x, boxes, (13, 11), frame_index=fidx, **kw)
    close(got, want, "float32", kw)



@pytest.mark.gpu
def test_crop_resize_nv12_matches_reference(gpu_cf, rng):
    # boxes from 4x down to upscaled, partly outside the frame, on cf_resize_nv12 (an even
    # output width): each box's warps share their words or not
    x = u8_frames(rng, (3, 72, 64))  # NV12, 48 x 64
    k = 9
    xy = rng.uniform(-10, 50, (k, 2))
    wh = rng.uniform(1, 60, (k, 2))
    boxes = np.concatenate([xy, xy + wh], 1).astype(np.float32)
    fidx = rng.integers(0, 3, k).astype(np.int32)
    kw = dict(mean=MEAN, std=STD, src_format="NV12")
    got = image.crop_resize(gpu_cf.asarray(x), gpu_cf.asarray(boxes), (13, 12),
                            frame_index=gpu_cf.asarray(fidx),
                            dst=poisoned(gpu_cf, (k, 3, 13, 12), "float32"), **kw)
    want = on_numpy(image.crop_resize, x, boxes, (13, 12), frame_index=fidx, **kw)
    close(got, want, "float32", kw)


@pytest.mark.parametrize("box", [[-20, 0, 20, 40], [-5, -5, 35, 35], [30, 12, 70, 52],
                                 [-50, -50, -10, -10], [70, 50, 110, 90]])
def test_area_boxes_that_leave_the_frame_repeat_the_border(cf, rng, box):
    # area averages the box over the frame with its border pixels repeated outside, as
    # nearest and bilinear sample it: the mean of 10 x 10 blocks of the edge-padded frame
    x = u8_frames(rng, (40, 60, 3))
    padded = np.pad(x, ((60, 60), (60, 60), (0, 0)), mode="edge").astype(np.float64)
    x1, y1, x2, y2 = (v + 60 for v in box)
    want = padded[y1:y2, x1:x2].reshape(4, 10, 4, 10, 3).mean(axis=(1, 3))
    got = image.crop_resize(cf.asarray(x), [box], 4, interpolation="area", scale=1.0,
                            layout="NHWC", dst=poisoned(cf, (1, 4, 4, 3), "float32"))
    close(to_host(got)[0], want, "float32", dict(scale=1.0))


@pytest.mark.parametrize("interpolation", ["bilinear", "nearest", "area"])
def test_boxes_past_float32_pixel_positions_are_refused(cf, rng, interpolation):
    # a finite box whose width overflows float32 (or that lies past 2**24, where float32
    # stops holding whole pixel positions) has no sampling positions: refused, naming it
    x = cf.asarray(u8_frames(rng, (2, 12, 16, 3)))
    for bad in ([-3e38, 0, 3e38, 10], [0, 0, 2**24 + 2, 8], [-2.0**25, 0, 4, 4]):
        with pytest.raises(image.ImageFormatError) as e:
            image.crop_resize(x, [[0, 0, 8, 8], bad], 4, interpolation=interpolation)
        assert "2**24" in str(e.value) and "box 1" in str(e.value)
    # the limit itself is a box (that repeats the frame's border)
    out = image.crop_resize(x, [[-2**24, 0, 2**24, 8]], 4, interpolation=interpolation,
                            scale=1.0, layout="NHWC")
    assert np.isfinite(to_host(out)).all()
    with pytest.raises(image.ImageFormatError, match=r"1e\+300"):  # (the value as given)
        image.crop_resize(x, [[0, 0, 1e300, 4]], 4, interpolation=interpolation)


def test_boxes_need_a_frame(cf):
    # (the kernel would clamp the frame index to -1 and read before the source)
    empty = cf.asarray(np.zeros((0, 8, 8, 3), np.uint8))
    with pytest.raises(image.ImageFormatError, match="1 boxes but no frame"):
        image.crop_resize(empty, [[0, 0, 4, 4]], 2)
