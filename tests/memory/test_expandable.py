"""Expandable segments: the page heap's placement and page policy, the backend's stream
ordering, and the pool over it on host memory (device memory on a GPU)."""

from __future__ import annotations

import contextlib
import ctypes
import random

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import cuflow
from cuflow.memory import HostExpandableBackend, Pool, _expandable
from cuflow.memory._expandable import KEEP, PAGE

from .conftest import ExpandableEventBackend, assert_consistent, device_unshared, fill
from .test_state_machine import DevicePoolMachine, PoolMachine

MIB = 1 << 20


def pages_of(a, n):
    return set(range(a // PAGE, (a + n - 1) // PAGE + 1))


def recording(base):
    class RecordingHeap(base):
        """A heap that records its page calls, and refuses to map past ``physical``
        pages."""

        def __init__(self, capacity=1 << 34, physical=None):
            super().__init__(capacity)
            self.physical = physical
            self.calls = []

        def map_pages(self, pages):
            if self.physical is not None and self.mapped_count + len(pages) > self.physical:
                raise MemoryError("no physical page left")
            self.calls.append(("map", list(pages)))
            super().map_pages(pages)

        def unmap_pages(self, pages):
            assert set(pages) <= set(self.free_pages()), "a page under a live range unmapped"
            self.calls.append(("unmap", list(pages)))
            super().unmap_pages(pages)

    return RecordingHeap


IMPLEMENTATIONS = {"python": recording(_expandable.PageHeap)}
if _expandable.CPageHeap is not None:
    IMPLEMENTATIONS["compiled"] = recording(_expandable.CPageHeap)


def RecordingHeap(*args, **kwargs):  # noqa: N802  (stands for the class of the hot path)
    """The placement the backend runs under the test's hot path (``hot_path``: compiled,
    or Python), recording."""
    return IMPLEMENTATIONS["compiled" if _expandable.CPageHeap is not None else "python"](
        *args, **kwargs)


def test_a_second_pass_maps_nothing():
    heap = RecordingHeap()
    rng = random.Random(5)
    sizes = [rng.randrange(1, 40) * MIB for _ in range(50)]

    def one_pass():
        live = [(heap.alloc(n), n) for n in sizes[:25]]
        for a, n in live[::2]:
            heap.free(a, n)
        live = live[1::2] + [(heap.alloc(n), n) for n in sizes[25:]]
        for a, n in live:
            heap.free(a, n)

    one_pass()
    assert heap.calls  # the first pass maps pages
    heap.calls = []
    one_pass()
    assert heap.calls == []
    assert heap.live == 0 and heap.mapped  # free pages stay mapped


def test_free_pages_go_only_past_the_threshold():
    heap = RecordingHeap()
    a = heap.alloc(64 * MIB)
    b = heap.alloc(8 * MIB)  # above it, live
    heap.free(a, 64 * MIB)
    c = heap.alloc(16 * MIB)  # fits on mapped pages
    assert [kind for kind, _ in heap.calls] == ["map", "map"]
    heap.free(c, 16 * MIB)
    # 100 MiB fits only above b: mapping it all would pass KEEP x the 108 MiB peak
    d = heap.alloc(100 * MIB)
    assert d == 72 * MIB and pages_of(d, 100 * MIB) <= heap.mapped
    assert [kind for kind, _ in heap.calls] == ["map", "map", "unmap", "map"]
    assert heap.mapped_count * PAGE <= KEEP * 108 * MIB + PAGE
    assert pages_of(b, 8 * MIB) <= heap.mapped


def test_placement_prefers_mapped_space():
    heap = RecordingHeap()
    a = heap.alloc(8 * MIB)
    b = heap.alloc(8 * MIB)
    heap.free(a, 8 * MIB)
    assert heap.alloc(4 * MIB) == a  # the lowest mapped free space
    assert heap.alloc(4 * MIB) == a + 4 * MIB
    assert len(heap.calls) == 2 and b == 8 * MIB  # the two first ranges only


def test_demand_bounds_the_mapped_bytes():
    heap = RecordingHeap()
    a = heap.alloc(40 * MIB, demand=40 * MIB)
    heap.free(a, 40 * MIB)
    heap.alloc(50 * MIB, demand=20 * MIB)  # the user asked for 20 MiB of those 50
    assert heap.mapped_count * PAGE <= 50 * MIB + PAGE  # the free 40 MiB went


def test_a_refused_mapping_unmaps_free_pages_and_tries_again():
    heap = RecordingHeap(physical=20)  # 40 MiB of pages
    a = heap.alloc(30 * MIB)
    heap.free(a, 30 * MIB)
    heap.alloc(4 * MIB)  # on mapped pages
    b = heap.alloc(30 * MIB)  # 15 more pages: only after the free ones go
    assert pages_of(b, 30 * MIB) <= heap.mapped and heap.mapped_count <= 20


def test_a_refusal_leaves_the_heap_as_it_was():
    heap = RecordingHeap(physical=4)  # 8 MiB of pages
    a = heap.alloc(6 * MIB)
    free, mapped = heap.free_pages(), set(heap.mapped)
    with pytest.raises(MemoryError):
        heap.alloc(10 * MIB)
    assert (heap.free_pages(), heap.mapped, heap.live) == (free, mapped, 6 * MIB)
    heap.free(a, 6 * MIB)
    assert heap.alloc(8 * MIB) == 0  # the whole range is free again, from the start


def test_the_address_range_is_a_limit():
    heap = RecordingHeap(capacity=16 * MIB)
    heap.alloc(12 * MIB)
    with pytest.raises(MemoryError, match="16777216 reserved bytes"):
        heap.alloc(8 * MIB)


@pytest.mark.parametrize("impl", list(IMPLEMENTATIONS))
def test_the_top_counts_only_where_it_fits(impl):
    heap = IMPLEMENTATIONS[impl](capacity=16 * MIB)
    a = heap.alloc(4 * MIB)
    heap.alloc(11 * MIB)
    heap.free(a, 4 * MIB)
    heap.trim()
    assert heap.alloc(3 * MIB) == 0  # the free 4 MiB at 0: above 15 MiB, 3 do not fit


@pytest.mark.parametrize("impl", list(IMPLEMENTATIONS))
def test_a_request_past_the_range_changes_nothing(impl):
    heap = IMPLEMENTATIONS[impl]()
    heap.alloc(512, demand=2**70)  # (a demand past 2**63 is taken as it is)
    before = (heap.top, heap.free_ranges(), heap.mapped, heap.live)
    for n in (2**63 - 512, heap.capacity):
        with pytest.raises(MemoryError, match="do not fit"):
            heap.alloc(n)
        assert (heap.top, heap.free_ranges(), heap.mapped, heap.live) == before
    assert heap.alloc(4096) == 512


@pytest.mark.parametrize("impl", list(IMPLEMENTATIONS))
def test_a_free_outside_the_ranges_placed_is_refused(impl):
    heap = IMPLEMENTATIONS[impl](capacity=16 * MIB)
    heap.alloc(4 * MIB)
    for a, n in ((64 * MIB, 4 * MIB), (-512, 512), (0, 0), (0, 8 * MIB)):
        with pytest.raises(ValueError, match="must lie in"):
            heap.free(a, n)
    assert heap.live == 4 * MIB


def test_pages_unmapped_from_outside_are_placed_as_unmapped():
    heaps = [make() for make in IMPLEMENTATIONS.values()]
    for heap in heaps:
        a = heap.alloc(4 * MIB)
        heap.alloc(4 * MIB)
        heap.free(a, 4 * MIB)
        heap.free(heap.alloc(2 * MIB), 2 * MIB)
        heap.unmap_pages([0, 1])
        heap.alloc(4 * MIB)
    assert all(h.calls == heaps[0].calls and h.mapped == heaps[0].mapped for h in heaps)
    assert {0, 1} <= heaps[0].mapped


class HeapMachine(RuleBasedStateMachine):
    """Random ranges in and out of the heap, every implementation side by side: the same
    offsets, page calls and free ranges; live ranges never overlap and stay mapped; the
    mapped pages stay within KEEP x the peak whenever free pages could have gone; a refused
    mapping leaves the heap as it was."""

    def __init__(self):
        super().__init__()
        self.heaps = [make(physical=120) for make in IMPLEMENTATIONS.values()]
        self.live = []

    @rule(n=st.integers(1, 24 * MIB // 512).map(lambda k: k * 512),
          demand=st.sampled_from([0, 0, 16 * MIB, 64 * MIB]))
    def alloc(self, n, demand):
        out = set()
        for heap in self.heaps:
            before = heap.mapped
            try:
                out.add(heap.alloc(n, demand))
            except MemoryError:
                out.add(None)
                assert heap.mapped <= before  # nothing new mapped
                continue
            if heap.mapped - before:  # it mapped: within KEEP x the peak and the cap, or
                free = heap.free_pages()  # no free page was left to unmap
                if not demand:
                    assert heap.mapped_count * PAGE <= KEEP * heap.peak_live + PAGE or not free
                if heap.cap:
                    assert heap.mapped_count * PAGE <= heap.cap or not free
        assert len(out) == 1, f"the implementations placed {n} bytes apart: {out}"
        a = out.pop()
        if a is not None:
            self.live.append((a, n))

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 1 << 30))
    def free(self, i):
        a, n = self.live.pop(i % len(self.live))
        for heap in self.heaps:
            heap.free(a, n)

    @rule()
    def trim(self):
        assert len({heap.trim() for heap in self.heaps}) == 1

    @rule(cap=st.sampled_from([0, 32 * MIB, 96 * MIB]), pages=st.integers(0, 4))
    def cap_and_trim_some(self, cap, pages):
        for heap in self.heaps:
            heap.cap = cap
        assert len({heap.trim(pages) for heap in self.heaps}) == 1

    @invariant()
    def consistent(self):
        spans = sorted(self.live)
        for (a, n), (b, _) in zip(spans, spans[1:], strict=False):
            assert a + n <= b
        first = self.heaps[0]
        for heap in self.heaps:
            for a, n in self.live:
                assert pages_of(a, n) <= heap.mapped
            assert heap.live == sum(n for _, n in self.live)
            assert sum(n for _, n in heap.free_ranges()) + heap.live == heap.top
            assert (heap.calls, heap.free_ranges(), heap.mapped, heap.peak_mapped) == (
                first.calls, first.free_ranges(), first.mapped, first.peak_mapped)


HeapMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=60,
                                         deadline=None)
