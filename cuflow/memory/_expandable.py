"""Expandable segments: the pool's segments placed in one reserved address range whose
physical pages are mapped only while needed (PyTorch's ``expandable_segments``).

The driver's stream-ordered pool places the pool's segments as it likes and reserves whole
chunks, so with shapes that vary (a transformer's sequence lengths, a CNN's batch sizes) its
free memory is scattered over chunks that a new segment cannot use, and the device footprint
(peak memory in use over peak bytes requested) reaches 1.3-1.5 on the recorded traces.  Here
cuflow places the segments itself, in one range of virtual addresses reserved at start:

* **Placement** is first fit over the free space that is already mapped (the lowest address
  where the segment lies on mapped pages only); when none holds it, the free range or the
  top of the range that needs the fewest new pages.  Free neighbours coalesce, whatever the
  stream that freed them.
* **Pages** are :data:`PAGE` (2 MiB, the device's mapping granularity) each, mapped when a
  segment first lies on them.  They stay mapped while free, so a workload's second pass maps
  nothing, until mapping more would take the mapped bytes over :data:`KEEP` times the peak of
  the bytes the pool's users requested; then free pages are unmapped, the largest free runs
  first, only
  as many as that limit needs.  ``bench/heap_model.py`` replays this placement alone over
  the allocation traces; ``python -m cuflow bench traces`` measures the pool over it
  ("cuflow vmm").
* **Streams.** Each stream that gives segments back has one event, recorded again at each
  of its frees (one runtime call), and the ranges it freed.  A segment placed over such a
  range for another stream waits for that event on its stream (no host synchronization):
  for all of the freeing stream's work so far, which covers the range's.  Pages are
  unmapped only once the events of the streams that freed ranges on them completed (a host
  wait).  A destroyed stream's frees stay under a key of their own, since CUDA may give its
  handle to a new stream.  Mapping and unmapping run in relaxed capture mode: they touch
  no stream, so another stream's graph capture goes on.

:class:`PageHeap` is the placement, on offsets, and the streams' ordering (its ``lend`` and
``give_back`` are the backend's ``alloc`` and ``free``, compiled with it in ``_pageheap.c``);
:class:`ExpandableBackend` is the backend over it, with pages and events from its
subclasses: :class:`VirtualMemoryBackend` (device pages through the driver's virtual-memory
API, ``CUFLOW_POOL_BACKEND=vmm``) and :class:`HostExpandableBackend` (host pages, for
tests).
"""

from __future__ import annotations

import abc
import bisect
import contextlib
import ctypes as C
import functools
import mmap
from collections.abc import Iterator
from typing import Any

from .._checks import is_integer
from .._errors import CudaError
from ._backends import Backend, _CudaEvents
from ._env import POOL_HOTPATH
from ._blocks import DEAD_STREAM
from ._exceptions import DoubleFreeError, MemoryTypeError, MemoryValueError

try:  # the same placement compiled (_pageheap.c), where the extension was built
    from ._hotpath import PageHeap as CPageHeap
except ImportError:
    CPageHeap = None
if POOL_HOTPATH == "python":
    CPageHeap = None

__all__ = ["KEEP", "PAGE", "ExpandableBackend", "HostExpandableBackend", "PageHeap",
           "VirtualMemoryBackend"]

PAGE = 2 << 20
ALIGN = 512
_MOST = 1 << 46  # most bytes of address space an expandable backend reserves (its page map:
# a byte a page)  # segments start at multiples of this
KEEP = 1.25  # mapped bytes stay at most KEEP x the peak live bytes, while free pages allow
_NOT_READY = 600  # cudaErrorNotReady: an event's work is not done
_MOST_SPANS = 64  # a stream's spans past this become one span over them
_MOST_STREAMS = 8  # past this, streams whose work is done are forgotten


