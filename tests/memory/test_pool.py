"""The allocator core (cuflow/memory/_pool.py, _blocks.py): size classes, split and coalesce,
statistics, large requests and segments, out-of-memory retry, threads."""

from __future__ import annotations

import gc
import random
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cuflow
from cuflow.bench import _traces
from cuflow.memory import HostBackend, HostExpandableBackend, Pool, round_size, size_class
from cuflow.memory._blocks import Segment

from .conftest import (DeviceBytes, EventBackend, assert_consistent, check, device_unshared,
                       fill)

MIB = 1 << 20


def test_round_size_and_classes():
    assert round_size(0) == 512 and round_size(1) == 512 and round_size(513) == 1024
    assert round_size((1 << 20) + 1) == (1 << 20) + (1 << 17)
    for n in [1, 511, 512, 513, 4096, 5000, 1 << 20, 3 << 20, 123456789]:
        assert round_size(n) >= n
        c = size_class(n)
        assert c >= n and c < 2 * max(n, 512)  # four classes per power of two
    assert round_size(np.int64(513)) == 1024 and size_class(np.uint16(600)) == 640
    for f in (round_size, size_class):
        with pytest.raises(cuflow.memory.MemoryValueError, match=f"{f.__name__}: n must be a "
                                                                 "number of bytes >= 0, got -1"):
            f(-1)
        for bad in (2.0, True, "512", None):
            with pytest.raises(cuflow.memory.MemoryTypeError, match=f"{f.__name__}: n must be "
                                                                    "an int"):
                f(bad)


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


def test_reset_stats_keeps_what_is_held_and_counts_failures_apart():
    pool = Pool(HostBackend(capacity=4 << 20))
    a, b = pool.alloc(1 << 20, 0), pool.alloc(1000, 0)
    pool.reset_stats()  # zeroes what accumulated, not what is lent or reserved now
    s = pool.stats()
    assert s["allocated_bytes.all.current"] == a.size + b.size
    assert s["allocated_bytes.all.peak"] == a.size + b.size
    assert s["reserved_bytes.all.current"] > 0 and s["num_alloc"] == s["num_free"] == 0
    pool.free(a)
    pool.free(b)
    with pytest.raises(cuflow.OutOfMemoryError):
        pool.alloc(8 << 20, 0)
    pool.empty_cache()
    s = pool.stats()
    assert s["allocated_bytes.all.current"] == 0 and s["reserved_bytes.all.current"] == 0
    assert s["num_free"] == 2 and s["num_alloc"] == 0 and s["num_ooms"] == 1
    assert s["cache_misses"] == 0  # the refused request served nothing


def test_free_twice_is_an_error():
    pool = Pool(HostBackend())
    b = pool.alloc(10, 0)
    pool.free(b)
    with pytest.raises(RuntimeError, match="twice"):
        pool.free(b)


def test_oom_retry_releases_cache():
    backend = HostBackend(capacity=6 << 20)
    pool = Pool(backend)
    pool.free(pool.alloc(4 << 20, 1))  # cached on stream 1: no other stream can use it as is
    backend.cheap_release = False  # like cudaMalloc: release only under pressure
    b = pool.alloc(5 << 20, 2)
    assert b.size >= 5 << 20
    assert pool.stats()["num_alloc_retries"] == 1


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


@pytest.mark.parametrize("name", list(_traces.TRACES))
def test_traces_footprint_on_host_memory(name):
    """The placement policy on the synthetic traces and the recorded ones (bench/traces/),
    with a backend that reuses released memory perfectly: what the pool itself holds stays
    near the live bytes."""

    class AddressOnly(HostBackend):  # addresses and accounting, no host memory behind them
        next_ptr = 1 << 40

        def alloc(self, nbytes, stream):
            ptr, self.next_ptr = self.next_ptr, self.next_ptr + nbytes + (1 << 21)
            self.in_use += nbytes
            self.peak = max(self.peak, self.in_use)
            return ptr

        def free(self, ptr, nbytes, stream):
            self.in_use -= nbytes

    its = _traces.TRACES[name]()
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
    for b in live.values():  # what the workload kept (a model's gradients, say)
        pool.free(b)
    assert pool.stats()["allocated_bytes.all.current"] == 0


