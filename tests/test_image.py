"""cuflow.image: fused kernels against the NumPy reference, independent oracles and torchvision.

Inputs are random over the full uint8 range; every output given as ``dst`` is
poisoned first (NaN or 0xAB) so unwritten elements show.  Tolerances are the
ones the module documents: float32 within ``1e-3 * max|a|`` (``a = scale /
std``), float16 within that plus one float16 rounding, uint8 within 1.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import cuflow
from cuflow import image
from cuflow.testing import to_host

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def _frames(rng, shape):
    return rng.integers(0, 256, shape, dtype=np.uint8)


def _poisoned(cf, shape, dtype):
    d = np.dtype(dtype)
    return cf.full(shape, np.nan if d.kind == "f" else 0xAB, dtype=d)


def _tol(kw, dtype):
    a = max(abs(kw.get("scale", 1 / 255) / s) for s in np.atleast_1d(kw.get("std", 1.0)))
    if np.dtype(dtype) == np.uint8:
        return dict(atol=1, rtol=0)
    if np.dtype(dtype) == np.float16:
        return dict(atol=1e-3 * a, rtol=2e-3)
    return dict(atol=1e-3 * a, rtol=1e-6)


def _close(got, want, dtype, kw):
    got = to_host(got).astype(np.float64)
    want = np.asarray(want).astype(np.float64)
    assert got.shape == want.shape
    assert np.isfinite(got).all(), "unwritten (poisoned) elements in the output"
    np.testing.assert_allclose(got, want, **_tol(kw, dtype))


def _on_numpy(fn, *host_args, **kw):
    """Run ``fn`` on the NumPy backend (the reference) with host inputs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cuflow.set_backend("numpy")
    try:
        conv = [cuflow.asarray(a) if isinstance(a, np.ndarray) else a for a in host_args]
        r = fn(*conv, **kw)
        return to_host(r[0] if isinstance(r, tuple) else r)
    finally:
        cuflow.set_backend("cupy")


# ------------------------------------------------------------------ independent oracles
def test_normalize_matches_the_unfused_chain(cf, rng):
    x = _frames(rng, (2, 5, 7, 3))
    out = image.normalize(cf.asarray(x), mean=MEAN, std=STD,
                          dst=_poisoned(cf, (2, 3, 5, 7), "float32"))
    want = ((x.astype(np.float32) / 255 - np.float32(MEAN)) / np.float32(STD)).transpose(0, 3, 1, 2)
    _close(out, want, "float32", dict(std=STD))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "uint8"])
def test_normalize_layouts_dtypes_swap_flip(cf, rng, layout, dtype):
    x = _frames(rng, (3, 4, 9, 3))  # 36 pixels: not a multiple of 8, the general kernel
    kw = dict(mean=(10, 20, 30), std=(2, 3, 4), scale=1.0) if dtype == "uint8" else dict(
        mean=MEAN, std=STD)
    shape = (3, 3, 4, 9) if layout == "NCHW" else (3, 4, 9, 3)
    out = image.normalize(cf.asarray(x), out_format="BGR", flip=True, layout=layout, dtype=dtype,
                          dst=_poisoned(cf, shape, dtype), **kw)
    sc = kw.get("scale", 1 / 255)
    v = x[..., ::-1, ::-1].astype(np.float32)  # BGR, mirrored
    # mean and std are per output channel, in out_format order
    want = (v * np.float32(sc) - np.float32(kw["mean"])) / np.float32(kw["std"])
    if dtype == "uint8":
        want = np.clip(np.rint(want), 0, 255)
    if layout == "NCHW":
        want = want.transpose(0, 3, 1, 2)
    _close(out, want, dtype, dict(kw, std=kw["std"]))


def test_single_frame_shapes(cf, rng):
    x = cf.asarray(_frames(rng, (4, 6, 3)))
    assert image.normalize(x).shape == (3, 4, 6)
    assert image.normalize(x, layout="NHWC").shape == (4, 6, 3)
    assert image.resize(x, (2, 3)).shape == (2, 3, 3)
    assert image.cvt_color(x, "RGB", "GRAY").shape == (4, 6, 1)
    assert isinstance(image.resize(x, 5), cuflow.darray)


