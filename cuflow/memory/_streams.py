"""Streams in the pool: cross-stream use, borrowing, and destroyed streams.

A block used on other streams (``record_stream``) is not reused until events
recorded on those streams at free time have completed; a block freed on
another stream is borrowed from a stream whose work has all finished where
there is one, else by making this stream wait on an event recorded there (no
host synchronization).  Every event recorded here is handed to ``Backend.done``
until it completes (which destroys it).  A destroyed stream's cached blocks
become orphans (``DEAD_STREAM``), reused on stream 0 after a device synchronize,
since CUDA may give the handle to a new stream.  Nothing here may record an
event on, or synchronize with, a stream that captures a graph.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import weakref
from collections.abc import Iterator
from typing import Any

from ._blocks import DEAD_STREAM, Block, check_stream
from ._exceptions import MemoryTypeError, MemoryValueError

__all__ = ["StreamsMixin"]


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """No garbage collection in the block (whose finalizers could destroy a stream)."""
    on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if on:
            gc.enable()


class StreamsMixin:
    """The stream bookkeeping of :class:`~cuflow.memory._pool.Pool` (its state, its lock)."""

    #: events that ordered one stream after another, kept until ``Backend.done`` says they
    #: completed (which destroys them); a pool makes its own list at its first such event
    _order_events: list[Any] | None = None

    def record_stream(self, b: Block, stream: int, stream_obj: Any = None) -> None:
        """Mark ``b`` as used on ``stream`` (PyTorch's ``record_stream``); the pool watches
        ``stream_obj``, the stream's object, to learn when it is destroyed.

        Raises
        ------
        MemoryTypeError
            ``b`` is not a :class:`Block`, or ``stream`` not an int.
        MemoryValueError
            ``b`` is no block this pool lends now (a freed block's mark would stick to the
            memory's next user), or ``stream`` is not in [0, 2**63).
        """
        if not isinstance(b, Block):
            raise MemoryTypeError(f"cuflow.memory.Pool.record_stream: b must be a Block this "
                                  f"pool lends now, got {type(b).__name__} {b!r}")
        stream = check_stream("Pool.record_stream", stream)
        if self._live.get(b.ptr) is not b or b.ptr in self._freed:
            raise MemoryValueError(f"cuflow.memory.Pool.record_stream: b must be a block this "
                                   f"pool lends now, got the block at {b.ptr:#x}, which is "
                                   f"freed already or from another pool")
        self._mark_used(b, stream, stream_obj)

    def _mark_used(self, b: Block, stream: int, stream_obj: Any) -> None:
        """:meth:`record_stream` of a block known to be lent and a checked handle (the
        module's ``record_stream`` finds the block among the lent ones, for a live array)."""
        if stream != b.stream:
            with self._lock:
                if self._gone and not self._busy:
                    self._drain()  # a destroyed stream with this handle is forgotten first
                if stream_obj is not None and stream > 2 and stream not in self._watched:
                    self.watch_stream(stream_obj, stream)
                if b.uses is None:
                    b.uses = set()
                b.plain = False
                b.uses.add(stream)
                b.seg.streams.add(stream)

    def watch_stream(self, stream_obj: Any, ptr: int) -> None:
        """Release the free list of ``stream_obj``'s stream when the object is destroyed."""
        with self._lock:
            self._watched.add(ptr)
        try:
            weakref.finalize(stream_obj, self._stream_gone, ptr)
        except TypeError:
            pass

    def _stream_gone(self, ptr: int) -> None:
        """The stream object at ``ptr`` is being destroyed (a finalizer: only queue it).

        The finalizer runs before CUDA destroys the stream; taking the lock makes another
        thread's destruction wait until no pool operation can be recording an event on the
        stream.  In this thread (a garbage collection inside the pool) the lock is re-entered
        and the operations in flight skip the streams queued here.
        """
        with self._lock:
            self._gone.append(ptr)
            self._slow = True

    def _forget_stream(self, ptr: int) -> None:
        """Cached blocks of a destroyed stream become orphans (no event can be recorded on a
        dead stream), reused on the default stream after a device synchronize."""
        self._watched.discard(ptr)
        self.backend.stream_gone(ptr)
        for b in itertools.chain(self._live.values(), self._pending, self._deferred):
            self._forget_block(b, ptr)
        orphans = [b for by_size in self._quick.pop(ptr, {}).values() for b in by_size]
        self._general.pop(ptr, None)
        for key in [k for k in self._lists if k[1] == ptr]:
            orphans += self._lists.pop(key).blocks()
        for b in orphans:
            b.quick = False
            b.stream = DEAD_STREAM
        self._orphans += orphans
        for seg in self._segments.values():
            seg.streams.discard(ptr)
            if seg.stream == ptr:
                seg.stream = DEAD_STREAM

    @staticmethod
    def _forget_block(b: Block, ptr: int) -> None:
        """A lent or pending block of (or used by) the destroyed stream ``ptr``: its free
        goes to the orphans, whatever new stream CUDA gives the handle."""
        if b.stream == ptr:
            b.plain = False
            b.stream = DEAD_STREAM
        if b.uses and ptr in b.uses:
            b.uses.discard(ptr)
            b.uses.add(DEAD_STREAM)

    def _forget_gone(self, freeing: Block | None = None) -> None:
        """Process the queued stream destructions; ``freeing`` is a block being freed (out of
        ``_live`` already: the hot paths process queued frees before anything else)."""
        while self._gone:
            ptr = self._gone.pop()
            self._forget_stream(ptr)
            if freeing is not None:
                self._forget_block(freeing, ptr)
        self._update_slow()

    def _adopt_orphans(self) -> None:
        self.backend.synchronize()  # whatever the dead streams queued has finished
        orphans, self._orphans = self._orphans, []
        for b in orphans:
            b.stream = 0
            if b.seg.stream == DEAD_STREAM:
                b.seg.stream = 0
            b.seg.streams.add(0)
            self._insert_free(b)

    # ------------------------------------------------------- cross-stream reuse
    def _borrow(self, size: int, stream: int, most: int | None) -> Block | None:
        """A free block of another stream, with ``stream`` ordered after its last use.

        The first fit on a stream whose work has all finished is taken as it is; without
        one, the first fit found, and ``stream`` waits for the work queued so far on the
        fit's stream (all of it: the pool does not know which of it used the block).
        Whether a stream's work has finished is asked of the stream (``Backend.stream_idle``),
        else of an event recorded there, and only while no stream captures (a query may not
        run during a capture): then the first fit is taken.
        """
        gone, capturing = self._gone, self._capturing
        probe = not capturing
        if probe:
            self._reap_order_events()
        first = None  # (free list, block, event): the fallback, on a stream still at work
        with _no_gc():  # a collection between the check and the record could destroy s
            for (o, s), fl in self._lists.items():
                if o is not None or s == stream or s in capturing or s in gone:
                    continue  # (an event recorded on a capturing stream would be captured)
                b = fl.pop_fit(size, most)
                if b is None:
                    continue
                idle = probe and self.backend.stream_idle(s)  # (then no event is needed)
                ev = None if idle else self.backend.record(s)
                if ev is None or (probe and self.backend.done(ev)):
                    # s's work so far, the block's last use included, has finished
                    if first is not None:
                        first[0].push(first[1])
                        self._retire(first[2])
                    return self._lend(b, stream)
                if first is None:
                    first = (fl, b, ev)
                    if not probe:
                        break
                else:  # a fit of a stream at work, after the first one: left where it was
                    fl.push(b)
                    self._retire(ev)
        if first is None:
            return None
        self.backend.wait(stream, first[2])
        self._retire(first[2])
        return self._lend(first[1], stream)

    def _lend(self, b: Block, stream: int) -> Block:
        """``b``, borrowed from another stream's free list, for ``stream``."""
        b.stream = stream
        b.seg.streams.add(stream)
        self.num_cross_stream += 1
        return b

    def _retire(self, ev: Any) -> None:
        """``ev`` is awaited by nothing more: destroyed once it completes (a wait queued on
        it already holds what it needs)."""
        evs = self._order_events
        if evs is None:
            evs = self._order_events = []
        evs.append(ev)

    def _reap_order_events(self) -> None:
        """Hand the retired events to ``Backend.done``, keeping those not yet complete (no
        capture may be running)."""
        evs = self._order_events
        if evs:
            done = self.backend.done
            self._order_events = [ev for ev in evs if not done(ev)]

    def _await_uses(self, b: Block) -> None:
        """Hold freed ``b`` until the work of the other streams that used it is done."""
        self.pending_bytes += b.size
        if self._capturing and (DEAD_STREAM in b.uses or not b.uses.isdisjoint(self._capturing)):
            b.events = ()  # no event or synchronize may happen now: done after the capture
            self._deferred.append(b)
        else:
            b.events = self._events_after(b.uses)
            b.uses = None
            self._pending.append(b)

    def _events_after(self, streams: set[int]) -> list[Any]:
        """Events after the work queued so far on ``streams`` (no capture may be running); a
        destroyed stream's work is waited for by a device synchronize instead."""
        with _no_gc():  # as in _borrow: no stream may be destroyed between check and record
            if DEAD_STREAM in streams or not streams.isdisjoint(self._gone):
                self.backend.synchronize()
                return []
            return [self.backend.record(s) for s in streams]

    def _process_pending(self, wait: bool = False) -> bool:
        """Move blocks whose cross-stream events completed to the free lists (no capture may
        be running)."""
        self._reap_order_events()
        for b in self._deferred:  # freed during a capture: their events can be recorded now
            b.events = self._events_after(b.uses)
            b.uses = None
        self._pending += self._deferred
        self._deferred = []
        done_any = False
        keep = []
        for b in self._pending:
            evs = b.events or []
            if wait:
                for ev in evs:
                    while not self.backend.done(ev):
                        pass
                ok = True
            else:
                ok = all(self.backend.done(ev) for ev in evs)
            if ok:
                b.events = None
                self.pending_bytes -= b.size
                self._insert_free(b)
                done_any = True
            else:
                keep.append(b)
        self._pending = keep
        return done_any