test_heap_state_machine = HeapMachine.TestCase


class LoggedEvents:
    """Events as a heap takes them (``PageHeap.events``), logging every call; an event's
    work is done when the test says so."""

    def __init__(self):
        self.log, self.made = [], 0

    def calls(self):
        def create():
            self.made += 1
            ev = {"id": self.made, "done": True, "destroyed": False}
            self.log.append(("create", ev["id"]))
            return ev

        def record(ev, stream):
            assert not ev["destroyed"]
            ev["done"] = False
            self.log.append(("record", ev["id"], stream))

        def query(ev):
            assert not ev["destroyed"]
            return 0 if ev["done"] else 600

        def wait(stream, ev, flags):
            assert not ev["destroyed"] and flags == 0
            self.log.append(("wait", stream, ev["id"]))

        def sync(ev):
            ev["done"] = True
            self.log.append(("sync", ev["id"]))

        def destroy(ev):
            ev["destroyed"] = True
            self.log.append(("destroy", ev["id"]))

        return create, record, query, wait, sync, destroy


class StreamOrderMachine(RuleBasedStateMachine):
    """Segments lent and given back on random streams, streams destroyed, work completed
    and pages trimmed, every implementation side by side: the same addresses, the same
    event calls in the same order (which stream waits for which), the same pending
    give-backs; a segment placed over a range another stream gave back, whose work is not
    done, is never lent before its stream waits for that work."""

    def __init__(self):
        super().__init__()
        self.heaps, self.events = [], []
        for base in IMPLEMENTATIONS.values():

            class Settling(base):  # as the backend's heap: a page's give-backs settle first
                def unmap_pages(self, pages):
                    for first, count in _expandable._runs(pages):
                        self.settle(first * PAGE, (first + count) * PAGE)
                    super().unmap_pages(pages)

            heap, ev = Settling(physical=120), LoggedEvents()
            heap.base, heap.events = 1 << 40, ev.calls()
            self.heaps.append(heap)
            self.events.append(ev)
        self.live = []

    def _same(self, results):
        assert len(set(results)) == 1, f"the implementations differ: {results}"
        first = self.events[0].log
        assert all(e.log == first for e in self.events), [e.log[-6:] for e in self.events]
        return results[0]

    @rule(n=st.integers(1, 12 * MIB // 512).map(lambda k: k * 512),
          stream=st.sampled_from([0, 7, 8, 9]))
    def lend(self, n, stream):
        before = len(self.events[0].log)
        out = []
        for heap in self.heaps:
            pend = {s: (ev["id"], spans) for s, (ev, spans) in heap.pending().items()
                    if s != stream and not ev["done"]}
            try:
                ptr = heap.lend(n, stream)
            except MemoryError:
                out.append(None)
                continue
            out.append(ptr)
            a = ptr - heap.base
            since = self.events[0].log[before:]
            for ev_id, spans in pend.values():  # work over the range not done: waited for
                if any(lo < a + n and a < hi for lo, hi in spans):
                    assert ("wait", stream, ev_id) in since or ("sync", ev_id) in since
        ptr = self._same(out)
        if ptr is not None:
            self.live.append((ptr, n, stream))

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 1 << 30), other=st.sampled_from([None, 0, 7]))
    def give_back(self, i, other):
        ptr, n, stream = self.live.pop(i % len(self.live))
        stream = stream if other is None else other  # (the pool gives back on any stream)
        for heap in self.heaps:
            heap.give_back(ptr, n, stream)
        self._same([0])

    @rule(stream=st.sampled_from([7, 8, 9]))
    def stream_gone(self, stream):
        for heap in self.heaps:
            heap.stream_gone(stream)
        self._same([0])

    @rule()
    def work_done(self):
        for heap in self.heaps:
            for ev, _ in heap.pending().values():
                ev["done"] = True

    @rule(pages=st.integers(0, 8))
    def trim(self, pages):
        self._same([heap.trim(pages) for heap in self.heaps])

    @invariant()
    def same_pending(self):
        views = [{s: (ev["id"], spans) for s, (ev, spans) in heap.pending().items()}
                 for heap in self.heaps]
        assert all(v == views[0] for v in views), views
        for heap in self.heaps:  # nothing pending over an unmapped page
            for _, spans in heap.pending().values():
                for lo, hi in spans:
                    assert pages_of(lo, hi - lo) <= heap.mapped


StreamOrderMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=60,
                                                deadline=None)
test_stream_order_state_machine = StreamOrderMachine.TestCase


def test_a_heaps_events_are_six_callables_or_none():
    for make in IMPLEMENTATIONS.values():
        heap = make()
        with pytest.raises(TypeError, match="6 callables"):
            heap.events = (print,) * 5
        heap.events = LoggedEvents().calls()
        heap.give_back(heap.lend(4 * MIB, 1), 4 * MIB, 1)
        for value in (LoggedEvents().calls(), None):  # (the pending events are its)
            with pytest.raises(ValueError, match="pending"):
                heap.events = value
        heap.settle(0, heap.capacity)
        heap.events = None  # (work is synchronous: nothing to order)


class HookedEvents(LoggedEvents):
    """LoggedEvents whose callbacks run ``hooks[(call, event id or stream)]`` once: the code
    a collection's finalizers may run inside any callback."""

    def __init__(self):
        super().__init__()
        self.hooks = {}

    def calls(self):
        create, record, query, wait, sync, destroy = super().calls()

        def hooked(name, f, key_of):
            def call(*args):
                out = f(*args)
                hook = self.hooks.pop((name, key_of(*args, out)), None)
                if hook is not None:
                    hook()
                return out

            return call

        return (hooked("create", create, lambda ev: ev["id"]),
                hooked("record", record, lambda ev, stream, _: stream),
                hooked("query", query, lambda ev, _: ev["id"]), wait,
                hooked("sync", sync, lambda ev, _: ev["id"]), destroy)