def test_bilinear_halving_is_the_2x2_mean(cf, rng):
    x = _frames(rng, (2, 8, 10, 3))
    out = image.resize_normalize(cf.asarray(x), (4, 5), scale=1.0, layout="NHWC",
                                 dst=_poisoned(cf, (2, 4, 5, 3), "float32"))
    want = x.astype(np.float32).reshape(2, 4, 2, 5, 2, 3).mean(axis=(2, 4))
    _close(out, want, "float32", dict(scale=1.0))


@pytest.mark.parametrize("interpolation", ["area", "nearest"])
def test_integer_downscale(cf, rng, interpolation):
    x = _frames(rng, (1, 9, 12, 3))
    out = image.resize(cf.asarray(x), (3, 4), interpolation=interpolation,
                       dst=_poisoned(cf, (1, 3, 4, 3), "uint8"))
    if interpolation == "area":
        want = np.rint(x.astype(np.float64).reshape(1, 3, 3, 4, 3, 3).mean(axis=(2, 4)))
    else:
        want = x[:, ::3, ::3]
    _close(out, want, "uint8", {})


def test_same_size_resize_is_identity(cf, rng):
    x = _frames(rng, (2, 7, 5, 4))
    for interp in ("nearest", "bilinear", "area"):
        out = image.resize(cf.asarray(x), (7, 5), interpolation=interp, out_format="RGBA")
        assert (to_host(out) == x).all()


def test_cvt_color_packed(cf, rng):
    x = _frames(rng, (2, 3, 5, 4))
    d = cf.asarray(x)
    assert (to_host(image.cvt_color(d, "RGBA", "BGR")) == x[..., 2::-1]).all()
    assert (to_host(image.cvt_color(d, "BGRA", "BGRA")) == x).all()
    rgb = x[..., :3]
    gray = image.cvt_color(cf.asarray(np.ascontiguousarray(rgb)), "RGB", "GRAY")
    want = np.rint(rgb.astype(np.float64) @ [0.299, 0.587, 0.114])[..., None]
    _close(gray, want, "uint8", {})
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


def test_letterbox_geometry_and_unmap(cf, rng):
    x = _frames(rng, (2, 64, 128, 3))
    out, info = image.letterbox(cf.asarray(x), 64, scale=1.0, layout="NHWC",
                                dst=_poisoned(cf, (2, 64, 64, 3), "float32"))
    assert info.resized == (32, 64) and info.pad_y == 16 and info.pad_x == 0
    o = to_host(out)
    assert (o[:, :16] == 114).all() and (o[:, 48:] == 114).all()
    # halving: the image part is the 2x2 mean
    want = x.astype(np.float32).reshape(2, 32, 2, 64, 2, 3).mean(axis=(2, 4))
    _close(o[:, 16:48], want, "float32", dict(scale=1.0))
    boxes = cf.asarray(np.array([[0, 16, 64, 48], [10, 20, 30, 40]], np.float32))
    back = to_host(info.unmap_boxes(boxes))
    np.testing.assert_allclose(back, [[0, 0, 128, 64], [20, 8, 60, 48]], atol=1e-5)


def test_letterbox_pad_is_normalized(cf, rng):
    x = cf.asarray(_frames(rng, (10, 20, 3)))
    out, _ = image.letterbox(x, (20, 20), pad=114, mean=MEAN, std=STD)
    o = to_host(out)
    assert o.shape == (3, 20, 20)
    want = (114 / 255 - np.float32(MEAN)) / np.float32(STD)
    np.testing.assert_allclose(o[:, 0, 0], want, rtol=1e-5)


