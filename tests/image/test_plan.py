"""cuflow.image's plans (image/_plan.py): kernel choice; every kernel against the reference."""

from __future__ import annotations

import numpy as np
import pytest

from cuflow import image
from cuflow.image import _plan
from cuflow.image._plan import warp  # the plan a call takes: private by nature
from cuflow.testing import to_host
from image_helpers import MEAN, STD, close, on_numpy, poisoned, u8_frames


def test_bilinear_plans_take_the_fast_kernel_where_it_applies(cf, rng):
    def entry(shape, **kw):
        _, plan = warp("resize_normalize", cf.asarray(u8_frames(rng, shape)), **kw)
        return plan.lin_entry

    assert entry((2, 36, 64, 3), size=(20, 30)) == "cf_resize_lin<{T},0,3,3>"
    assert entry((2, 36, 64, 4), size=(20, 30), out_format="BGR") == "cf_resize_lin<{T},0,4,3>"
    assert entry((2, 36, 64, 3), size=(40, 70), interpolation="area") is not None  # upscale
    assert entry((2, 36, 64, 3), size=(20, 30), interpolation="area") is None  # box filter
    assert entry((2, 36, 64, 3), size=(20, 30), interpolation="nearest") is None
    assert entry((2, 36, 64, 3), size=(20, 30), out_format="GRAY") is None
    assert entry((1, 5, 7, 3), size=(3, 4)) is None  # 105 bytes: the end is not aligned
    # one row: no second tap (src_format says the one-row frame is HWC)
    assert entry((1, 1, 8, 3), size=(3, 4), src_format="RGB") is None
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
        _, plan = warp("resize_normalize", cf.asarray(u8_frames(rng, shape)), size=size,
                            src_format="NV12", **kw)
        return plan.lin_pairs

    assert pairs((2, 54, 64), (20, 30))
    assert pairs((2, 54, 64), (20, 30), flip=True, layout="NHWC", dtype="uint8")
    assert not pairs((2, 54, 64), (20, 31))  # a pair would start at an odd element
    assert not pairs((2, 9, 4), (3, 2))  # 4 columns: no 8 bytes from W - 8
    assert not pairs((2, 54, 64), (20, 30), out_format="GRAY")  # not cf_resize_lin



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
    "resize-1-row": (None, dict(fn="resize_normalize", shape=(2, 1, 9, 3), size=(3, 4),
                                src_format="RGB")),
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
        x = u8_frames(rng, (n, h * 3 // 2, w))
    else:
        x = u8_frames(rng, spec.pop("shape"))
    kw = dict(mean=MEAN[:1] if spec.get("out_format") == "GRAY" or (
        x.ndim == 4 and x.shape[-1] == 1) else MEAN, std=0.25, layout=layout, dtype=dtype)
    kw.update(spec)
    if dtype == "uint8":
        kw.update(mean=0.0, std=1.0, scale=1.0)
    size = kw.pop("size", None)
    args = (size,) if size is not None else ()
    want = on_numpy(fn, x, *args, **kw)
    want = want[0] if isinstance(want, tuple) else want
    r = fn(gpu_cf.asarray(x), *args, dst=poisoned(gpu_cf, want.shape, dtype), **kw)
    got = r[0] if isinstance(r, tuple) else r
    close(got, want, dtype, kw)


def test_mean_std_as_lists_or_arrays_share_the_plan_of_tuples(cf, rng, monkeypatch):
    """A plan is built once for the values, however the sequence is spelled (lists are
    torchvision's spelling): a list must not make the cache miss on every call."""
    monkeypatch.setattr(_plan, "_PLANS", {})  # (the cache: empty, for this test only)
    x = cf.asarray(u8_frames(rng, (2, 12, 16, 3)))
    spellings = [(list(MEAN), list(STD)), (list(MEAN), list(STD)), (MEAN, STD),
                 (np.array(MEAN), np.array(STD))]
    outs, infos = zip(*(image.letterbox(x, 8, mean=m, std=s) for m, s in spellings),
                      strict=True)
    assert len(_plan._PLANS) == 1
    assert all(i is infos[0] for i in infos)  # the cached plan's Letterbox
    for o in outs[1:]:
        np.testing.assert_array_equal(to_host(o), to_host(outs[0]))
    y = image.normalize(x, mean=MEAN, std=STD)
    backs = [image.denormalize(y, mean=m, std=s, layout="NCHW") for m, s in spellings]
    assert len(_plan._PLANS) == 3  # normalize's and denormalize's
    for b in backs[1:]:
        np.testing.assert_array_equal(to_host(b), to_host(backs[0]))