@pytest.mark.parametrize("name", _traces.loop_names())
def test_fixed_loops_after_a_kept_warmup_take_no_segment(name):
    """A loop of one recorded step (``python -m cuflow bench traces``, ``loop:`` rows): after
    a warm-up of that step whose segments are kept, no step takes or gives back a segment,
    and every step gives back all it took."""
    its = _traces.trace_its(name)
    assert len(its) == 30 and all(ops == its[0] for ops in its)
    pool = Pool(HostBackend())
    events = [(op, key, n, 0) for op, key, n in its[0]]
    pool.replay(events, keep=True)
    n_alloc, n_free = pool.num_segment_alloc, pool.num_segment_free
    for ops in its[:5]:
        live = {}
        for op, key, n in ops:
            if op == "a":
                live[key] = pool.alloc(n, 0)
            else:
                pool.free(live.pop(key))
        assert not live
    assert (pool.num_segment_alloc, pool.num_segment_free) == (n_alloc, n_free)
    assert pool.stats()["allocated_bytes.all.current"] == 0


def test_the_warmup_of_a_recorded_trace_holds_what_earlier_steps_hold():
    """``python -m cuflow bench traces``' warm-up step, one call from a fresh start: a
    training step's state that earlier steps allocated and still hold comes first, so the
    step's peak is the trace's; after an arena replay of it the whole trace takes no
    segment."""
    if "real:resnet18_train_bs2-64" not in _traces.TRACES:
        pytest.skip("the recorded traces are in the source tree (bench/traces), not the wheel")
    its = _traces.trace_its("real:resnet18_train_bs2-64")
    step = _traces.largest_iteration(its)
    assert _traces.peak_requested([step]) == _traces.peak_requested(its)
    pool = Pool(HostBackend())
    assert pool.replay([(op, key, max(n, 1), 0) for op, key, n in step]) == 1
    segments, live = pool.num_segment_alloc, {}
    for ops in its:
        for op, key, n in ops:
            if op == "a":
                live[key] = pool.alloc(max(n, 1), 0)
            else:
                pool.free(live.pop(key))
    assert pool.num_segment_alloc == segments


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


@pytest.mark.gpu
def test_threads_never_share_a_device_block(gpu_cf):
    dev = DeviceBytes()
    pool = Pool(gpu_cf.memory.DriverPoolBackend(dev.rt.getDevice()))
    try:
        stress_threads(pool, dev.fill, dev.check)
    finally:
        dev.rt.deviceSynchronize()
        pool.empty_cache()


_NO_POINTERS = st.one_of(st.none(), st.booleans(), st.floats(), st.text(max_size=3),
                        st.lists(st.integers(), max_size=1), st.tuples(st.integers()),
                        st.dictionaries(st.integers(), st.integers(), max_size=1))


@settings(max_examples=60, deadline=None)
@given(ptr=st.one_of(_NO_POINTERS, st.integers()))
def test_free_ptr_and_block_of_take_int_pointers(ptr):
    """free_ptr and block_of name their rule for what is no integer pointer (MemoryTypeError),
    free_ptr refuses an int that is no lent block (DoubleFreeError) and block_of answers None
    for it; the lent block stays lent either way."""
    pool = Pool(HostBackend())
    p = pool.alloc_ptr(5000, 0)
    if isinstance(ptr, int) and not isinstance(ptr, bool):
        assert pool.block_of(ptr) is (pool.block_of(p) if ptr == p else None)
        if ptr != p:
            with pytest.raises(cuflow.memory.DoubleFreeError, match="Pool.free_ptr: ptr must be "
                                                                  "a block this pool lends"):
                pool.free_ptr(ptr)
    elif ptr != p:  # (a float equal to a lent pointer is that pointer: see free_ptr)
        with pytest.raises(cuflow.memory.MemoryTypeError,
                           match=r"Pool.block_of: ptr must be an int pointer, got "):
            pool.block_of(ptr)
        with pytest.raises(cuflow.memory.MemoryTypeError,
                           match=r"Pool.free_ptr: ptr must be the int pointer of a block this "
                                 r"pool lends now, got "):
            pool.free_ptr(ptr)
    assert pool.stats()["allocation.all.current"] == 1 and pool.block_of(p) is not None


def test_block_of_refuses_a_float_even_where_it_equals_a_lent_pointer():
    pool = Pool(HostBackend())
    p = pool.alloc_ptr(5000, 0)
    with pytest.raises(cuflow.memory.MemoryTypeError, match=rf"got float {float(p)!r}"):
        pool.block_of(float(p))
    assert pool.block_of(np.int64(p)) is pool.block_of(p) is not None


