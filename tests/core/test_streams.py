"""Streams and events: API on both backends, ordering on the GPU."""

from __future__ import annotations

import gc
import re
import weakref

import numpy as np
import pytest

import cuflow
from cuflow.testing import assert_equal_host


def test_stream_api_on_every_backend(cf):
    s = cf.Stream(non_blocking=True)
    with s as entered:
        assert entered is s
        a = cf.ones((8,))
    e = s.record()
    assert isinstance(e, cf.Event)
    s.wait(e)
    s.synchronize()
    assert s.query() and e.query()
    e.synchronize()
    assert float(a.sum()) == 8.0
    assert isinstance(cf.current_stream(), cf.Stream)
    cf.synchronize()


def test_with_stream_makes_it_current_on_every_backend(cf):
    base = cf.current_stream()
    assert cf.current_stream() == base
    s, t = cf.streams(2)
    with s:
        assert cf.current_stream() == s
        with t:
            assert cf.current_stream() == t
        assert cf.current_stream() == s
    assert cf.current_stream() == base


def test_stream_and_event_arguments_are_checked_on_every_backend(cf):
    with pytest.raises(cuflow.ArgumentTypeError, match="stream="):
        cf.Event().record("not a stream")
    with pytest.raises(cuflow.ArgumentTypeError, match="event must be a cuflow.Event"):
        cf.Stream().record("not an event")
    with pytest.raises(cuflow.ArgumentTypeError, match="priority"):
        cf.streams(0, priority="high")


def test_streams_are_distinct(cf):
    ss = cf.streams(4)
    assert len(ss) == 4 and len({id(s) for s in ss}) == 4
    if cf.get_backend().name == "cupy":
        assert len({s.ptr for s in ss}) == 4
    with pytest.raises(ValueError):
        cf.streams(-1)


def test_event_elapsed_time(cf):
    start = cf.Event().record()
    x = cf.ones((1000,))
    (x * 2).sum()
    end = cf.Event().record()
    assert end.elapsed_time(end) == 0  # one timestamp (host clock or CUDA event) against itself
    assert start.elapsed_time(end) >= 0
    with pytest.raises(cuflow.CuflowError, match="recorded"):
        cf.Event().elapsed_time(end)


@pytest.mark.gpu
def test_event_elapsed_time_measures_the_work_between(gpu_cf, spin):
    s = gpu_cf.Stream()
    start = gpu_cf.Event().record(s)
    spin(s, ms=50)  # 50 ms of GPU time between the two events
    end = gpu_cf.Event().record(s)
    end.synchronize()
    assert 45 <= start.elapsed_time(end) < 5000


def test_event_elapsed_time_needs_timing_events(cf):
    timed = cf.Event().record()
    untimed = cf.Event(timing=False).record()
    with pytest.raises(cuflow.ArgumentError, match=r"timing=True; the start event \(self\) was"):
        untimed.elapsed_time(timed)
    with pytest.raises(cuflow.ArgumentError, match="timing=True; the end event was"):
        timed.elapsed_time(untimed)
    with pytest.raises(cuflow.ArgumentError, match="start and end events were"):
        untimed.elapsed_time(untimed)
    # checked before recording too: the event could never be timed
    with pytest.raises(cuflow.ArgumentError, match="timing=True"):
        cf.Event(timing=False).elapsed_time(timed)


def test_stream_kwarg_on_ops(cf):
    s = cf.Stream()
    a = cf.arange(10, dtype="float32", stream=s)
    b = cf.add(a, 1, stream=s)
    c = cf.empty(10, dtype="float32")
    cf.multiply(b, 2, dst=c, stream=s)
    t = cf.sum(c, stream=s)
    s.synchronize()
    assert float(t) == float(((np.arange(10) + 1) * 2).sum())
    with pytest.raises(TypeError, match="stream="):
        cf.add(a, 1, stream="not a stream")