def three_streams(make):
    """A heap whose streams 1, 2 and 3 each gave back a page in turn, their work not done."""
    heap, events = make(), HookedEvents()
    heap.events = events.calls()
    pages = [heap.lend(PAGE, s) for s in (1, 2, 3)]
    for s, a in zip((1, 2, 3), pages, strict=True):
        heap.give_back(a, PAGE, s)
    return heap, events


@pytest.mark.parametrize("impl", list(IMPLEMENTATIONS))
def test_a_stream_destroyed_inside_a_query_does_not_skip_the_others(impl):
    heap, events = three_streams(IMPLEMENTATIONS[impl])
    events.hooks[("query", 2)] = lambda: heap.stream_gone(1)
    events.log.clear()
    heap.lend(3 * PAGE, 9)  # over all three pages: it waits for each stream's work
    assert [e for e in events.log if e[0] == "wait"] == [("wait", 9, 1), ("wait", 9, 2),
                                                         ("wait", 9, 3)]


@pytest.mark.parametrize("impl", list(IMPLEMENTATIONS))
def test_a_stream_destroyed_inside_a_sync_leaves_the_others_pending(impl):
    heap, events = three_streams(IMPLEMENTATIONS[impl])
    events.hooks[("sync", 1)] = lambda: heap.stream_gone(2)
    events.log.clear()
    heap.settle(0, PAGE)
    assert events.log == [("sync", 1), ("destroy", 1)]
    assert sorted(ev["id"] for ev, _ in heap.pending().values()) == [2, 3]


