"""Hypothesis state machines over the pool: random allocate / free / resize / stream
sequences, with graphs and destroyed streams, on host memory (and device memory on a GPU)."""

from __future__ import annotations

import ctypes
import itertools

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import cuflow
from cuflow.memory import Pool, _pool

from .conftest import (
    CaptureBackend,
    DeviceBytes,
    EventBackend,
    FakeStream,
    assert_consistent,
    begin_capture,
    check,
    end_capture,
    fill,
    python_hot_path,
)


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

    @rule(past=st.integers(1, 1 << 70), stream=st.integers(0, 2))
    def allocate_past_the_address_space(self, past, stream):
        """A size whose rounding to a block and a granule would pass 2**63: refused, and
        nothing changes (the invariants below)."""
        n = 2**63 - 1 - (1 << 17) - self.pool.backend.segment_granularity + past
        with pytest.raises(cuflow.OutOfMemoryError, match="at most"):
            self.pool.alloc(n, self.stream(stream))

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
