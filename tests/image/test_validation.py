"""Bad arguments to the image operators: a clear error naming the argument, rule and value,
or the documented behaviour (inverted and non-finite crop boxes)."""

from __future__ import annotations

import numpy as np
import pytest

import cuflow
from cuflow import image
from cuflow.testing import to_host
from image_helpers import MEAN, STD, u8_frames

NAN, INF = float("nan"), float("inf")


def _clear(e, *words):
    assert isinstance(e, cuflow.CuflowError)
    for w in words:
        assert w in str(e), f"{w!r} not in {str(e)!r}"


@pytest.mark.parametrize("scale", [NAN, INF, -INF, 0, 0.0])
@pytest.mark.parametrize("op", ["normalize", "resize_normalize", "letterbox", "denormalize"])
def test_scale_must_be_finite_and_non_zero(cf, rng, op, scale):
    x = cf.asarray(u8_frames(rng, (2, 12, 16, 3)))
    call = {"normalize": lambda: image.normalize(x, scale=scale),
            "resize_normalize": lambda: image.resize_normalize(x, 8, scale=scale),
            "letterbox": lambda: image.letterbox(x, 8, scale=scale),
            "denormalize": lambda: image.denormalize(image.normalize(x), layout="NCHW",
                                                     scale=scale)}[op]
    with pytest.raises(image.ImageFormatError) as e:
        call()
    _clear(e.value, "scale")


@pytest.mark.parametrize("std", [[1e-320] * 3, 1e-320, [1, 1, 5e-324]])
def test_a_std_whose_coefficients_overflow_float32_is_refused(cf, rng, std):
    x = cf.asarray(u8_frames(rng, (2, 12, 16, 3)))
    with pytest.raises(image.ImageFormatError) as e:
        image.normalize(x, std=std)
    _clear(e.value, "std", "float32")


def test_mean_std_must_be_real_numbers(cf, rng):
    x = cf.asarray(u8_frames(rng, (2, 12, 16, 3)))
    with pytest.raises(image.ImageTypeError, match="mean"):
        image.normalize(x, mean="0.5")
    with pytest.raises(image.ImageTypeError, match="std"):
        image.normalize(x, std=[1, None, 1])
    with pytest.raises(image.ImageFormatError, match="mean must be finite"):
        image.normalize(x, mean=[0, NAN, 0])


@pytest.mark.parametrize("what", ["mean", "std"])
@pytest.mark.parametrize("bad, valid", [
    (["0.5", "0.5", "0.5"], None), ([b"0.5"] * 3, None), (np.array(["0.5"] * 3), None),
    ([True, True, True], [1, 1, 1]), ((1.0, True, 1.0), (1.0, 1, 1.0)), (True, 1),
    (np.array([True, True, True]), np.array([1, 1, 1]))])
def test_mean_std_elements_must_be_real_numbers(cf, rng, what, bad, valid):
    """Each value is a real number: text is not parsed and a bool is not 1, also when a
    valid call of equal values (1 == True) built its plan first."""
    x = cf.asarray(u8_frames(rng, (2, 12, 16, 3)))
    if valid is not None:
        image.normalize(x, **{what: valid})
    calls = [lambda: image.normalize(x, **{what: bad}),
             lambda: image.Norm(**{what: bad}),
             lambda: cuflow.Pipeline(8, 2, **{what: bad})]
    for call in calls:
        with pytest.raises(image.ImageTypeError) as e:
            call()
        _clear(e.value, f"{what} must be a real number or a sequence of them", repr(bad))


@pytest.mark.parametrize("pad, err", [(NAN, image.ImageFormatError),
                                      (INF, image.ImageFormatError),
                                      ("gray", image.ImageTypeError),
                                      (True, image.ImageTypeError)])
def test_letterbox_pad_is_a_finite_number(cf, rng, pad, err):
    x = cf.asarray(u8_frames(rng, (10, 20, 3)))
    with pytest.raises(err) as e:
        image.letterbox(x, 16, pad=pad)
    _clear(e.value, "pad")


