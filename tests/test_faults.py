"""Faults in the middle of Pipeline work: out of memory, a failing kernel, a destroyed
stream, an exception or KeyboardInterrupt thrown into the iteration.

After each: the error is clear (a CuflowError for cuflow's own faults, the caller's
exception as it is otherwise, with a note counting the frames); every frame taken from
the source was delivered once or is in ``Pipeline.undelivered``; feeding the undelivered
frames again delivers each frame exactly once overall; the pool's statistics add up and
nothing stays allocated once the pipeline is gone; the next batch works.

On the NumPy backend the faults are simulated at the image operator the Pipeline calls;
the gpu-marked tests provoke them for real (``memory.set_limit``, an invalid launch
configuration, a stream destroyed under live blocks).
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import cuflow
from cuflow import image

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SIZE = (24, 32)


def host_frames(rng, n, h=40, w=56):
    return [rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8) for _ in range(n)]


def expected(cf, frames):
    return np.stack([cf.asnumpy(image.resize_normalize(cf.asarray(f), SIZE, mean=MEAN, std=STD))
                     for f in frames])


def pipeline(cf, batch=3, **kw):
    return cf.Pipeline(SIZE, batch, mean=MEAN, std=STD, **kw)


def pool_consistent(cf):
    s = cf.memory.stats()
    assert 0 <= s["allocated_bytes.all.current"] <= s["reserved_bytes.all.current"]
    assert s["num_alloc"] - s["num_free"] == s["allocation.all.current"] >= 0
    return s["allocated_bytes.all.current"]


def check_exactly_once(cf, pipe, frames, got, err):
    """``got`` (host batches delivered before ``err``) + a rerun of the undelivered frames
    is every frame exactly once, in order; the error's note counts them."""
    n_out = sum(len(b) for b in got)
    assert pipe.frames_out == n_out
    assert pipe.undelivered == range(n_out, pipe.frames_in)
    if err is not None and pipe.frames_in > n_out:
        assert any("not delivered" in note for note in getattr(err, "__notes__", []))
    rest = frames[n_out:]
    again = [cf.asnumpy(b) for b in pipe.batches(rest)]  # the next batches work
    assert pipe.frames_in == pipe.frames_out == len(rest) and not pipe.undelivered
    allb = np.concatenate(got + again) if got or again else np.empty((0,))
    assert len(allb) == len(frames)
    np.testing.assert_allclose(allb, expected(cf, frames), rtol=1e-5, atol=1e-5)


class FailingOp:
    """``image.resize_normalize`` that raises ``exc`` at its ``at``-th call (the Pipeline's
    probe of the output shape is call 1)."""

    def __init__(self, exc, at):
        self.exc, self.at, self.calls = exc, at, 0
        self.original = image.resize_normalize

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls == self.at:
            raise self.exc
        return self.original(*args, **kwargs)


@pytest.mark.parametrize("at", [1, 2, 5, 8])
@pytest.mark.parametrize("fault", ["oom", "kernel"])
def test_a_fault_in_the_fused_op_loses_and_repeats_no_frame(cf, rng, monkeypatch, fault, at):
    frames = host_frames(rng, 10)
    before = pool_consistent(cf)
    pipe = pipeline(cf)
    exc = (cf.OutOfMemoryError("cuflow.image.resize_normalize: out of device memory (test)")
           if fault == "oom" else cf.CudaError("launching cuflow kernel image.cf_warp failed"))
    monkeypatch.setattr(image, "resize_normalize", FailingOp(exc, at))
    got = []
    b = None
    with pytest.raises(type(exc)) as e:
        for b in pipe.batches(frames):
            got.append(cf.asnumpy(b))
    assert isinstance(e.value, cf.CuflowError)
    monkeypatch.undo()
    pool_consistent(cf)
    check_exactly_once(cf, pipe, frames, got, e.value)
    # the last batch (a view of the pipeline's buffer) and the exception's traceback (the
    # frames of the failed batch) hold device memory
    del pipe, got, e, exc, b
    gc.collect()
    assert pool_consistent(cf) == before


@pytest.mark.parametrize("exc", [ValueError("the consumer failed"), KeyboardInterrupt()])
@pytest.mark.parametrize("after", [1, 2])
@pytest.mark.parametrize("reused", [True, False])
def test_an_exception_thrown_into_the_iteration(cf, rng, exc, after, reused):
    frames = host_frames(rng, 11)
    pipe = pipeline(cf, frames_reused=reused)
    gen = pipe.batches(frames)
    got = [cf.asnumpy(next(gen)) for _ in range(after)]
    with pytest.raises(type(exc)) as e:
        gen.throw(exc)
    assert e.value is exc  # the caller's own exception, as it is
    assert pipe.frames_out == 3 * after  # the batches handed out count as delivered
    check_exactly_once(cf, pipe, frames, got, e.value)


def test_a_keyboard_interrupt_from_the_source(cf, rng):
    frames = host_frames(rng, 9)

    def source():
        yield from frames[:5]
        raise KeyboardInterrupt

    pipe = pipeline(cf)
    got = []
    with pytest.raises(KeyboardInterrupt) as e:
        for b in pipe.batches(source()):
            got.append(cf.asnumpy(b))
    assert pipe.frames_in == 5 and pipe.frames_out == 3
    check_exactly_once(cf, pipe, frames, got, e.value)


def test_a_consumer_that_stops_early_leaves_nothing_behind(cf, rng):
    frames = host_frames(rng, 10)
    pipe = pipeline(cf)
    got = []
    for b in pipe.batches(frames):
        got.append(cf.asnumpy(b))
        break
    assert pipe.frames_out == 3 and len(pipe.undelivered) >= 1
    check_exactly_once(cf, pipe, frames, got, None)


