"""cuflow.memory: the pool's logic on host memory (CPU CI), and on the GPU under CuPy."""

from __future__ import annotations

import ctypes
import gc
import itertools
import os
import random
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import cuflow
from cuflow.memory import HostBackend, Pool, _pool, round_size, size_class

# --------------------------------------------------------------------- helpers


class EventBackend(HostBackend):
    """Host memory with fake asynchronous streams: events complete when the test says so."""

    def __init__(self, capacity=None):
        super().__init__(capacity)
        self.events = []
        self.waits = []

    def record(self, stream):
        ev = {"stream": stream, "done": False}
        self.events.append(ev)
        return ev

    def done(self, event):
        return event["done"]

    def wait(self, stream, event):
        self.waits.append((stream, event["stream"]))

    def finish_all(self):
        for ev in self.events:
            ev["done"] = True


def fill(b, byte):
    ctypes.memset(b.ptr, byte, b.req)


def check(b, byte):
    data = ctypes.string_at(b.ptr, b.req)
    assert data == bytes([byte]) * b.req, f"block at {b.ptr:#x} corrupted"


class DeviceBytes:
    """fill / check / copy / set for blocks of device memory, each on the block's stream
    (asynchronous, as a kernel's use would be), checks read back and wait."""

    def __init__(self):
        import cupy

        self.rt = cupy.cuda.runtime

    def set(self, ptr, byte, n, stream):
        self.rt.memsetAsync(ptr, byte, n, stream)

    def fill(self, b, byte):
        self.set(b.ptr, byte, b.req, b.stream)

    def check(self, b, byte):
        host = np.empty(b.req, np.uint8)
        self.rt.memcpyAsync(host.ctypes.data, b.ptr, b.req, self.rt.memcpyDeviceToHost,
                            b.stream)
        self.rt.streamSynchronize(b.stream)
        assert (host == byte).all(), f"device block at {b.ptr:#x} corrupted"

    def copy(self, dst, src, n, stream):
        self.rt.memcpyAsync(dst, src, n, self.rt.memcpyDeviceToDevice, stream)


def assert_consistent(pool, live):
    """Live blocks never overlap; the pool's counters match them."""
    spans = sorted((b.ptr, b.ptr + b.size) for b in live)
    for (s0, e0), (s1, _) in zip(spans, spans[1:], strict=False):
        assert e0 <= s1, "two live blocks overlap"
    st_ = pool.stats()
    assert st_["allocated_bytes.all.current"] == sum(b.size for b in live)
    assert st_["requested_bytes.all.current"] == sum(b.req for b in live)
    assert st_["reserved_bytes.all.current"] == sum(s["size"] for s in pool.snapshot())
    for seg in pool.snapshot():  # blocks tile their segment exactly
        assert sum(blk["size"] for blk in seg["blocks"]) == seg["size"]


# ------------------------------------------------------------ the hot paths


def pytest_generate_tests(metafunc):
    """Every test of the pool's logic runs over the compiled hot path and the Python one
    (the GPU tests use the pool cuflow installed)."""
    if (metafunc.definition.get_closest_marker("gpu") is None
            and "hot_path" not in metafunc.definition.name):  # not the tests comparing them
        metafunc.parametrize("hot_path", ["compiled", "python"], indirect=True)


@pytest.fixture(autouse=True)
def hot_path(request, monkeypatch):
    which = getattr(request, "param", "installed")
    if which == "python":
        monkeypatch.setattr(_pool, "HotAlloc", None)
    elif which == "compiled":
        if os.environ.get("CUFLOW_POOL_HOTPATH", "").strip().lower() == "python":
            pytest.skip("CUFLOW_POOL_HOTPATH=python: the Python hot path only")
        assert _pool.HotAlloc is not None, (
            "the memory pool's C hot path (cuflow/memory/_hotpath.c) was not built: install "
            "with a C compiler and Python's headers (pip install -e .), or set "
            "CUFLOW_POOL_HOTPATH=python to test the Python one only")
    return which


def python_hot_path(pool):
    """``pool`` with the Python hot path (what a build without a compiler runs)."""
    saved, _pool.HotAlloc = _pool.HotAlloc, None
    try:
        pool.alloc_ptr = pool._make_alloc()
    finally:
        _pool.HotAlloc = saved
    return pool


def test_both_hot_paths_make_the_same_decisions():
    """The same random sequence (queued frees, exact-size hits, misses, streams) gives the
    same pointers and statistics through the compiled and the Python hot path."""
    if _pool.HotAlloc is None:
        pytest.fail("the compiled hot path was not built (see the hot_path fixture)")
    rng = random.Random(7)
    ops = [(rng.random() < 0.6, rng.choice([0, 100, 512, 5000, 70000, 3 << 20]),
            rng.randrange(3), rng.randrange(10**6)) for _ in range(3000)]
    results = []
    for pool in (Pool(HostBackend()), python_hot_path(Pool(HostBackend()))):
        segs, live, trace = {}, [], []  # where each block lies: (segment's rank, offset)
        for is_alloc, n, stream, pick in ops:
            if is_alloc or not live:
                p = pool.alloc_ptr(n, stream)
                seg = pool._live[p].seg
                trace.append((segs.setdefault(id(seg), len(segs)), p - seg.ptr))
                live.append(p)
            else:
                pool._freed[live.pop(pick % len(live))] = 0
        s = pool.stats()
        results.append((trace, {k: v for k, v in s.items() if k != "backend"}))
    assert type(Pool(HostBackend()).alloc_ptr).__name__ == "HotAlloc"
    assert results[0] == results[1]


