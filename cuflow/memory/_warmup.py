"""Warm-up: preparing the cache for an allocation pattern before it runs.

Segments made while warming are *kept* (except over a backend that places segments
itself, ``places_segments``: expandable segments): any request may split them, and an
ordinary miss does not release them; ``empty_cache`` does, and so does a miss
whose new segment the limit or the device refuses (memory is short then: kept
segments go back before the pool raises ``OutOfMemoryError``).
``start_recording`` .. ``stop_recording`` capture a pattern of allocations and
frees (one recording at a time per pool); ``replay`` dry-runs it (no kernels) so
that the cache holds what it needs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from .._checks import as_flag, is_integer
from ._blocks import Block
from ._exceptions import MemoryValueError

__all__ = ["WarmupMixin"]


class WarmupMixin:
    """Warm-up and recording of :class:`~cuflow.memory._pool.Pool` (its state, its lock)."""

    @contextlib.contextmanager
    def _warm(self):
        """Segments made inside are kept: any request may split them, and an ordinary miss
        does not release them (:meth:`empty_cache` does, and a miss whose segment the limit
        or the device refuses).  Over a backend that places segments itself (expandable
        segments) none is kept: the pages stay mapped and serve later placements, where
        kept segments would fix a placement that varying shapes do not fit."""
        self._warming = not self.backend.places_segments
        try:
            yield
        finally:
            self._warming = False

    def reserve(self, nbytes: int, stream: int | None = None) -> None:
        """Hold at least ``nbytes`` of free cache (one segment) for the coming allocations."""
        with self._warm():
            self.free(self.alloc(nbytes, stream))

    def warmup(self, sizes: Iterable[int], stream: int | None = None) -> None:
        """Allocate ``sizes`` all at once, then free them: the cache then serves them."""
        blocks: list[Block] = []
        with self._warm():
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
        Returns the segments the replay made.
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
        with self._warm() if keep else contextlib.nullcontext():
            for _ in range(rounds):
                live: dict[int, Block] = {}
                try:  # a refused allocation frees the blocks still held
                    for op, key, nbytes, stream in events:
                        if op == "a":
                            live[key] = self.alloc(nbytes, stream)
                        elif key in live:
                            self.free(live.pop(key))
                finally:
                    for b in live.values():
                        self.free(b)
        return self.num_segment_alloc - n0
