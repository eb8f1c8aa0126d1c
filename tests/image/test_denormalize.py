"""cuflow.image.denormalize: inverts normalize; the GPU against the reference."""

from __future__ import annotations

import pytest

from cuflow import image
from cuflow.testing import to_host
from image_helpers import MEAN, STD, close, on_numpy, poisoned, u8_frames


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_denormalize_inverts_normalize(cf, rng, layout, dtype):
    x = u8_frames(rng, (2, 5, 9, 3))
    y = image.normalize(cf.asarray(x), mean=MEAN, std=STD, layout=layout, dtype=dtype)
    back = image.denormalize(y, mean=MEAN, std=STD, layout=layout,
                             dst=poisoned(cf, (2, 5, 9, 3), "uint8"))
    close(back, x, "uint8", {})
    bgr = image.denormalize(y, mean=MEAN, std=STD, layout=layout, out_format="BGR")
    close(bgr, x[..., ::-1], "uint8", {})
    clamped = image.denormalize(cf.full((3, 2, 2), 100.0, dtype=dtype))
    assert (to_host(clamped) == 255).all()



@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize(("src_format", "out_format"), [
    ("RGB", "RGB"), ("RGB", "BGR"), ("RGBA", "BGR"), ("RGBA", "BGRA"), ("GRAY", "GRAY")])
@pytest.mark.parametrize("hw", [(6, 10), (5, 9)])  # four pixels per thread, and not
def test_denormalize_matches_reference(gpu_cf, rng, layout, dtype, src_format, out_format, hw):
    C = {"RGB": 3, "RGBA": 4, "GRAY": 1}[src_format]
    oc = len(out_format) if out_format != "GRAY" else 1
    shape = (3, C, *hw) if layout == "NCHW" else (3, *hw, C)
    x = rng.uniform(-3, 3, shape).astype(dtype)  # beyond [0, 255] once denormalized
    kw = dict(mean=tuple(rng.uniform(0.2, 0.6, C)), std=tuple(rng.uniform(0.1, 0.3, C)),
              layout=layout, src_format=src_format, out_format=out_format)
    got = image.denormalize(gpu_cf.asarray(x), dst=poisoned(gpu_cf, (3, *hw, oc), "uint8"), **kw)
    want = on_numpy(image.denormalize, x, **kw)
    close(got, want, "uint8", {})