def test_compiled_hot_path_checks_its_arguments():
    if _pool.HotAlloc is None:
        pytest.fail("the compiled hot path was not built (see the hot_path fixture)")
    pool = Pool(HostBackend())
    with pytest.raises(TypeError, match="2 positional"):
        pool.alloc_ptr(100)
    with pytest.raises(TypeError, match="capsule"):
        _pool.HotAlloc(pool, _pool.Block, "not a capsule")
    with pytest.raises(TypeError, match="__slots__"):
        _pool.HotAlloc(pool, type("NotABlock", (), {}))
    lock = _pool.PoolLock()
    with pytest.raises(RuntimeError, match="un-acquired"):
        lock.release()
    assert lock.acquire() and lock.acquire(False) and lock._is_owned()  # reentrant
    lock.release()
    lock.release()
    assert not lock._is_owned()
    held = threading.Event()
    done = threading.Event()

    def other():
        with lock:
            held.set()
            done.wait()

    t = threading.Thread(target=other)
    t.start()
    held.wait()
    assert lock.acquire(False) is False  # held by the other thread
    done.set()
    t.join()
    assert lock.acquire(False) is True
    lock.release()
    with pytest.raises(ValueError, match="negative"):
        pool.alloc_ptr(-5, 0)
    assert not pool._lock._is_owned()  # released on the error path


# ----------------------------------------------------------------- the logic


def test_round_size_and_classes():
    assert round_size(0) == 512 and round_size(1) == 512 and round_size(513) == 1024
    assert round_size((1 << 20) + 1) == (1 << 20) + (1 << 17)
    for n in [1, 511, 512, 513, 4096, 5000, 1 << 20, 3 << 20, 123456789]:
        assert round_size(n) >= n
        c = size_class(n)
        assert c >= n and c < 2 * max(n, 512)  # four classes per power of two


def test_hit_split_coalesce_and_stats():
    pool = Pool(HostBackend())
    a = pool.alloc(1000, 0)
    b = pool.alloc(3000, 0)
    c = pool.alloc(1000, 0)
    assert pool.stats()["num_device_alloc"] == 1  # one 2 MiB segment, split three times
    assert a.seg is b.seg is c.seg
    assert_consistent(pool, [a, b, c])
    pool.free(b)
    assert pool.stats()["inactive_split_bytes.all.current"] > 0
    b2 = pool.alloc(3000, 0)
    assert b2.ptr == b.ptr  # exact-size hit
    for x in (a, b2, c):
        pool.free(x)
    (seg,) = pool.snapshot()
    assert len(seg["blocks"]) == 1 and seg["blocks"][0]["state"] == "free"  # fully coalesced
    s = pool.stats()
    assert s["allocated_bytes.all.current"] == 0 and s["allocated_bytes.all.peak"] >= 5120
    assert s["cache_hits"] >= 3 and s["cache_misses"] == 1
    assert sum(v["hits"] for v in s["size_classes"].values()) == s["cache_hits"]
    pool.reset_peak_stats()
    assert pool.stats()["allocated_bytes.all.peak"] == 0
    assert pool.empty_cache() == 1 and pool.stats()["reserved_bytes.all.current"] == 0
    assert "reserved" in cuflow.memory.Pool(HostBackend()).summary()


def test_free_twice_is_an_error():
    pool = Pool(HostBackend())
    b = pool.alloc(10, 0)
    pool.free(b)
    with pytest.raises(RuntimeError, match="twice"):
        pool.free(b)


def test_limit_and_oom_message_keep_live_data():
    pool = Pool(HostBackend(), limit=4 << 20)
    a = pool.alloc(3 << 20, 0)
    fill(a, 0xAB)
    with pytest.raises(cuflow.OutOfMemoryError) as ei:
        pool.alloc(3 << 20, 0)
    msg = str(ei.value)
    for word in ("requested", "reserves", "in use", "largest free block", "set_limit"):
        assert word in msg
    assert isinstance(ei.value, MemoryError)
    check(a, 0xAB)  # nothing already allocated is lost
    assert pool.stats()["num_ooms"] == 1


def test_oom_retry_releases_cache():
    backend = HostBackend(capacity=6 << 20)
    pool = Pool(backend)
    pool.free(pool.alloc(4 << 20, 1))  # cached on stream 1: no other stream can use it as is
    backend.cheap_release = False  # like cudaMalloc: release only under pressure
    b = pool.alloc(5 << 20, 2)
    assert b.size >= 5 << 20
    assert pool.stats()["num_alloc_retries"] == 1


def test_record_stream_defers_reuse_until_event():
    be = EventBackend()
    pool = Pool(be)
    a = pool.alloc(4096, 1)
    pool.record_stream(a, 2)
    pool.free(a)
    b = pool.alloc(4096, 1)
    assert b.seg is not a.seg or b.ptr != a.ptr  # not handed out while stream 2 may use it
    assert pool.stats()["num_pending_cross_stream"] == 1
    be.finish_all()
    pool.free(b)
    pool.alloc(1 << 21, 1)  # a miss processes completed events
    assert pool.stats()["num_pending_cross_stream"] == 0


def test_cross_stream_borrow_orders_with_event():
    be = EventBackend()
    pool = Pool(be)
    pool.free(pool.alloc(1 << 20, 1))
    b = pool.alloc(1 << 20, 2)  # borrowed from stream 1's cache
    assert pool.stats()["num_device_alloc"] == 1
    assert (2, 1) in be.waits  # stream 2 waits for stream 1's event: no host sync
    assert b.stream == 2