@pytest.mark.parametrize("case", ["foreign", "twice", "queued"])
def test_free_ptr_of_no_lent_block_is_refused_at_once(case):
    """free_ptr refuses a pointer the pool does not lend now, naming it, at the call (not in
    a later, unrelated allocation), and the pool goes on."""
    pool = Pool(HostBackend())
    keep = pool.alloc(1000, 0)
    p = pool.alloc_ptr(5000, 0)
    if case == "foreign":
        p += 16  # inside a lent block, not its start
    elif case == "twice":
        pool.free_ptr(p)
    else:
        pool._freed[p] = None  # queued by CuPy's hook, not processed yet
    with pytest.raises(cuflow.memory.DoubleFreeError,
                       match=rf"Pool.free_ptr: ptr must be a block this pool lends now, got "
                             rf"{hex(p)}: freed twice, or not from this pool"):
        pool.free_ptr(p)
    if case == "foreign":
        pool.free_ptr(p - 16)  # the block itself goes back as usual
    b = pool.alloc(5000, 0)  # the next operations drain the queue without an error
    pool.free(b)
    s = pool.stats()
    assert s["allocation.all.current"] == 1 and s["allocated_bytes.all.current"] == keep.size
    pool.free(keep)
    assert pool.stats()["allocated_bytes.all.current"] == 0


def test_reset_stats_resets_the_device_peak_too():
    pool = Pool(HostBackend())
    pool.free(pool.alloc(4 << 20, 0))
    pool.empty_cache()
    assert pool.stats()["device_reserved_bytes.peak"] == 4 << 20
    a = pool.alloc(1000, 0)
    pool.reset_stats()  # what reset_peak_stats does, and the accumulated counters
    s = pool.stats()
    assert s["device_reserved_bytes.current"] == s["device_reserved_bytes.peak"] == 2 << 20
    assert s["reserved_bytes.all.peak"] == 2 << 20
    pool.free(a)


def test_stats_read_the_same_before_and_after_a_snapshot():
    """A block freed into the exact-size cache is not coalesced until the cache is flushed
    (snapshot() does): the split bytes and free blocks count as if it were."""
    pool = Pool(HostBackend(capacity=64 << 20))
    seen = []
    b = pool.alloc(1000, 0)
    c = pool.alloc(3000, 0)
    for step in ("both lent", "b freed", "c freed"):
        if step == "b freed":
            pool.free(b)
        elif step == "c freed":
            pool.free(c)
        before = (pool.stats()["inactive_split_bytes.all.current"], pool.n_free_blocks())
        pool.snapshot()
        after = (pool.stats()["inactive_split_bytes.all.current"], pool.n_free_blocks())
        assert before == after, step
        seen.append(after)
    seg = pool.reserved
    assert seen == [(seg - 4096, 1), (seg - 3072, 2), (0, 1)]


@pytest.mark.gpu
def test_empty_cache_gives_the_driver_reserve_back(gpu_cf):
    """After empty_cache() another process can use the memory: the driver pool's reserve
    behind the released segments goes back to the device, not only to the driver pool."""
    rt = gpu_cf.get_backend().xp.cuda.runtime
    pool = Pool(gpu_cf.memory.DriverPoolBackend(rt.getDevice()))
    p = pool.alloc(1 << 30, 0)
    pool.free(p)
    free_before = rt.memGetInfo()[0]
    assert pool.empty_cache() == 1
    assert pool.backend.device_reserved()[0] == 0  # the driver pool backs nothing now
    if device_unshared():  # and the device's own count of free memory agrees
        assert rt.memGetInfo()[0] >= free_before + (1 << 30) - (64 << 20)


class _Granular64(HostBackend):
    """Large segments of whole 64 MiB granules, as the driver-pool backend makes them."""

    segment_granularity = 64 << 20
    segment_granularity_min = 2 << 20


_STATS_KEYS = ("num_alloc", "num_free", "cache_misses", "reserved_bytes.all.current",
               "allocated_bytes.all.current")


@settings(max_examples=60, deadline=None)
@given(backend=st.sampled_from([HostBackend, _Granular64]),
       past=st.one_of(st.integers(1, (64 << 20) + (1 << 18)), st.integers(1, 2**70)),
       raw=st.booleans())
