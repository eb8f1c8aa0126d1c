"""Pipeline: host frames -> batches equal to the per-frame fused op, partial batches, streams."""

from __future__ import annotations

import re

import numpy as np
import pytest

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def host_frames(rng, n, h=48, w=64):
    return [rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8) for _ in range(n)]


def expected(cf, frames, size, **kw):
    if kw.pop("letterbox", False):
        return np.stack([cf.asnumpy(cf.image.letterbox(cf.asarray(f), size, **kw)[0])
                         for f in frames])
    return np.stack([cf.asnumpy(cf.image.resize_normalize(cf.asarray(f), size, **kw))
                     for f in frames])


@pytest.mark.parametrize("reused, threads, pinned", [
    (True, 3, False), (False, 3, False), (False, 1, False), (True, 0, False), (False, 0, False),
    (False, 3, True), (True, 3, True)])
@pytest.mark.parametrize("n, batch", [(8, 4), (7, 3), (2, 5)])
def test_batches_match_the_fused_op(cf, rng, n, batch, reused, threads, pinned):
    """Every way a frame reaches the device (pinned staging by copy threads, the driver's
    staging, a pinned frame in place), with n_staging frames ahead or one."""
    frames = host_frames(rng, n)
    if pinned:  # (page-locked on the GPU: uploaded in place)
        frames = [cf.memory.empty_pinned(f.shape, f.dtype) for f in frames]
        for f, h in zip(frames, host_frames(rng, n), strict=True):
            f[...] = h
    pipe = cf.Pipeline((32, 40), batch, mean=MEAN, std=STD, frames_reused=reused,
                       copy_threads=threads)
    got = [cf.asnumpy(b) for b in pipe.batches(frames)]
    assert [len(b) for b in got] == [batch] * (n // batch) + ([n % batch] if n % batch else [])
    want = expected(cf, frames, (32, 40), mean=MEAN, std=STD)
    np.testing.assert_allclose(np.concatenate(got), want, rtol=1e-5, atol=1e-5)
    assert pipe.frames == n


def test_letterbox_float16_nhwc(cf, rng):
    frames = host_frames(rng, 5, h=30, w=64)
    kw = dict(mean=MEAN, std=STD, layout="NHWC", dtype=cf.float16)
    pipe = cf.Pipeline(32, 4, letterbox=True, pad=114, **kw)
    got = np.concatenate([cf.asnumpy(b) for b in pipe.batches(frames)])
    assert got.shape == (5, 32, 32, 3) and got.dtype == np.float16
    assert pipe.letterbox_info is not None and pipe.letterbox_info.pad_y > 0
    want = expected(cf, frames, (32, 32), letterbox=True, pad=114, **kw)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3,
                               atol=2e-3)


def test_run_calls_the_consumer(cf, rng):
    frames = host_frames(rng, 5)
    pipe = cf.Pipeline(16, 2)
    sums = pipe.run(frames, lambda b: float(b.sum()))
    want = expected(cf, frames, (16, 16)).astype(np.float64)
    # one call per batch, in order: frames 0-1, 2-3 and the partial batch of frame 4
    np.testing.assert_allclose(sums, [want[0:2].sum(), want[2:4].sum(), want[4:].sum()],
                               rtol=1e-5)


def test_run_refuses_a_consumer_it_cannot_call_before_taking_a_frame(cf, rng):
    frames = iter(host_frames(rng, 5))
    with pytest.raises(TypeError) as e:
        cf.Pipeline(16, 2).run(frames, None)
    assert isinstance(e.value, cf.CuflowError) and "consumer" in str(e.value)
    assert len(list(frames)) == 5  # a one-shot source keeps every frame


def test_batches_checks_its_arguments_when_called(cf, rng):
    """Not at the first batch asked for: the call names itself, and takes no frame."""
    frames = iter(host_frames(rng, 2))
    pipe = cf.Pipeline(16, 2)
    with pytest.raises(cf.ArgumentTypeError, match=r"cuflow\.Pipeline\.batches: stream= must"):
        pipe.batches(frames, stream="q")
    with pytest.raises(cf.ArgumentTypeError, match=r"Pipeline\.batches: frames must be an "
                                                    r"iterable .* got int"):
        pipe.batches(5)
    assert len(list(frames)) == 2 and pipe.frames_in == 0
    with pytest.raises(cf.ArgumentTypeError, match=r"cuflow\.Bufferizer: stream= must"):
        cf.Bufferizer((2,), 2, "float32", stream="q")