def test_private_pool_isolated_and_released():
    pool = Pool(HostBackend())
    owner = pool.begin_private(7)
    g = pool.alloc(1 << 20, 7)
    tmp = pool.alloc(1 << 20, 7)
    pool.free(tmp)  # freed during capture: back to the private pool only
    pool.end_private(7)
    x = pool.alloc(1 << 20, 7)
    assert x.seg.owner is None and x.seg is not g.seg and x.seg is not tmp.seg
    assert pool.stats()["private_pools"] == 1
    pool.close_private(owner)
    assert pool.stats()["private_pools"] == 1  # g still alive
    pool.free(g)
    assert pool.stats()["private_pools"] == 0
    assert all(s["private_pool"] is None for s in pool.snapshot())


@pytest.mark.parametrize("free_first", [False, True])
def test_closed_graph_pool_is_released_after_its_stream_dies(free_first):
    """A graph's private segment goes back once the graph is closed and its blocks are
    free, even when the capture stream was destroyed first (its blocks are orphans)."""
    be = HostBackend()
    pool = Pool(be)
    owner = pool.begin_private(7)
    b = pool.alloc(3 << 20, 7)
    pool.end_private(7)
    pool._stream_gone(7)
    if free_first:
        pool.free(b)
    pool.flush_frees()
    pool.close_private(owner)
    if not free_first:
        assert pool.stats()["private_pools"] == 1  # its output is still alive
        pool.free(b)
    assert pool.stats()["private_pools"] == 0 and be.in_use == 0


class CaptureBackend(EventBackend):
    """Fake streams that may be capturing a graph, with CUDA's rules: while any stream
    captures, nothing frees device memory or synchronizes the device, and no event is
    recorded on or awaited by a capturing stream outside the captured work; events are
    recorded on and awaited by existing streams only (``streams``, when the test sets it)."""

    def __init__(self, capacity=None):
        super().__init__(capacity)
        self.capturing = set()
        self.streams = None
        self.syncs = 0

    def _legal(self, what, stream=None):
        bad = self.capturing if stream is None else self.capturing & {stream}
        assert not bad, f"{what} while stream(s) {sorted(bad)} capture a graph"
        assert stream is None or self.streams is None or stream in self.streams, (
            f"{what} on stream {stream}, which does not exist")

    def free(self, ptr, nbytes, stream):
        self._legal("a device free")
        super().free(ptr, nbytes, stream)

    def synchronize(self):
        self._legal("a device synchronize")
        self.syncs += 1
        self.finish_all()

    def record(self, stream):
        self._legal("an event record", stream)
        return super().record(stream)

    def wait(self, stream, event):
        self._legal("an event wait", stream)
        super().wait(stream, event)


def begin_capture(pool, be, stream):
    be.capturing.add(stream)
    return pool.begin_private(stream)


def end_capture(pool, be, stream):
    be.capturing.discard(stream)  # CUDA ends the capture, then cuflow.graph tells the pool
    pool.end_private(stream)


@pytest.mark.parametrize("stream_dies", [False, True])
def test_closed_graph_memory_freed_during_a_capture_goes_back_when_it_ends(stream_dies):
    """A closed graph's last array freed while another graph captures (a garbage collection
    can do that at any time): nothing is freed during the capture, and the memory goes back
    when it ends, also when the first graph's stream was destroyed (its blocks are orphans)."""
    be = CaptureBackend()
    pool = Pool(be)
    g1 = begin_capture(pool, be, 7)
    out = pool.alloc(3 << 20, 7)
    end_capture(pool, be, 7)
    pool.close_private(g1)
    if stream_dies:
        pool._stream_gone(7)
    g2 = begin_capture(pool, be, 8)
    pool.free(out)
    tmp = pool.alloc(1000, 8)  # the capture goes on
    assert pool.stats()["private_pools"] == 2
    end_capture(pool, be, 8)
    assert pool.stats()["private_pools"] == 1  # g1's segment went back
    pool.close_private(g2)
    pool.free(tmp)
    assert pool.stats()["private_pools"] == 0 and be.in_use == 0


def test_graph_closed_during_a_capture_goes_back_when_it_ends():
    """Closing a graph while another captures (its ``__del__`` may run then) frees nothing
    until the capture ends; nor does ``empty_cache``.  A graph that allocated nothing is
    forgotten at once."""
    be = CaptureBackend()
    pool = Pool(be)
    g1 = begin_capture(pool, be, 7)
    pool.free(pool.alloc(3 << 20, 7))
    end_capture(pool, be, 7)
    nothing = begin_capture(pool, be, 9)
    end_capture(pool, be, 9)
    g2 = begin_capture(pool, be, 8)
    pool.close_private(g1)
    pool.close_private(nothing)
    assert pool.stats()["private_pools"] == 2  # g1 (waiting for the capture's end) and g2
    assert pool.empty_cache() == 0
    end_capture(pool, be, 8)
    pool.close_private(g2)
    assert pool.stats()["private_pools"] == 0 and be.in_use == 0


class FakeStream:
    """Stands for a CuPy stream object: the pool watches its life through a weak reference."""


def test_queued_free_after_its_use_stream_died_records_no_event_there():
    """The hot paths process queued frees (CuPy's hook queues them) before anything else:
    a stream destroyed meanwhile is forgotten first, so no event is recorded on it."""
    be = CaptureBackend()
    be.streams = {0, 7}
    pool = Pool(be)
    streams = {7: FakeStream()}
    b = pool.alloc(1 << 20, 0)
    pool.record_stream(b, 7, streams[7])
    del streams[7]
    be.streams.discard(7)
    pool._freed[b.ptr] = None
    again = pool.alloc(1 << 20, 0)
    assert again.ptr != b.ptr or be.syncs > 0