@pytest.mark.gpu
def test_event_orders_dependent_work_across_streams(gpu_cf):
    """A slow kernel on stream A writes x; stream B waits on an event, then reads x."""
    import cupy

    cf = gpu_cf
    slow = cupy.RawKernel(r"""
    extern "C" __global__ void slow_fill(float* x, int n, long long cycles, float v) {
        long long t0 = clock64();
        while (clock64() - t0 < cycles) { }
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) x[i] = v;
    }""", "slow_fill")
    n = 1 << 16
    a_stream, b_stream = cf.streams(2)
    for trial in range(3):
        x = cf.zeros(n, dtype="float32")
        y = cf.empty(n, dtype="float32")
        cf.synchronize()
        with a_stream:
            slow((n // 256,), (256,), (x, np.int32(n), np.int64(50_000_000), np.float32(trial + 1)))
        ev = a_stream.record()
        b_stream.wait(ev)
        cf.multiply(x, 2, dst=y, stream=b_stream)
        b_stream.synchronize()
        assert_equal_host(y, np.full(n, 2.0 * (trial + 1), np.float32))
    # Without the wait, B would race ahead: check the race is real (so the test means something).
    x = cf.zeros(n, dtype="float32")
    y = cf.empty(n, dtype="float32")
    cf.synchronize()
    with a_stream:
        slow((n // 256,), (256,), (x, np.int32(n), np.int64(200_000_000), np.float32(5)))
    cf.multiply(x, 2, dst=y, stream=b_stream)
    b_stream.synchronize()
    raced = float(y.to_numpy().max()) == 0.0
    a_stream.synchronize()
    assert raced, "B finished after A without waiting: the ordering test would prove nothing"


def test_a_stream_block_restores_what_was_current_at_its_entry(cf):
    s1, s2 = cf.Stream(), cf.Stream()
    with s1:
        with s2:
            assert cf.current_stream() == s2
            with s1:
                assert cf.current_stream() == s1
            assert cf.current_stream() == s2
        assert cf.current_stream() == s1
    if not cf.get_backend().is_gpu:  # (CuPy's own stream objects say what they say)
        with pytest.raises(cuflow.ArgumentError, match="not entered"):
            s1.__exit__(None, None, None)


# ------------------------------------------- orderings observed with a stream held busy
def read_on(cf, s, x):
    """``x`` on the host, copied on stream ``s`` only (no other stream is waited for)."""
    with s:
        return cf.asnumpy(x, stream=s)


def test_a_bad_stream_is_refused_naming_the_call_and_the_value(cf, rng):
    host = rng.uniform(-1e300, 1e300, (3, 4))
    x = cf.asarray(host)
    here = 0 if cf.get_backend().is_gpu else "cpu"
    n = int(rng.integers(1, 100))
    frame = cf.asarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8))
    chw = cf.asarray(rng.uniform(-3, 3, (3, 8, 8)).astype(np.float32))
    box = rng.uniform(0, 8, (1, 4)).astype(np.float32)
    z = cf.asarray(host + 1j * rng.uniform(-1e300, 1e300, (3, 4)))
    twice = cf.fuse(lambda v: v * 2, kernel_name="twice")
    calls = [("Event.record", lambda v: cf.Event().record(v)),
             ("Stream.wait_stream", lambda v: cf.Stream().wait_stream(v)),
             ("darray.to_device", lambda v: x.to_device(here, stream=v)),
             ("add", lambda v: cf.add(x, float(host[0, 0]), stream=v)),  # ufunc of two
             ("sqrt", lambda v: cf.sqrt(x, stream=v)),  # of one
             ("modf", lambda v: cf.modf(x, stream=v)),  # of two outputs
             ("sum", lambda v: cf.sum(x, axis=0, stream=v)),
             ("std", lambda v: cf.std(x, stream=v)),
             ("matmul", lambda v: cf.matmul(x, x.T, stream=v)),
             ("where", lambda v: cf.where(x > 0, x, -x, stream=v)),
             ("sort", lambda v: cf.sort(x, stream=v)),
             ("zeros", lambda v: cf.zeros((2, 3), stream=v)),
             ("arange", lambda v: cf.arange(n, stream=v)),
             ("fft.fftfreq", lambda v: cf.fft.fftfreq(n, stream=v)),
             ("asarray", lambda v: cf.asarray(host, stream=v)),
             ("asarray", lambda v: cf.asarray("ones", stream=v)),  # (a str is not the name)
             ("astype", lambda v: cf.astype(x, "float32", stream=v)),
             ("copy", lambda v: cf.copy(x, stream=v)),
             ("image.normalize", lambda v: cf.image.normalize(frame, stream=v)),
             ("image.resize", lambda v: cf.image.resize(frame, (4, 4), stream=v)),
             ("image.denormalize", lambda v: cf.image.denormalize(chw, stream=v)),
             ("image.crop_resize", lambda v: cf.image.crop_resize(frame, box, 4, stream=v)),
             ("fuse(twice)", lambda v: twice(x, stream=v)),
             ("fusion.erf", lambda v: cf.fusion.erf(x, stream=v)),
             ("expm1", lambda v: cf.expm1(z, stream=v)),  # (complex: its own path)
             ("tanh", lambda v: cf.tanh(z, stream=v))]
    value = int(rng.integers(-2**63, 2**63))
    for name, call in calls:
        with pytest.raises(cuflow.ArgumentTypeError, match=rf"^cuflow\.{re.escape(name)}: "
                                                           rf"stream= must be .* got int {value}$"):
            call(value)
        with pytest.raises(cuflow.ArgumentTypeError) as info:
            call("s" * 1000)
        assert "got str 'ssss" in str(info.value) and len(str(info.value)) < 400


def test_elapsed_time_needs_events_of_one_device(dcf):
    if dcf.Device().count < 2:
        pytest.skip("needs two devices; this machine has one GPU")
    with dcf.Device(0):
        start = dcf.Event().record()
    with dcf.Device(1):
        end = dcf.Event().record()
    with pytest.raises(dcf.DeviceError, match="start event belongs to device 0 and the end "
                                              "event to device 1"):
        start.elapsed_time(end)


@pytest.mark.gpu
def test_elapsed_time_waits_for_a_start_event_still_queued(gpu_cf, spin):
    """The start event on a stream still at work, the end event on an idle one: CUDA answers
    "not ready" until both are complete, so elapsed_time waits for both."""
    cf = gpu_cf
    a, b = cf.streams(2)
    spin(a)
    start = a.record()
    end = b.record()
    ms = start.elapsed_time(end)  # a raw CUDARuntimeError (not ready) when only end is waited for
    assert isinstance(ms, float) and start.query() and end.query()


@pytest.mark.gpu
def test_the_guide_example_orders_its_streams_after_the_current_one(gpu_cf, rng, spin):
    """docs/guide/streams.md's example, under a current stream still at work: s1 reads the
    upload queued there only after it ran."""
    import cupy

    cf = gpu_cf
    host = rng.standard_normal((256, 256), dtype=np.float32)
    source = cf.asarray(host)
    cf.synchronize()
    busy = cupy.cuda.Stream(non_blocking=True)
    spin(busy)
    with busy:  # the current stream, with earlier work queued (a decoder's, say)
        a = source + 0  # the upload (a copy from pageable memory may wait on the host)
        c = cf.empty_like(a)
        s1, s2 = cf.streams(2)
        s1.wait_stream(cf.current_stream())
        x = cf.multiply(a, 2, stream=s1)
        s2.wait(s1.record())
        cf.add(x, 1, dst=c, stream=s2)
        got = read_on(cf, s2, c)
    np.testing.assert_allclose(got, host * 2 + 1, rtol=1e-6)


class _ForeignStream:
    """A stream of another library, known only by the CUDA stream protocol (cuda.core's)."""

    def __init__(self, cupy_stream):
        self.inner = cupy_stream

    def __cuda_stream__(self):
        return (0, self.inner.ptr)


@pytest.mark.gpu
def test_a_foreign_stream_is_one_cupy_stream_while_its_object_lives(gpu_cf, monkeypatch):
    """A foreign stream object maps to one CuPy stream for as long as the object lives.  A
    new wrapper per op would die with the op, and the pool, taking that for the stream's
    destruction, would make the stream's blocks wait for a device synchronize: every op
    with a PyTorch or cuda.core stream would synchronize the device."""
    import cupy

    cf = gpu_cf
    if not cf.memory._INSTALLED:
        pytest.skip("cuflow's pool is off (CUFLOW_POOL=off): CuPy keeps its own allocator")
    inner = cupy.cuda.Stream(non_blocking=True)
    fs = _ForeignStream(inner)
    wrapper = cf.core.as_cupy_stream(fs)
    assert cf.core.as_cupy_stream(fs) is wrapper and wrapper.ptr == inner.ptr
    x = cf.ones(4096, dtype=cf.float32)
    cf.multiply(x, 2.0, stream=fs)
    cf.synchronize()
    be = cf.memory.get_pool().backend
    gc.collect()
    cf.memory.empty_cache()  # (the memory of streams destroyed before: a synchronize)
    syncs = []
    monkeypatch.setattr(be, "synchronize", lambda real=be.synchronize: (syncs.append(1), real()))
    for k in range(3):
        y = cf.multiply(x, 2.0, stream=fs)
        del y
        z = cf.empty(((64 + 8 * k) << 20) // 4, dtype=cf.float32, stream=fs)  # a miss
        del z
    monkeypatch.undo()
    inner.synchronize()
    assert not syncs, f"{len(syncs)} device synchronize(s) by the pool on a foreign stream"
    ref = weakref.ref(wrapper)
    del wrapper, fs
    gc.collect()
    assert ref() is None  # the foreign object gone, its handle may become another stream's


@pytest.mark.gpu
def test_pytorch_streams_keep_one_cupy_stream(gpu_cf):
    """torch.cuda.current_stream() is a new object at each call; PyTorch never destroys its
    own streams, so they all map to one CuPy stream."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    cf = gpu_cf
    ts = torch.cuda.Stream()
    with torch.cuda.stream(ts):
        first = cf.core.as_cupy_stream(torch.cuda.current_stream())
        gc.collect()
        assert cf.core.as_cupy_stream(torch.cuda.current_stream()) is first
        assert first.ptr == ts.cuda_stream


class _Handle:
    def __init__(self, v):
        self.v = v

    def __cuda_stream__(self):
        return self.v


def test_a_stream_class_or_a_handle_that_is_no_int_is_refused(cf, rng):
    x = cf.asarray(rng.uniform(-9, 9, 5))
    for bad in (cf.Stream, _Handle, _Handle((0, "q")), _Handle(7), _Handle((0, -1)),
                type("T", (), {"cuda_stream": None})()):
        with pytest.raises(cf.ArgumentTypeError, match=r"cuflow\.add: stream= must be"):
            cf.add(x, x, stream=bad)


def test_cupys_names_on_streams_and_events(cf):
    """Stream.null, Stream.done, Event.done and Event(disable_timing=, block=): CuPy's
    spellings, for code written for cupy.cuda."""
    null = cf.Stream.null
    assert null.ptr == 0 and cf.Stream.null == null
    s = cf.Stream()
    x = cf.multiply(cf.ones(1000), 2, stream=s)
    s.synchronize()
    assert s.done and null.done
    e = cf.Event(disable_timing=True, block=True).record(s)
    e.synchronize()
    assert e.done
    with pytest.raises(cuflow.ArgumentError, match="elapsed_time|timing"):
        e.elapsed_time(cf.Event().record(s))
    for bad in ({"timing": False, "disable_timing": True}, {"blocking": True, "block": True}):
        with pytest.raises(cuflow.ArgumentError, match="pass one"):
            cf.Event(**bad)
    assert_equal_host(x, np.full(1000, 2.0))