def test_frames_of_another_shape_midway(cf, rng):
    frames = host_frames(rng, 3) + host_frames(rng, 3, h=20, w=30)
    pipe = cf.Pipeline(16, 4)
    got = np.concatenate([cf.asnumpy(b) for b in pipe.batches(frames)])
    np.testing.assert_allclose(got, expected(cf, frames, (16, 16)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad, err", [
    (np.zeros((4, 4, 3), np.float32), TypeError),
    ([[1, 2]], TypeError),
    (np.zeros((2, 4, 4, 3), np.uint8), ValueError),
])
def test_bad_frames(cf, bad, err):
    with pytest.raises(err, match="Pipeline"):
        list(cf.Pipeline(8, 2).batches([bad]))


@pytest.mark.parametrize("kw", [dict(size=0, batch_size=2), dict(size=(8, 8, 8), batch_size=2),
                                dict(size=8, batch_size=0), dict(size=8, batch_size=2,
                                                                 n_staging=1),
                                dict(size=8, batch_size=2, frames_reused=1),
                                dict(size=8, batch_size=2, n_stagin=3)])
def test_options_are_validated(cf, kw):
    # a value out of range is a ValueError, a value of the wrong type a TypeError; both
    # are CuflowErrors
    with pytest.raises((ValueError, TypeError), match="Pipeline") as e:
        cf.Pipeline(**kw)
    assert isinstance(e.value, cf.CuflowError)


@pytest.mark.parametrize("kw, words", [
    (dict(src_format="bogus"), "src_format"), (dict(out_format="XYZ"), "out_format"),
    (dict(dtype="foo"), "dtype"), (dict(dtype=np.int32), "dtype"),
    (dict(mean=(1, 2)), "mean needs 1 or 3"), (dict(src_format="GRAY", std=(1, 2, 3)), "std"),
    (dict(out_format="RGBA", mean=MEAN), "mean needs 1 or 4"),
    (dict(src_format="RGB", out_format="RGBA"), "out_format"),
    (dict(letterbox=True, src_format="NV12", out_format="BGRA"), "letterbox: out_format"),
])
def test_image_options_are_validated_when_the_pipeline_is_made(cf, kw, words):
    # refused before a frame is taken from the source, with cuflow.image's own errors
    with pytest.raises((cf.image.ImageFormatError, cf.image.ImageTypeError), match=words) as e:
        cf.Pipeline(8, 2, **kw)
    assert isinstance(e.value, cf.CuflowError)


@pytest.mark.parametrize("kw", [dict(dtype=None), dict(dtype="float16"),
                                dict(src_format="NV12", out_format="BGR", mean=MEAN),
                                dict(src_format="GRAY", out_format="RGB", mean=0.5),
                                dict(out_format="RGBA", mean=(1, 2, 3, 4))])
def test_image_options_that_fit_are_taken(cf, kw):
    options = cf.Pipeline(8, 2, **kw).options
    for k, v in kw.items():  # each as given (a tuple of means as floats)
        got = getattr(options, k)
        assert got == (tuple(map(float, v)) if isinstance(v, tuple) else v), (k, got)
    assert options.src_format == kw.get("src_format")


NAN = float("nan")


@pytest.mark.parametrize("kw, err, words", [
    (dict(pad="114"), "ImageTypeError", ("pad must be a real number", "'114'")),
    (dict(pad=None), "ImageTypeError", ("pad must be a real number", "None")),
    (dict(pad=True), "ImageTypeError", ("pad must be a real number", "True")),
    (dict(pad=NAN), "ImageFormatError", ("pad must be finite", "nan")),
    (dict(layout="CHW"), "ImageFormatError", ("layout must be one of", "'CHW'")),
    (dict(layout=["NCHW"]), "ImageFormatError", ("layout must be one of", "['NCHW']")),
    (dict(interpolation="cubic"), "ImageFormatError", ("interpolation must be one of",
                                                       "'cubic'")),
])
def test_options_raise_what_the_image_functions_raise(cf, rng, kw, err, words):
    """Refused when the Pipeline is made, with the error cuflow.image.letterbox raises for
    the same value (the same class and message)."""
    x = cf.asarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8))
    with pytest.raises(getattr(cf.image, err)) as want:
        cf.image.letterbox(x, 8, **kw)
    with pytest.raises(getattr(cf.image, err)) as e:
        cf.Pipeline(8, 2, letterbox=True, **kw)
    assert type(e.value) is type(want.value) and str(e.value) == str(want.value)
    for w in ("cuflow.image.letterbox", *words):
        assert w in str(e.value), f"{w!r} not in {str(e.value)!r}"