def test_letterbox_pad_takes_numpy_numbers(cf, rng):
    x = cf.asarray(u8_frames(rng, (10, 20, 3)))
    out, info = image.letterbox(x, 16, pad=np.float32(0), scale=1.0, layout="NHWC")
    o = to_host(out)
    assert info.pad_y > 0 and (o[:info.pad_y] == 0).all()


@pytest.mark.parametrize("size", [(10.9, 12.7), 10.0, (10, 12.0), (True, 4), "10", (4,)])
@pytest.mark.parametrize("op", ["resize", "resize_normalize", "letterbox", "crop_resize"])
def test_sizes_are_ints_not_truncated(cf, rng, op, size):
    x = cf.asarray(u8_frames(rng, (2, 12, 16, 3)))
    boxes = cf.asarray(np.array([[0, 0, 8, 8]], np.float32))
    call = {"resize": lambda: image.resize(x, size),
            "resize_normalize": lambda: image.resize_normalize(x, size),
            "letterbox": lambda: image.letterbox(x, size),
            "crop_resize": lambda: image.crop_resize(x, boxes, size)}[op]
    with pytest.raises(image.ImageFormatError) as e:
        call()
    _clear(e.value, "size", repr(size))


def test_sizes_take_numpy_ints(cf, rng):
    x = cf.asarray(u8_frames(rng, (2, 12, 16, 3)))
    assert image.resize(x, (np.int64(10), np.int32(12))).shape == (2, 10, 12, 3)


def test_a_frame_that_may_be_chw_needs_src_format(cf, rng):
    chw = cf.asarray(u8_frames(rng, (3, 16, 4)))  # CHW: 3 channels of 16 x 4
    with pytest.raises(image.ImageFormatError) as e:
        image.normalize(chw)
    _clear(e.value, "(3, 16, 4)", "CHW", "src_format")
    # stated: a 3 x 16 RGBA frame
    assert image.normalize(chw, src_format="RGBA").shape == (3, 3, 16)
    # a frame that cannot be CHW (height 5) needs nothing
    assert image.normalize(cf.asarray(u8_frames(rng, (5, 16, 4)))).shape == (3, 5, 16)
    with pytest.raises(image.ImageFormatError, match="not CHW"):
        image.normalize(cf.asarray(u8_frames(rng, (3, 16, 4))), src_format="RGB")


def test_denormalize_refuses_a_layout_it_cannot_tell(cf, rng):
    x = u8_frames(rng, (2, 3, 16, 3))  # 3 rows of 16 RGB pixels
    nhwc = image.normalize(cf.asarray(x), mean=MEAN, std=STD, layout="NHWC", src_format="RGB")
    assert nhwc.shape == (2, 3, 16, 3)  # reads as NCHW (C=3, 16 x 3) too
    with pytest.raises(image.ImageFormatError) as e:
        image.denormalize(nhwc, mean=MEAN, std=STD)
    _clear(e.value, "NCHW", "NHWC", "layout=")
    back = image.denormalize(nhwc, mean=MEAN, std=STD, layout="NHWC")
    np.testing.assert_allclose(to_host(back).astype(int), x.astype(int), atol=1)


def test_denormalize_refuses_nhwc_read_as_the_default_nchw(cf, rng):
    x = u8_frames(rng, (2, 5, 6, 3))
    nhwc = image.normalize(cf.asarray(x), layout="NHWC")
    with pytest.raises(image.ImageFormatError) as e:
        image.denormalize(nhwc)
    _clear(e.value, "layout='NHWC'", "(2, 5, 6, 3)")
    nchw = image.normalize(cf.asarray(x))
    np.testing.assert_allclose(to_host(image.denormalize(nchw)).astype(int), x.astype(int),
                               atol=1)


def test_flags_are_bools_and_dtype_is_named(cf, rng):
    x = cf.asarray(u8_frames(rng, (2, 12, 16, 3)))
    with pytest.raises(image.ImageTypeError, match="flip"):
        image.normalize(x, flip="yes")
    with pytest.raises(image.ImageTypeError, match="full_range"):
        image.resize(x, 8, full_range=1)
    with pytest.raises(image.ImageTypeError, match="dtype"):
        image.normalize(x, dtype="not a dtype")
    with pytest.raises(image.ImageFormatError, match="dtype"):
        image.normalize(x, dtype="int64")
    with pytest.raises(image.ImageFormatError, match="layout"):
        image.normalize(x, layout=["NCHW"])


