"""Streams and events: API on both backends, ordering on the GPU."""

from __future__ import annotations

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
