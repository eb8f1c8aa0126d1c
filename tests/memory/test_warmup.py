"""Warm-up (cuflow/memory/_warmup.py and cuflow.memory.warmup): kept segments, recorded
patterns replayed."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cuflow
from cuflow.bench import _traces
from cuflow.memory import HostBackend, HostExpandableBackend, Pool
from cuflow.memory._expandable import KEEP
from cuflow.memory._warmup import _peak


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


@pytest.mark.parametrize("fail", ["size", "limit"])
def test_a_refused_warmup_or_replay_gives_back_what_it_took(fail):
    pool = Pool(HostBackend(), limit=None if fail == "size" else 3 << 20)
    bad = -1 if fail == "size" else 8 << 20
    with pytest.raises(cuflow.CuflowError):
        pool.warmup([1000, 1 << 20, bad])
    with pytest.raises(cuflow.CuflowError):
        pool.replay([("a", 1, 5000, 0), ("a", 2, bad, 0)], rounds=1)
    s = pool.stats()
    assert s["allocated_bytes.all.current"] == 0 and s["num_alloc"] == s["num_free"]


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


@pytest.mark.parametrize("keep", [True, False])
def test_module_warmup_keep(keep):
    """A fixed-shape loop after ``warmup``: kept segments serve every step with no segment
    taken or given back; ordinary ones go back to a backend that reuses released memory
    (``HostBackend``, as the driver's pool) on the loop's misses, every step."""
    pool = Pool(HostBackend())

    def step():
        pool.free(pool.alloc(5 << 20, 0))
        pool.free(pool.alloc(1 << 20, 0))  # an ordinary 5 MiB segment is too large for it

    info = cuflow.memory.warmup(step, pool=pool, keep=keep)
    assert info["allocations"] == 2
    n_alloc, n_free = pool.num_segment_alloc, pool.num_segment_free
    for _ in range(5):
        step()
    taken, given = pool.num_segment_alloc - n_alloc, pool.num_segment_free - n_free
    assert (taken, given) == ((0, 0) if keep else (10, 10))
    assert pool.stats()["allocated_bytes.all.current"] == 0


@pytest.mark.parametrize("fn_bytes", [1000, 8 << 20])
def test_module_warmup_keeps_the_pools_peak_statistics(fn_bytes):
    """warmup measures fn's peak without bringing the pool's allocated peak down: after it
    the peak is the larger of the pool's and fn's, and no other peak exceeds it."""
    pool = Pool(HostBackend())
    pool.free(pool.alloc(4 << 20, 0))  # the pool's peak: 4 MiB
    info = cuflow.memory.warmup(lambda: pool.free(pool.alloc(fn_bytes, 0)), pool=pool)
    assert info["peak_bytes"] == cuflow.memory.round_size(fn_bytes)
    s = pool.stats()
    assert s["allocated_bytes.all.peak"] == max(4 << 20, cuflow.memory.round_size(fn_bytes))
    assert s["requested_bytes.all.peak"] <= s["allocated_bytes.all.peak"]
    assert s["active_bytes.all.peak"] == s["allocated_bytes.all.peak"]
    pool.reset_peak_stats()
    assert pool.stats()["allocated_bytes.all.peak"] == 0


def test_statistics_read_during_a_recording_keep_the_pools_peak():
    """stats() read inside warmup's function (or anywhere between start_recording and
    stop_recording) shows the pool's peak as it is, not one brought down to the bytes lent
    at the start: the allocated and active peaks agree."""
    pool = Pool(HostBackend())
    pool.free(pool.alloc(64 << 20, 0))
    seen = []

    def step():
        pool.free(pool.alloc(1 << 20, 0))
        s = pool.stats()
        seen.append((s["allocated_bytes.all.peak"], s["active_bytes.all.peak"]))

    info = cuflow.memory.warmup(step, pool=pool)
    assert seen == [(64 << 20, 64 << 20)] and info["peak_bytes"] == 1 << 20
    assert pool.stats()["allocated_bytes.all.peak"] == 64 << 20


def test_a_recordings_peak_counts_its_own_blocks_through_frees_and_resets():
    """fn freeing a block lent before the warm-up, and a reset_peak_stats() inside fn, move
    neither the recording's peak (the most bytes of blocks lent during it held at once, as
    its replay holds them) nor make it negative."""
    pool = Pool(HostBackend())
    old = pool.alloc(1 << 20, 0)

    def step():
        pool.free(old)  # memory fn was handed
        pool.reset_peak_stats()  # a library call inside fn
        pool.free(pool.alloc(1000, 0))
        a = pool.alloc(300 << 10, 0)
        b = pool.alloc(200 << 10, 0)
        pool.free(a)
        pool.free(b)

    info = cuflow.memory.warmup(step, pool=pool)
    assert info["peak_bytes"] == (300 << 10) + (200 << 10)
    assert pool.stats()["allocated_bytes.all.peak"] == (300 << 10) + (200 << 10)


def test_a_warmup_records_every_threads_allocations_from_the_pool():
    """As its docstring and the guide say: the recording is the pool's, so another thread's
    allocations while fn runs count in the result and are replayed (their segments kept)."""
    pool = Pool(HostBackend())

    def other():
        b = pool.alloc(8 << 20, 0)
        pool.free(b)

    def step():
        a = pool.alloc(1 << 20, 0)
        t = threading.Thread(target=other)
        t.start()
        t.join()
        pool.free(a)

    info = cuflow.memory.warmup(step, pool=pool)
    assert info["allocations"] == 2 and info["peak_bytes"] == (1 << 20) + (8 << 20)
    n = pool.stats()["num_device_alloc"]
    pool.free(pool.alloc(8 << 20, 0))  # the other thread's size: served by a kept segment
    assert pool.stats()["num_device_alloc"] == n


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["alloc", "free", "reset"]),
                              st.sampled_from([100, 5000, 70000, 1 << 20, 3 << 20]),
                              st.integers(0, 10**6)), max_size=40),
       before=st.lists(st.sampled_from([5000, 1 << 20, 6 << 20]), max_size=4))
def test_a_recordings_peak_is_what_its_blocks_held_and_the_pools_statistics_go_on(ops, before):
    """Between start_recording and stop_recording, any mix of allocations, frees of blocks
    lent before or during it, and peak resets: the recording's peak is the most bytes its
    own blocks held at once (>= 0), and the pool's peak stays at least every allocated
    total seen since the last reset (never brought down by the recording)."""
    pool = Pool(HostBackend())
    live = [pool.alloc(n, 0) for n in before]
    peak_floor = pool.stats()["allocated_bytes.all.peak"]
    pool.start_recording()
    mine, held, most, n_allocs = set(), 0, 0, 0
    for op, n, pick in ops:
        if op == "alloc" or (op == "free" and not live):
            n_allocs += 1
            b = pool.alloc(n, 0)
            live.append(b)
            mine.add(b.ptr)
            held += b.size
            most = max(most, held)
            peak_floor = max(peak_floor, pool.allocated)
        elif op == "free":
            b = live.pop(pick % len(live))
            if b.ptr in mine:
                mine.discard(b.ptr)
                held -= b.size
            pool.free(b)
        else:
            pool.reset_peak_stats()
            peak_floor = pool.allocated
        assert pool.stats()["allocated_bytes.all.peak"] >= max(peak_floor, pool.allocated)
    events, peak = pool.stop_recording()
    assert peak == most >= 0
    assert sum(e[0] == "a" for e in events) == n_allocs
    assert pool.stats()["allocated_bytes.all.peak"] >= peak_floor


@pytest.mark.parametrize(("entries", "exc", "shown"), [
    ([2.5], cuflow.memory.MemoryTypeError, "entry 0: float 2.5"),
    ([100, "abc"], cuflow.memory.MemoryTypeError, "entry 1: str 'abc'"),
    ([True], cuflow.memory.MemoryTypeError, "entry 0: bool True"),
    ([(2, 1.5)], cuflow.memory.MemoryTypeError, "entry 0: (2, 1.5)"),
    ([(-2, 3)], cuflow.memory.MemoryValueError, "entry 0: (-2, 3)"),
    ([1000, -5], cuflow.memory.MemoryValueError, "entry 1: -5"),
])
def test_cupy_warmup_checks_each_entry(entries, exc, shown):
    """Pool.warmup (CuPy's form): each entry is bytes (an int >= 0) or a shape of ints >= 0;
    a bad one is refused, naming it, before anything is allocated."""
    pool = Pool(HostBackend())
    with pytest.raises(exc, match=r"cuflow.memory.Pool.warmup: each entry must be a number of "
                                  r"bytes \(an int >= 0\) or a shape") as ei:
        pool.warmup(entries)
    assert shown in str(ei.value)
    assert pool.stats()["num_alloc"] == 0 and pool.reserved == 0
    with pytest.raises(cuflow.memory.MemoryTypeError, match="shapes_or_nbytes must be a "
                                                            "sequence .* got int 5"):
        pool.warmup(5)


def test_cupy_warmup_takes_bytes_and_shapes():
    pool = Pool(HostBackend())
    pool.warmup([1 << 20, (256, 1024), [3]], dtype="float64")  # shapes with a dtype
    pool.warmup([5000, np.int64(3 << 20), (0, 7)])  # bytes, and a float32 shape
    n = pool.stats()["num_device_alloc"]
    for nbytes in (8 << 20, 2 << 20, 24, 5000, 3 << 20):
        pool.free(pool.alloc(nbytes, 0))
    assert pool.stats()["num_device_alloc"] == n


def test_a_recording_inside_a_recording_is_refused_and_the_outer_one_is_kept():
    """One recording at a time per pool: a warmup inside another's function (or on another
    thread) is refused, naming the rule, and the outer recording and the pool's own peak
    are what they would be without it."""
    pool = Pool(HostBackend())
    pool.free(pool.alloc(8 << 20, 0))  # the pool's peak before: 8 MiB
    pool.start_recording()
    a = pool.alloc(3 << 20, 0)
    with pytest.raises(cuflow.memory.MemoryValueError, match="one recording at a time per pool"):
        pool.start_recording()
    with pytest.raises(cuflow.memory.MemoryValueError, match="one recording at a time per pool"):
        cuflow.memory.warmup(lambda: None, pool=pool)
    pool.free(a)
    events, peak = pool.stop_recording()
    assert [e[0] for e in events] == ["a", "f"] and peak == 3 << 20
    assert pool.stats()["allocated_bytes.all.peak"] == 8 << 20


def test_a_warmup_inside_a_warmups_function_is_refused():
    pool = Pool(HostBackend())

    def step():
        pool.free(pool.alloc(5 << 20, 0))
        cuflow.memory.warmup(lambda: pool.free(pool.alloc(1 << 20, 0)), pool=pool)

    with pytest.raises(cuflow.memory.MemoryValueError, match="warmup inside another warmup"):
        cuflow.memory.warmup(step, pool=pool)
    info = cuflow.memory.warmup(lambda: pool.free(pool.alloc(5 << 20, 0)), pool=pool)
    assert info["allocations"] == 1 and info["peak_bytes"] == 5 << 20


def test_stop_recording_without_a_recording_is_refused():
    pool = Pool(HostBackend())
    with pytest.raises(cuflow.memory.MemoryValueError,
                       match="stop_recording needs an active recording .* none is active"):
        pool.stop_recording()
    pool.start_recording()
    pool.stop_recording()
    with pytest.raises(cuflow.memory.MemoryValueError, match="none is active"):
        pool.stop_recording()


@pytest.mark.parametrize("refuser", ["limit", "device"])
def test_kept_segments_go_back_when_a_segment_is_refused(refuser):
    """Kept segments stay through ordinary misses; a miss whose segment the limit or the
    device refuses gives them back before it retries (memory is short), rather than raise
    OutOfMemoryError with memory kept."""
    def pool_of(cap):
        return (Pool(HostBackend(), limit=cap) if refuser == "limit"
                else Pool(HostBackend(capacity=cap)))

    roomy, tight = pool_of(16 << 20), pool_of(12 << 20)
    for pool in (roomy, tight):
        pool.reserve(6 << 20)  # a kept segment
        b = pool.alloc(8 << 20, 0)  # a miss: 6 + 8 MiB fits 16 MiB, not 12 MiB
        pool.free(b)
    assert roomy.reserved == 14 << 20 and roomy.stats()["num_segment_free"] == 0
    s = tight.stats()
    assert tight.reserved == 8 << 20 and s["num_segment_free"] == 1 and s["num_ooms"] == 0


def test_replay_checks_its_arguments_and_takes_events_read_back_from_json():
    import json

    pool = Pool(HostBackend())
    pool.start_recording()
    b = pool.alloc(3 << 20, 0)
    pool.free(b)
    events, _ = pool.stop_recording()
    for bad in (dict(rounds=0), dict(rounds=-1), dict(rounds=1.5), dict(rounds=True)):
        with pytest.raises(cuflow.memory.MemoryValueError, match="rounds must be an int >= 1"):
            pool.replay(events, **bad)
    with pytest.raises(cuflow.ArgumentTypeError, match="keep must be True or False"):
        pool.replay(events, keep="no")
    for bad in ([("x", 1, 2, 0)], [(1, 2)], "events", None, [("a", [], 5, 0)],
                [("f", "key", 0, 0)]):
        with pytest.raises(cuflow.memory.MemoryValueError, match="events must be the list"):
            pool.replay(bad)
    pool.empty_cache()
    assert pool.replay(json.loads(json.dumps(events)), rounds=1) == 1  # lists, not tuples


# ------------------------------------------------------------------ arenas
def _step_events(name):
    """One recorded step of ``python -m cuflow bench traces`` as replay events (the
    recorded traces are in the source tree, not in an installed wheel)."""
    if name[len("loop:"):].rsplit(":", 1)[0] not in _traces.TRACES:
        pytest.skip("the recorded traces are in the source tree (bench/traces), not the wheel")
    return [(op, key, n, 0) for op, key, n in _traces.trace_its(name)[0]]


def _loop(pool, events, times):
    for _ in range(times):
        live = {}
        for op, key, n, stream in events:
            if op == "a":
                live[key] = pool.alloc(n, stream)
            else:
                pool.free(live.pop(key))
        assert not live


@pytest.mark.parametrize("step", ["loop:real:resnet50_infer_bs1-64:1",
                                  "loop:real:transformer_seq7-2048:11"])
@pytest.mark.parametrize("backend", ["host", "expandable"])
def test_a_kept_replay_keeps_one_arena_that_a_loop_of_the_step_fits(backend, step):
    """A ResNet-50 inference step and a transformer step fit one segment within KEEP x
    their peak: the replay keeps that one (over expandable segments too), lends nothing
    from it, and 20 loops of the step take no segment and map no page."""
    events = _step_events(step)
    be = HostBackend() if backend == "host" else HostExpandableBackend(256 << 20)
    pool = Pool(be)
    assert pool.replay(events, keep=True) == 1
    peak = _peak(events)
    assert peak < pool.reserved <= KEEP * peak
    assert pool.stats()["allocated_bytes.all.peak"] == 0  # (the arena lent no block)
    segments, device_allocs = pool.num_segment_alloc, be.device_allocs
    _loop(pool, events, 20)
    assert (pool.num_segment_alloc, pool.num_segment_free) == (segments, 0)
    assert be.device_allocs == device_allocs
    assert pool.empty_cache() == 1 and pool.reserved == 0  # (kept until asked for)


def test_a_step_that_one_segment_fits_only_past_keep_is_replayed_as_before():
    """R0's first step (a synthetic transformer's) needs more than KEEP x its peak in one
    segment (best fit fragments it): the replay keeps the segments it makes, as without
    arenas."""
    events = [(op, key, n, 0) for op, key, n in _traces.trace_r0(iterations=1)[0]]
    pool = Pool(HostBackend())
    assert pool._plan_arena(events, 2) is None
    assert pool.replay(events, keep=True) > 1
    segments = pool.num_segment_alloc
    _loop(pool, events, 5)
    assert pool.num_segment_alloc == segments


def test_patterns_on_several_streams_or_with_bad_events_plan_no_arena():
    """An arena serves one stream: a pattern on two keeps a segment per stream, as before;
    a bad event is refused by the replay's allocation, which names it."""
    pool = Pool(HostBackend())
    two = [("a", 1, 4 << 20, 0), ("a", 2, 4 << 20, 7), ("f", 1, 0, 0), ("f", 2, 0, 0)]
    assert pool._plan_arena(two, 2) is None
    assert pool.replay(two, keep=True) == 2
    for bad in (-1, 2.5, True):
        with pytest.raises(cuflow.CuflowError, match="nbytes"):
            pool.replay([("a", 1, 4 << 20, 0), ("a", 2, bad, 0)])
    for bad in (-3, [0], 0.0):
        with pytest.raises(cuflow.CuflowError, match="stream"):
            pool.replay([("a", 1, 4 << 20, bad)])
    ooms = pool.stats()["num_ooms"]
    with pytest.raises(cuflow.OutOfMemoryError, match="at most"):  # (the pool's own error)
        pool.replay([("a", 1, 2**63, 0)])
    assert pool.stats()["num_ooms"] == ooms + 1
    assert pool.replay([]) == 0