def test_an_inverted_box_mirrors_its_crop(cf, rng):
    x = cf.asarray(u8_frames(rng, (1, 12, 16, 3)))
    # bilinear at whole-pixel positions: every output is one source pixel
    kw = dict(interpolation="bilinear", scale=1.0, layout="NHWC", dtype="uint8")
    boxes = cf.asarray(np.array([[2, 2, 6, 6], [6, 6, 2, 2], [6, 2, 2, 6]], np.float32))
    up, inv, hflip = to_host(image.crop_resize(x, boxes, 4, **kw))
    np.testing.assert_array_equal(inv, up[::-1, ::-1])
    np.testing.assert_array_equal(hflip, up[:, ::-1])
    np.testing.assert_array_equal(up, to_host(x)[0, 2:6, 2:6])


@pytest.mark.parametrize("bad", [[0, 0, INF, 4], [NAN, 0, 4, 4], [0, -INF, 4, 4]])
def test_a_non_finite_box(cf, rng, bad):
    x = cf.asarray(u8_frames(rng, (2, 12, 16, 3)))
    boxes = cf.asarray(np.array([[0, 0, 8, 8], bad], np.float32))
    if not cf.get_backend().is_gpu:
        with pytest.raises(image.ImageFormatError) as e:
            image.crop_resize(x, boxes, 4)
        _clear(e.value, "finite", "box 1")
        return
    # on the GPU the boxes are not read by the host: pixels of the frame, nothing else; the
    # finite box comes out as it does alone
    kw = dict(scale=1.0, layout="NHWC", dtype="uint8")
    out = to_host(image.crop_resize(x, boxes, 4, **kw))
    assert out.shape == (2, 4, 4, 3)
    np.testing.assert_array_equal(out[0], to_host(image.crop_resize(x, boxes[:1], 4, **kw))[0])
    frames = to_host(x)
    assert frames.min() <= out[1].min() and out[1].max() <= frames.max()


def test_frame_index_must_be_integers(cf, rng):
    x = cf.asarray(u8_frames(rng, (2, 12, 16, 3)))
    boxes = cf.asarray(np.array([[0, 0, 8, 8]], np.float32))
    with pytest.raises(image.ImageTypeError) as e:
        image.crop_resize(x, boxes, 4, frame_index=cf.asarray(np.array([1.9])))
    _clear(e.value, "frame_index", "integers", "float64")
    with pytest.raises(image.ImageTypeError, match="boxes"):
        image.crop_resize(x, cf.asarray(np.ones((1, 4), bool)), 4)
    out = image.crop_resize(x, boxes, 4, frame_index=cf.asarray(np.array([1], np.int64)),
                            scale=1.0, layout="NHWC", dtype="uint8", interpolation="nearest")
    np.testing.assert_array_equal(to_host(out)[0], to_host(x)[1, 0:8:2, 0:8:2])


def test_host_frame_indices_keep_their_shape_and_an_empty_list_is_integers(cf, rng):
    x = cf.asarray(u8_frames(rng, (2, 12, 16, 3)))
    one = np.array([[0, 0, 8, 8]], np.float32)
    with pytest.raises(image.ImageFormatError) as e:  # a 0-d index is no (1,) vector
        image.crop_resize(x, one, 4, frame_index=np.array(1))
    _clear(e.value, "frame_index must be (1,) like boxes", "()")
    out = image.crop_resize(x, np.zeros((0, 4), np.float32), 4, frame_index=[])
    assert out.shape == (0, 3, 4, 4)


