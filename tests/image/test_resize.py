"""cuflow.image.resize and resize_normalize: oracles, edge sizes, alignments, torchvision."""

from __future__ import annotations

import numpy as np
import pytest

from cuflow import image
from cuflow.testing import to_host
from image_helpers import MEAN, STD, close, on_numpy, poisoned, torchvision_or_skip, u8_frames


def test_bilinear_halving_is_the_2x2_mean(cf, rng):
    x = u8_frames(rng, (2, 8, 10, 3))
    out = image.resize_normalize(cf.asarray(x), (4, 5), scale=1.0, layout="NHWC",
                                 dst=poisoned(cf, (2, 4, 5, 3), "float32"))
    want = x.astype(np.float32).reshape(2, 4, 2, 5, 2, 3).mean(axis=(2, 4))
    close(out, want, "float32", dict(scale=1.0))



@pytest.mark.parametrize("interpolation", ["area", "nearest"])
def test_integer_downscale(cf, rng, interpolation):
    x = u8_frames(rng, (1, 9, 12, 3))
    out = image.resize(cf.asarray(x), (3, 4), interpolation=interpolation,
                       dst=poisoned(cf, (1, 3, 4, 3), "uint8"))
    if interpolation == "area":
        want = np.rint(x.astype(np.float64).reshape(1, 3, 3, 4, 3, 3).mean(axis=(2, 4)))
    else:
        want = x[:, ::3, ::3]
    close(out, want, "uint8", {})



def test_same_size_resize_is_identity(cf, rng):
    x = u8_frames(rng, (2, 7, 5, 4))
    for interp in ("nearest", "bilinear", "area"):
        out = image.resize(cf.asarray(x), (7, 5), interpolation=interp, out_format="RGBA")
        assert (to_host(out) == x).all()



@pytest.mark.parametrize("shape", [(1, 1, 1, 3), (1, 1, 7, 1), (5, 3, 1, 4)])
def test_tiny_images(cf, rng, shape):
    x = u8_frames(rng, shape)
    # frames 1, 3 or 4 rows high may be CHW: src_format states the HWC reading
    out = image.resize_normalize(cf.asarray(x), (3, 5), scale=1.0, layout="NHWC",
                                 src_format={1: "GRAY", 3: "RGB", 4: "RGBA"}[shape[-1]],
                                 out_format="GRAY" if shape[-1] == 1 else "RGB")
    o = to_host(out)
    assert o.shape == (shape[0], 3, 5, 1 if shape[-1] == 1 else 3)
    assert np.isfinite(o).all() and o.min() >= 0 and o.max() <= 255
    v = x[..., :o.shape[-1]].astype(np.float64)  # the channels kept: GRAY, or RGBA's RGB
    if shape[1:3] == (1, 1):  # one pixel: every output pixel is that pixel
        close(out, np.broadcast_to(v, o.shape), "float32", dict(scale=1.0))
    elif shape[1] == 1:  # one row: every output row is that row, resized alike (half-pixel
        # centres, the edges repeated: NumPy's interp)
        w = shape[2]
        at = (np.arange(5) + 0.5) * w / 5 - 0.5
        row = np.stack([np.interp(at, np.arange(w), v[0, 0, :, c]) for c in range(v.shape[-1])],
                       axis=-1)
        close(out, np.broadcast_to(row, o.shape), "float32", dict(scale=1.0))
    else:  # one column as high as the output: every output column is that column
        close(out, np.broadcast_to(v, o.shape), "float32", dict(scale=1.0))



@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_nv12_pairs_fall_back_for_a_dst_not_aligned_to_two_elements(gpu_cf, rng, dtype):
    # cf_resize_nv12 stores two elements at once; a dst one element into a buffer takes
    # cf_resize_lin (and the result is the same)
    x = u8_frames(rng, (2, 54, 64))
    shape = (2, 3, 20, 30)
    buf = poisoned(gpu_cf, (int(np.prod(shape)) + 1,), dtype)
    dst = buf[1:].reshape(shape)
    assert dst.data.ptr % (2 * dst.itemsize)
    kw = dict(mean=MEAN, std=STD) if dtype != "uint8" else dict(mean=0.0, std=1.0, scale=1.0)
    got = image.resize_normalize(gpu_cf.asarray(x), (20, 30), src_format="NV12", dtype=dtype,
                                 dst=dst, **kw)
    assert got is dst
    want = on_numpy(image.resize_normalize, x, (20, 30), src_format="NV12", dtype=dtype, **kw)
    close(got, want, dtype, kw)



@pytest.mark.gpu
def test_unaligned_source_takes_the_general_kernel(gpu_cf, rng):
    # cf_resize_lin reads aligned words, so a source 1 byte into a buffer goes to cf_warp
    shape = (2, 36, 64, 3)
    x = u8_frames(rng, shape)
    buf = gpu_cf.empty(x.size + 4, dtype="uint8")
    src = buf[1:1 + x.size].reshape(shape)
    src[...] = gpu_cf.asarray(x)
    assert src.data.ptr % 4 == 1
    got = image.resize_normalize(src, (20, 30), mean=MEAN, std=STD)
    want = on_numpy(image.resize_normalize, x, (20, 30), mean=MEAN, std=STD)
    close(got, want, "float32", dict(std=STD))




@pytest.mark.gpu
@pytest.mark.parametrize("interpolation", ["bilinear", "nearest"])
@pytest.mark.parametrize("size", [(37, 53), (120, 90)])
def test_resize_matches_torchvision(gpu_cf, rng, interpolation, size):
    torch, tv = torchvision_or_skip()
    x = gpu_cf.asarray(u8_frames(rng, (3, 71, 64, 3)))
    out = image.resize(x, size, interpolation=interpolation)
    t = torch.from_dlpack(x).permute(0, 3, 1, 2)
    mode = {"bilinear": tv.InterpolationMode.BILINEAR,
            "nearest": tv.InterpolationMode.NEAREST}[interpolation]
    ref = tv.resize(t, list(size), interpolation=mode, antialias=False).permute(0, 2, 3, 1)
    diff = np.abs(to_host(out).astype(int) - ref.cpu().numpy().astype(int))
    assert diff.max() <= (1 if interpolation == "bilinear" else 0)