def _rounded(nbytes: int) -> int:
    """``nbytes`` rounded up to a multiple of :data:`ALIGN` (at least one)."""
    return max(-(-nbytes // ALIGN) * ALIGN, ALIGN)


class PageHeap:
    """Placement of ranges in ``[0, capacity)`` with page accounting (see the module
    docstring); ``map_pages`` and ``unmap_pages`` are called with ascending page numbers and
    may raise :class:`MemoryError` (mapping) to refuse."""

    def __init__(self, capacity: int, keep: float = KEEP) -> None:
        self.capacity = capacity
        self.keep = keep
        self.cap = 0  # most bytes mapped, where free pages allow (0: none; a pool's limit)
        self.by_size: list[tuple[int, int]] = []  # free (size, offset), sorted
        self.size_at: dict[int, int] = {}  # free offset -> size
        self.start_of: dict[int, int] = {}  # free end -> offset
        self.top = 0  # the end of the highest range ever placed
        self.mapped: set[int] = set()
        self.peak_mapped = 0  # pages
        self.live = self.peak_live = 0  # bytes of the live ranges, and their peak
        self._runs: tuple[list[int], list[int]] | None = None  # mapped runs (starts, ends)
        # the backend's part (lend, give_back): see the module docstring, "Streams"
        self.base = 0  # the address of offset 0
        self.state: Any = None  # the pool's counters (peak_requested, requested), or None
        self._events: tuple | None = None
        # per stream: one event, recorded after the last of its give-backs whose work may not
        # be done, and the spans given back there
        self._pending: dict[int, tuple[Any, list[tuple[int, int]]]] = {}
        self._gone_key = DEAD_STREAM  # (destroyed streams' give-backs: keys below it)

    @property
    def events(self) -> tuple | None:
        """``(create, record, query, wait, sync, destroy)``, or None: work is synchronous.

        ``create()`` gives a new event, ``record(event, stream)`` records it, ``query(event)``
        gives 0 once its work is done and 600 while it is not (another value is a CUDA
        error), ``wait(stream, event, 0)`` makes a stream wait for it, ``sync(event)`` waits
        on the host, ``destroy(event)`` frees it (CuPy's runtime functions, for a device)."""
        return self._events

    @events.setter
    def events(self, value: tuple | None) -> None:
        if value is not None and not (isinstance(value, tuple) and len(value) == 6
                                      and all(callable(f) for f in value)):
            raise MemoryTypeError(f"PageHeap.events must be None or a tuple of 6 callables "
                            f"(create, record, query, wait, sync, destroy), got {value!r}")
        if self._pending:
            raise MemoryValueError("PageHeap.events: give-backs are pending on the events in "
                                   "use (settle them first)")
        self._events = value

    @property
    def mapped_count(self) -> int:
        return len(self.mapped)

    def free_ranges(self) -> list[tuple[int, int]]:
        """The free ranges, (offset, size), ascending."""
        return sorted(self.size_at.items())

    # -- the pages: overridden by a heap that maps them
    def map_pages(self, pages: list[int]) -> None:
        self.mapped.update(pages)
        self._runs = None

    def unmap_pages(self, pages: list[int]) -> None:
        self.mapped.difference_update(pages)
        self._runs = None

    # -- free ranges
    def _take(self, a: int) -> int:
        n = self.size_at.pop(a)
        del self.start_of[a + n]
        self.by_size.pop(bisect.bisect_left(self.by_size, (n, a)))
        return n

    def _put(self, a: int, n: int) -> None:
        self.size_at[a] = n
        self.start_of[a + n] = a
        bisect.insort(self.by_size, (n, a))

    def _release(self, a: int, n: int) -> None:
        """Return ``[a, a + n)`` to the free ranges, joined with free neighbours."""
        if a + n in self.size_at:
            n += self._take(a + n)
        if a in self.start_of:
            b = self.start_of[a]
            n += self._take(b)
            a = b
        self._put(a, n)

    def _new_pages(self, a: int, n: int) -> int:
        return sum(p not in self.mapped for p in range(a // PAGE, (a + n - 1) // PAGE + 1))

    def _spot(self, n: int) -> tuple[int, int, int, bool] | None:
        """(offset, free range's offset, its size, whether it lies on mapped pages only)
        for ``n`` bytes; None: at the top."""
        if self._runs is None:
            pages = sorted(self.mapped)
            self._runs = ([p for p in pages if p - 1 not in self.mapped],
                          [p + 1 for p in pages if p + 1 not in self.mapped])
        starts, ends = self._runs
        fit, spots = None, []
        for size, a in self.by_size[bisect.bisect_left(self.by_size, (n, -1)):]:
            end = a + size
            spots += [(a, a, size), (end - n, a, size)]
            j = max(bisect.bisect_right(starts, a // PAGE) - 1, 0)
            while j < len(starts) and starts[j] * PAGE < end:  # mapped runs over the range
                lo, hi = max(a, starts[j] * PAGE), min(end, ends[j] * PAGE)
                if hi - lo >= n and (fit is None or lo < fit[0]):
                    fit = (lo, a, size, True)
                if hi > a:
                    spots += [(p, a, size) for p in (lo, hi - n) if a <= p <= end - n]
                j += 1
        if fit or not spots:
            return fit
        best = min((self._new_pages(p, n), size, p not in (a, a + size - n), p, a)
                   for p, a, size in spots)  # fewest new pages, then the smallest range
        top = self.start_of.get(self.top, self.top)
        if top + n <= self.capacity and self._new_pages(top, n) < best[0]:
            return None  # the top, where it fits
        return best[3], best[4], best[1], False

    def alloc(self, n: int, demand: int = 0) -> int:
        """The offset of a new range of ``n`` bytes (a multiple of :data:`ALIGN`); raises
        :class:`MemoryError` when the address range or the pages run out.  ``demand``: the
        peak bytes the user asked for so far, this range included, for the mapped bytes
        to stay within ``keep`` times of (0: the live ranges' peak; a pool's ranges hold
        free blocks too)."""
        spot = self._spot(n)
        mapped = False
        if spot is None:  # the top grows, from a free range that ends there if there is one
            a = self.start_of.get(self.top, self.top)
            if a + n > self.capacity:
                raise MemoryError(f"expandable segments: {n} bytes do not fit in the "
                                  f"{self.capacity} reserved bytes of address space")
            if a != self.top:
                self._take(a)
            self.top = a + n
        else:
            a, b, size, mapped = spot
            self._take(b)
            if a > b:
                self._put(b, a - b)
            if a + n < b + size:
                self._put(a + n, b + size - a - n)
        peak = max(self.peak_live, self.live + n)
        if not mapped:  # (the range is out of the free ranges: an unmap for room skips it)
            missing = [p for p in range(a // PAGE, (a + n - 1) // PAGE + 1)
                       if p not in self.mapped]
            try:
                if missing:
                    self._map(missing, demand or peak)
            except BaseException:
                self._release(a, n)
                raise
        self.live += n
        self.peak_live = peak
        return a

    def _map(self, pages: list[int], peak: int) -> None:
        """Map ``pages``, first unmapping free pages beyond ``KEEP`` x ``peak``; on a
        refusal, unmap every free page and try once more."""
        excess = (len(self.mapped) + len(pages)) * PAGE - self.keep * peak
        if self.cap:
            excess = max(excess, (len(self.mapped) + len(pages)) * PAGE - self.cap)
        if excess > 0:
            self._unmap_free(-(-int(excess) // PAGE))
        self._runs = None
        try:
            self.map_pages(pages)
        except MemoryError:
            if not self.trim():
                raise
            # the pages the refused call did not map, once more
            self.map_pages([p for p in pages if p not in self.mapped])
        finally:
            self._runs = None
            self.peak_mapped = max(self.peak_mapped, len(self.mapped))

    def free_pages(self) -> list[int]:
        """The mapped pages no live range touches, ascending: those a free range covers (up
        to the top of the ranges placed)."""
        out = []
        for a in sorted(self.size_at):
            end = a + self.size_at[a]
            last = -(-end // PAGE) if end == self.top else end // PAGE
            out += [p for p in range(-(-a // PAGE), last) if p in self.mapped]
        return out

    def _unmap_free(self, need: int | None) -> int:
        """Unmap ``need`` free pages (all: None), the largest free runs first, each from its
        high end; the number unmapped."""
        runs: list[list[int]] = []
        for p in self.free_pages():
            if runs and runs[-1][-1] == p - 1:
                runs[-1].append(p)
            else:
                runs.append([p])
        done = 0
        for run in sorted(runs, key=len, reverse=True):
            if need is not None and done >= need:
                break
            take = run if need is None else run[-(need - done):]
            self.unmap_pages(take)
            self._runs = None
            done += len(take)
        return done

    def free(self, a: int, n: int) -> None:
        """Return the range at ``a`` of ``n`` bytes (from :meth:`alloc`); its pages stay
        mapped."""
        if a < 0 or n <= 0 or a + n > self.top:
            raise MemoryValueError(f"PageHeap.free: the range at {a} of {n} bytes must lie in "
                                   f"[0, {self.top}), the ranges placed")
        starts = sorted(self.size_at)
        i = bisect.bisect_left(starts, a)
        if (i and starts[i - 1] + self.size_at[starts[i - 1]] > a) or \
                (i < len(starts) and starts[i] < a + n):
            raise MemoryValueError(f"PageHeap.free: the range at {a} of {n} bytes must be "
                                   f"placed, and it overlaps a free one (freed twice?)")
        self.live -= n
        self._release(a, n)

    def trim(self, pages: int | None = None) -> int:
        """Unmap every free page (or ``pages`` of them); the number unmapped."""
        return self._unmap_free(pages)

    # -- the backend's alloc and free, with the streams' ordering (the events' callbacks may
    # run any code, a collection's finalizers giving back ranges or destroying streams
    # included: entries are found again by their event after each call)
    def lend(self, nbytes: int, stream: int) -> int:
        """The address of a new segment of ``nbytes`` for work on ``stream``, which waits
        for the work of other streams that gave back ranges under it."""
        n = _rounded(nbytes)
        st = self.state
        a = self.alloc(n, 0 if st is None else max(st.peak_requested, st.requested + n))
        p = self._pending
        if self._events is not None and (len(p) > 1 or (p and stream not in p)):
            try:
                self._order(a, a + n, stream)
            except BaseException:
                self.free(a, n)  # (placed just now: it goes back)
                raise
        return self.base + a

    def give_back(self, ptr: int, nbytes: int, stream: int) -> None:
        """The segment at ``ptr`` back, after ``stream``'s work so far."""
        a, n = ptr - self.base, _rounded(nbytes)
        ev = self._events
        event = None
        # recorded here, on the freeing stream, even where no reader may ever need it: a record
        # made later, when another stream's segment or an unmap reads it, would touch the
        # freeing stream inside that other work, and a use of the legacy stream there ends any
        # capture on a blocking stream (cudaErrorStreamCaptureImplicit)
        if ev is not None:  # recorded before the range goes back: a failed record leaves it
            event = self._entry_event(stream)
            try:
                ev[1](event, stream)
            except BaseException:
                self._drop_if_unused(event)
                raise
        try:
            self.free(a, n)
        except ValueError as e:
            if event is not None:
                self._drop_if_unused(event)
            raise DoubleFreeError(f"cuflow.memory: expandable segments: {ptr:#x} of {nbytes} "
                                  f"bytes is no segment this backend lends: {e}") from None
        if event is None:
            return
        key = self._key_of(event)
        if key is not None:  # (the event's entry, under whatever key it has now)
            spans = self._pending[key][1]
            if len(spans) == _MOST_SPANS:  # one span over them (waiting for it waits for each)
                spans[:] = [(min(s[0] for s in spans), max(s[1] for s in spans))]
            spans.append((a, a + n))
        if len(self._pending) > _MOST_STREAMS:  # streams come and go: forget those done
            self._order(0, 0, stream)

    def _entry_event(self, stream: int) -> Any:
        """``stream``'s event, with a new entry where it has none."""
        entry = self._pending.get(stream)
        if entry is not None:
            return entry[0]
        event = self._events[0]()
        entry = self._pending.get(stream)  # (the callback may have made one)
        if entry is not None:
            self._events[5](event)
            return entry[0]
        self._pending[stream] = (event, [])
        return event

    def _key_of(self, event: Any) -> int | None:
        return next((k for k, (e, _) in self._pending.items() if e is event), None)

    def _drop_event(self, event: Any) -> None:
        """``event`` destroyed and its entry, wherever it is now, forgotten."""
        self._events[5](event)
        key = self._key_of(event)
        if key is not None:
            del self._pending[key]

    def _drop_if_unused(self, event: Any) -> None:
        """``event``'s entry forgotten if it holds no span (made for a give-back that
        failed)."""
        key = self._key_of(event)
        if key is not None and not self._pending[key][1]:
            with contextlib.suppress(Exception):  # (the give-back's own error goes on)
                self._drop_event(event)

    def _over(self, lo: int, hi: int, stream: int | None) -> list[Any]:
        """The events of the entries (other than ``stream``'s) over ``[lo, hi)`` (every one
        for an empty range), before any callback runs."""
        return [e for s, (e, spans) in self._pending.items()
                if s != stream and (lo >= hi or any(a < hi and lo < b for a, b in spans))]

    def _order(self, lo: int, hi: int, stream: int) -> None:
        """Make ``stream`` wait for the give-backs of other streams over ``[lo, hi)`` whose
        work is not done; forget the streams whose work is (every other one, for an empty
        range)."""
        ev = self._events
        for event in self._over(lo, hi, stream):
            if self._key_of(event) is None:
                continue  # (forgotten meanwhile)
            status = ev[2](event)
            if status == 0:
                self._drop_event(event)
            elif status != _NOT_READY:
                raise CudaError(f"cuflow.memory: expandable segments: a query of the event "
                                f"ordering a range given back returned CUDA status {status}")
            elif lo < hi:
                ev[3](stream, event, 0)

    def settle(self, lo: int, hi: int) -> None:
        """Wait on the host for the work of the streams that gave back ranges over
        ``[lo, hi)``, and forget them (before their pages are unmapped)."""
        if self._events is None:
            return
        for event in self._over(lo, max(hi, lo + 1), None):
            if self._key_of(event) is not None:
                self._events[4](event)
                self._drop_event(event)

    def stream_gone(self, stream: int) -> None:
        """``stream`` was destroyed: its give-backs stay under a key no stream has (CUDA may
        give its handle to a new stream, which must not take them for its own)."""
        entry = self._pending.pop(stream, None)
        if entry is not None:
            self._gone_key -= 1
            self._pending[self._gone_key] = entry

    def pending(self) -> dict[int, tuple[Any, list[tuple[int, int]]]]:
        """{stream: (event, [(lo, hi)])}: the give-backs whose work may not be done."""
        return {s: (e, list(spans)) for s, (e, spans) in self._pending.items()}


def _backend_heap(base: type) -> type:
    class _Heap(base):
        """The backend's heap: its page calls go to the backend."""

        def __init__(self, backend: ExpandableBackend, capacity: int) -> None:
            super().__init__(capacity)
            self.backend = backend

        # run by run, each recorded once done: a refusal partway leaves the heap's pages
        # those of the device
        def map_pages(self, pages: list[int]) -> None:
            for first, count in _runs(pages):
                self.backend._map(first, count)
                super().map_pages(range(first, first + count))

        def unmap_pages(self, pages: list[int]) -> None:
            for first, count in _runs(pages):
                self.backend._unmap(first, count)
                super().unmap_pages(range(first, first + count))

    return _Heap


_HEAPS = {base: _backend_heap(base) for base in (PageHeap, CPageHeap) if base is not None}


def _runs(pages: list[int]) -> list[tuple[int, int]]:
    """(first page, page count) of each run of adjacent pages, ``pages`` ascending."""
    out: list[tuple[int, int]] = []
    for p in pages:
        if out and out[-1][0] + out[-1][1] == p:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((p, 1))
    return out


class ExpandableBackend(Backend):
    """Segments placed by a :class:`PageHeap` in one reserved range at ``self.base`` (see the
    module docstring); subclasses map and unmap the pages and give the heap its events
    (:attr:`PageHeap.events`; none: work is synchronous).

    An abstract class: :class:`VirtualMemoryBackend` and :class:`HostExpandableBackend` are
    its forms.

    Parameters
    ----------
    capacity : int
        Bytes of the range the segments are placed in (the subclasses check it and round
        it up to whole pages before they pass it here).
    """

    cheap_release = True
    places_segments = True
    # segments of exactly what a request needs, rounded to a 128 KiB block: the heap, not
    # the pool, owns the rest of a page (bench/test_bench_memory.py::test_trace)
    segment_granularity = 1 << 17

    def __init__(self, capacity: int) -> None:
        self.heap = _HEAPS[CPageHeap or PageHeap](self, capacity)
        # the heap's own methods, so that a pool's miss calls no Python frame here (a lend
        # and give-back cost 2.3-2.8 us through Python methods, 0.6-1.0 us so: the
        # performance page, "What limits the figures"), unless a
        # subclass has its own
        if type(self).alloc is ExpandableBackend.alloc:
            self.alloc = self.heap.lend
        if type(self).free is ExpandableBackend.free:
            self.free = self.heap.give_back

    @property
    def base(self) -> int:
        """The address of the reserved range."""
        return self.heap.base

    # -- subclasses: the pages
    @abc.abstractmethod
    def _map_run(self, first: int, count: int) -> None:
        """Map ``count`` pages from page ``first``; MemoryError when memory is short."""

    @abc.abstractmethod
    def _unmap_run(self, first: int, count: int) -> None:
        """Unmap ``count`` pages from page ``first``."""

    # -- the backend
    def alloc(self, nbytes: int, stream: int) -> int:  # (the instance's is the heap's)
        """A new segment of ``nbytes`` placed in the range, its pages mapped where they are
        not (the heap's ``lend``, which an instance calls directly).

        Parameters
        ----------
        nbytes : int
            The segment's bytes (rounded up to a multiple of 512 in the range).
        stream : int
            The handle of the stream whose work first uses the segment.

        Returns
        -------
        int
            The segment's address.

        Raises
        ------
        MemoryError
            The range has no room for it, or its pages cannot be mapped even after the free
            pages are unmapped.
        cuflow.CudaError
            A query of the event of a stream that gave back a range under it reports a
            CUDA error.

        Notes
        -----
        Stream semantics: nothing is queued for the segment itself; where it lies over
        ranges other streams gave back whose work may not be done, a wait for each such
        stream's event is queued on ``stream`` (no host synchronization).
        """
        return self.heap.lend(nbytes, stream)

    def free(self, ptr: int, nbytes: int, stream: int) -> None:
        """Return a segment from :meth:`alloc` to the range; its pages stay mapped (the
        heap's ``give_back``, which an instance calls directly).

        Parameters
        ----------
        ptr : int
            The segment's address, from :meth:`alloc` and not given back yet.
        nbytes : int
            Its bytes, as asked of :meth:`alloc`.
        stream : int
            The handle of the stream whose queued work the release follows.

        Raises
        ------
        DoubleFreeError
            The range of ``nbytes`` at ``ptr`` lies outside the ranges placed, or over a
            free one (given back already).

        Notes
        -----
        Stream semantics: where the backend has events (:class:`VirtualMemoryBackend`), one
        is recorded on ``stream`` after its work so far (one event per stream, recorded
        again at each of its frees); a segment later placed over the range for another
        stream waits for it there, and the range's pages are unmapped only after it
        completes.
        """
        self.heap.give_back(ptr, nbytes, stream)

    def attach(self, state: Any) -> None:
        """Keep the pool's counters: the mapped bytes stay within :data:`KEEP` times the
        peak of its requested bytes, where free pages allow.

        Parameters
        ----------
        state : object
            The pool's counters, with ``requested`` and ``peak_requested`` attributes.
        """
        # the pool's requested bytes: the mapped bytes are kept within KEEP x their peak,
        # not the segments', which hold the pool's free blocks too (python -m cuflow bench
        # traces: S's footprint)
        self.heap.state = state

    def limit_memory(self, limit: int | None) -> None:
        """Hold the mapped bytes to the pool's limit, where free pages allow: free pages past
        it are unmapped at once, and before each later mapping.  In between, pages freed stay
        mapped (until a mapping needs room, or :meth:`trim`), and pages that live segments
        share only in part stay mapped whatever the limit: the mapped bytes may pass it.

        Parameters
        ----------
        limit : int or None
            The pool's limit in bytes; ``None`` (or 0) removes the cap.

        Notes
        -----
        Stream semantics: before a page is unmapped, the host waits for the work of the
        streams that gave back ranges on it.
        """
        # the pool's limit caps the mapped pages too, where free pages allow, or free pages
        # kept by the 1.25x rule would hold device memory past it
        self.heap.cap = limit or 0
        over = self.heap.mapped_count * PAGE - (limit or 0)
        if limit and over > 0:
            self.heap.trim(-(-over // PAGE))

    def stream_gone(self, stream: int) -> None:
        """``stream`` was destroyed: the ranges it gave back stay ordered after its event,
        under a key no stream has, so a new stream given its handle does not take them as
        its own.

        Parameters
        ----------
        stream : int
            The handle of the destroyed stream.
        """
        self.heap.stream_gone(stream)

    def _map(self, first: int, count: int) -> None:
        self._map_run(first, count)
        self.device_allocs += 1

    def _unmap(self, first: int, count: int) -> None:
        self.heap.settle(first * PAGE, (first + count) * PAGE)  # their last work ends first
        self._unmap_run(first, count)
        self.device_frees += 1

    def device_reserved(self) -> tuple[int, int]:
        return self.heap.mapped_count * PAGE, self.heap.peak_mapped * PAGE

    def reset_device_peak(self) -> None:
        self.heap.peak_mapped = self.heap.mapped_count

    def trim(self) -> None:
        """Unmap every free page."""
        self.heap.trim()


def _check_capacity(where: str, capacity: Any) -> int:
    if not is_integer(capacity):
        raise MemoryTypeError(f"cuflow.memory.{where}: capacity must be an int number of "
                              f"bytes in (0, 2**46], got {type(capacity).__name__} "
                              f"{capacity!r}")
    if not 0 < capacity <= _MOST:
        raise MemoryValueError(f"cuflow.memory.{where}: capacity must be an int number of "
                               f"bytes in (0, 2**46], got {capacity}")
    return -(-int(capacity) // PAGE) * PAGE


class HostExpandableBackend(ExpandableBackend):
    """Expandable segments over host memory: one anonymous mapping of ``capacity`` bytes
    (rounded up to whole pages) whose pages the kernel commits when first written; an
    unmapped page's memory goes back to the kernel (``MADV_DONTNEED``) and reads as zeros
    when used again.  Streams are plain integers and always in order.  For tests.

    Parameters
    ----------
    capacity : int, default 4 GiB
        Bytes of the mapping, in (0, 2**46]; rounded up to whole pages (:data:`PAGE`).  It
        is also the whole that a fraction limit is of.

    Raises
    ------
    MemoryTypeError
        ``capacity`` is not an integer (a bool neither).
    MemoryValueError
        ``capacity`` is outside (0, 2**46], or the host cannot reserve that much address
        space.
    """

    name = "host-expandable"

    def __init__(self, capacity: int = 4 << 30) -> None:
        capacity = _check_capacity("HostExpandableBackend", capacity)
        super().__init__(capacity)
        try:
            self._buf = mmap.mmap(-1, capacity, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
                                  | getattr(mmap, "MAP_NORESERVE", 0))
        except (OSError, OverflowError) as e:
            raise MemoryValueError(f"cuflow.memory.HostExpandableBackend: cannot reserve "
                                   f"{capacity} bytes of host address space (capacity): "
                                   f"{e}") from None
        self._view = C.c_char.from_buffer(self._buf)
        self.heap.base = C.addressof(self._view)

    def _map_run(self, first: int, count: int) -> None:
        pass  # (the kernel commits a page when it is first written)

    def _unmap_run(self, first: int, count: int) -> None:
        self._buf.madvise(mmap.MADV_DONTNEED, first * PAGE, count * PAGE)

    def total_memory(self) -> int:
        return self.heap.capacity


class _Location(C.Structure):
    _fields_ = [("type", C.c_int), ("id", C.c_int)]


class _AllocFlags(C.Structure):
    _fields_ = [("compressionType", C.c_ubyte), ("gpuDirectRDMACapable", C.c_ubyte),
                ("usage", C.c_ushort), ("reserved", C.c_ubyte * 4)]


class _Prop(C.Structure):  # CUmemAllocationProp
    _fields_ = [("type", C.c_int), ("requestedHandleTypes", C.c_int), ("location", _Location),
                ("win32HandleMetaData", C.c_void_p), ("allocFlags", _AllocFlags)]


class _Access(C.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", C.c_int)]


_CU_OUT_OF_MEMORY = 2
_CAPTURE_RELAXED = 2  # CU_STREAM_CAPTURE_MODE_RELAXED
_PINNED, _DEVICE, _READ_WRITE = 1, 1, 3  # CU_MEM_ALLOCATION_TYPE_PINNED, ..._LOCATION_TYPE_DEVICE


class VirtualMemoryBackend(_CudaEvents, ExpandableBackend):
    """Expandable segments in device memory, through the driver's virtual-memory API:
    ``cuMemAddressReserve`` once (``capacity`` bytes of addresses, by default twice the
    device's memory), then one ``cuMemCreate`` and ``cuMemMap`` per 2 MiB page and
    ``cuMemSetAccess`` per run of pages; unmapping is ``cuMemUnmap`` and ``cuMemRelease``.

    Mapping a page costs tens of microseconds, so a workload's first pass is slower than on
    the driver's pool; later passes reuse mapped pages and call the driver rarely or never
    (``python -m cuflow bench traces``, "cuflow vmm").  The memory is mapped for this device
    only (no peer access is granted to other devices), and CUDA IPC handles
    (``cudaIpcGetMemHandle``) do not apply to it.

    Parameters
    ----------
    device_id : int
        The device ordinal, a visible device.
    capacity : int, optional
        Bytes of address space to reserve, in (0, 2**46]; rounded up to whole pages
        (:data:`PAGE`).  Default: twice the device's memory.

    Raises
    ------
    MemoryTypeError
        ``device_id`` or ``capacity`` is not an integer (a bool neither).
    MemoryValueError
        ``device_id`` is not a visible device, ``capacity`` is outside (0, 2**46], or the
        device's mapping granularity does not divide the 2 MiB page.
    MemoryError
        The driver reports that it is out of memory (reserving the address range).
    cuflow.CudaError
        Another error of the driver's virtual-memory API.
    ImportError
        CuPy is not installed.
    OSError
        The driver library (``libcuda.so.1``) cannot be loaded.
    """

    name = "vmm"

    def __init__(self, device_id: int, capacity: int | None = None) -> None:
        if not is_integer(device_id):
            raise MemoryTypeError(f"cuflow.memory.VirtualMemoryBackend: device_id must be an "
                                  f"int device ordinal, got {type(device_id).__name__} "
                                  f"{device_id!r}")
        _CudaEvents.__init__(self, device_id)
        n = self._rt.getDeviceCount()
        if not 0 <= device_id < n:
            raise MemoryValueError(f"cuflow.memory.VirtualMemoryBackend: device_id must be in "
                                   f"[0, {n}), got {device_id}")
        self._cu = C.CDLL("libcuda.so.1")
        self._call("cuInit", 0)  # (the driver API's own start: a no-op once CUDA runs)
        self._prop = _Prop(_PINNED, 0, _Location(_DEVICE, device_id), None, _AllocFlags())
        self._access = _Access(_Location(_DEVICE, device_id), _READ_WRITE)
        g = C.c_size_t()
        self._call("cuMemGetAllocationGranularity", C.byref(g), C.byref(self._prop), 0)
        if PAGE % g.value:
            raise MemoryValueError(f"cuflow.memory.VirtualMemoryBackend: the device maps "
                                   f"memory in granules of {g.value} bytes, which must divide "
                                   f"the {PAGE} byte page")
        if capacity is None:
            capacity = 2 * self._rt.getDeviceProperties(device_id)["totalGlobalMem"]
        capacity = _check_capacity("VirtualMemoryBackend", capacity)
        ExpandableBackend.__init__(self, capacity)
        base = C.c_uint64()
        self._call("cuMemAddressReserve", C.byref(base), C.c_size_t(capacity), C.c_size_t(0),
                   C.c_uint64(0), C.c_uint64(0))
        self.heap.base = base.value
        self._handles: dict[int, C.c_uint64] = {}
        rt = self._rt
        # CuPy's runtime functions, called by the heap with no Python frame between; one
        # event per stream, recorded again at each give-back (where a new event cost four
        # runtime calls)
        self.heap.events = (functools.partial(rt.eventCreateWithFlags, rt.eventDisableTiming),
                            rt.eventRecord, rt.eventQuery, rt.streamWaitEvent,
                            rt.eventSynchronize, rt.eventDestroy)

    def _closed(self, nbytes: int, stream: int) -> int:
        raise MemoryValueError("cuflow.memory.VirtualMemoryBackend: closed (its address "
                               "range was given back); a pool needs a new backend")

    @contextlib.contextmanager
    def _relaxed(self) -> Iterator[None]:
        """This thread in relaxed capture mode: mapping and unmapping (and the wait for a
        range's last work) touch no stream, so they may run while another stream captures
        a graph, which a global-mode capture (PyTorch's default) otherwise refuses."""
        mode = C.c_int(_CAPTURE_RELAXED)
        self._call("cuThreadExchangeStreamCaptureMode", C.byref(mode))
        try:
            yield
        finally:
            self._call("cuThreadExchangeStreamCaptureMode", C.byref(mode))

    def _map(self, first: int, count: int) -> None:
        with self._relaxed():
            super()._map(first, count)

    def _unmap(self, first: int, count: int) -> None:
        with self._relaxed():
            super()._unmap(first, count)

    def _call(self, name: str, *args: Any) -> int:
        r = getattr(self._cu, name)(*args)
        if r == _CU_OUT_OF_MEMORY:
            raise MemoryError(f"cuflow.memory.VirtualMemoryBackend: {name}: out of memory")
        if r:
            raise CudaError(f"cuflow.memory.VirtualMemoryBackend: {name} returned CUresult {r}")
        return r

    def _map_run(self, first: int, count: int) -> None:
        done = []
        try:
            for p in range(first, first + count):
                h = C.c_uint64()
                self._call("cuMemCreate", C.byref(h), C.c_size_t(PAGE), C.byref(self._prop),
                           C.c_uint64(0))
                try:
                    self._call("cuMemMap", C.c_uint64(self.base + p * PAGE), C.c_size_t(PAGE),
                               C.c_size_t(0), h, C.c_uint64(0))
                except BaseException:
                    self._cu.cuMemRelease(h)
                    raise
                self._handles[p] = h
                done.append(p)
            self._call("cuMemSetAccess", C.c_uint64(self.base + first * PAGE),
                       C.c_size_t(count * PAGE), C.byref(self._access), C.c_size_t(1))
        except BaseException:  # a run maps whole or not at all
            for first_done, n in _runs(done):
                self._unmap_run(first_done, n)
            raise

    def _unmap_run(self, first: int, count: int) -> None:
        self._call("cuMemUnmap", C.c_uint64(self.base + first * PAGE), C.c_size_t(count * PAGE))
        for p in range(first, first + count):
            self._call("cuMemRelease", self._handles.pop(p))

    def close(self) -> None:
        """Unmap every page and give the address range back, once no segment is in use
        (otherwise, and after a first close, nothing)."""
        heap = self.heap
        if heap.base and not heap.live:
            with self.on_device():  # (the heap's events belong to the backend's device)
                heap.trim()
                heap.settle(0, heap.capacity)  # (every give-back's work: none is pending after)
            self._call("cuMemAddressFree", C.c_uint64(heap.base), C.c_size_t(heap.capacity))
            heap.base = 0
            self.alloc = self._closed

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # (at interpreter exit the driver may be gone already)
            pass
