"""cuflow.image.Norm: one option group for mean, std and scale, checked once."""

from __future__ import annotations

import numpy as np
import pytest

from cuflow import image
from cuflow.testing import to_host
from image_helpers import MEAN, STD, u8_frames


def test_norm_gives_the_same_result_as_the_keywords(cf, rng):
    x = cf.asarray(u8_frames(rng, (2, 12, 16, 3)))
    norm = image.Norm(MEAN, STD)
    boxes = cf.asarray(np.array([[0, 0, 16, 12], [2, 1, 10, 9]], np.float32))
    pairs = [
        (image.normalize(x, norm=norm), image.normalize(x, mean=MEAN, std=STD)),
        (image.resize_normalize(x, 6, norm=norm), image.resize_normalize(x, 6, mean=MEAN,
                                                                            std=STD)),
        (image.letterbox(x, 8, norm=norm)[0], image.letterbox(x, 8, mean=MEAN, std=STD)[0]),
        (image.crop_resize(x, boxes, 5, norm=norm),
         image.crop_resize(x, boxes, 5, mean=MEAN, std=STD)),
    ]
    for got, want in pairs:
        np.testing.assert_array_equal(to_host(got), to_host(want))
    y = image.normalize(x, norm=norm)
    np.testing.assert_array_equal(to_host(image.denormalize(y, norm=norm)),
                                  to_host(image.denormalize(y, mean=MEAN, std=STD)))


def test_norm_is_checked_once_and_normalized_to_tuples():
    n = image.Norm(0.5, [0.25, 0.5, 1], 1)
    assert n == image.Norm((0.5,), (0.25, 0.5, 1.0), 1.0)
    assert hash(n) == hash(image.Norm((0.5,), (0.25, 0.5, 1.0), 1.0))
    with pytest.raises(image.ImageFormatError, match="std must be non-zero"):
        image.Norm(std=(1.0, 0.0, 1.0))
    with pytest.raises(image.ImageFormatError, match="mean must be finite"):
        image.Norm(mean=float("nan"))


def test_norm_and_the_keywords_do_not_mix(cf, rng):
    x = cf.asarray(u8_frames(rng, (5, 6, 3)))
    with pytest.raises(TypeError, match="either norm= or mean="):
        image.normalize(x, norm=image.Norm(), mean=MEAN)
    with pytest.raises(TypeError, match="must be a cuflow.image.Norm"):
        image.normalize(x, norm=(MEAN, STD))
    with pytest.raises(ValueError, match="1 or 3 values"):
        image.normalize(x, norm=image.Norm(mean=(1, 2)))