def test_an_arena_is_a_size_its_pattern_was_replayed_in():
    """Best fit is not monotone in the segment's size: for this pattern the arena's
    margin over the tightest fit lands on a size that misses (326 x 128 KiB), where the
    sizes just below and above fit.  The size kept is one the pattern replayed in, and
    loops of the pattern take no segment."""
    events = [("a", 1, 9610971, 0), ("a", 2, 8441480, 0), ("f", 1, 0, 0),
              ("a", 8, 962372, 0), ("a", 10, 8690375, 0), ("a", 12, 1493749, 0),
              ("a", 13, 14497059, 0), ("f", 13, 0, 0), ("f", 2, 0, 0), ("a", 15, 863737, 0),
              ("f", 12, 0, 0), ("a", 18, 15854605, 0), ("f", 10, 0, 0), ("f", 8, 0, 0),
              ("f", 15, 0, 0), ("f", 18, 0, 0)]
    for be in (HostBackend(), HostExpandableBackend(256 << 20)):
        pool = Pool(be)
        assert pool.replay(events) == 1
        segments, device_allocs = pool.num_segment_alloc, be.device_allocs
        _loop(pool, events, 8)
        assert (pool.num_segment_alloc, be.device_allocs) == (segments, device_allocs)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 1 << 24), st.booleans()), min_size=1, max_size=40))