def test_boxes_and_frame_indices_may_come_from_the_host(cf, rng):
    x = cf.asarray(u8_frames(rng, (2, 12, 16, 3)))
    kw = dict(scale=1.0, layout="NHWC", dtype="uint8", interpolation="nearest")
    want = to_host(image.crop_resize(x, cf.asarray(np.array([[0, 0, 8, 8], [2, 2, 10, 6]],
                                                            np.float32)), 4,
                                     frame_index=cf.asarray(np.array([1, 0])), **kw))
    for boxes, idx in [([[0, 0, 8, 8], [2, 2, 10, 6]], [1, 0]),
                       (np.array([[0, 0, 8, 8], [2, 2, 10, 6]]), np.array([1, 0], np.int32))]:
        np.testing.assert_array_equal(
            to_host(image.crop_resize(x, boxes, 4, frame_index=idx, **kw)), want)
    with pytest.raises(image.ImageFormatError, match="boxes"):
        image.crop_resize(x, [[0, 0, 8, 8], [1, 2]], 4)
    with pytest.raises(image.ImageTypeError, match="boxes"):
        image.crop_resize(x, "0 0 8 8", 4)


def test_host_boxes_and_frame_indices_past_the_kernels_types_are_refused(cf, rng):
    # the kernel reads float32 coordinates and int32 frame indices: a cast would make an
    # infinite box of a finite float64 one, and wrap a frame index to another frame
    x = cf.asarray(u8_frames(rng, (2, 12, 16, 3)))
    with pytest.raises(image.ImageFormatError) as e:
        image.crop_resize(x, [[0, 0, 8, 8], [0, 0, 4e38, 8]], 4)
    _clear(e.value, "finite float32", "box 1")
    with pytest.raises(image.ImageFormatError) as e:
        image.crop_resize(x, [[0, 0, 8, 8]], 4, frame_index=np.array([2**32 + 1]))
    _clear(e.value, "frame_index", "int32", str(2**32 + 1))


def test_host_frame_indices_must_index_the_frames(cf, rng):
    # device indices are not read back (no sync); host ones would otherwise read the nearest
    # frame in silence
    x = cf.asarray(u8_frames(rng, (2, 12, 16, 3)))
    boxes = [[0, 0, 8, 8], [2, 2, 10, 6]]
    for idx in ([0, 2], np.array([-1, 1]), [5, 7]):
        with pytest.raises(image.ImageFormatError) as e:
            image.crop_resize(x, boxes, 4, frame_index=idx)
        _clear(e.value, "frame_index must index the 2 source frames", "[0, 2)",
               str(int(np.min(idx))), str(int(np.max(idx))))
    with pytest.raises(image.ImageFormatError, match=r"the 1 source frame, each in \[0, 1\)"):
        image.crop_resize(x[0], boxes, 4, frame_index=[0, 1])
    kw = dict(scale=1.0, layout="NHWC", dtype="uint8", interpolation="nearest")
    out = to_host(image.crop_resize(x, boxes, 4, frame_index=[1, 1], **kw))
    np.testing.assert_array_equal(out[0], to_host(x)[1, 0:8:2, 0:8:2])


@pytest.mark.parametrize("kw", [dict(scale=NAN), dict(std=0), dict(mean=INF),
                                dict(letterbox=True, pad=NAN), dict(layout="CHW"),
                                dict(interpolation="cubic"), dict(letterbox=1)])
def test_pipeline_options_are_checked_when_it_is_made(cf, kw):
    with pytest.raises(cuflow.CuflowError):
        cf.Pipeline(16, 2, **kw)


def test_a_cached_plan_does_not_let_an_invalid_flag_or_pad_through(cf, rng):
    # 1 == 1.0 == True: a valid call's plan must not answer an invalid call that equals it
    x = cf.asarray(u8_frames(rng, (10, 20, 3)))
    for valid, invalid in [(lambda: image.normalize(x, flip=True),
                            lambda: image.normalize(x, flip=1.0)),
                           (lambda: image.normalize(x, flip=False),
                            lambda: image.normalize(x, flip=0)),
                           (lambda: image.letterbox(x, 20, pad=1),
                            lambda: image.letterbox(x, 20, pad=True)),
                           (lambda: image.resize(x, 8, full_range=True),
                            lambda: image.resize(x, 8, full_range=1))]:
        valid()
        with pytest.raises(image.ImageTypeError):
            invalid()
    # equal valid values of other types still run, with the same result
    a = to_host(image.normalize(x, flip=True))
    np.testing.assert_array_equal(to_host(image.normalize(x, flip=np.True_)), a)
    b = to_host(image.letterbox(x, 20, pad=1)[0])
    np.testing.assert_array_equal(to_host(image.letterbox(x, 20, pad=np.float32(1))[0]), b)