def test_crop_resize_boxes_and_frames(cf, rng):
    x = _frames(rng, (3, 12, 16, 3))
    boxes = np.array([[0, 0, 16, 12], [4, 2, 8, 6], [-4, -4, 4, 4]], np.float32)
    fidx = np.array([2, 0, 1], np.int32)
    out = image.crop_resize(cf.asarray(x), cf.asarray(boxes), (6, 8), frame_index=cf.asarray(fidx),
                            scale=1.0, layout="NHWC", dst=_poisoned(cf, (3, 6, 8, 3), "float32"))
    o = to_host(out)
    full = x[2].astype(np.float32).reshape(6, 2, 8, 2, 3).mean(axis=(1, 3))
    _close(o[0], full, "float32", dict(scale=1.0))  # whole frame halved = 2x2 mean
    # a 4x4 box to 6x8 samples inside it only
    assert o[1].min() >= x[0, 2:6, 4:8].min() - 1e-3 and o[1].max() <= x[0, 2:6, 4:8].max() + 1e-3
    # a box that leaves the frame repeats the border: its top-left quarter is pixel (0, 0)
    np.testing.assert_allclose(o[2, 0, 0], x[1, 0, 0], atol=1e-3)
    # boxes from an unbatched frame; single box still gives a batch
    one = image.crop_resize(cf.asarray(x[0]), cf.asarray(boxes[:1]), 4)
    assert one.shape == (1, 3, 4, 4)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_denormalize_inverts_normalize(cf, rng, layout, dtype):
    x = _frames(rng, (2, 5, 9, 3))
    y = image.normalize(cf.asarray(x), mean=MEAN, std=STD, layout=layout, dtype=dtype)
    back = image.denormalize(y, mean=MEAN, std=STD, layout=layout,
                             dst=_poisoned(cf, (2, 5, 9, 3), "uint8"))
    _close(back, x, "uint8", {})
    bgr = image.denormalize(y, mean=MEAN, std=STD, layout=layout, out_format="BGR")
    _close(bgr, x[..., ::-1], "uint8", {})
    clamped = image.denormalize(cf.full((3, 2, 2), 100.0, dtype=dtype))
    assert (to_host(clamped) == 255).all()


def test_strided_rows_need_no_copy_and_other_layouts_are_copied(cf, rng):
    big = _frames(rng, (2, 20, 30, 3))
    crop = cf.asarray(big)[:, 3:13, 5:21]  # strided rows and frames, pixels contiguous
    out = image.normalize(crop, scale=1.0, layout="NHWC")
    _close(out, big[:, 3:13, 5:21], "float32", dict(scale=1.0))
    planar = cf.asarray(np.ascontiguousarray(big.transpose(0, 3, 1, 2))).transpose(0, 2, 3, 1)
    out = image.normalize(planar, scale=1.0, layout="NHWC")  # channels strided: copied first
    _close(out, big, "float32", dict(scale=1.0))


@pytest.mark.parametrize("shape", [(1, 1, 1, 3), (1, 1, 7, 1), (5, 3, 1, 4)])
def test_tiny_images(cf, rng, shape):
    x = _frames(rng, shape)
    out = image.resize_normalize(cf.asarray(x), (3, 5), scale=1.0, layout="NHWC",
                                 out_format="GRAY" if shape[-1] == 1 else "RGB")
    o = to_host(out)
    assert o.shape == (shape[0], 3, 5, 1 if shape[-1] == 1 else 3)
    assert np.isfinite(o).all() and o.min() >= 0 and o.max() <= 255


# ------------------------------------------------------------------ errors
def test_errors_state_the_rule(cf, rng):
    x = cf.asarray(_frames(rng, (2, 4, 6, 3)))
    with pytest.raises(image.ImageFormatError, match="must be uint8"):
        image.normalize(x.astype("float32"))
    with pytest.raises(ValueError, match=r"\(H, W, C\) or \(N, H, W, C\)"):
        image.normalize(x[0, 0])
    with pytest.raises(ValueError, match="C in"):
        image.normalize(cf.asarray(_frames(rng, (4, 6, 2))))
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
        image.cvt_color(cf.asarray(_frames(rng, (7, 6))), "NV12", "RGB")
    with pytest.raises(ValueError, match="interpolation must be one of"):
        image.resize(x, 4, interpolation="cubic")
    with pytest.raises(TypeError, match="uint8|backend"):
        image.normalize(np.zeros((2, 2, 3), np.uint8) if cf.get_backend().is_gpu else [1])
    with pytest.raises(ValueError, match=r"\(K, 4\)"):
        image.crop_resize(x, cf.zeros((3, 5), dtype="float32"), 4)
    with pytest.raises(image.ImageFormatError, match=r"fewer than 2\*\*31 elements"):
        image.resize(x, (46341, 46341))  # planned (and refused) before anything is allocated