def test_sizes_whose_rounding_passes_2_63_are_out_of_memory(backend, past, raw):
    """A request within a block and a granule of 2**63 (or past it) is refused with
    OutOfMemoryError stating its size, through Pool.alloc and the raw hot path alike: no
    block comes back for a size that wrapped around, the backend is not asked, and the
    statistics stay as they were."""
    be = backend(capacity=1 << 40)
    pool = Pool(be)
    keep = pool.alloc(5000, 0)
    before = {k: pool.stats()[k] for k in _STATS_KEYS}
    most = 2**63 - 1 - (1 << 17) - be.segment_granularity  # the most a request may ask
    n = most + past
    with pytest.raises(cuflow.OutOfMemoryError) as ei:
        pool.alloc_ptr(n, 0) if raw else pool.alloc(n, 0)
    assert f"{n} bytes" in str(ei.value) and f"at most {most} bytes" in str(ei.value)
    s = pool.stats()
    assert {k: s[k] for k in _STATS_KEYS} == before and s["num_ooms"] == 1
    assert be.device_allocs == 1  # the first block's segment only
    pool.free(keep)


def test_a_request_just_under_the_bound_reaches_the_backend_unwrapped():
    """The largest request allowed is asked of the backend as a positive segment size that
    holds it (which host memory cannot map: out of memory, not an OSError)."""
    asked = []

    class Recording(_Granular64):
        def alloc(self, nbytes, stream):
            asked.append(nbytes)
            return super().alloc(nbytes, stream)

    be = Recording()
    pool = Pool(be)
    n = 2**63 - 1 - (1 << 17) - be.segment_granularity
    with pytest.raises(cuflow.OutOfMemoryError, match="could not give"):
        pool.alloc(n, 0)
    assert asked and all(n <= a < 2**63 for a in asked)
    assert pool.stats()["cache_misses"] == 0 and pool.reserved == 0


@pytest.mark.parametrize("n", [2**48, 2**62])
def test_host_memory_past_what_the_host_maps_is_out_of_memory(n):
    """The host backend turns mmap's refusal (OSError, OverflowError) into MemoryError, so
    the pool retries and raises OutOfMemoryError with the miss uncounted."""
    pool = Pool(HostBackend())
    with pytest.raises(cuflow.OutOfMemoryError, match="could not give"):
        pool.alloc(n, 0)
    s = pool.stats()
    assert s["num_alloc"] == s["num_free"] == s["cache_misses"] == 0 and s["num_ooms"] == 1
    with pytest.raises(MemoryError):
        HostBackend().alloc(n, 0)


class _Broken(HostBackend):
    """Its segments fail with an error that is not MemoryError (a sticky CUDA error)."""

    broken = False

    def alloc(self, nbytes, stream):
        if self.broken:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return super().alloc(nbytes, stream)


@pytest.mark.parametrize("capacity", [None, 64 << 20])
def test_a_backend_error_leaves_the_statistics_as_they_were(capacity):
    """A miss whose segment fails with the backend's own error served nothing: num_alloc,
    cache_misses and num_free do not count it (docs/errors.md: the statistics add up after
    a failed launch)."""
    pool = Pool(_Broken(capacity))
    a = pool.alloc(1 << 20, 0)
    before = {k: pool.stats()[k] for k in _STATS_KEYS}
    pool.backend.broken = True
    for n in (8 << 20, 100, 3 << 20):
        with pytest.raises(RuntimeError, match="illegal memory access"):
            pool.alloc(n, 0)
    assert {k: pool.stats()[k] for k in _STATS_KEYS} == before
    pool.backend.broken = False
    pool.free(a)
    s = pool.stats()
    assert s["num_alloc"] == s["num_free"] == 1


@settings(max_examples=40, deadline=None)
@given(stream=st.one_of(
    st.integers(max_value=-1), st.integers(min_value=2**63), st.booleans(), st.floats(),
    st.text(max_size=3), st.none().map(lambda _: [1]), st.just(np.float64(1.0))))
def test_alloc_refuses_what_is_not_a_stream_handle(stream):
    """Pool.alloc's stream is an int in [0, 2**63) (not a bool): anything else is refused
    with the rule and the value, and the pool takes nothing (-1, the pool's mark of a
    destroyed stream, would leak a segment that empty_cache never releases)."""
    pool = Pool(HostBackend())
    with pytest.raises(cuflow.CuflowError) as ei:
        pool.alloc(4096, stream)
    assert isinstance(ei.value, TypeError | ValueError)
    msg = str(ei.value)
    assert "stream must be a stream handle, an int in [0, 2**63)" in msg and repr(stream) in msg
    assert pool.reserved == 0 and pool.stats()["num_alloc"] == 0