def test_dead_streams_block_never_goes_to_a_new_stream_with_its_handle():
    """CUDA may give a destroyed stream's handle to a new stream.  A block lent on the old
    stream and freed after that may still be in use by the old stream's work: it is reused
    only after a device synchronize, never through the new stream's cache."""
    be = CaptureBackend()
    pool = Pool(be)
    streams = {}
    pool._on_new_stream = lambda ptr: pool.watch_stream(streams[ptr], ptr)
    streams[7] = FakeStream()
    old = pool.alloc(1 << 20, 7)
    del streams[7]  # destroyed (its work may still run)
    streams[7] = FakeStream()  # a new stream with the same handle
    pool.alloc(1000, 7)  # its first allocation: the pool learns both facts
    pool.free(old)
    again = pool.alloc(1 << 20, 7)
    assert again.ptr != old.ptr or be.syncs > 0


def test_block_used_by_a_dead_stream_waits_for_a_device_synchronize():
    """A block used on a stream that was destroyed since: no event can be recorded on that
    stream any more, so the block is reused after a device synchronize."""
    be = CaptureBackend()
    be.streams = {0, 7}
    pool = Pool(be)
    streams = {7: FakeStream()}
    pool._on_new_stream = lambda ptr: pool.watch_stream(streams[ptr], ptr)
    b = pool.alloc(1 << 20, 0)
    pool.record_stream(b, 7, streams[7])
    del streams[7]
    be.streams.discard(7)
    pool.free(b)
    again = pool.alloc(1 << 20, 0)
    assert again.ptr != b.ptr or be.syncs > 0


def test_warmup_then_no_device_allocations():
    pool = Pool(HostBackend())
    sizes = [1 << 20, 3 << 20, 5000, 70000]
    pool.warmup(sizes, stream=0)
    n = pool.stats()["num_device_alloc"]
    for _ in range(5):
        blocks = [pool.alloc(s, 0) for s in sizes]
        for b in blocks:
            pool.free(b)
    assert pool.stats()["num_device_alloc"] == n


def test_module_warmup_keeps_the_peak(cf):
    def step(n):
        a = cf.empty((n, 256), dtype=cf.float32)
        b = cf.empty((n, 512), dtype=cf.float32)
        del a
        c = cf.empty((n, 1024), dtype=cf.float32)
        del b, c

    if cf.get_backend().name == "numpy":
        pytest.skip("NumPy allocates host memory itself; the pool serves the CuPy backend")
    pool = cf.memory.Pool(cf.memory.DriverPoolBackend(0))  # fresh: no other test's arrays
    info = cf.memory.warmup(step, 2048, pool=pool)
    assert info["peak_bytes"] >= 2048 * (512 + 1024) * 4
    n = pool.stats()["num_device_alloc"]
    with cf.memory.using_pool(pool):
        for k in (2048, 1000, 1500, 17):
            step(k)
    assert pool.stats()["num_device_alloc"] == n
    assert pool.stats()["allocated_bytes.all.current"] == 0


def test_hot_path_reuses_exact_size_and_drains_queued_frees():
    pool = Pool(HostBackend())
    p = pool.alloc_ptr(5000, 3)
    pool._freed[p] = 0  # how CuPy's hook frees: a C-level dict store, processed later
    assert pool.alloc_ptr(5000, 3) == p  # the same block, from the exact-size cache
    q = pool.alloc_ptr(5000, 4)
    assert q != p  # another stream does not take it unordered
    pool._freed[p] = pool._freed[q] = 0
    s = pool.stats()  # reports process the queue first
    assert s["allocated_bytes.all.current"] == 0 and s["allocation.all.current"] == 0
    assert s["num_alloc"] == s["num_free"] == 3
    assert s["cache_hits"] == 2 and s["cache_misses"] == 1  # stream 4 borrowed, event-ordered
    (seg,) = pool.snapshot()  # coalesced per stream for exact reports
    assert {b["state"] for b in seg["blocks"]} == {"free"} and len(seg["blocks"]) == 2


@settings(max_examples=40, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.sampled_from([100, 512, 5000, 70000, 3 << 20]),
                              st.integers(0, 2), st.integers(0, 10**6)), max_size=80))
def test_hot_path_queued_frees_never_overlap(ops):
    """The CuPy hook's path: alloc_ptr, frees queued as dict stores, drained by the next
    allocation (the block just freed may be handed straight back)."""
    pool = Pool(HostBackend())
    live = {}  # ptr -> (nbytes, stream, byte)
    for k, (is_alloc, n, stream, pick) in enumerate(ops):
        if is_alloc or not live:
            p = pool.alloc_ptr(n, stream)
            assert p not in live
            ctypes.memset(p, k % 251, n)
            live[p] = (n, k % 251)
        else:
            p = list(live)[pick % len(live)]
            pool._freed[p] = 0
            del live[p]
        for q, (m, byte) in live.items():
            assert ctypes.string_at(q, m) == bytes([byte]) * m
    s = pool.stats()
    assert s["requested_bytes.all.current"] == sum(m for m, _ in live.values())
    assert s["allocated_bytes.all.current"] == sum(round_size(m) for m, _ in live.values())
    assert s["allocation.all.current"] == len(live)


def test_free_during_a_pool_operation_is_queued():
    pool = Pool(HostBackend())
    a, b = pool.alloc(100, 0), pool.alloc(100, 0)
    pool._busy = True  # as if a finalizer ran inside the pool
    pool.free(a)
    assert pool.allocated == 2 * 512  # not processed yet
    pool._busy = False
    pool.free(b)
    assert pool.allocated == 0
    with pytest.raises(RuntimeError, match="twice"):
        pool.free(a)


