"""Warm-up: preparing the cache for an allocation pattern before it runs.

Segments made while warming are *kept*: any request may split them, and an ordinary miss
does not release them; ``empty_cache`` does, and so does a miss whose new segment the
limit or the device refuses (memory is short then: kept segments go back before the pool
raises ``OutOfMemoryError``).  A kept segment's blocks are coalesced as they are freed,
not cached by exact size (one under 1 MiB that the next request asks for with its very
size is handed straight back).  ``reserve`` and ``warmup`` (sizes the caller names) keep their
segments over every backend; a replay's own segments are not kept over a backend that
places segments itself (``places_segments``: expandable segments), where the mapped pages
serve later placements instead.
``start_recording`` .. ``stop_recording`` capture a pattern of allocations and
frees (one recording at a time per pool); ``replay`` dry-runs it (no kernels) so
that the cache holds what it needs.

A kept replay first plans an *arena*: the smallest single segment in which the pattern,
replayed by the pool's own placement, needs no other segment.  The plan runs the pattern
on model pools over a backend of addresses only (:class:`_PlanBackend`), so it costs host
time and no memory.  Where such a segment fits within ``KEEP`` (1.25, ``_expandable``) times
the pattern's peak, that one segment is kept, over every backend, expandable segments
included: a loop of the pattern then neither misses nor maps a page, at the footprint of
one segment the pattern fits (``python -m cuflow bench traces``, "after warmup").  Where
best fit in one segment needs more (fragmentation), the replay keeps what it makes, as
above.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable
from typing import Any

from .._checks import as_flag, is_integer
from ._backends import Backend
from ._blocks import LARGE_ROUND, SMALL, Block, round_size
from ._exceptions import MemoryValueError
from ._expandable import KEEP

__all__ = ["WarmupMixin"]


#: an arena is 1/ARENA_MARGIN larger than the tightest fit found, within KEEP x the peak
#: (tests/memory/test_warmup.py: the ResNet-18 step's tightest fit missed once by its
#: 14th round)
ARENA_MARGIN = 32


class _PlanBackend(Backend):
    """A source of addresses with no memory behind them: what a model pool, replaying a
    pattern to plan an arena, takes its segments from (a segment is never touched)."""

    name = "plan"

    def __init__(self, cheap_release: bool) -> None:
        self.cheap_release = cheap_release  # (it bounds a large request's fit, as upstream)
        self._next = 1 << 40

    def alloc(self, nbytes: int, stream: int) -> int:
        ptr = self._next
        self._next += -(-nbytes // LARGE_ROUND) * LARGE_ROUND
        return ptr

    def free(self, ptr: int, nbytes: int, stream: int) -> None:
        pass


def _play(pool: Any, events: list[tuple] | tuple, rounds: int) -> None:
    """``events`` replayed ``rounds`` times on ``pool`` as a program's arrays use it: each
    allocation through ``alloc_ptr``, each free queued in ``_freed`` for the next
    allocation to give back, as CuPy's allocator hook queues it (``free_ptr`` gives back
    at once); each round frees what it holds.

    A recording logs the frees queued between two allocations in the order the pool gave
    them back, the last queued first; each such run is queued here in reverse, so the pool
    gives the blocks back in the recorded order.  Where a freed block goes, and whether
    the next request takes it straight back, follow that order."""
    for _ in range(rounds):
        live: dict[int, int] = {}  # key -> pointer
        run: list[int] = []  # the frees since the last allocation

        def give_back() -> None:
            for key in reversed(run):
                if key in live:
                    pool._freed[live.pop(key)] = None
            run.clear()

        try:  # a refused allocation frees the blocks still held
            for op, key, nbytes, stream in events:
                if op == "a":
                    give_back()
                    live[key] = pool.alloc_ptr(nbytes, stream)
                else:
                    run.append(key)
            give_back()
        finally:
            for ptr in live.values():
                pool._freed[ptr] = None
            pool.flush_frees()


def _peak(events: list[tuple] | tuple) -> int:
    """The most bytes (rounded block sizes) that ``events``' blocks hold at once."""
    live: dict[int, int] = {}
    cur = peak = 0
    for op, key, nbytes, _ in events:
        if op == "a":
            cur -= live.get(key, 0)  # (a key lent again: the replay drops the old block)
            live[key] = round_size(int(nbytes))
            cur += live[key]
            peak = max(peak, cur)
        else:
            cur -= live.pop(key, 0)
    return peak