@pytest.mark.parametrize("impl", list(IMPLEMENTATIONS))
def test_a_give_back_inside_a_give_back_loses_nothing(impl):
    heap, events = three_streams(IMPLEMENTATIONS[impl])
    a, b = heap.lend(PAGE, 4), heap.lend(PAGE, 5)
    events.hooks[("create", 4)] = lambda: heap.give_back(b, PAGE, 5)  # (event 4: stream 4's)
    heap.give_back(a, PAGE, 4)
    spans = {k: spans for k, (_, spans) in heap.pending().items()}
    assert spans[4] == [(a - heap.base, a - heap.base + PAGE)]
    assert spans[5] == [(b - heap.base, b - heap.base + PAGE)]


@pytest.mark.parametrize("impl", list(IMPLEMENTATIONS))
def test_a_stream_destroyed_inside_its_record_keeps_its_range(impl):
    heap, events = three_streams(IMPLEMENTATIONS[impl])
    a = heap.lend(PAGE, 3)
    events.hooks[("record", 3)] = lambda: heap.stream_gone(3)
    heap.give_back(a, PAGE, 3)
    (key, (_, spans)), = [(k, v) for k, v in heap.pending().items() if v[0]["id"] == 3]
    assert key < -1 and (a - heap.base, a - heap.base + PAGE) in spans


def test_a_segment_on_another_streams_freed_range_waits_for_it():
    be = ExpandableEventBackend()
    a = be.alloc(4 * MIB, stream=1)
    be.free(a, 4 * MIB, stream=1)
    assert be.alloc(4 * MIB, stream=2) == a
    assert be.waits == [(2, 1)]  # stream 2 waits for stream 1's work on the range
    be.free(a, 4 * MIB, stream=2)
    be.finish_all()
    assert be.alloc(4 * MIB, stream=3) == a and be.waits == [(2, 1)]  # done: no wait


def test_frees_on_many_streams_are_forgotten_once_done():
    be = ExpandableEventBackend()
    for s in range(1, 40):  # streams come and go, each freeing a segment
        be.free(be.alloc(2 * MIB, stream=s), 2 * MIB, stream=s)
        be.finish_all()
    assert len(be.heap.pending()) <= 9
    a = be.alloc(2 * MIB, stream=1)
    be.free(a, 2 * MIB, stream=1)
    b = be.alloc(2 * MIB, stream=1)  # its own stream's free: in stream order, no wait
    assert b == a and be.waits == []


def test_a_destroyed_streams_frees_are_not_a_new_streams_with_its_handle():
    be = ExpandableEventBackend()
    a = be.alloc(4 * MIB, stream=0x5000)
    be.free(a, 4 * MIB, stream=0x5000)
    be.stream_gone(0x5000)  # the handle comes back as a new stream's
    assert be.alloc(4 * MIB, stream=0x5000) == a
    assert be.waits == [(0x5000, 0x5000)]  # the new stream waits for the old one's work


class FailingPages(ExpandableEventBackend):
    """Refuses to map the pages in ``refuse``; records what the device holds."""

    def __init__(self):
        super().__init__()
        self.refuse, self.device = set(), set()

    def _map_run(self, first, count):
        if self.refuse & set(range(first, first + count)):
            raise MemoryError("no page")
        self.device |= set(range(first, first + count))

    def _unmap_run(self, first, count):
        self.device -= set(range(first, first + count))