def test_large_request_does_not_split_a_much_larger_block():
    be = HostBackend()
    pool = Pool(be)
    big = pool.alloc(64 << 20, 0)
    pool.free(big)
    small = pool.alloc(8 << 20, 0)  # 64 MiB is more than twice 8 MiB: released, new segment
    assert small.seg is not big.seg and small.seg.nbytes == 8 << 20
    assert be.in_use == 8 << 20
    pool.free(small)
    pool.warmup([64 << 20])  # a warm-up's segments are kept and split by any request
    kept = pool.alloc(8 << 20, 0)
    assert kept.seg.keep and kept.seg.nbytes == 64 << 20
    pool.free(kept)
    assert pool.empty_cache() >= 1 and be.in_use == 0


def test_large_segments_are_whole_granules():
    """A backend that reserves in granules gets whole ones; the pool splits the rest."""

    class Granular(HostBackend):
        segment_granularity = 4 << 20

    be = Granular()
    pool = Pool(be)
    a = pool.alloc(5 << 20, 0)
    assert a.seg.nbytes == 8 << 20 and be.in_use == 8 << 20
    b = pool.alloc(3 << 20, 0)  # the granule's rest: no new segment
    assert b.seg is a.seg and be.device_allocs == 1
    small = pool.alloc(1000, 0)  # small requests keep their own small segments
    assert small.seg.nbytes == 2 << 20
    for x in (a, b, small):
        pool.free(x)
    assert pool.stats()["allocated_bytes.all.current"] == 0


@pytest.mark.parametrize("name", ["R0", "G", "S"])
def test_issue_traces_footprint_on_host_memory(name):
    """The placement policy on the issue's traces, with a backend that reuses released
    memory perfectly: what the pool itself holds stays near the live bytes."""
    from cuflow.bench import _traces

    class AddressOnly(HostBackend):  # addresses and accounting, no host memory behind them
        next_ptr = 1 << 40

        def alloc(self, nbytes, stream):
            ptr, self.next_ptr = self.next_ptr, self.next_ptr + nbytes + (1 << 21)
            self.in_use += nbytes
            self.peak = max(self.peak, self.in_use)
            return ptr

        def free(self, ptr, nbytes, stream):
            self.in_use -= nbytes

    its = {"R0": _traces.trace_r0, "G": _traces.trace_g, "S": _traces.trace_s}[name]()
    be = AddressOnly()
    pool = Pool(be)
    live = {}
    for ops in its:
        for op, key, n in ops:
            if op == "a":
                live[key] = pool.alloc(n, 0)
            else:
                pool.free(live.pop(key))
    assert be.peak / _traces.peak_requested(its) <= 1.1
    assert pool.stats()["allocated_bytes.all.current"] == 0


def test_limit_env_parsing():
    from cuflow.memory._limit import parse_limit_env as _parse_limit_env

    be = HostBackend(capacity=1000)
    assert _parse_limit_env("8GiB", be) == 8 << 30
    assert _parse_limit_env("512MB", be) == 512 * 10**6
    assert _parse_limit_env("0.5", be) == 500
    assert _parse_limit_env("25%", be) == 250
    assert _parse_limit_env("123456", be) == 123456
    with pytest.raises(ValueError, match="CUFLOW_MEMORY_LIMIT"):
        _parse_limit_env("lots", be)


def test_threads_never_share_a_block():
    stress_threads(Pool(HostBackend()), fill, check)


def stress_threads(pool, fill, check):
    """8 threads allocating, filling, checking and freeing at once on one pool."""
    errors = []

    def worker(seed):
        rng = random.Random(seed)
        live = []
        try:
            for _ in range(400):
                if live and rng.random() < 0.5:
                    b, byte = live.pop(rng.randrange(len(live)))
                    check(b, byte)
                    pool.free(b)
                else:
                    b = pool.alloc(rng.choice([100, 512, 3000, 70000, 1 << 20]), 0)
                    byte = rng.randrange(256)
                    fill(b, byte)
                    live.append((b, byte))
            for b, byte in live:
                check(b, byte)
                pool.free(b)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[0]
    assert pool.stats()["allocated_bytes.all.current"] == 0


class PoolMachine(RuleBasedStateMachine):
    """Random allocate / free / resize / stream / record_stream sequences; every live block
    carries its own byte pattern, checked after every step."""

    def __init__(self):
        super().__init__()
        self.be = EventBackend()
        self.pool = Pool(self.be, limit=64 << 20)
        self.live = []  # (block, byte)
        self.counter = 0

    # what the rules do to memory and streams (host memory here; DevicePoolMachine's
    # device memory below)
    def fill(self, b, byte):
        fill(b, byte)

    def check(self, b, byte):
        check(b, byte)

    def move(self, nb, b, n, byte):
        """nb takes b's first n bytes, and byte after them."""
        ctypes.memmove(nb.ptr, b.ptr, n)
        ctypes.memset(nb.ptr + n, byte, nb.req - n)

    def stream(self, i):
        return i

    def use(self, b, byte, stream):
        """Work on another stream uses b."""
        self.pool.record_stream(b, stream)

    def complete(self):
        self.be.finish_all()

    def _pattern(self):
        self.counter = (self.counter + 1) % 251
        return self.counter + 1

    @rule(size=st.one_of(st.integers(1, 5000), st.integers(1 << 19, 3 << 20)),
          stream=st.integers(0, 2))
    def allocate(self, size, stream):
        try:
            b = self.pool.alloc(size, self.stream(stream))
        except cuflow.OutOfMemoryError:
            return
        byte = self._pattern()
        self.fill(b, byte)
        self.live.append((b, byte))

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 10**6))
    def free(self, i):
        b, byte = self.live.pop(i % len(self.live))
        self.check(b, byte)
        self.pool.free(b)

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 10**6))
    def free_queued(self, i):
        """Free the way CuPy's hook does: queue the pointer; the next allocation processes
        it (and hands the block straight back when it asks for the same size)."""
        b, byte = self.live.pop(i % len(self.live))
        self.check(b, byte)
        self.pool._freed[b.ptr] = 0

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 10**6), size=st.integers(1, 3 << 20))
    def resize(self, i, size):
        b, byte = self.live.pop(i % len(self.live))
        try:
            nb = self.pool.alloc(size, b.stream)
        except cuflow.OutOfMemoryError:
            self.live.append((b, byte))
            return
        self.move(nb, b, min(b.req, nb.req), byte)
        self.pool.free(b)
        self.live.append((nb, byte))

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 10**6), stream=st.integers(0, 2))
    def use_on_stream(self, i, stream):
        self.use(*self.live[i % len(self.live)], self.stream(stream))

    @rule()
    def events_complete(self):
        self.complete()

    @rule()
    def empty_cache(self):
        self.pool.empty_cache()

    @invariant()
    def intact(self):
        for b, byte in self.live:
            self.check(b, byte)
        assert_consistent(self.pool, [b for b, _ in self.live])


PoolMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
test_pool_state_machine = PoolMachine.TestCase


class PythonHotPathPoolMachine(PoolMachine):
    """The same sequences through the Python hot path."""

    def __init__(self):
        super().__init__()
        python_hot_path(self.pool)


PythonHotPathPoolMachine.TestCase.settings = PoolMachine.TestCase.settings
test_python_hot_path_pool_state_machine = PythonHotPathPoolMachine.TestCase


class GranularEventBackend(EventBackend):
    segment_granularity = 4 << 20  # large segments of whole 4 MiB granules, split by the pool


class GranularPoolMachine(PoolMachine):
    """The same sequences over a backend whose large segments are whole granules."""

    def __init__(self):
        super().__init__()
        self.be = GranularEventBackend()
        self.pool = Pool(self.be, limit=64 << 20)


GranularPoolMachine.TestCase.settings = PoolMachine.TestCase.settings
test_granular_pool_state_machine = GranularPoolMachine.TestCase


class GraphPoolMachine(PoolMachine):
    """The same sequences with graphs: captures begin and end on streams 1 and 2 (their
    allocations go to private pools), graphs are closed at any time (during other captures
    too), and streams are destroyed, a new one sometimes getting the dead one's handle.
    CUDA's rules hold throughout (see CaptureBackend), and with no capture running a closed
    graph's memory is back once none of it is lent or waits for another stream's work."""

    def __init__(self):
        super().__init__()
        self.be = CaptureBackend()
        self.pool = Pool(self.be, limit=64 << 20)
        self.handles = [0, 11, 12]  # stream i's handle (1 and 2 would be CUDA's default ones)
        self.objs = {11: FakeStream(), 12: FakeStream()}  # handle -> the live stream
        self.pool._on_new_stream = lambda h: self.pool.watch_stream(self.objs[h], h)
        self.be.streams = {0, 11, 12}
        self.next_handle = 13
        self.capturing = {}  # stream index -> private pool
        self.graphs = []  # private pools of ended captures, not closed

    def stream(self, i):
        return self.handles[i]

    def use(self, b, byte, stream):
        self.pool.record_stream(b, stream, self.objs.get(stream))

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 10**6), size=st.integers(1, 3 << 20))
    def resize(self, i, size):
        b = self.live[i % len(self.live)][0]
        if b.stream != _pool.DEAD_STREAM:  # a dead stream's block has no stream to resize on
            super().resize(i, size)

    @rule(i=st.integers(1, 2))
    def begin_capture(self, i):
        if i not in self.capturing:
            self.capturing[i] = begin_capture(self.pool, self.be, self.handles[i])

    @precondition(lambda self: self.capturing)
    @rule(k=st.integers(0, 1))
    def end_capture(self, k):
        i = sorted(self.capturing)[k % len(self.capturing)]
        end_capture(self.pool, self.be, self.handles[i])
        self.graphs.append(self.capturing.pop(i))

    @precondition(lambda self: self.graphs)
    @rule(k=st.integers(0, 10**6))
    def close_graph(self, k):
        self.pool.close_private(self.graphs.pop(k % len(self.graphs)))

    @rule(i=st.integers(1, 2), reuse=st.booleans())
    def stream_dies(self, i, reuse):
        if i in self.capturing:  # a capturing stream is alive
            return
        h = self.handles[i]
        del self.objs[h]  # its finalizer tells the pool
        self.be.streams.discard(h)
        if not reuse:
            h = self.handles[i] = self.next_handle
            self.next_handle += 1
        self.objs[h] = FakeStream()
        self.be.streams.add(h)

    @invariant()
    def closed_graphs_released(self):
        if self.capturing:
            return
        held = {b.seg.owner for b in  # lent (queued frees included) or waiting for events
                itertools.chain(self.pool._live.values(), self.pool._pending)}
        for owner, info in self.pool._private.items():
            assert not info["closed"] or owner in held, (
                f"closed graph {owner}'s memory is free but not released")


GraphPoolMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=50,
                                              deadline=None)
test_graph_pool_state_machine = GraphPoolMachine.TestCase


