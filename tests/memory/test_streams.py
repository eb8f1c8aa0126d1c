"""Streams in the pool (cuflow/memory/_streams.py): record_stream, cross-stream borrowing,
and destroyed streams' blocks."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from cuflow.memory import Pool

from .conftest import CaptureBackend, EventBackend, FakeStream


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


def test_record_stream_refuses_a_block_the_pool_does_not_lend():
    """A freed block's mark would stick to the memory's next user (whose free would then
    wait for a stream it never used): refused, as is anything but a block."""
    import cuflow

    be = EventBackend()
    pool = Pool(be)
    a = pool.alloc(4096, 1)
    pool.free(a)
    with pytest.raises(cuflow.memory.MemoryValueError,
                       match=r"record_stream: b must be a block this pool lends now, got the "
                             r"block at 0x[0-9a-f]+, which is freed already"):
        pool.record_stream(a, 2)
    b = pool.alloc(4096, 1)  # the same memory, for a new user
    assert b.ptr == a.ptr and b.uses is None
    pool.free(b)
    assert pool.stats()["num_pending_cross_stream"] == 0  # its free waits for nothing
    other = Pool(EventBackend())
    c = other.alloc(4096, 1)
    with pytest.raises(cuflow.memory.MemoryValueError, match="from another pool"):
        pool.record_stream(c, 2)
    for bad, shown in (("block", "str 'block'"), (None, "NoneType None")):
        with pytest.raises(cuflow.memory.MemoryTypeError,
                           match=f"b must be a Block this pool lends now, got {shown}"):
            pool.record_stream(bad, 2)
    with pytest.raises(cuflow.memory.MemoryValueError, match="stream must be .* got -1"):
        other.record_stream(c, -1)
    other.free(c)


def test_cross_stream_borrow_orders_with_event():
    be = EventBackend()
    pool = Pool(be)
    pool.free(pool.alloc(1 << 20, 1))
    b = pool.alloc(1 << 20, 2)  # borrowed from stream 1's cache
    assert pool.stats()["num_device_alloc"] == 1
    assert (2, 1) in be.waits  # stream 2 waits for stream 1's event: no host sync
    assert b.stream == 2


def test_empty_cache_releases_a_segment_split_across_streams():
    """Free neighbours of two streams never coalesce; once both are free, empty_cache gives
    their segment back, ordered after the work of each stream, and the stats balance."""
    be = EventBackend()
    pool = Pool(be)
    a = pool.alloc(1000, 1)
    b = pool.alloc(1000, 2)  # the rest of stream 1's segment, borrowed
    assert a.seg is b.seg
    pool.free(a)
    pool.free(b)
    be.waits.clear()
    assert pool.empty_cache() == 1
    s = pool.stats()
    assert s["reserved_bytes.all.current"] == 0 and s["segment.all.current"] == 0
    assert be.waits in ([(1, 2)], [(2, 1)])  # the release waits for the other stream
    b = pool.alloc(1000, 1)  # the pool still works
    pool.free(b)


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
    ptr = a.data.mem.ptr
    del a
    gc.collect()
    pool = cf.memory.get_pool()
    pool.flush_frees()
    if pool.block_of(ptr) is not None:  # seen under compute-sanitizer
        pytest.skip("the array outlived its last reference: its free cannot be checked here")
    b = cupy.empty((1 << 20,), cupy.float32)
    b.fill(3.0)
    assert float(b.sum()) == 3.0 * (1 << 20)
    assert "sync" in calls and handle not in calls


class _LifeBackend(EventBackend):
    """Events that are created, complete when their stream is not listed in ``busy``, and are
    destroyed when ``done`` first answers True (as CUDA's backend does); queries are refused
    while ``capturing`` says a stream captures."""

    def __init__(self):
        super().__init__()
        self.busy = set()
        self.live = set()
        self.capturing = False

    def record(self, stream):
        ev = super().record(stream)
        self.live.add(id(ev))
        return ev

    def done(self, event):
        assert not self.capturing, "an event query while a stream captures a graph"
        if event["stream"] in self.busy and not event["done"]:
            return False
        self.live.discard(id(event))
        return True

    def settle(self, pool):
        """Every stream's work done; one more borrow (by a new stream) hands the pool's
        retired events to done()."""
        self.busy = set()
        self.finish_all()
        pool.free(pool.alloc(1 << 20, 99))


def test_borrowing_destroys_the_events_it_records():
    """Every borrow across streams records an event; each one is handed to done() until it
    completes, which destroys it (a cudaEvent per borrow leaked otherwise)."""
    be = _LifeBackend()
    pool = Pool(be)
    for i in range(50):
        be.busy = {11, 12} if i % 2 else set()  # half the borrows wait on a stream at work
        pool.free(pool.alloc(1 << 20, 11))
        pool.free(pool.alloc(1 << 20, 12))  # stream 12 borrows stream 11's block, and back
    assert pool.stats()["num_cross_stream_reuse"] >= 50
    be.settle(pool)
    assert not be.live, f"{len(be.live)} of {len(be.events)} events never destroyed"


def test_releasing_a_segment_used_on_two_streams_destroys_its_event():
    """A segment released to the backend is ordered after every stream that used it, with
    an event recorded there; that event is destroyed once complete, as a borrow's is."""
    be = _LifeBackend()
    pool = Pool(be)
    for _ in range(5):
        b = pool.alloc(1 << 20, 11)
        pool.record_stream(b, 12)  # (read on stream 12 too)
        pool.free(b)
        be.finish_all()
        assert pool.empty_cache() == 1
    pool.empty_cache()  # (retired events are handed to done() by the pool's next settling)
    assert not be.live, f"{len(be.live)} of {len(be.events)} events never destroyed"


def _cached_on_11_and_13(be):
    """A pool over ``be`` with a free 1 MiB block cached on stream 11 (whose free list comes
    first, and which is then at work) and one on stream 13; the pool and the two blocks."""
    pool = Pool(be)
    a = pool.alloc(1 << 20, 11)
    b = pool.alloc(1 << 20, 13)
    pool.free(a)
    pool.free(b)
    be.busy = {11}
    return pool, a, b


def test_a_borrow_takes_a_stream_whose_work_is_done_first():
    """A block of a stream whose work has all finished needs no ordering; only when every
    fit is on a stream at work does the borrower wait, for the first one's work."""
    be = _LifeBackend()
    pool, a, b = _cached_on_11_and_13(be)
    c = pool.alloc(1 << 20, 12)
    assert c.ptr == b.ptr and be.waits == []  # stream 13's block, no wait
    pool.free(c)  # back, on stream 12 now
    be.busy = {11, 12}
    d = pool.alloc(1 << 20, 14)
    assert d.ptr == a.ptr and be.waits == [(14, 11)]
    pool.free(d)
    be.settle(pool)
    assert not be.live


class _LaggingBackend(_LifeBackend):
    """A device whose events read as not done for a while after their record (the record
    is not taken yet), whose streams can be asked whether they have work left."""

    def done(self, event):
        return False if not event["done"] else super().done(event)

    def stream_idle(self, stream):
        return stream not in self.busy


def test_a_borrow_asks_the_stream_before_it_records_an_event():
    """An event recorded on an idle stream may read as not done yet: the borrow asks the
    stream itself first, and takes an idle stream's block with no event and no wait."""
    be = _LaggingBackend()
    pool, _, b = _cached_on_11_and_13(be)
    before = len(be.events)
    c = pool.alloc(1 << 20, 12)
    assert c.ptr == b.ptr and be.waits == []
    assert len(be.events) == before + 1  # one event: stream 11's, a fallback not taken
    pool.free(c)
    be.settle(pool)


def test_a_borrow_during_a_capture_queries_no_event():
    """While a stream captures, no event may be queried: a borrow then waits for the first
    fit's stream, and its event is destroyed after the capture."""
    be = _LifeBackend()
    pool = Pool(be)
    pool.free(pool.alloc(1 << 20, 11))
    pool.begin_private(20)
    be.capturing = True
    b = pool.alloc(1 << 20, 12)  # (stream 12 does not capture: the general pool)
    assert be.waits == [(12, 11)] and len(be.live) == 1
    be.capturing = False
    pool.end_private(20)
    pool.free(b)
    be.settle(pool)
    assert not be.live


@pytest.mark.gpu
def test_a_borrow_does_not_wait_for_a_stream_at_work(pooled, spin, monkeypatch):
    """Two streams cache a block of the size a third one asks for; one of them is busy.  The
    borrower takes the idle stream's block, so its work does not wait for the busy one."""
    import cupy

    cf = pooled
    pool = cf.memory.get_pool()
    cf.memory.empty_cache()
    waits = []
    wait = pool.backend.wait
    monkeypatch.setattr(pool.backend, "wait", lambda s, ev: waits.append(s) or wait(s, ev))
    busy, idle, user = (cupy.cuda.Stream(non_blocking=True) for _ in range(3))
    n = (96 << 20) // 4 + 333  # a size no other stream caches
    with busy:  # busy's free list is made first: a borrow that does not look takes from it
        b = cupy.empty((n,), cupy.float32)
    with idle:
        a = cupy.empty((n,), cupy.float32)
    spin(busy)  # (after taking back destroyed streams' memory: no device synchronize below)
    del a, b  # each back in its stream's cache
    before = pool.stats()["num_cross_stream_reuse"]
    with user:
        u = cupy.empty((n,), cupy.float32)
        at_work = not busy.done
        u.fill(1.0)
    user.synchronize()
    borrowed = pool.stats()["num_cross_stream_reuse"] - before
    busy.synchronize()
    assert borrowed == 1, "the test meant a borrow; the pool made a new segment"
    assert at_work, "the test meant a borrow while the busy stream works"
    # the pool's decision, not the finishing order: with other processes on the GPU, the
    # borrower's fill may end after the spin's wall-clock end with nothing ordering it so
    assert waits == [], "the borrower was ordered after the busy stream's unrelated work"
    del u


@pytest.mark.gpu
def test_borrowing_destroys_its_cuda_events(pooled, monkeypatch):
    """Every event a borrow records on the device is destroyed once complete."""
    import cupy

    cf = pooled
    pool = cf.memory.get_pool()
    be = pool.backend
    made, destroyed = [], []
    outstanding: dict = {}  # handle -> events made with it and not destroyed yet
    record, done = be.record, be.done

    def recorded(stream):
        ev = record(stream)
        made.append(ev)
        outstanding[ev] = outstanding.get(ev, 0) + 1
        return ev

    def destroyed_if_done(ev):
        if not done(ev):
            return False
        # (CUDA reuses a destroyed event's handle, so a handle made and not destroyed is
        # the latest event made with it; an event made before the patch is not counted)
        if outstanding.get(ev):
            outstanding[ev] -= 1
            destroyed.append(ev)
        return True

    s1, s2 = (cupy.cuda.Stream(non_blocking=True) for _ in range(2))
    n = (40 << 20) // 4 + 77
    with s1:  # the one miss (a miss may release free segments: not a borrow's events)
        cupy.empty((n,), cupy.float32)  # (freed at once)
    monkeypatch.setattr(be, "record", recorded)
    monkeypatch.setattr(be, "done", destroyed_if_done)
    for _ in range(20):  # from here on, each allocation borrows the other stream's block
        with s1:
            x = cupy.empty((n,), cupy.float32)
            x.fill(1.0)  # work on s1 that the next borrow may have to wait for
        del x
        with s2:
            y = cupy.empty((n,), cupy.float32)
            y.fill(2.0)
        del y
    cf.synchronize()
    with s1:  # a last borrow, with all work done: the retired events are handed to done()
        cupy.empty((n,), cupy.float32)  # (freed at once)
    monkeypatch.undo()
    assert made and len(destroyed) == len(made), (
        f"{len(made) - len(destroyed)} of {len(made)} events never destroyed")


@pytest.mark.gpu
def test_an_event_behind_queued_work_is_not_done(pooled, spin):
    """The pool's events say done only once the work before them has run: every cross-stream
    ordering (record_stream, borrowing, segment release) rests on it."""
    import cupy

    be = pooled.memory.get_pool().backend
    s = cupy.cuda.Stream(non_blocking=True)
    spin(s)
    ev = be.record(s.ptr)
    assert not be.done(ev) and not s.done
    s.synchronize()
    assert be.done(ev)  # (and destroyed: not asked again)


def test_a_dead_streams_free_blocks_are_counted_as_cached():
    """The free blocks of a destroyed stream wait for a device synchronize (orphans); the
    statistics count them as cached, so cached + allocated is what the pool reserves."""
    pool = Pool(CaptureBackend())
    s = FakeStream()
    pool.watch_stream(s, 5)
    blocks = [pool.alloc(100_000, 5) for _ in range(4)]
    keep = pool.alloc(1000, 0)
    for b in blocks:
        pool.free(b)
    del s
    gc.collect()
    pool.alloc(1000, 0)  # the pool learns of the destruction at its next operation
    st = pool.stats()
    assert st["free_cached_bytes"] > 0 and pool.n_free_blocks() >= 1
    assert st["free_cached_bytes"] + st["allocated_bytes.all.current"] == \
        st["reserved_bytes.all.current"]
    pool.free(keep)