def test_dst_contract(cf, rng):
    x = cf.asarray(_frames(rng, (2, 4, 6, 3)))
    with pytest.raises(cuflow.DstShapeError, match=r"\(2, 3, 4, 6\)"):
        image.normalize(x, dst=cf.empty((2, 4, 6, 3), dtype="float32"))
    with pytest.raises(cuflow.DstDtypeError, match="float16"):
        image.normalize(x, dtype="float16", dst=cf.empty((2, 3, 4, 6), dtype="float32"))
    with pytest.raises(cuflow.DstError, match="C-contiguous"):
        image.normalize(x, dst=cf.empty((2, 6, 4, 3), dtype="float32").transpose(0, 3, 2, 1))
    with pytest.raises(cuflow.DstError, match="overlaps an input"):
        image.cvt_color(x, "RGB", "BGR", dst=x)
    d = cf.empty((2, 3, 4, 6), dtype="float32")
    assert image.normalize(x, dst=d) is d


def test_bilinear_plans_take_the_fast_kernel_where_it_applies(cf, rng):
    def entry(shape, **kw):
        _, plan = image._op("resize_normalize", cf.asarray(_frames(rng, shape)), **kw)
        return plan.lin_entry

    assert entry((2, 36, 64, 3), size=(20, 30)) == "cf_resize_lin<{T},0,3,3>"
    assert entry((2, 36, 64, 4), size=(20, 30), out_format="BGR") == "cf_resize_lin<{T},0,4,3>"
    assert entry((2, 36, 64, 3), size=(40, 70), interpolation="area") is not None  # upscale
    assert entry((2, 36, 64, 3), size=(20, 30), interpolation="area") is None  # box filter
    assert entry((2, 36, 64, 3), size=(20, 30), interpolation="nearest") is None
    assert entry((2, 36, 64, 3), size=(20, 30), out_format="GRAY") is None
    assert entry((1, 5, 7, 3), size=(3, 4)) is None  # 105 bytes: the end is not aligned
    assert entry((1, 1, 8, 3), size=(3, 4)) is None  # one row: no second tap
    boxes = cf.asarray(np.array([[1, 2, 30, 20], [-3, 0, 70, 40]], np.float32))
    assert entry((2, 36, 64, 3), size=(8, 8), rois=boxes) == "cf_resize_lin<{T},0,3,3>"
    assert entry((2, 36, 64, 3), size=(8, 8), rois=boxes, interpolation="area") is None
    # NV12 reads its chroma pairs from word starts: rows must start aligned
    assert entry((2, 54, 64), size=(20, 30), src_format="NV12") == "cf_resize_lin<{T},1,3,3>"
    assert entry((2, 54, 64), size=(20, 30), src_format="NV12",
                 out_format="BGR") == "cf_resize_lin<{T},1,3,3>"
    assert entry((2, 54, 66), size=(20, 30), src_format="NV12") is None
    assert entry((2, 54, 64), size=(20, 30), src_format="NV12", out_format="GRAY") is None
    assert entry((2, 54, 64), size=(20, 30), src_format="I420") is None


def test_nv12_plans_take_the_two_column_kernel_for_even_widths(cf, rng):
    def pairs(shape, size, **kw):
        _, plan = image._op("resize_normalize", cf.asarray(_frames(rng, shape)), size=size,
                            src_format="NV12", **kw)
        return plan.lin_pairs

    assert pairs((2, 54, 64), (20, 30))
    assert pairs((2, 54, 64), (20, 30), flip=True, layout="NHWC", dtype="uint8")
    assert not pairs((2, 54, 64), (20, 31))  # a pair would start at an odd element
    assert not pairs((2, 9, 4), (3, 2))  # 4 columns: no 8 bytes from W - 8
    assert not pairs((2, 54, 64), (20, 30), out_format="GRAY")  # not cf_resize_lin