def test_whatever_arena_a_replay_keeps_serves_its_pattern(ops):
    """Random patterns (sizes 1 B to 16 MiB; each block freed at once or at the end): where
    the replay keeps one arena, it is within KEEP x the peak and 8 more loops take no
    segment; where it does not, it replays as before."""
    events, held = [], []
    for k, (n, free_now) in enumerate(ops):
        events.append(("a", k, n, 0))
        (events.append(("f", k, 0, 0)) if free_now else held.append(k))
        if len(held) > 3:
            events.append(("f", held.pop(0), 0, 0))
    events += [("f", k, 0, 0) for k in held]
    pool = Pool(HostBackend())
    plan = pool._plan_arena(events, 2)
    made = pool.replay(events, keep=True)
    if plan is not None:
        assert made == 1 and pool.reserved == plan[0] <= KEEP * _peak(events)
        segments = pool.num_segment_alloc
        _loop(pool, events, 8)
        assert pool.num_segment_alloc == segments
    s = pool.stats()
    assert s["allocated_bytes.all.current"] == 0 and s["num_alloc"] == s["num_free"]


def test_a_replay_on_a_capturing_stream_keeps_no_arena():
    """While a stream captures a graph its allocations come from the graph's private pool:
    a replay there keeps no general segment (an arena) for it."""
    pool = Pool(HostBackend())
    events = [("a", 1, 4 << 20, 7), ("a", 2, 2 << 20, 7), ("f", 1, 0, 0), ("f", 2, 0, 0)]
    pool.begin_private(7)
    pool.replay(events, keep=True)
    assert all(seg.owner is not None for seg in pool._segments.values())
    pool.end_private(7)
