"""cuflow.image's input checks (image/_parse.py): errors that state the rule."""

from __future__ import annotations

import numpy as np
import pytest

from cuflow import image
from image_helpers import u8_frames


def test_errors_state_the_rule(cf, rng):
    x = cf.asarray(u8_frames(rng, (2, 5, 6, 3)))
    with pytest.raises(image.ImageFormatError, match="must be uint8"):
        image.normalize(x.astype("float32"))
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
