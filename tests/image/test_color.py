"""cuflow.image.cvt_color: packed channel orders, GRAY and YUV (NV12, I420) round trips."""

from __future__ import annotations

import numpy as np
import pytest

from cuflow import image
from cuflow.testing import to_host
from image_helpers import close, u8_frames


def test_cvt_color_packed(cf, rng):
    x = u8_frames(rng, (2, 3, 5, 4))
    d = cf.asarray(x)
    assert (to_host(image.cvt_color(d, "RGBA", "BGR")) == x[..., 2::-1]).all()
    assert (to_host(image.cvt_color(d, "BGRA", "BGRA")) == x).all()
    rgb = x[..., :3]
    gray = image.cvt_color(cf.asarray(np.ascontiguousarray(rgb)), "RGB", "GRAY")
    want = np.rint(rgb.astype(np.float64) @ [0.299, 0.587, 0.114])[..., None]
    close(gray, want, "uint8", {})
    g3 = image.cvt_color(gray, "GRAY", "RGB")
    assert (to_host(g3) == np.repeat(to_host(gray), 3, -1)).all()



def _rgb_to_yuv(rgb, matrix="bt601", full_range=False):
    """Encode RGB (H, W, 3) into Y, U, V planes (float) with the inverse matrix."""
    kr, kb = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722)}[matrix]
    r, g, b = (rgb[..., i].astype(np.float64) for i in range(3))
    y = kr * r + (1 - kr - kb) * g + kb * b
    u = (b - y) / (2 * (1 - kb))
    v = (r - y) / (2 * (1 - kr))
    if full_range:
        return y, u + 128, v + 128
    return 16 + y * 219 / 255, 128 + u * 224 / 255, 128 + v * 224 / 255



@pytest.mark.parametrize("fmt", ["NV12", "I420"])
@pytest.mark.parametrize(("matrix", "full"), [("bt601", False), ("bt709", False), ("bt601", True),
                                              ("bt709", True)])
def test_yuv_round_trip(cf, rng, fmt, matrix, full):
    H, W = 6, 8
    # 2x2 blocks of one colour, so 4:2:0 chroma loses nothing
    rgb = np.repeat(np.repeat(rng.integers(30, 220, (2, H // 2, W // 2, 3)), 2, 1), 2, 2)
    frames = []
    for f in rgb:
        y, u, v = _rgb_to_yuv(f, matrix, full)
        u, v = u[::2, ::2], v[::2, ::2]
        if fmt == "NV12":
            chroma = np.stack([u, v], -1).reshape(H // 2, W)
        else:
            chroma = np.concatenate([u.ravel(), v.ravel()]).reshape(H // 2, W)
        frames.append(np.rint(np.concatenate([y, chroma])).astype(np.uint8))
    src = cf.asarray(np.stack(frames))
    out = image.cvt_color(src, fmt, "RGB", matrix=matrix, full_range=full)
    assert out.shape == (2, H, W, 3)
    np.testing.assert_allclose(to_host(out).astype(int), rgb, atol=2)
    # black and white of the limited range
    if not full:
        flat = np.full((1, H * 3 // 2, W), 128, np.uint8)
        flat[0, :H] = 16
        assert (to_host(image.cvt_color(cf.asarray(flat), fmt, "RGB")) == 0).all()
        flat[0, :H] = 235
        assert (to_host(image.cvt_color(cf.asarray(flat), fmt, "RGB")) == 255).all()


@pytest.mark.parametrize("src_format, shape", [("RGB", (4, 6, 3)), ("BGR", (4, 6, 3)),
                                               ("GRAY", (4, 6, 1)), ("NV12", (6, 6)),
                                               ("I420", (6, 6))])
@pytest.mark.parametrize("out_format", ["RGBA", "BGRA"])
def test_alpha_is_carried_never_added(cf, rng, src_format, shape, out_format):
    # as documented: RGBA and BGRA outputs need a source with alpha
    x = cf.asarray(u8_frames(rng, shape))
    with pytest.raises(image.ImageFormatError) as e:
        image.cvt_color(x, src_format, out_format)
    assert out_format in str(e.value)
    with pytest.raises(image.ImageFormatError):
        image.normalize(x, src_format=src_format, out_format=out_format)
    rgba = u8_frames(rng, (4, 6, 4))
    got = to_host(image.cvt_color(cf.asarray(rgba), "RGBA", out_format))
    np.testing.assert_array_equal(got, rgba if out_format == "RGBA" else rgba[..., [2, 1, 0, 3]])


@pytest.mark.parametrize("src_format, out_format", [("RGB", None), (None, "BGR"), (None, None)])
def test_cvt_color_needs_both_formats(cf, rng, src_format, out_format):
    x = cf.asarray(u8_frames(rng, (6, 8, 3)))
    with pytest.raises(image.ImageFormatError) as e:
        image.cvt_color(x, src_format, out_format)
    msg = str(e.value)
    assert "src_format and out_format must both be given" in msg
    assert f"got src_format={src_format!r}, out_format={out_format!r}" in msg
    assert "'NV12'" in msg and "'BGRA'" in msg  # the formats allowed