class CountedPages(FailingPages):
    """Holds ``pages`` pages of memory; refuses a page mapped twice."""

    def __init__(self, pages):
        super().__init__()
        self.pages = pages

    def _map_run(self, first, count):
        run = set(range(first, first + count))
        assert not run & self.device, f"pages {sorted(run & self.device)} mapped twice"
        if len(self.device) + count > self.pages:
            raise MemoryError("no page")
        self.device |= run


def test_a_refused_mapping_is_retried_on_the_pages_still_unmapped():
    be = CountedPages(10)
    a = be.alloc(8 * MIB, 0)  # pages 0-3
    be.alloc(2 * MIB, 0)  # page 4, live
    c = be.alloc(2 * MIB, 0)  # page 5
    be.free(a, 8 * MIB, 0)
    be.free(c, 2 * MIB, 0)
    be.heap.unmap_pages([1, 3])  # holes in the free range at 0
    be.pages = 5
    # at 0: pages 1 and 3 to map; 3 is refused, page 5 is unmapped, and 3 only is mapped again
    assert be.alloc(8 * MIB, 0) == be.base
    assert be.heap.mapped == be.device == {0, 1, 2, 3, 4}


def test_a_mapping_refused_partway_leaves_the_heap_as_the_device():
    be = FailingPages()
    a = be.alloc(2 * MIB, 0)
    b = be.alloc(2 * MIB, 0)  # page 1
    be.alloc(2 * MIB, 0)  # page 2
    be.free(a, 2 * MIB, 0)
    be.free(b, 2 * MIB, 0)
    be.trim()  # pages 0 and 1 go
    be.refuse = {4}
    with pytest.raises(MemoryError):
        be.alloc(8 * MIB, 0)  # pages 0 and 1, then 3 and 4: 4 is refused
    assert be.heap.mapped == be.device
    be.refuse = set()
    be.alloc(8 * MIB, 0)
    assert be.heap.mapped == be.device


def test_pages_are_unmapped_after_their_last_work():
    be = ExpandableEventBackend()
    a = be.alloc(8 * MIB, stream=1)
    be.free(a, 8 * MIB, stream=1)
    ev = be.events[-1]
    assert not ev["done"]
    be.trim()
    assert ev["done"] and not be.heap.mapped  # waited for (here: completed), then unmapped


def test_unmapped_host_pages_give_their_memory_back():
    be = HostExpandableBackend(64 * MIB)
    a = be.alloc(4 * MIB, 0)
    ctypes.memset(a, 7, 4 * MIB)
    be.free(a, 4 * MIB, 0)
    be.trim()
    assert be.device_reserved() == (0, 4 * MIB)
    b = be.alloc(4 * MIB, 0)
    assert ctypes.string_at(b, 16) == bytes(16)  # a new page reads as zeros


@pytest.mark.parametrize("capacity, error", [("1 GiB", cuflow.memory.MemoryTypeError),
                                             (0, cuflow.memory.MemoryValueError),
                                             (True, cuflow.memory.MemoryTypeError),
                                             (1 << 63, cuflow.memory.MemoryValueError)])
def test_capacity_is_checked(capacity, error):
    with pytest.raises(error, match=r"capacity must be an int number of bytes in \(0, 2\*\*46\]"):
        HostExpandableBackend(capacity)


