"""cuflow.image.normalize: the unfused chain, layouts, dtypes, strided frames, torchvision."""

from __future__ import annotations

import numpy as np
import pytest

import cuflow
from cuflow import image
from cuflow.testing import to_host
from image_helpers import MEAN, STD, close, on_numpy, poisoned, torchvision_or_skip, u8_frames


def test_normalize_matches_the_unfused_chain(cf, rng):
    x = u8_frames(rng, (2, 5, 7, 3))
    out = image.normalize(cf.asarray(x), mean=MEAN, std=STD,
                          dst=poisoned(cf, (2, 3, 5, 7), "float32"))
    want = ((x.astype(np.float32) / 255 - np.float32(MEAN)) / np.float32(STD)).transpose(0, 3, 1, 2)
    close(out, want, "float32", dict(std=STD))



@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "uint8"])
def test_normalize_layouts_dtypes_swap_flip(cf, rng, layout, dtype):
    x = u8_frames(rng, (3, 12, 3, 3))  # 36 pixels: not a multiple of 8, the general kernel
    kw = dict(mean=(10, 20, 30), std=(2, 3, 4), scale=1.0) if dtype == "uint8" else dict(
        mean=MEAN, std=STD)
    shape = (3, 3, 12, 3) if layout == "NCHW" else (3, 12, 3, 3)
    out = image.normalize(cf.asarray(x), out_format="BGR", flip=True, layout=layout, dtype=dtype,
                          dst=poisoned(cf, shape, dtype), **kw)
    sc = kw.get("scale", 1 / 255)
    v = x[..., ::-1, ::-1].astype(np.float32)  # BGR, mirrored
    # mean and std are per output channel, in out_format order
    want = (v * np.float32(sc) - np.float32(kw["mean"])) / np.float32(kw["std"])
    if dtype == "uint8":
        want = np.clip(np.rint(want), 0, 255)
    if layout == "NCHW":
        want = want.transpose(0, 3, 1, 2)
    close(out, want, dtype, dict(kw, std=kw["std"]))



def test_single_frame_shapes(cf, rng):
    x = cf.asarray(u8_frames(rng, (5, 6, 3)))
    assert image.normalize(x).shape == (3, 5, 6)
    assert image.normalize(x, layout="NHWC").shape == (5, 6, 3)
    assert image.resize(x, (2, 3)).shape == (2, 3, 3)
    assert image.cvt_color(x, "RGB", "GRAY").shape == (5, 6, 1)
    assert isinstance(image.resize(x, 5), cuflow.darray)



def test_strided_rows_need_no_copy_and_other_layouts_are_copied(cf, rng):
    big = u8_frames(rng, (2, 20, 30, 3))
    crop = cf.asarray(big)[:, 3:13, 5:21]  # strided rows and frames, pixels contiguous
    out = image.normalize(crop, scale=1.0, layout="NHWC")
    close(out, big[:, 3:13, 5:21], "float32", dict(scale=1.0))
    planar = cf.asarray(np.ascontiguousarray(big.transpose(0, 3, 1, 2))).transpose(0, 2, 3, 1)
    out = image.normalize(planar, scale=1.0, layout="NHWC")  # channels strided: copied first
    close(out, big, "float32", dict(scale=1.0))



@pytest.mark.gpu
def test_large_batch_and_stream(gpu_cf, rng):
    x = gpu_cf.asarray(u8_frames(rng, (64, 32, 40, 3)))
    s = gpu_cf.Stream()
    out = image.normalize(x, mean=MEAN, std=STD, stream=s)
    s.synchronize()
    want = on_numpy(image.normalize, to_host(x), mean=MEAN, std=STD)
    close(out, want, "float32", dict(std=STD))




@pytest.mark.gpu
def test_normalize_matches_torchvision(gpu_cf, rng):
    torch, tv = torchvision_or_skip()
    x = gpu_cf.asarray(u8_frames(rng, (2, 33, 48, 3)))
    out = image.normalize(x, mean=MEAN, std=STD)
    t = tv.to_dtype(torch.from_dlpack(x).permute(0, 3, 1, 2), torch.float32, scale=True)
    ref = tv.normalize(t, MEAN, STD)
    close(out, ref.cpu().numpy(), "float32", dict(std=STD))
