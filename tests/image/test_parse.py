"""cuflow.image's input checks (image/_parse.py): errors that state the rule."""

from __future__ import annotations

import numpy as np
import pytest

from cuflow import image
from image_helpers import u8_frames


def test_errors_state_the_rule(cf, rng):
    x = cf.asarray(u8_frames(rng, (2, 5, 6, 3)))
    # a dtype problem is the TypeError kind, for frames as for denormalize's source
    with pytest.raises(image.ImageTypeError, match="frames must be uint8, got float32"):
        image.normalize(x.astype("float32"))
    with pytest.raises(image.ImageTypeError, match="frames must be uint8, got float64"):
        image.resize(x.astype("float64"), 4)
    with pytest.raises(image.ImageTypeError, match="float32 or float16 .* got float64"):
        image.denormalize(image.normalize(x).astype("float64"))
    with pytest.raises(ValueError, match=r"\(H, W, C\) or \(N, H, W, C\)"):
        image.normalize(x[0, 0])
    with pytest.raises(ValueError, match="C in"):
        image.normalize(cf.asarray(u8_frames(rng, (4, 6, 2))))
    with pytest.raises(ValueError, match="layout must be one of"):
        image.normalize(x, layout="CHW")
    with pytest.raises(ValueError, match="1 or 3 values"):
        image.normalize(x, mean=(1, 2))
    with pytest.raises(ValueError, match="std must be non-zero"):
        image.normalize(x, std=0)
    with pytest.raises(ValueError, match="needs channel"):
        image.normalize(x, out_format="RGBA")
    with pytest.raises(ValueError, match="size must be"):
        image.resize(x, (0, 4))
    with pytest.raises(ValueError, match="even height and width"):
        image.cvt_color(cf.asarray(u8_frames(rng, (7, 6))), "NV12", "RGB")
    with pytest.raises(ValueError, match="interpolation must be one of"):
        image.resize(x, 4, interpolation="cubic")
    with pytest.raises(TypeError, match="uint8|backend"):
        image.normalize(np.zeros((2, 2, 3), np.uint8) if cf.get_backend().is_gpu else [1])
    with pytest.raises(ValueError, match=r"\(K, 4\)"):
        image.crop_resize(x, cf.zeros((3, 5), dtype="float32"), 4)
    with pytest.raises(image.ImageFormatError, match=r"fewer than 2\*\*31 elements"):
        image.resize(x, (46341, 46341))  # planned (and refused) before anything is allocated


@pytest.mark.parametrize("fmt", ["NV12", "I420"])
@pytest.mark.parametrize("shape", [(6, 0), (2, 6, 0), (0, 4)])
def test_yuv_frames_of_no_pixels_are_refused(cf, fmt, shape):
    # as packed frames are: the kernels would divide by the width and index the chroma
    z = cf.asarray(np.zeros(shape, np.uint8))
    boxes = [[0, 0, 2, 2]]
    for call in (lambda: image.cvt_color(z, fmt, "RGB"),
                 lambda: image.resize(z, (4, 4), src_format=fmt),
                 lambda: image.normalize(z, src_format=fmt),
                 lambda: image.letterbox(z, 4, src_format=fmt),
                 lambda: image.crop_resize(z, boxes, 4, src_format=fmt)):
        with pytest.raises(image.ImageFormatError, match=r"H, W > 0"):
            call()


def test_src_format_must_be_a_name(cf, rng):
    # a list is refused as out_format, layout or matrix are, not by the lookups it breaks
    x = cf.asarray(u8_frames(rng, (2, 5, 6, 3)))
    for call in (lambda: image.normalize(x, src_format=["RGB"]),
                 lambda: image.cvt_color(x, ["RGB"], "BGR"),
                 lambda: image.resize(x, 4, src_format={"NV12"}),
                 lambda: image.denormalize(image.normalize(x), src_format=["RGB"])):
        with pytest.raises(image.ImageFormatError, match="src_format must be one of"):
            call()