class DevicePoolMachine(PoolMachine):
    """The same sequences on device memory from the driver's pool, over the legacy stream
    and two others: patterns are written and read back on each block's stream, and a use
    on another stream is a write of the block's pattern in flight there."""

    def __init__(self):
        import cupy

        super().__init__()
        self.dev = DeviceBytes()
        self.streams = [None, cupy.cuda.Stream(non_blocking=True),
                        cupy.cuda.Stream(non_blocking=True)]
        self.be = cuflow.memory.DriverPoolBackend(self.dev.rt.getDevice())
        self.pool = Pool(self.be, limit=256 << 20)

    def fill(self, b, byte):
        self.dev.fill(b, byte)

    def check(self, b, byte):
        self.dev.check(b, byte)

    def move(self, nb, b, n, byte):
        self.dev.copy(nb.ptr, b.ptr, n, b.stream)  # nb is on b's stream
        self.dev.set(nb.ptr + n, byte, nb.req - n, nb.stream)

    def stream(self, i):
        return 0 if i == 0 else self.streams[i].ptr

    def use(self, b, byte, stream):
        self.dev.set(b.ptr, byte, b.req, stream)
        super().use(b, byte, stream)

    def complete(self):
        self.dev.rt.deviceSynchronize()

    def teardown(self):
        for b, byte in self.live:
            self.check(b, byte)
            self.pool.free(b)
        self.dev.rt.deviceSynchronize()
        self.pool.empty_cache()
        self.be.trim()


DevicePoolMachine.TestCase.settings = settings(max_examples=30, stateful_step_count=40,
                                               deadline=None)
test_device_pool_state_machine = pytest.mark.gpu(DevicePoolMachine.TestCase)


# ---------------------------------------------------------------------- GPU


@pytest.fixture
def pooled(gpu_cf):
    if not gpu_cf.memory._INSTALLED:
        pytest.skip("cuflow's pool is off (CUFLOW_POOL=off): CuPy keeps its own allocator")
    return gpu_cf


@pytest.mark.gpu
def test_cupy_allocations_use_the_pool(pooled):
    import cupy

    gpu_cf = pooled
    pool = gpu_cf.memory.get_pool()
    n = pool.num_alloc
    x = cupy.empty((1000,), cupy.float32)  # plain CuPy, not cuflow
    assert pool.num_alloc == n + 1
    assert pool.block_of(x.data.ptr) is not None
    used = pool.used_bytes()
    del x
    assert pool.used_bytes() == used - round_size(4000)
    assert pool.stats()["backend"] == "driver-pool"


@pytest.mark.gpu
def test_installed_hook_runs_the_compiled_hot_path_on_the_current_stream(pooled):
    """CuPy's hook over the pool calls the compiled hot path, which asks CuPy's C API for
    the current stream: blocks are lent on the stream the array is made on."""
    import cupy

    from cuflow.memory import _current_stream_fn

    pool = pooled.memory.get_pool()
    assert _current_stream_fn() is not None, "CuPy no longer exports get_current_stream_ptr"
    hot = pool._make_alloc(cupy.cuda.get_current_stream, _current_stream_fn())
    assert type(hot).__name__ == "HotAlloc"
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        x = cupy.empty(1000, cupy.float32)
        assert pool.block_of(x.data.ptr).stream == s.ptr
        ptr = x.data.ptr
        del x
        y = cupy.empty(1000, cupy.float32)  # the block just freed, handed back on its stream
        assert y.data.ptr == ptr and pool.block_of(ptr).stream == s.ptr
    z = cupy.empty(1000, cupy.float32)
    assert pool.block_of(z.data.ptr).stream == cupy.cuda.get_current_stream().ptr != s.ptr
    del y, z
    s.synchronize()


_WHICH_ALLOCATOR = (
    "import cupy, cuflow as cf; cf.set_backend('cupy'); cf.zeros(4); "
    "print(type(cupy.cuda.get_allocator().__self__).__name__)")


@pytest.mark.gpu
@pytest.mark.parametrize(("env", "owner"), [
    ({}, "PythonFunctionAllocator"), ({"CUFLOW_POOL": "off"}, "MemoryPool")])