class WarmupMixin:
    """Warm-up and recording of :class:`~cuflow.memory._pool.Pool` (its state, its lock)."""

    @contextlib.contextmanager
    def _warm(self, every_backend: bool = False):
        """Segments made inside are kept: any request may split them, and an ordinary miss
        does not release them (:meth:`empty_cache` does, and a miss whose segment the limit
        or the device refuses).  Over a backend that places segments itself (expandable
        segments) none is kept, unless ``every_backend`` (an arena, sizes the caller
        names): the pages stay mapped and serve later placements, where a replay's kept
        segments would fix a placement that varying shapes do not fit."""
        self._warming = every_backend or not self.backend.places_segments
        try:
            yield
        finally:
            self._warming = False

    def reserve(self, nbytes: int, stream: int | None = None) -> None:
        """Hold at least ``nbytes`` of free cache (one segment) for the coming allocations."""
        with self._warm(every_backend=True):
            self.free(self.alloc(nbytes, stream))

    def warmup(self, sizes: Iterable[int], stream: int | None = None) -> None:
        """Allocate ``sizes`` all at once, then free them: the cache then serves them."""
        blocks: list[Block] = []
        with self._warm(every_backend=True):
            try:  # a size refused frees the blocks already taken
                for n in sizes:
                    blocks.append(self.alloc(n, stream))
            finally:
                for b in blocks:
                    self.free(b)

    def start_recording(self) -> None:
        """Record the pool's allocations and frees until :meth:`stop_recording`.

        The recording is the pool's, not the calling thread's: what any thread allocates
        from the pool and frees meanwhile is recorded.  It leaves the pool's statistics as
        they are (its peak is counted apart).

        Raises
        ------
        MemoryValueError
            A recording is active already (a ``warmup`` inside another's function, or on
            another thread): one recording at a time per pool.
        """
        with self._lock:
            if self._recording is not None:
                raise MemoryValueError(
                    "cuflow.memory: one recording at a time per pool: start_recording (or "
                    "warmup) was called while a recording of this pool is active; stop it "
                    "first (a warmup inside another warmup's function is refused too)")
            self._drain()
            self._recording = []
            # the recording's own counters (see _record_lent): the pool's peaks stay what
            # they are for stats() read meanwhile, and a reset_peak_stats() meanwhile does
            # not move the recording's peak
            self._rec_lent = {}
            self._rec_bytes = self._rec_peak = 0
            # every allocation and free goes through Python's _take and _free_locked while
            # this is set, on both hot paths (the compiled ones defer to them): the events
            # and the counters above miss none
            self._slow = True

    def _record_lent(self, b: Block) -> None:
        """A block lent during the recording: its bytes count toward the recording's peak
        until it is freed (blocks lent before the recording count in neither way, as a
        replay of the events does not hold them)."""
        self._rec_lent[b.ptr] = b.size
        self._rec_bytes += b.size
        if self._rec_bytes > self._rec_peak:
            self._rec_peak = self._rec_bytes

    def _record_freed(self, b: Block) -> None:
        """A block freed during the recording (lent before it, or during it)."""
        self._rec_bytes -= self._rec_lent.pop(b.ptr, 0)

    def stop_recording(self) -> tuple[list[tuple], int]:
        """The recording since :meth:`start_recording`: its events and its peak.

        Returns
        -------
        events : list of tuple
            ``("a", pointer, nbytes, stream)`` for each allocation and ``("f", pointer, 0,
            0)`` for each free, in order, as :meth:`replay` takes them.
        peak : int
            The most bytes (allocated: rounded sizes) that blocks lent during the recording
            held at once, >= 0; blocks lent before it do not count, freed or not.

        Raises
        ------
        MemoryValueError
            No recording is active (stop_recording needs a start_recording before it).
        """
        with self._lock:
            if self._recording is None:
                raise MemoryValueError("cuflow.memory: stop_recording needs an active "
                                       "recording (from start_recording); none is active")
            self._drain()
            events, self._recording = self._recording, None
            self._update_slow()
            peak = self._rec_peak
            self._rec_lent = {}
            self._rec_bytes = self._rec_peak = 0
            return events, peak

    def replay(self, events: list[tuple], rounds: int = 2, keep: bool = True) -> int:
        """Dry-run recorded allocation events (no kernels) so the cache fits their pattern.

        Placement decides whether a pattern fits in a given reserve, so the
        pattern is replayed ``rounds`` times: whatever it needs is then held.
        With ``keep`` the segments made are kept (served to any request and
        released by :meth:`empty_cache`, or when the limit or the device refuses a
        segment, not by an ordinary miss); without it they are ordinary
        segments, and a backend that reuses released memory for any size
        (``cheap_release``) keeps what the pattern needed in its own reserve.
        With ``keep``, a pattern on one stream that one segment of at most ``KEEP`` times
        its peak fits gets that one segment instead (an arena: see the module docstring),
        over every backend; it lends no block, so the statistics of lent bytes do not
        count it.  Returns the segments the replay made.
        """
        if isinstance(rounds, bool) or not is_integer(rounds) or rounds < 1:
            raise MemoryValueError(f"cuflow.memory.Pool.replay: rounds must be an int >= 1, "
                                   f"got {rounds!r}")
        keep = as_flag("memory.Pool.replay", "keep", keep)
        if not isinstance(events, list | tuple) or not all(
                isinstance(e, tuple | list) and len(e) == 4 and e[0] in ("a", "f")
                and is_integer(e[1]) for e in events):
            raise MemoryValueError("cuflow.memory.Pool.replay: events must be the list "
                                   "stop_recording gives, of ('a' or 'f', key, nbytes, stream) "
                                   "tuples, each key an int (a block's pointer)")
        n0 = self.num_segment_alloc
        if keep and self._keep_arena(events, rounds):
            return self.num_segment_alloc - n0
        with self._warm() if keep else contextlib.nullcontext():
            _play(self, events, rounds)
        return self.num_segment_alloc - n0

    def _keep_arena(self, events: list[tuple] | tuple, rounds: int) -> bool:
        """Keep the arena that :meth:`_plan_arena` finds for ``events``, a free segment that
        lends no block (the statistics of lent bytes do not see it); whether it did (no
        plan, or the source refused it: the replay then keeps what it makes)."""
        plan = self._plan_arena(events, rounds)
        if plan is None:
            return False
        nbytes, stream = plan
        with self.backend.on_device(), self._lock, self._warm(every_backend=True):
            if stream in self._capturing:  # (its allocations come from the graph's pool)
                return False
            self._drain()
            try:
                ptr = self._new_segment(nbytes, stream, None)
            except MemoryError:  # (the replay's own segments may still fit)
                return False
            self._insert_free(self._add_segment(ptr, nbytes, stream, None))
        return True

    def _plan_arena(self, events: list[tuple] | tuple, rounds: int) -> tuple[int, int] | None:
        """``(nbytes, stream)``: a segment this pool would make (its rounding) in which
        ``events``, all on one stream, replay with no other segment, of at most ``KEEP``
        times their peak; else None.  A binary search over model pools finds the tightest
        fit of ``rounds`` rounds; the segment returned is 1/ARENA_MARGIN larger, or the
        most allowed, whichever replays ``4 * rounds`` rounds with no other segment (best
        fit is not monotone in the segment's size, and a later round's drifted free lists
        may miss a fit of the first few).  Events a replay refuses (a size or stream that
        is no valid int, a size past ``max_request``) plan nothing: the replay names them."""
        allocs = [e for e in events if e[0] == "a"]
        if not allocs or not all(
                is_integer(e[2]) and 0 <= e[2] <= self._state.max_request
                and is_integer(e[3]) and 0 <= e[3] <= sys.maxsize for e in allocs):
            return None
        streams = {int(e[3]) for e in allocs}
        peak = _peak(events)
        if len(streams) != 1 or peak == 0:
            return None
        stream = streams.pop()
        most = int(KEEP * peak)

        def size(n: int) -> int:  # the segment the pool makes for a request of n bytes
            return self._segment_bytes(round_size(max(n, SMALL)), None)

        def fits(n: int, times: int = rounds) -> bool:
            model = self._model(_PlanBackend(self.backend.cheap_release))
            with model._warm(every_backend=True):
                model.free(model.alloc(n, stream))
            made = model.num_segment_alloc
            _play(model, events, times)
            return model.num_segment_alloc == made

        lo, top = peak, most  # top: the largest request whose segment stays within most
        while top - lo >= LARGE_ROUND and size(top) > most:
            mid = (lo + top) // 2
            lo, top = (mid, top) if size(mid) <= most else (lo, mid)
        if size(top) > most:
            top = lo
        if size(top) > most or not fits(size(top)):
            return None
        lo, hi = peak, top  # the tightest fit, to 1/256 of the peak
        while hi - lo >= max(LARGE_ROUND, peak >> 8) and size(lo) < size(hi):
            mid = (lo + hi) // 2
            if fits(size(mid)):
                hi = mid
            else:
                lo = mid
        for n in (min(hi + hi // ARENA_MARGIN, top), top):
            if fits(size(n), 4 * rounds):
                return size(n), stream
        return None