# ------------------------------------------------------------------ GPU against the reference
_CASES = {
    "normalize-vec": (lambda x: x, dict(fn="normalize", shape=(3, 16, 24, 3))),
    "normalize-vec-rgba": (lambda x: x, dict(fn="normalize", shape=(2, 8, 8, 4),
                                              out_format="BGR")),
    "normalize-vec-gray": (lambda x: x, dict(fn="normalize", shape=(2, 8, 16, 1))),
    "normalize-odd": (lambda x: x, dict(fn="normalize", shape=(2, 5, 13, 3), flip=True)),
    "resize-bilinear-up": (None, dict(fn="resize_normalize", shape=(2, 17, 23, 3), size=(40, 31))),
    "resize-bilinear-down": (None, dict(fn="resize_normalize", shape=(2, 61, 83, 3), size=(20, 27))),
    "resize-rgba-down": (None, dict(fn="resize_normalize", shape=(2, 61, 83, 4), size=(23, 30),
                                    out_format="BGR")),
    "resize-area": (None, dict(fn="resize_normalize", shape=(2, 61, 83, 3), size=(20, 27),
                               interpolation="area")),
    "resize-area-mixed": (None, dict(fn="resize_normalize", shape=(1, 61, 20, 4), size=(20, 27),
                                     interpolation="area", out_format="GRAY")),
    "resize-nearest": (None, dict(fn="resize_normalize", shape=(2, 61, 83, 3), size=(29, 101),
                                  interpolation="nearest", out_format="BGR")),
    "letterbox": (None, dict(fn="letterbox", shape=(2, 45, 80, 3), size=(33, 47))),
    "nv12": (None, dict(fn="resize_normalize", yuv=(2, 24, 34), size=(17, 19),
                        src_format="NV12")),
    "i420-709-full": (None, dict(fn="resize_normalize", yuv=(1, 24, 34), size=(30, 40),
                                 src_format="I420", matrix="bt709", full_range=True)),
    # cf_resize_lin's edges: outputs that end inside a block's rows and columns, flip, the
    # 2-pixel minimum, 1 and 4 channels, area along upscaled axes; a 1-row source (cf_warp)
    "resize-ragged-flip": (None, dict(fn="resize_normalize", shape=(2, 30, 50, 3),
                                      size=(70, 130), flip=True, out_format="BGR")),
    "resize-2x2": (None, dict(fn="resize_normalize", shape=(2, 2, 2, 3), size=(5, 7))),
    "resize-gray": (None, dict(fn="resize_normalize", shape=(2, 19, 24, 1), size=(33, 9))),
    "resize-rgba-bgra": (None, dict(fn="resize_normalize", shape=(1, 33, 70, 4), size=(40, 130),
                                    out_format="BGRA", mean=(*MEAN, 0.5))),
    "resize-area-up": (None, dict(fn="resize_normalize", shape=(1, 10, 12, 3), size=(23, 31),
                                  interpolation="area")),
    "resize-1-row": (None, dict(fn="resize_normalize", shape=(2, 1, 9, 3), size=(3, 4))),
    "letterbox-nv12": (None, dict(fn="letterbox", yuv=(2, 36, 64), size=(41, 29),
                                  src_format="NV12")),
    # NV12 on cf_resize_lin: odd and even taps (chroma pairs across a word), flip, the
    # far edges, BGR, BT.709 full range, upscaling
    "nv12-lin-down": (None, dict(fn="resize_normalize", yuv=(2, 38, 52), size=(17, 19),
                                 src_format="NV12", flip=True, out_format="BGR")),
    "nv12-lin-up": (None, dict(fn="resize_normalize", yuv=(1, 10, 12), size=(23, 37),
                               src_format="NV12", matrix="bt709", full_range=True)),
    # NV12 on cf_resize_nv12 (even output widths): a pair's taps in one 8-byte window
    # (up to ~3x down) or not (4.8x down: each column reads its own), flip, upscaling, the
    # letterbox's padding, outputs that end inside a block's rows and columns
    "nv12-pair-down": (None, dict(fn="resize_normalize", yuv=(2, 38, 52), size=(17, 18),
                                  src_format="NV12", flip=True, out_format="BGR")),
    "nv12-pair-5x": (None, dict(fn="resize_normalize", yuv=(1, 40, 96), size=(9, 20),
                                src_format="NV12")),
    "nv12-pair-up": (None, dict(fn="resize_normalize", yuv=(1, 10, 12), size=(23, 70),
                                src_format="NV12", matrix="bt709", full_range=True)),
    "letterbox-nv12-pair": (None, dict(fn="letterbox", yuv=(2, 36, 64), size=(41, 30),
                                       src_format="NV12")),
}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "uint8"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", list(_CASES))
def test_kernel_matches_reference(gpu_cf, rng, case, layout, dtype):
    _, spec = _CASES[case]
    spec = dict(spec)
    fn = getattr(image, spec.pop("fn"))
    if "yuv" in spec:
        n, h, w = spec.pop("yuv")
        x = _frames(rng, (n, h * 3 // 2, w))
    else:
        x = _frames(rng, spec.pop("shape"))
    kw = dict(mean=MEAN[:1] if spec.get("out_format") == "GRAY" or (
        x.ndim == 4 and x.shape[-1] == 1) else MEAN, std=0.25, layout=layout, dtype=dtype)
    kw.update(spec)
    if dtype == "uint8":
        kw.update(mean=0.0, std=1.0, scale=1.0)
    size = kw.pop("size", None)
    args = (size,) if size is not None else ()
    want = _on_numpy(fn, x, *args, **kw)
    want = want[0] if isinstance(want, tuple) else want
    r = fn(gpu_cf.asarray(x), *args, dst=_poisoned(gpu_cf, want.shape, dtype), **kw)
    got = r[0] if isinstance(r, tuple) else r
    _close(got, want, dtype, kw)


@pytest.mark.gpu
@pytest.mark.parametrize("interpolation", ["bilinear", "nearest", "area"])
def test_crop_resize_matches_reference(gpu_cf, rng, interpolation):
    x = _frames(rng, (4, 50, 70, 3))
    k = 9
    xy = rng.uniform(-10, 60, (k, 2))
    wh = rng.uniform(1, 50, (k, 2))
    boxes = np.concatenate([xy, xy + wh], 1).astype(np.float32)
    fidx = rng.integers(0, 4, k).astype(np.int32)
    kw = dict(mean=MEAN, std=STD, interpolation=interpolation)
    got = image.crop_resize(gpu_cf.asarray(x), gpu_cf.asarray(boxes), (13, 11),
                            frame_index=gpu_cf.asarray(fidx), **kw)
    want = _on_numpy(image.crop_resize, x, boxes, (13, 11), frame_index=fidx, **kw)
    _close(got, want, "float32", kw)


@pytest.mark.gpu
def test_crop_resize_nv12_matches_reference(gpu_cf, rng):
    # boxes from 4x down to upscaled, partly outside the frame, on cf_resize_nv12 (an even
    # output width): each box's warps share their words or not
    x = _frames(rng, (3, 72, 64))  # NV12, 48 x 64
    k = 9
    xy = rng.uniform(-10, 50, (k, 2))
    wh = rng.uniform(1, 60, (k, 2))
    boxes = np.concatenate([xy, xy + wh], 1).astype(np.float32)
    fidx = rng.integers(0, 3, k).astype(np.int32)
    kw = dict(mean=MEAN, std=STD, src_format="NV12")
    got = image.crop_resize(gpu_cf.asarray(x), gpu_cf.asarray(boxes), (13, 12),
                            frame_index=gpu_cf.asarray(fidx),
                            dst=_poisoned(gpu_cf, (k, 3, 13, 12), "float32"), **kw)
    want = _on_numpy(image.crop_resize, x, boxes, (13, 12), frame_index=fidx, **kw)
    _close(got, want, "float32", kw)


@pytest.mark.gpu
def test_large_batch_and_stream(gpu_cf, rng):
    x = gpu_cf.asarray(_frames(rng, (64, 32, 40, 3)))
    s = gpu_cf.Stream()
    out = image.normalize(x, mean=MEAN, std=STD, stream=s)
    s.synchronize()
    want = _on_numpy(image.normalize, to_host(x), mean=MEAN, std=STD)
    _close(out, want, "float32", dict(std=STD))


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
    got = image.denormalize(gpu_cf.asarray(x), dst=_poisoned(gpu_cf, (3, *hw, oc), "uint8"), **kw)
    want = _on_numpy(image.denormalize, x, **kw)
    _close(got, want, "uint8", {})


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_nv12_pairs_fall_back_for_a_dst_not_aligned_to_two_elements(gpu_cf, rng, dtype):
    # cf_resize_nv12 stores two elements at once; a dst one element into a buffer takes
    # cf_resize_lin (and the result is the same)
    x = _frames(rng, (2, 54, 64))
    shape = (2, 3, 20, 30)
    buf = _poisoned(gpu_cf, (int(np.prod(shape)) + 1,), dtype)
    dst = buf[1:].reshape(shape)
    assert dst.data.ptr % (2 * dst.itemsize)
    kw = dict(mean=MEAN, std=STD) if dtype != "uint8" else dict(mean=0.0, std=1.0, scale=1.0)
    got = image.resize_normalize(gpu_cf.asarray(x), (20, 30), src_format="NV12", dtype=dtype,
                                 dst=dst, **kw)
    assert got is dst
    want = _on_numpy(image.resize_normalize, x, (20, 30), src_format="NV12", dtype=dtype, **kw)
    _close(got, want, dtype, kw)


@pytest.mark.gpu
def test_unaligned_source_takes_the_general_kernel(gpu_cf, rng):
    # cf_resize_lin reads aligned words, so a source 1 byte into a buffer goes to cf_warp
    shape = (2, 36, 64, 3)
    x = _frames(rng, shape)
    buf = gpu_cf.empty(x.size + 4, dtype="uint8")
    src = buf[1:1 + x.size].reshape(shape)
    src[...] = gpu_cf.asarray(x)
    assert src.data.ptr % 4 == 1
    got = image.resize_normalize(src, (20, 30), mean=MEAN, std=STD)
    want = _on_numpy(image.resize_normalize, x, (20, 30), mean=MEAN, std=STD)
    _close(got, want, "float32", dict(std=STD))


# ------------------------------------------------------------------ torchvision
def _tv():
    tv = pytest.importorskip("torchvision.transforms.v2.functional")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    return torch, tv


@pytest.mark.gpu
@pytest.mark.parametrize("interpolation", ["bilinear", "nearest"])
@pytest.mark.parametrize("size", [(37, 53), (120, 90)])
def test_resize_matches_torchvision(gpu_cf, rng, interpolation, size):
    torch, tv = _tv()
    x = gpu_cf.asarray(_frames(rng, (3, 71, 64, 3)))
    out = image.resize(x, size, interpolation=interpolation)
    t = torch.from_dlpack(x).permute(0, 3, 1, 2)
    mode = {"bilinear": tv.InterpolationMode.BILINEAR,
            "nearest": tv.InterpolationMode.NEAREST}[interpolation]
    ref = tv.resize(t, list(size), interpolation=mode, antialias=False).permute(0, 2, 3, 1)
    diff = np.abs(to_host(out).astype(int) - ref.cpu().numpy().astype(int))
    assert diff.max() <= (1 if interpolation == "bilinear" else 0)


@pytest.mark.gpu
def test_normalize_matches_torchvision(gpu_cf, rng):
    torch, tv = _tv()
    x = gpu_cf.asarray(_frames(rng, (2, 33, 48, 3)))
    out = image.normalize(x, mean=MEAN, std=STD)
    t = tv.to_dtype(torch.from_dlpack(x).permute(0, 3, 1, 2), torch.float32, scale=True)
    ref = tv.normalize(t, MEAN, STD)
    _close(out, ref.cpu().numpy(), "float32", dict(std=STD))