def test_a_dtype_of_another_byte_order_is_refused_when_the_pipeline_is_made(cf, rng):
    other = np.dtype("f4").newbyteorder()
    x = cf.asarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8))
    with pytest.raises(cf.image.ImageTypeError) as want:
        cf.image.resize_normalize(x, 8, dtype=other)
    with pytest.raises(cf.image.ImageTypeError) as e:
        cf.Pipeline(8, 2, dtype=other)
    assert str(e.value) == str(want.value)
    assert f"dtype must be in the machine's byte order, got {other.str}" in str(e.value)


@pytest.mark.parametrize("fmt", ["NV12", "I420"])
def test_yuv_frames_are_one_frame_per_item(cf, rng, fmt):
    h, w = 16, 20
    frame = rng.integers(0, 256, (h * 3 // 2, w), dtype=np.uint8)
    pipe = cf.Pipeline((8, 8), 4, src_format=fmt)
    assert [b.shape for b in pipe.batches([frame] * 3)] == [(3, 3, 8, 8)]
    for stacked in (rng.integers(0, 256, (2, h * 3 // 2, w), dtype=np.uint8),
                    rng.integers(0, 256, (1, 2, h * 3 // 2, w), dtype=np.uint8)):
        with pytest.raises(cf.ArgumentError) as e:
            list(pipe.batches([frame, stacked]))
        msg = str(e.value)
        assert f"src_format={fmt!r}" in msg and "(H*3//2, W)" in msg, msg
        assert str(stacked.shape) in msg, msg
        assert list(pipe.undelivered) == [0, 1]
    assert pipe.frames_in == 2 and pipe.frames_out == 0


def test_mean_std_lists_build_one_plan(cf, rng, monkeypatch):
    """Lists (torchvision's spelling) find the plan the first frame built, as tuples do."""
    from cuflow.image import _plan  # (its plan cache: private by nature)
    monkeypatch.setattr(_plan, "_PLANS", {})
    frames = host_frames(rng, 9, h=20, w=30)
    pipe = cf.Pipeline((8, 8), 4, mean=list(MEAN), std=list(STD))
    got = np.concatenate([cf.asnumpy(b) for b in pipe.batches(frames)])
    assert len(_plan._PLANS) == 1
    np.testing.assert_allclose(got, expected(cf, frames, (8, 8), mean=MEAN, std=STD),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reused, threads", [(True, 3), (False, 3), (True, 0)])
@pytest.mark.parametrize("first", [True, False])
@pytest.mark.parametrize("shape", [(0, 64, 3), (48, 64, 2), (3, 2), (3, 16, 4)])
def test_a_bad_frame_is_an_image_error_naming_its_shape(cf, rng, shape, first, reused,
                                                         threads):
    frames = ([] if first else host_frames(rng, 1)) + [np.zeros(shape, np.uint8)]
    pipe = cf.Pipeline(8, 2, frames_reused=reused, copy_threads=threads)
    with pytest.raises(cf.image.ImageFormatError, match=re.escape(str(shape))):
        list(pipe.batches(frames))
    assert list(pipe.undelivered) == list(range(len(frames)))
    assert len(list(pipe.batches(host_frames(rng, 2)))) == 1  # the next call starts clean


@pytest.mark.parametrize("exc", [ZeroDivisionError, KeyboardInterrupt, StopIteration])
def test_a_consumer_that_raises_in_run(cf, rng, exc):
    """run() ends the iteration as batches() does when an exception is thrown in: the note
    counts the frames and the next call starts clean (while the first exception, and the
    frames its traceback holds, are still alive)."""
    frames = host_frames(rng, 6)
    pipe = cf.Pipeline(16, 2)
    seen = []

    def consumer(batch):
        seen.append(len(batch))
        if len(seen) == 2:
            raise exc
        return len(batch)

    with pytest.raises(exc) as e:
        pipe.run(frames, consumer)
    n_out, n_in = pipe.frames_out, pipe.frames_in
    assert n_out == 4 and n_in > n_out  # the second batch was handed over
    assert e.value.__notes__ == [
        f"cuflow.Pipeline: {n_out} frame(s) delivered, {n_in - n_out} taken from the source "
        f"and not delivered (Pipeline.undelivered: source positions {n_out}..{n_in - 1})"]
    assert pipe.run(frames, len) == [2, 2, 2]


@pytest.mark.gpu
def test_batches_feed_torch_without_a_copy(gpu_cf, rng):
    torch = pytest.importorskip("torch")
    cf = gpu_cf
    frames = host_frames(rng, 12, h=120, w=160)
    pipe = cf.Pipeline((64, 64), 4, mean=MEAN, std=STD)
    want = expected(cf, frames, (64, 64), mean=MEAN, std=STD)
    outs = []
    for b in pipe.batches(frames):
        t = torch.from_dlpack(b)
        assert t.data_ptr() == b.data.ptr
        outs.append((t * 2).cpu().numpy())  # queued on torch's stream after the batch
    np.testing.assert_allclose(np.concatenate(outs), want * 2, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pinned", [False, True])
@pytest.mark.gpu
def test_a_producer_that_refills_one_buffer(gpu_cf, rng, pinned):
    """frames_reused=True: the producer writes the next frame into the buffer it just handed
    over; every frame must still be processed as it was when it was handed over."""
    cf = gpu_cf
    contents = host_frames(rng, 10, h=540, w=960)
    buf = cf.memory.empty_pinned(contents[0].shape, np.uint8) if pinned else contents[0].copy()

    def producer():
        for c in contents:
            np.copyto(buf, c)
            yield buf

    pipe = cf.Pipeline((64, 64), 4, mean=MEAN, std=STD)
    got = np.concatenate([cf.asnumpy(b) for b in pipe.batches(producer())])
    np.testing.assert_allclose(got, expected(cf, contents, (64, 64), mean=MEAN, std=STD),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reused", [True, False])
def test_a_consumer_that_stops_early(cf, rng, reused):
    """Breaking out of batches() leaves no host copy running into the staging buffers."""
    frames = host_frames(rng, 12, h=120, w=160)
    pipe = cf.Pipeline((32, 32), 2, frames_reused=reused)
    for _ in pipe.batches(frames):
        break
    assert not pipe._copying
    got = np.concatenate([cf.asnumpy(b) for b in pipe.batches(frames[:5])])
    np.testing.assert_allclose(got, expected(cf, frames[:5], (32, 32)), rtol=1e-5, atol=1e-5)


def test_each_run_takes_its_own_channel_layout(cf):
    p = cf.Pipeline((4, 4), 2)
    rgb, gray = np.zeros((12, 16, 3), np.uint8), np.zeros((12, 16, 1), np.uint8)
    assert [b.shape for b in p.batches([rgb] * 3)] == [(2, 3, 4, 4), (1, 3, 4, 4)]
    assert [b.shape for b in p.batches([gray] * 3)] == [(2, 1, 4, 4), (1, 1, 4, 4)]
    with pytest.raises(cf.image.ImageFormatError, match=r"frame 1 has shape \(12, 16, 3\)"):
        list(p.batches([gray, rgb]))
    assert list(p.undelivered) == [0, 1]
    assert [b.shape for b in p.batches([rgb] * 2)] == [(2, 3, 4, 4)]


def test_batches_and_sizes_are_checked_before_a_frame_is_taken(cf):
    p = cf.Pipeline((4, 4), 2)
    for src in (None, 5):
        with pytest.raises(cf.ArgumentTypeError, match="frames must be an iterable"):
            list(p.batches(src))
    with pytest.raises(cf.ArgumentError, match="at most 65535"):
        cf.Pipeline((70000, 4), 1)


def test_an_iteration_stays_open_until_it_has_recovered(cf, rng, monkeypatch):
    """A second iteration started while the first tidies up (from another thread) is refused;
    opened in between, the first one's recovery would release its batch and drop its frames."""
    frames = host_frames(rng, 5)
    pipe = cf.Pipeline(8, 2)
    tried = []
    recover = cf.Pipeline._recover

    def recover_and_start_another(self, consumer):
        if self is pipe and not tried and self.frames_out == len(frames):
            try:
                next(self.batches(frames))
            except cf.pipeline.PipelineError as e:
                tried.append(e)
        return recover(self, consumer)

    monkeypatch.setattr(cf.Pipeline, "_recover", recover_and_start_another)
    assert sum(len(b) for b in pipe.batches(frames)) == len(frames)
    assert len(tried) == 1 and "another iteration" in str(tried[0])
    assert sum(len(b) for b in pipe.batches(frames)) == len(frames)


def test_options_that_are_classes_arrays_or_0d_are_refused_or_kept_hashable(cf, rng):
    for kw, err in [(dict(mean=np.float32), cf.image.ImageTypeError),
                    (dict(std=np.float64), cf.image.ImageTypeError),
                    (dict(layout=np.array(["NCHW", "NHWC"])), cf.image.ImageFormatError)]:
        with pytest.raises(err):
            cf.Pipeline(8, 2, **kw)
    pipe = cf.Pipeline(8, 2, scale=np.array(1 / 255))  # a 0-d array: kept as its float
    assert pipe.options.scale == 1 / 255 and hash(pipe.options) == hash(cf.Pipeline(8, 2).options)
    with pytest.raises(cf.ArgumentTypeError, match="frames must be an iterable"):
        pipe.batches(np.array(2))
    assert sum(len(b) for b in pipe.batches(host_frames(rng, 3))) == 3