def test_outputs_are_in_the_machines_byte_order(cf, rng):
    x = cf.asarray(u8_frames(rng, (8, 8, 3)))
    with pytest.raises(image.ImageTypeError, match="byte order, got >f4"):
        image.normalize(x, dtype=">f4")
    if not cf.get_backend().is_gpu:  # (CuPy arrays are of the machine's byte order only)
        # a dst of another byte order is the output contract's error, not a word on dtype=
        with pytest.raises(cf.DstDtypeError, match="dst.dtype must be float32 .* got >f4"):
            image.normalize(x, dst=np.empty((3, 8, 8), ">f4"))


def test_a_per_channel_value_count_is_stated_once_for_one_channel(cf, rng):
    x = cf.asarray(u8_frames(rng, (8, 8, 1)))
    with pytest.raises(image.ImageFormatError, match=r"mean needs 1 value \(one per channel\)"):
        image.normalize(x, mean=(1, 2, 3))


@pytest.mark.parametrize("op", ["normalize", "cvt_color"])
def test_a_source_taller_than_the_grid_is_refused(cf, rng, op):
    from cuflow.image._parse import MOST_ROWS
    call = {"normalize": lambda x: image.normalize(x),
            "cvt_color": lambda x: image.cvt_color(x, "RGB", "GRAY")}[op]
    tall = cf.asarray(u8_frames(rng, (MOST_ROWS + 1, 1, 3)))
    with pytest.raises(image.ImageFormatError) as e:
        call(tall)
    _clear(e.value, str(MOST_ROWS), str(MOST_ROWS + 1), "rows high")
    # the tallest one the grid holds runs
    x = u8_frames(rng, (MOST_ROWS, 1, 3))
    out = to_host(call(cf.asarray(x)))
    if op == "normalize":
        np.testing.assert_allclose(out, x.transpose(2, 0, 1) / 255, rtol=0, atol=1e-6)
    else:
        assert out.shape == (MOST_ROWS, 1, 1)


@pytest.mark.parametrize("op", ["normalize", "resize_normalize", "letterbox", "crop_resize"])
def test_a_uint8_output_keeps_the_0_255_scale_by_default(cf, rng, op):
    """Without scale=, a uint8 output is the frame's values resampled (not x / 255, which
    rounds to 0 and 1); a float output is x / 255."""
    x = u8_frames(rng, (12, 16, 3))
    full = np.array([[0, 0, 16, 12]], np.float32)
    call = {"normalize": lambda **k: image.normalize(cf.asarray(x), layout="NHWC", **k),
            "resize_normalize": lambda **k: image.resize_normalize(cf.asarray(x), (12, 16),
                                                                   layout="NHWC", **k),
            "letterbox": lambda **k: image.letterbox(cf.asarray(x), (12, 16), layout="NHWC",
                                                     **k)[0],
            "crop_resize": lambda **k: image.crop_resize(cf.asarray(x), cf.asarray(full),
                                                         (12, 16), layout="NHWC", **k)[0]}[op]
    np.testing.assert_array_equal(to_host(call(dtype="uint8")), x)
    np.testing.assert_allclose(to_host(call()), x / 255, rtol=0, atol=1e-6)


def test_crop_resize_of_no_boxes_given_as_an_empty_list(cf, rng):
    x = cf.asarray(u8_frames(rng, (2, 12, 16, 3)))
    for boxes in ([], np.zeros(0, np.float32), np.zeros((0, 4), np.float32)):
        assert image.crop_resize(x, boxes, 8).shape == (0, 3, 8, 8)
    assert image.crop_resize(x, [], 8, frame_index=[]).shape == (0, 3, 8, 8)


def test_a_chw_frame_is_told_to_move_its_channels_last(cf):
    with pytest.raises(image.ImageFormatError) as e:
        image.normalize(cf.zeros((3, 224, 224), dtype=cf.uint8))
    _clear(e.value, "(3, 224, 224)", "CHW", "moveaxis")