def test_a_bad_frame_midway(cf, rng):
    frames = host_frames(rng, 7)
    bad = frames[:4] + [frames[4].astype(np.float32)] + frames[5:]
    pipe = pipeline(cf)
    got = []
    with pytest.raises(TypeError) as e:
        for b in pipe.batches(bad):
            got.append(cf.asnumpy(b))
    assert isinstance(e.value, cf.CuflowError) and "uint8" in str(e.value)
    assert pipe.frames_in == 5
    check_exactly_once(cf, pipe, frames, got, e.value)


def test_one_iteration_at_a_time(cf, rng):
    pipe = pipeline(cf)
    gen = pipe.batches(host_frames(rng, 7))
    next(gen)
    with pytest.raises(cuflow.pipeline.PipelineError, match="still open"):
        next(pipe.batches(host_frames(rng, 3)))
    gen.close()
    assert len(list(pipe.batches(host_frames(rng, 3)))) == 1


def test_a_consumer_stream_dropped_while_its_batch_is_in_use(cf, rng):
    # the Pipeline holds the consumer's stream while a batch is out: the caller may drop it
    frames = host_frames(rng, 7)
    pipe = pipeline(cf)
    s = cf.Stream()
    got = []
    gen = pipe.batches(frames, stream=s)
    got.append(cf.asnumpy(next(gen), stream=s))  # a batch is ready on the consumer's stream
    del s
    gc.collect()
    for b in gen:  # ready on the stream the Pipeline holds: the device's work, then read it
        cf.synchronize()
        got.append(cf.asnumpy(b))
    np.testing.assert_allclose(np.concatenate(got), expected(cf, frames), rtol=1e-5, atol=1e-5)


def test_a_stream_destroyed_while_its_blocks_are_in_use(cf, rng):
    before = pool_consistent(cf)
    s = cf.Stream()
    with s:
        a = cf.asarray(rng.uniform(-1, 1, (256, 1024)).astype(np.float32))
        b = a * 2
    cf.memory.record_stream(a, s)
    s.synchronize()
    del s
    gc.collect()  # the stream is destroyed; its blocks are still in use
    np.testing.assert_allclose(cf.asnumpy(b), cf.asnumpy(a) * 2)
    del a, b
    gc.collect()
    assert pool_consistent(cf) == before
    c = cf.ones((256, 1024), dtype=cf.float32)  # the memory is usable again
    assert float(c.sum()) == 256 * 1024


# ------------------------------------------------------------------ the real thing (GPU)
@pytest.mark.gpu
def test_out_of_memory_inside_a_batch(gpu_cf, rng):
    cf = gpu_cf
    small = host_frames(rng, 6)
    pipe = pipeline(cf, copy_threads=0)
    list(pipe.batches(small))  # warm: buffers and small device frames exist
    cf.synchronize()
    cf.memory.empty_cache()
    st = cf.memory.stats()
    limit = st["reserved_bytes.all.current"] + (1 << 20)
    # a big frame larger than the free blocks the pool still holds (in segments that earlier
    # tests of this process keep partly in use) and the limit's room together
    free = st["reserved_bytes.all.current"] - st["allocated_bytes.all.current"]
    h = 720
    while h * 1280 * 3 <= free + (2 << 20):
        h *= 2
    big = host_frames(rng, 6, h=h, w=1280)
    frames = small[:4] + big  # the big frames need new device frames: past the limit
    got = []
    cf.memory.set_limit(limit)
    try:
        with pytest.raises(cf.OutOfMemoryError) as e:
            for b in pipe.batches(frames):
                got.append(cf.asnumpy(b))
    finally:
        cf.memory.set_limit(None)
    assert isinstance(e.value, MemoryError) and "memory" in str(e.value).lower()
    assert cf.memory.stats()["num_ooms"] >= 1
    pool_consistent(cf)
    # the rest (big frames) now fit: each frame once overall
    n_out = sum(len(b) for b in got)
    assert pipe.undelivered == range(n_out, pipe.frames_in)
    again = [cf.asnumpy(b) for b in pipe.batches(frames[n_out:])]
    delivered = np.concatenate(got + again)
    assert len(delivered) == len(frames)
    want = np.stack([cf.asnumpy(image.resize_normalize(cf.asarray(f), SIZE, mean=MEAN, std=STD))
                     for f in frames])
    np.testing.assert_allclose(delivered, want, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_a_kernel_launch_that_really_fails(gpu_cf, rng, monkeypatch):
    from cuflow.raw_kernels import _launch

    cf = gpu_cf
    frames = host_frames(rng, 10)
    pipe = pipeline(cf)
    original = _launch.launch
    calls = []

    def bad_block(kernel, entry, dtype, grid, block, *rest):
        calls.append(entry)
        if len(calls) == 4:  # 4096 threads per block: the driver refuses the launch
            block = (4096, 1, 1)
        return original(kernel, entry, dtype, grid, block, *rest)

    monkeypatch.setattr(_launch, "launch", bad_block)
    got = []
    with pytest.raises(cf.CudaError) as e:
        for b in pipe.batches(frames):
            got.append(cf.asnumpy(b))
    monkeypatch.undo()
    assert e.value.__cause__ is not None and "block (4096, 1, 1)" in str(e.value)
    cf.synchronize()  # a refused launch leaves no sticky error
    check_exactly_once(cf, pipe, frames, got, e.value)