def test_pool_is_installed_by_default_and_off_leaves_cupys(gpu_cf, env, owner):
    """By default cuflow's pool becomes CuPy's allocator on first use (CuPy's
    PythonFunctionAllocator over the pool's hook); CUFLOW_POOL=off keeps CuPy's MemoryPool."""
    import subprocess
    import sys

    e = {k: v for k, v in os.environ.items() if k not in ("CUFLOW_POOL", "CUFLOW_POOL_HOTPATH")}
    e.update(env)
    out = subprocess.run([sys.executable, "-c", _WHICH_ALLOCATOR], env=e, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[-1] == owner


def test_destroyed_stream_blocks_are_adopted():
    be = EventBackend()
    pool = Pool(be)
    a = pool.alloc(4096, 5)
    live = pool.alloc(4096, 5)
    pool.free(a)
    pool._stream_gone(5)  # what the weakref finalizer of a destroyed stream does
    pool.free(live)  # freed after its stream died: an orphan too
    assert not any(k[1] == 5 for k in pool._lists)
    b = pool.alloc(1 << 21, 0)  # a miss adopts the orphans (after a device synchronize)
    assert all(k[1] != 5 for k in pool._lists) and not pool._orphans
    pool.free(b)
    assert pool.empty_cache() >= 1


@pytest.mark.gpu
def test_threads_never_share_a_device_block(gpu_cf):
    dev = DeviceBytes()
    pool = Pool(gpu_cf.memory.DriverPoolBackend(dev.rt.getDevice()))
    try:
        stress_threads(pool, dev.fill, dev.check)
    finally:
        dev.rt.deviceSynchronize()
        pool.empty_cache()
        pool.backend.trim()


@pytest.mark.gpu
def test_cross_stream_reuse_is_ordered(pooled):
    gpu_cf = pooled
    """A long kernel on stream A reads a buffer that is then freed and at once reallocated
    for a write on stream B: with the pool's event ordering, A still reads the old data."""
    import cupy

    cf = gpu_cf
    spin = cupy.RawKernel(r'''
    extern "C" __global__ void slow_copy(const float* src, float* dst, int n, long long spins) {
        long long t0 = clock64();
        while (clock64() - t0 < spins) { }
        for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
    }''', "slow_copy")
    n = 1 << 18
    a_stream, b_stream = cf.Stream(), cf.Stream()
    for trial in range(2):
        with a_stream:
            src = cupy.full((n,), 7.0, cupy.float32)  # allocated on A
            out = cupy.empty((n,), cupy.float32)
            spin((1,), (256,), (src, out, np.int32(n), np.int64(200_000_000)))  # ~0.1 s
        if trial == 1:
            cf.memory.record_stream(src, b_stream)  # the PyTorch spelling, also honoured
        del src  # freed while A's kernel still reads it
        with b_stream:
            new = cupy.empty((n,), cupy.float32)  # the same bytes, borrowed by stream B
            new.fill(-1.0)
        a_stream.synchronize()
        b_stream.synchronize()
        assert float(out.min()) == 7.0 and float(out.max()) == 7.0
        del out, new


@pytest.mark.gpu
def test_graph_replay_never_overwrites_live_arrays(pooled):
    gpu_cf = pooled
    import cupy

    cf = gpu_cf
    pool = cf.memory.get_pool()
    gc.collect()  # earlier tests' graphs held by reference cycles go now, not during this one
    before = pool.stats()["private_pools"]
    x = cf.asarray(np.arange(1 << 16, dtype=np.float32))
    with cf.graph.capture() as g:
        tmp = cf.multiply(x, x)  # allocated inside the capture
        y = cf.add(tmp, x)
        del tmp  # freed during capture: must stay the graph's
    g.replay()
    g.stream.synchronize()
    live = [cupy.full((1 << 16,), 5.0, cupy.float32) for _ in range(8)]  # after capture
    for _ in range(3):
        g.replay()
    g.stream.synchronize()
    for a in live:
        assert float(a.min()) == 5.0 and float(a.max()) == 5.0
    xs = np.arange(1 << 16, dtype=np.float32)
    np.testing.assert_array_equal(cf.asnumpy(y), xs * xs + xs)
    assert pool.stats()["private_pools"] == before + 1
    g.close()
    del y
    assert pool.stats()["private_pools"] == before


@pytest.mark.gpu
@pytest.mark.parametrize("stream_dies", [False, True])
def test_closed_graph_array_freed_during_another_capture(pooled, stream_dies):
    """A closed graph's last array freed while another graph captures (a garbage collection
    can do that at any time): the capture is not disturbed, and the memory goes back when it
    ends, also after the first graph's capture stream was destroyed."""
    cf = pooled
    pool = cf.memory.get_pool()
    gc.collect()
    before = pool.stats()["private_pools"]
    xs = np.arange(1 << 16, dtype=np.float32)
    x = cf.asarray(xs)
    with cf.graph.capture() as g1:
        out = cf.multiply(x, x)
    g1.close()
    if stream_dies:
        del g1
    with cf.graph.capture() as g2:
        y = cf.add(x, x)
        del out
        z = cf.add(y, x)  # the pool runs while capturing
    assert pool.stats()["private_pools"] == before + 1
    g2.replay()
    g2.stream.synchronize()
    np.testing.assert_array_equal(cf.asnumpy(z), 3 * xs)
    g2.close()
    del y, z
    assert pool.stats()["private_pools"] == before


@pytest.mark.gpu
def test_record_stream_on_a_stream_destroyed_before_the_free(pooled, monkeypatch):
    """record_stream watches the stream it is given: when the stream is destroyed before the
    array's free, the free waits for the device instead of recording an event on it."""
    import cupy

    cf = pooled
    be = cf.memory.get_pool().backend
    calls = []
    sync, record = be.synchronize, be.record
    monkeypatch.setattr(be, "synchronize", lambda: (calls.append("sync"), sync())[1])
    monkeypatch.setattr(be, "record", lambda st: (calls.append(st), record(st))[1])
    a = cupy.full((1 << 20,), 1.0, cupy.float32)
    s = cupy.cuda.Stream(non_blocking=True)
    handle = s.ptr
    with s:
        a *= 2.0  # work on s that uses a
    cf.memory.record_stream(a, s)
    del s  # destroyed, its work perhaps still queued
    del a
    b = cupy.empty((1 << 20,), cupy.float32)  # the pool processes the free
    b.fill(3.0)
    assert float(b.sum()) == 3.0 * (1 << 20)
    assert "sync" in calls and handle not in calls


@pytest.mark.gpu
def test_failed_capture_releases_private_pool(pooled):
    gpu_cf = pooled
    cf = gpu_cf
    pool = cf.memory.get_pool()
    before = pool.stats()["private_pools"]
    with pytest.raises(ZeroDivisionError), cf.graph.capture():
        cf.empty((1000,), dtype=cf.float32)
        1 / 0  # noqa: B018
    assert pool.stats()["private_pools"] == before


@pytest.mark.gpu
def test_gpu_limit_raises_cuflow_oom(pooled):
    gpu_cf = pooled
    cf = gpu_cf
    pool = cf.memory.get_pool()
    keep = cf.ones((1 << 20,), dtype=cf.float32)
    old = pool.limit
    try:
        pool.set_limit(size=pool.reserved + (8 << 20))
        with pytest.raises(cf.OutOfMemoryError, match="requested"):
            cf.empty((1 << 30,), dtype=cf.uint8)
    finally:
        pool.limit = old
    assert float(keep.sum()) == float(1 << 20)


@pytest.mark.gpu
def test_pinned_host_arrays(gpu_cf):
    cf = gpu_cf
    h = cf.memory.empty_pinned((4, 5), np.float32)
    h[...] = np.arange(20, dtype=np.float32).reshape(4, 5)
    assert cf.memory.zeros_pinned(3, np.int32).tolist() == [0, 0, 0]
    s = cf.Stream()
    d = cf.asarray(h, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(cf.asnumpy(d), h)