def test_a_capacity_the_host_cannot_reserve_says_so(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(_expandable.mmap, "mmap", refuse)
    with pytest.raises(cuflow.memory.MemoryValueError, match="cannot reserve"):
        HostExpandableBackend(1 << 40)


def test_a_segment_given_back_twice_is_refused():
    be = ExpandableEventBackend()
    a = be.alloc(4 * MIB, 0)
    be.alloc(4 * MIB, 0)
    be.free(a, 4 * MIB, 0)
    with pytest.raises(cuflow.memory.DoubleFreeError, match="no segment this backend lends"):
        be.free(a, 4 * MIB, 0)
    assert be.alloc(2 * MIB, 0) == a and be.alloc(2 * MIB, 0) == a + 2 * MIB


def test_the_pools_limit_caps_the_mapped_pages():
    pool = Pool(ExpandableEventBackend())
    pool.free(pool.alloc(128 * MIB))
    b = pool.alloc(40 * MIB)
    pool.limit = 48 * MIB
    assert pool.backend.device_reserved()[0] <= 48 * MIB
    c = pool.alloc(6 * MIB)
    assert pool.backend.device_reserved()[0] <= 48 * MIB
    pool.free(b)
    pool.free(c)
    pool.limit = None
    assert pool.backend.heap.cap == 0


def test_the_limit_caps_reserved_bytes_and_freed_pages_stay_mapped_until_empty_cache():
    """As the guide says: the limit caps what the pool reserves at every step; the mapped
    pages may pass it (partly used pages, and wholly free ones after frees), and
    empty_cache() unmaps the free ones."""
    pool = Pool(HostExpandableBackend(1 << 30), limit=16 * MIB)
    rng = random.Random(3)
    live, most = [], 0
    for _ in range(300):
        if rng.random() < 0.5 or not live:
            with contextlib.suppress(cuflow.OutOfMemoryError):
                live.append(pool.alloc(rng.randrange(1, 6 * MIB), 0))
        else:
            pool.free(live.pop(rng.randrange(len(live))))
        assert pool.reserved <= pool.limit
        most = max(most, pool.stats()["device_reserved_bytes.current"])
    for b in live:
        pool.free(b)
    mapped = pool.stats()["device_reserved_bytes.current"]
    assert most > pool.limit and mapped > pool.limit  # no live block: free pages stay mapped
    pool.empty_cache()
    assert pool.stats()["device_reserved_bytes.current"] == 0 and pool.reserved == 0


def test_a_fraction_limit_is_of_the_host_capacity():
    pool = Pool(HostExpandableBackend(64 * MIB), limit=0.5)
    assert pool.limit == 32 * MIB


def test_a_warmup_keeps_its_sizes_and_a_replay_only_an_arena_over_expandable_segments():
    """Sizes the caller names (``Pool.warmup``, ``reserve``) are kept over expandable
    segments too: later requests of them take no segment and map no page.  A replay with no
    arena (a pattern on two streams) keeps none of its own segments: their pages stay mapped
    and serve a later segment of another size."""
    pool = Pool(ExpandableEventBackend())
    pool.warmup([8 * MIB, 3 * MIB])
    assert sorted(s.nbytes for s in pool._segments.values() if s.keep) == [3 * MIB, 8 * MIB]
    maps, segments = pool.backend.device_allocs, pool.num_segment_alloc
    for _ in range(3):
        blocks = [pool.alloc(3 * MIB), pool.alloc(8 * MIB)]
        for b in blocks:
            pool.free(b)
    assert (pool.backend.device_allocs, pool.num_segment_alloc) == (maps, segments)

    pool = Pool(ExpandableEventBackend())
    two = [("a", 1, 8 * MIB, 0), ("a", 2, 3 * MIB, 7), ("f", 1, 0, 0), ("f", 2, 0, 0)]
    assert pool.replay(two) == 2
    assert not any(s.keep for s in pool._segments.values())
    assert pool.backend.heap.mapped  # the pages stay mapped
    pool.backend.finish_all()
    maps = pool.backend.device_allocs
    b = pool.alloc(11 * MIB)  # a segment where the two were: no new page
    assert pool.backend.device_allocs == maps
    pool.free(b)


def test_pool_footprint_on_varying_shapes():
    """Sequence lengths that vary, as a transformer's: the mapped pages stay within KEEP x
    the peak requested bytes, where segments of the sizes seen would pile up."""
    pool = Pool(ExpandableEventBackend(1 << 30))
    rng = random.Random(3)
    for _ in range(200):
        t = rng.randrange(16, 2048)
        blocks = [pool.alloc(t * k * 4096) for k in (3, 1, 4, 1)]
        for b in blocks:
            fill(b, 1)
        assert_consistent(pool, blocks)
        for b in blocks:
            pool.free(b)
    peak = pool.stats()["requested_bytes.all.peak"]
    assert pool.backend.device_reserved()[1] <= KEEP * peak + PAGE


class ExpandablePoolMachine(PoolMachine):
    """The pool's random sequences over expandable segments on host memory."""

    def __init__(self):
        super().__init__()
        self.be = ExpandableEventBackend()
        self.pool = Pool(self.be, limit=64 << 20)


ExpandablePoolMachine.TestCase.settings = PoolMachine.TestCase.settings
test_expandable_pool_state_machine = ExpandablePoolMachine.TestCase


@pytest.mark.gpu
class TestDevice:
    def test_pages_map_and_unmap_on_the_device(self, gpu_cf):
        import cupy

        rt = cupy.cuda.runtime
        be = cuflow.memory.VirtualMemoryBackend(rt.getDevice())
        free = rt.memGetInfo()[0]
        a = be.alloc(6 * MIB, 0)
        assert be.device_reserved() == (6 * MIB, 6 * MIB)
        if device_unshared():
            assert free - rt.memGetInfo()[0] == 6 * MIB  # three pages, and nothing else
        x = cupy.ndarray((6 * MIB,), cupy.uint8, cupy.cuda.MemoryPointer(
            cupy.cuda.UnownedMemory(a, 6 * MIB, be), 0))
        x.fill(9)
        assert int(x.sum()) == 9 * 6 * MIB
        assert be.device_reserved() == (6 * MIB, 6 * MIB)
        del x
        be.free(a, 6 * MIB, 0)
        be.trim()
        assert be.device_reserved()[0] == 0
        be.close()
        assert be.base == 0

    def test_unmapping_during_a_global_mode_capture(self, gpu_cf):
        """A miss on one stream while another captures a graph in global mode (PyTorch's
        default) unmaps free pages without breaking the capture."""
        import cupy

        rt = cupy.cuda.runtime
        be = cuflow.memory.VirtualMemoryBackend(rt.getDevice())
        a_s, b_s = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
        x = be.alloc(40 * MIB, b_s.ptr)
        be.alloc(4 * MIB, b_s.ptr)
        be.free(x, 40 * MIB, b_s.ptr)
        y = cupy.ones(16, cupy.float32)
        a_s.begin_capture(mode=getattr(rt, "streamCaptureModeGlobal", 0))
        with a_s:
            y *= 2
        frees = be.device_frees
        be.alloc(60 * MIB, b_s.ptr)  # past 1.25x the peak: free pages of x go
        graph = a_s.end_capture()
        assert be.device_frees > frees
        graph.launch(stream=a_s)
        a_s.synchronize()
        assert float(y[0]) == 2.0

    def test_a_pool_of_another_device_releases_on_it(self, gpu_cf):
        """empty_cache and close of a pool over device 1, called with device 0 current: the
        releases record the heap's events (made on device 1) on device 1's streams, and
        device 0 stays current."""
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 2:
            pytest.skip("needs two devices; this machine has one GPU")
        pool = cuflow.memory.Pool(cuflow.memory.VirtualMemoryBackend(1))
        heap = pool.backend.heap
        with cupy.cuda.Device(1):
            s = cupy.cuda.Stream(non_blocking=True)
            blocks = [pool.alloc(40 * MIB, stream) for stream in (0, s.ptr)]
            for b in blocks:  # a wholly free segment on each stream, kept by the pool
                pool.free(b)
        with cupy.cuda.Device(0):
            assert pool.empty_cache() == 2  # (each release records on its stream)
            assert cupy.cuda.runtime.getDevice() == 0 and not heap.mapped
            pool.backend.close()
        assert heap.base == 0 and not heap.pending()

    def test_a_closed_backend_says_so(self, gpu_cf):
        be = cuflow.memory.VirtualMemoryBackend(0)
        be.close()
        with pytest.raises(cuflow.memory.MemoryValueError, match="closed"):
            be.alloc(MIB, 0)

    def test_refused_capacity(self, gpu_cf):
        with pytest.raises(cuflow.memory.MemoryValueError, match="capacity"):
            cuflow.memory.VirtualMemoryBackend(0, capacity=-1)


class DeviceExpandablePoolMachine(DevicePoolMachine):
    """The pool's random sequences on device memory over expandable segments."""

    def __init__(self):
        super().__init__()
        self.be = cuflow.memory.VirtualMemoryBackend(self.dev.rt.getDevice())
        self.pool = Pool(self.be, limit=256 << 20)


DeviceExpandablePoolMachine.TestCase.settings = DevicePoolMachine.TestCase.settings
test_device_expandable_pool_state_machine = pytest.mark.gpu(
    DeviceExpandablePoolMachine.TestCase)