def test_alloc_takes_numpy_integer_streams():
    pool = Pool(HostBackend())
    b = pool.alloc(4096, np.int64(3))
    assert b.stream == 3 and type(b.stream) is int
    pool.free(b)


def test_free_ptr_refuses_what_is_no_pointer():
    pool = Pool(HostBackend())
    with pytest.raises(cuflow.memory.MemoryTypeError,
                       match=r"free_ptr: ptr must be the int pointer .* got list \[1\]"):
        pool.free_ptr([1])
    with pytest.raises(cuflow.memory.DoubleFreeError, match="0x10"):
        pool.free_ptr(16)


def test_host_backend_refuses_a_segment_given_back_twice():
    be = HostBackend()
    a = be.alloc(1 << 20, 0)
    be.free(a, 1 << 20, 0)
    with pytest.raises(cuflow.memory.DoubleFreeError, match="no segment this backend lends"):
        be.free(a, 1 << 20, 0)
    assert be.in_use == 0


@settings(max_examples=40, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(1, 40), st.integers(0, 1 << 20)),
                    min_size=1, max_size=80))
def test_a_miss_releases_every_wholly_free_segment(ops):
    """A miss finds the wholly free segments among those that became so since the last one;
    it must release each of them, as a look at every segment would (kept ones stay)."""
    backend = EventBackend()
    backend.cheap_release = True  # (a miss releases: the driver pool's rule)
    pool = Pool(backend)
    pool.warmup([3 * MIB])  # one kept segment, never released by a miss
    live = []
    for alloc, mib, pick in ops:
        if alloc or not live:
            pool._settle()  # the exact-size cache coalesced: what a miss sees
            # the segment objects, not their addresses: a new segment may be given the
            # address of one just released
            whole = [seg for seg in pool._segments.values() if not seg.keep
                     and seg.first.next is None and seg.first.free and not seg.first.quick]
            misses = pool.stats()["cache_misses"]
            b = pool.alloc(mib * 100_000)
            if pool.stats()["cache_misses"] > misses:
                kept = set(map(id, pool._segments.values()))
                assert not [seg for seg in whole if id(seg) in kept], \
                    "a wholly free segment stayed"
            live.append(b)
        else:
            pool.free(live.pop(pick % len(live)))
    assert any(seg.keep for seg in pool._segments.values())


@pytest.mark.parametrize("make", [EventBackend, HostExpandableBackend], ids=["cheap", "vmm"])
def test_released_segments_leave_no_garbage_for_the_collector(make):
    """A miss over a backend whose release is cheap releases a segment nearly every time:
    the segment and its block go when released, not at the garbage collector's next pass."""
    backend = make()
    backend.cheap_release = True
    pool = Pool(backend)
    rng = random.Random(7)
    sizes = [rng.randrange(1, 64) * 100_000 + rng.randrange(512) for _ in range(40)]

    def segments() -> int:  # (the objects alive, garbage included: the collector is off)
        return sum(type(o) is Segment for o in gc.get_objects())

    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        released, before = pool.stats()["num_segment_free"], segments()
        for n in sizes:
            pool.free(pool.alloc(n))
        assert pool.stats()["num_segment_free"] - released >= len(sizes) // 4
        assert segments() - before == len(pool._segments), (
            "released segments stay alive in reference cycles")
    finally:
        if enabled:
            gc.enable()


def test_a_release_that_raises_leaves_the_other_segments_for_the_next_miss():
    backend = EventBackend()
    backend.cheap_release = True
    pool = Pool(backend)
    blocks = [pool.alloc(n * MIB) for n in (3, 5, 7)]  # three segments, one size each
    for b in blocks:
        pool.free(b)
    real_free, calls = backend.free, []

    def refuse_once(ptr, nbytes, stream):
        calls.append(ptr)
        if len(calls) == 1:
            raise RuntimeError("the source refuses")
        real_free(ptr, nbytes, stream)

    backend.free = refuse_once
    with pytest.raises(RuntimeError, match="refuses"):
        pool.alloc(40 * MIB)  # a miss: its release meets the refusal first
    before = pool.stats()["num_segment_free"]
    pool.alloc(60 * MIB)  # the next miss releases the two others
    assert pool.stats()["num_segment_free"] == before + 2 and len(calls) == 3
