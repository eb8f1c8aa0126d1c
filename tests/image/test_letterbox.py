"""cuflow.image.letterbox: geometry, padding and Letterbox.unmap_boxes."""

from __future__ import annotations

import numpy as np
import pytest

from cuflow import image
from cuflow.testing import to_host
from image_helpers import MEAN, STD, close, poisoned, u8_frames


def test_letterbox_geometry_and_unmap(cf, rng):
    x = u8_frames(rng, (2, 64, 128, 3))
    out, info = image.letterbox(cf.asarray(x), 64, scale=1.0, layout="NHWC",
                                dst=poisoned(cf, (2, 64, 64, 3), "float32"))
    assert info.resized == (32, 64) and info.pad_y == 16 and info.pad_x == 0
    o = to_host(out)
    assert (o[:, :16] == 114).all() and (o[:, 48:] == 114).all()
    # halving: the image part is the 2x2 mean
    want = x.astype(np.float32).reshape(2, 32, 2, 64, 2, 3).mean(axis=(2, 4))
    close(o[:, 16:48], want, "float32", dict(scale=1.0))
    boxes = cf.asarray(np.array([[0, 16, 64, 48], [10, 20, 30, 40]], np.float32))
    back = to_host(info.unmap_boxes(boxes))
    np.testing.assert_allclose(back, [[0, 0, 128, 64], [20, 8, 60, 48]], atol=1e-5)
    for host in (to_host(boxes), to_host(boxes).tolist()):  # host boxes, as after NMS
        np.testing.assert_allclose(to_host(info.unmap_boxes(host)), back, atol=1e-5)


def test_unmap_boxes_takes_four_real_coordinates(cf, rng):
    _, info = image.letterbox(cf.asarray(u8_frames(rng, (16, 32, 3))), 16)
    for bad in (np.zeros((5, 6), np.float32), np.zeros((4, 1), np.float32),
                np.zeros((2, 4), np.complex64), None, "boxes"):
        with pytest.raises(image.ImageFormatError, match="unmap_boxes: boxes must be a real"):
            info.unmap_boxes(bad)


def test_unmap_boxes_refuses_ragged_boxes(cf, rng):
    # as crop_resize does: an ImageFormatError naming the rule and the boxes given
    _, info = image.letterbox(cf.asarray(u8_frames(rng, (16, 32, 3))), 16)
    ragged = [rng.uniform(0, 16, 4).tolist(), [1.5, 2.5]]
    with pytest.raises(image.ImageFormatError) as e:
        info.unmap_boxes(ragged)
    assert "unmap_boxes: boxes must be a real array of shape (..., 4)" in str(e.value)
    assert repr(ragged) in str(e.value)



@pytest.mark.parametrize(("fields", "err", "words"), [
    ((1.0, 0, 0, (0, 0), (8, 8)), ValueError, "resized must be positive"),
    (("a", 0, 0, (1, 1), (8, 8)), TypeError, "scale must be a real number"),
    ((0.0, 0, 0, (1, 1), (8, 8)), ValueError, "scale must be positive"),
    ((1.0, -1, 0, (1, 1), (8, 8)), ValueError, "pad_x must be an int >= 0"),
    ((1.0, 0, 2.5, (1, 1), (8, 8)), TypeError, "pad_y must be an int >= 0"),
    ((1.0, 0, 0, (4, 4), None), TypeError, "src_size must be (height, width) of ints"),
])
def test_a_letterbox_built_by_hand_states_its_rule(cf, fields, err, words):
    """Not a ZeroDivisionError or a bare TypeError later, in unmap_boxes."""
    with pytest.raises(err) as e:
        cf.image.Letterbox(*fields)
    assert isinstance(e.value, cf.CuflowError) and words in str(e.value)


def test_letterbox_pad_is_normalized(cf, rng):
    x = cf.asarray(u8_frames(rng, (10, 20, 3)))
    out, _ = image.letterbox(x, (20, 20), pad=114, mean=MEAN, std=STD)
    o = to_host(out)
    assert o.shape == (3, 20, 20)
    want = (114 / 255 - np.float32(MEAN)) / np.float32(STD)
    np.testing.assert_allclose(o[:, 0, 0], want, rtol=1e-5)
