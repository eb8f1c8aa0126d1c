"""The caching allocator's logic, independent of where memory comes from.

Layout: the pool holds *segments* from a backend (see ``_backends``); a
segment is carved into address-ordered *blocks* (``prev``/``next`` links).
Free blocks sit in one free list per (owner, stream), indexed by size; owner
``None`` is the general pool, any other owner is a graph-private pool.

Hot path: a freed block goes, without coalescing, to a per-stream cache of
exact sizes (``_quick``), and an allocation of that size on that stream takes
it back: two dictionary lookups and a list pop.  The CuPy hook frees by
storing the pointer in ``_freed`` (a C-level dictionary store, safe from
finalizers and other threads); the next pool operation drains it.  The hot
path is compiled (``_hotpath.c``: the same decisions on the same containers)
where the extension was built, else the Python closure of :meth:`Pool._make_alloc`.

Otherwise (``size`` = request rounded to 512 B, or to 128 KiB at or above
1 MiB): the exact-size cache is flushed into the coalesced free lists, then
take the smallest free block of the stream that is at least ``size``
(an exact-size hit first, a whole segment before the rest of a split one; a
request of 1 MiB or more takes at most twice its size, or the segment a miss
would make for it, unless the segment was kept by a warm-up), split off the
rest when it is 512 B or more; else
process blocks whose cross-stream uses have finished; else borrow a block
freed on another stream by making this stream wait on an event recorded there
(no host synchronization); else (a miss) release fully free segments when the
backend can reuse them cheaply (all but kept ones), and get a new segment
(for a request of 1 MiB or more, a whole number of the backend's
``segment_granularity``).  Coalescing joins free neighbours of the same stream.
A block used on other streams (``record_stream``) is not reused until events
recorded on those streams at free time have completed.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import itertools
import os
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from .._errors import OutOfMemoryError
from ._backends import Backend

try:  # the compiled hot path (an optional extension: a source install without a compiler
    # runs the same operations in Python)
    from ._hotpath import HotAlloc, PoolLock
except ImportError:
    HotAlloc = PoolLock = None
if os.environ.get("CUFLOW_POOL_HOTPATH", "").strip().lower() == "python":
    HotAlloc = PoolLock = None

__all__ = ["Block", "Pool", "round_size", "size_class"]

SMALL = 1 << 20
LARGE_ROUND = 1 << 17
MIN_SEGMENT = 2 << 20
SPLIT_MIN = 512
#: with a backend that reuses released memory for any size, a large request takes a cached
#: block of at most this many times its size; otherwise it misses, and the miss releases the
#: free segments to the backend (splitting much larger blocks pins them and fragments memory)
LARGE_SPLIT_MAX = 2


#: the stream of a block whose stream was destroyed (its orphans, and blocks lent on it): CUDA
#: may hand the handle to a new stream, which must not inherit them (the dead stream's work
#: may still run); they are reused on stream 0 after a device synchronize
DEAD_STREAM = -1


def round_size(n: int) -> int:
    """Bytes actually reserved for a request of ``n`` bytes."""
    if n < SMALL:
        return ((n + 511) >> 9) << 9 if n > 0 else 512
    return (n + LARGE_ROUND - 1) & ~(LARGE_ROUND - 1)


def size_class(n: int) -> int:
    """Upper bound of ``n``'s statistics class: four classes per power of two, from 512 B."""
    if n <= 512:
        return 512
    k = (n - 1).bit_length()  # 2**(k-1) < n <= 2**k
    q = 1 << (k - 3)  # a quarter of the lower power of two
    return (1 << (k - 1)) + q * (((n - 1 - (1 << (k - 1))) // q) + 1)


class Segment:
    __slots__ = ("first", "keep", "nbytes", "owner", "ptr", "stream", "streams")

    def __init__(self, ptr: int, nbytes: int, stream: int, owner: Any) -> None:
        self.ptr, self.nbytes, self.stream, self.owner = ptr, nbytes, stream, owner
        self.keep = False  # kept by a warm-up: split freely, released only by empty_cache
        self.streams: set[int] = {stream}
        self.first: Block | None = None  # the lowest block; splitting and coalescing keep it


class Block:
    """A range of a segment; ``free`` blocks are in a free list, others are lent out."""

    __slots__ = ("events", "free", "next", "plain", "ptr", "prev", "quick", "req", "seg",
                 "size", "stream", "uses")

    def __init__(self, ptr: int, size: int, seg: Segment, stream: int) -> None:
        self.ptr, self.size, self.seg, self.stream = ptr, size, seg, stream
        self.prev: Block | None = None
        self.next: Block | None = None
        self.free = True
        self.quick = False  # free, in the exact-size cache (not coalesced)
        self.req = 0
        self.uses: set[int] | None = None  # other streams that used it (record_stream)
        self.events: list[Any] | None = None
        #: lent from the general pool on a live stream, with no recorded cross-stream use:
        #: its free may go straight to the exact-size cache (the hot path checks only this)
        self.plain = False


class _FreeList:
    """Free blocks of one (owner, stream), indexed by size (lazy deletion of empty sizes)."""

    __slots__ = ("by_size", "sizes")

    def __init__(self) -> None:
        self.by_size: dict[int, list[Block]] = {}
        self.sizes: list[int] = []

    def push(self, b: Block) -> None:
        lst = self.by_size.get(b.size)
        if lst is None:
            self.by_size[b.size] = [b]
            bisect.insort(self.sizes, b.size)
        else:
            lst.append(b)

    def pop_fit(self, size: int, most: int | None = None) -> Block | None:
        """The smallest free block of ``size`` to ``most`` bytes (any size in a segment a
        warm-up made); among equal sizes, a whole segment first (taking the rest of a split
        segment would keep its live neighbour from coalescing back when it is freed)."""
        sizes = self.sizes
        i = bisect.bisect_left(sizes, size)
        while i < len(sizes):
            s = sizes[i]
            lst = self.by_size[s]
            if most is not None and s > most:
                for j in range(len(lst) - 1, -1, -1):
                    if lst[j].seg.keep:
                        return lst.pop(j)
                i += 1
                continue
            if lst:
                for j in range(len(lst) - 1, -1, -1):
                    b = lst[j]
                    if b.prev is None and b.next is None:
                        return lst.pop(j)
                return lst.pop()
            del sizes[i]
            del self.by_size[s]
        return None

    def remove(self, b: Block) -> None:
        self.by_size[b.size].remove(b)

    def blocks(self) -> Iterable[Block]:
        for lst in self.by_size.values():
            yield from lst


class Pool:
    """A caching allocator over ``backend`` (statistics with PyTorch's key names).

    Parameters
    ----------
    backend : Backend
        Segment source (:class:`~cuflow.memory.DriverPoolBackend` on the GPU).
    limit : int, optional
        Most bytes the pool may reserve; ``None`` for no limit.
    """

    def __init__(self, backend: Backend, limit: int | None = None) -> None:
        self.backend = backend
        self.limit = limit
        # Reentrant: a finalizer may call free() while this thread is inside the pool; the
        # slow paths set _busy and such frees then wait in _freed for the end of the operation.
        self._lock = threading.RLock() if PoolLock is None else PoolLock()
        self._busy = False
        self._live: dict[int, Block] = {}  # pointer -> lent block
        self._freed: dict[int, Any] = {}  # pointers given back, not yet processed
        self._quick: dict[int, dict[int, list[Block]]] = {}  # stream -> size -> freed blocks
        self._gone: list[int] = []  # destroyed streams, not yet processed
        self._lists: dict[tuple[Any, int], _FreeList] = {}
        self._segments: dict[int, Segment] = {}
        self._pending: list[Block] = []
        self._deferred: list[Block] = []  # freed during a capture, used on a capturing stream
        self._capturing: dict[int, Any] = {}  # stream -> private owner id
        self._private: dict[Any, dict[str, Any]] = {}
        self._next_owner = 1
        self._recording: list[tuple] | None = None
        #: a stream captures, a stream was destroyed, or allocations are recorded: the hot
        #: path then defers to the general one (see _update_slow)
        self._slow = False
        self._warming = False  # segments made now are kept (reserve / warmup / replay)
        self._watched: set[int] = set()
        self._on_new_stream: Callable[[int], None] | None = None  # set by the CuPy glue
        self._orphans: list[Block] = []
        self.hits: defaultdict[int, int] = defaultdict(int)
        self.misses: defaultdict[int, int] = defaultdict(int)
        self.reset_stats()
        #: ``alloc_ptr(nbytes, stream)``: the device pointer of a new block of at least
        #: ``nbytes`` for work on ``stream``; give it back with :meth:`free_ptr`
        self.alloc_ptr = self._make_alloc()

    # ----------------------------------------------------------------- stats
    def reset_stats(self) -> None:
        self.allocated = self.requested = self.reserved = self.pending_bytes = 0
        self.peak_allocated = self.peak_requested = self.peak_reserved = self.peak_active = 0
        self.num_segment_alloc = self.num_segment_free = 0
        self._device_base = (self.backend.device_allocs, self.backend.device_frees)
        self.num_alloc_retries = self.num_ooms = self.num_cross_stream = 0
        self.hits.clear()  # cleared in place: the hot path holds these objects
        self.misses.clear()

    def reset_peak_stats(self) -> None:
        with self._lock:
            self._drain()
            self.peak_allocated = self.allocated
            self.peak_requested = self.requested
            self.peak_reserved = self.reserved
            self.peak_active = self.allocated + self.pending_bytes
        self.backend.reset_device_peak()

    @property
    def num_device_alloc(self) -> int:
        """Allocations that took new memory from the device (not from a backend's reserve)."""
        return self.backend.device_allocs - self._device_base[0]

    @property
    def num_alloc(self) -> int:
        """Allocations served so far (each is a cache hit or a miss)."""
        return sum(self.hits.values()) + sum(self.misses.values())

    # ----------------------------------------------------------- allocation
    def _make_alloc(self, stream_of: Callable[[], Any] | None = None,
                    stream_fn: Any = None) -> Callable[[int, int], int]:
        """The pool's hot path.

        ``alloc(nbytes, stream)`` gives the device pointer of a block of at least
        ``nbytes`` for work on ``stream``; with ``stream_of`` (a callable giving
        the current stream object) or ``stream_fn`` (a capsule of a C function
        giving the current stream's handle), it is CuPy's
        ``PythonFunctionAllocator`` callback ``alloc(nbytes, device_id)`` on the
        current stream.  It first processes queued frees (one each, usually: back
        to the exact-size cache), then hands back an exact-size block freed
        earlier on the stream; anything else goes to :meth:`_alloc_miss`.

        The compiled ``_hotpath.HotAlloc`` does this when it was built (it needs
        ``stream_fn`` for CuPy's callback); otherwise, or with
        ``CUFLOW_POOL_HOTPATH=python``, a Python closure over the pool's
        containers does the same operations.
        """
        if HotAlloc is not None and (stream_of is None or stream_fn is not None):
            return HotAlloc(self, Block, stream_fn)
        pool, quick, live, freed, hits = self, self._quick, self._live, self._freed, self.hits
        free_other, miss = self._free_locked, self._alloc_miss
        acquire, release = self._lock.acquire, self._lock.release  # cheaper than ``with``

        def alloc(nbytes: int, arg: int) -> int:
            stream = arg if stream_of is None else stream_of().ptr
            acquire()
            try:
                if freed and not pool._busy:
                    slow, again = pool._slow, 0
                    while freed:  # the queued frees, inlined for the common case
                        ptr = freed.popitem()[0]
                        b = live[ptr]
                        if slow or not b.plain:
                            del live[ptr]
                            free_other(b)
                        elif not again and b.req == nbytes and b.stream == stream:
                            # the block just freed was asked for with this very size: hand it
                            # straight back (it stays lent, its statistics are unchanged; the
                            # other queued frees still go on)
                            hits[b.size] += 1
                            again = ptr
                        else:
                            del live[ptr]
                            pool.requested -= b.req
                            pool.allocated -= b.size
                            b.free = b.quick = True
                            q = quick.get(b.stream)
                            if q is None:
                                quick[b.stream] = {b.size: [b]}
                            else:
                                lst = q.get(b.size)
                                if lst is None:
                                    q[b.size] = [b]
                                else:
                                    lst.append(b)
                    if again:
                        return again
                if nbytes < SMALL:
                    size = (((nbytes + 511) >> 9) << 9) or 512
                else:
                    size = (nbytes + LARGE_ROUND - 1) & ~(LARGE_ROUND - 1)
                if not pool._slow and nbytes >= 0:
                    q = quick.get(stream)
                    if q is not None:
                        lst = q.get(size)
                        if lst:
                            b = lst.pop()
                            b.quick = b.free = False
                            b.req = nbytes
                            hits[size] += 1
                            n = pool.requested = pool.requested + nbytes
                            if n > pool.peak_requested:
                                pool.peak_requested = n
                            n = pool.allocated = pool.allocated + size
                            if n > pool.peak_allocated:
                                pool.peak_allocated = n
                                if n + pool.pending_bytes > pool.peak_active:
                                    pool.peak_active = n + pool.pending_bytes
                            live[b.ptr] = b
                            return b.ptr
                return miss(size, nbytes, stream)
            finally:
                release()

        return alloc

    def _alloc_miss(self, size: int, nbytes: int, stream: int) -> int:
        """Everything but an exact-size hit (under the lock)."""
        if nbytes < 0:
            raise ValueError(f"cuflow.memory: cannot allocate a negative size ({nbytes} bytes)")
        if self._gone and not self._busy:
            self._drain()
        if stream > 2 and stream not in self._watched and self._on_new_stream is not None:
            self._on_new_stream(stream)
        self._busy = True
        try:
            b = self._alloc_locked(size, nbytes, stream)
        finally:
            self._busy = False
        self._live[b.ptr] = b
        if self._freed:
            self._drain()
        return b.ptr

    def free_ptr(self, ptr: int) -> None:
        """Give back the block at ``ptr`` (from :meth:`alloc_ptr`); safe from finalizers."""
        self._freed[ptr] = None
        self.flush_frees()

    def flush_frees(self) -> None:
        """Process the frees queued by :meth:`free_ptr` and the CuPy hook."""
        if not self._busy:
            with self._lock:
                if not self._busy:
                    self._drain()

    def alloc(self, nbytes: int, stream: int | None = None) -> Block:
        """A block of at least ``nbytes`` usable on ``stream`` (default: the current stream).

        Raises
        ------
        cuflow.OutOfMemoryError
            After freeing cached blocks, collecting garbage and retrying.
        """
        if stream is None:
            stream = self.backend.current_stream()
        return self._live[self.alloc_ptr(nbytes, stream)]

    def free(self, b: Block) -> None:
        """Return ``b``; reused at once on its stream, or after its other streams' work."""
        if self._live.get(b.ptr) is not b or b.ptr in self._freed:
            raise RuntimeError(f"cuflow.memory: block at {b.ptr:#x} freed twice (or not "
                               f"from this pool)")
        self.free_ptr(b.ptr)

    def block_of(self, ptr: int) -> Block | None:
        """The lent block that starts at ``ptr``, or ``None``."""
        return self._live.get(ptr)

    def _alloc_locked(self, size: int, nbytes: int, stream: int) -> Block:
        owner = self._capturing.get(stream) if self._capturing else None
        self._flush_quick()
        fl = self._lists.get((owner, stream))
        most = None
        if size >= SMALL and self.backend.cheap_release:
            # at most twice the request, or the segment a miss would make for it
            most = max(size * LARGE_SPLIT_MAX, self._segment_bytes(size, owner))
        b = fl.pop_fit(size, most) if fl is not None else None
        if b is None:
            b = self._alloc_slow(size, stream, owner, most)
        else:
            self.hits[size] += 1
        self._take(b, size, nbytes)
        return b

    def _take(self, b: Block, size: int, nbytes: int) -> None:
        if b.size - size >= SPLIT_MIN:
            r = Block(b.ptr + size, b.size - size, b.seg, b.stream)
            r.prev, r.next = b, b.next
            if b.next is not None:
                b.next.prev = r
            b.next = r
            b.size = size
            self._list(b.seg.owner, r.stream).push(r)
        b.free = False
        b.plain = b.seg.owner is None
        b.req = nbytes
        self.allocated += b.size
        self.requested += nbytes
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated
        if self.requested > self.peak_requested:
            self.peak_requested = self.requested
        active = self.allocated + self.pending_bytes
        if active > self.peak_active:
            self.peak_active = active
        if self._recording is not None:
            self._recording.append(("a", b.ptr, nbytes, b.stream))

    def _list(self, owner: Any, stream: int) -> _FreeList:
        fl = self._lists.get((owner, stream))
        if fl is None:
            fl = self._lists[(owner, stream)] = _FreeList()
        return fl

    def _flush_quick(self) -> None:
        """Move the exact-size cache into the coalesced free lists."""
        if not self._quick:
            return
        quick = list(self._quick.values())
        self._quick.clear()  # in place: the hot path holds this dict
        for by_size in quick:
            for lst in by_size.values():
                for b in lst:
                    b.quick = False
                    self._insert_free(b)

    def _alloc_slow(self, size: int, stream: int, owner: Any, most: int | None) -> Block:
        # While any stream captures a graph nothing here may synchronize or free
        # device memory (both are illegal during capture): no orphan adoption,
        # no segment release, no waiting on pending frees.
        capturing = bool(self._capturing)
        if (self._pending or self._deferred) and not capturing and self._process_pending():
            b = self._list(owner, stream).pop_fit(size, most)
            if b is not None:
                self.hits[size] += 1
                return b
        b = self._borrow(size, stream, most) if owner is None else None
        if b is not None:
            self.hits[size] += 1
            return b
        if self._orphans and not capturing:
            self._adopt_orphans()
            b = self._list(owner, stream).pop_fit(size) if stream == 0 else None
            if b is not None:
                self.hits[size] += 1
                return b
        self.misses[size] += 1
        seg_bytes = self._segment_bytes(size, owner)
        if self.backend.cheap_release and owner is None and not capturing:
            self._release_free_segments(kept=False)
        if self.limit is not None and self.reserved + seg_bytes > self.limit:
            if not capturing:
                self._release_free_segments()
            if self.reserved + seg_bytes > self.limit:
                self.num_ooms += 1
                raise OutOfMemoryError(self._oom_message(size, f"the pool's limit of "
                                                               f"{_fmt(self.limit)}"))
        try:
            ptr = (self.backend.alloc(seg_bytes, stream) if owner is None
                   else self.backend.alloc_private(seg_bytes))
        except MemoryError as first:
            self.num_alloc_retries += 1
            gc.collect()  # finalizers of collected arrays queue their frees; drain them
            self._drain()
            self._flush_quick()
            if not capturing:
                self._release_free_segments()
                self._process_pending(wait=True)
                self._release_free_segments()
            b = self._list(owner, stream).pop_fit(size)
            if b is not None:
                return b
            try:
                ptr = (self.backend.alloc(seg_bytes, stream) if owner is None
                       else self.backend.alloc_private(seg_bytes))
            except MemoryError:
                self.num_ooms += 1
                raise OutOfMemoryError(self._oom_message(size, "the device")) from first
        seg = Segment(ptr, seg_bytes, stream, owner)
        seg.keep = self._warming and owner is None
        self._segments[ptr] = seg
        self.reserved += seg_bytes
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved
        self.num_segment_alloc += 1
        if owner is not None:
            self._private[owner]["segments"] += 1
        seg.first = Block(ptr, seg_bytes, seg, stream)
        return seg.first

    def _segment_bytes(self, size: int, owner: Any) -> int:
        """The segment a miss on a request of ``size`` bytes gets from the backend."""
        if size < SMALL:
            return max(size, MIN_SEGMENT)
        if owner is not None:  # a graph's private segment (cudaMalloc): exactly the request
            return size
        g = self.backend.segment_granularity  # whole granules: the pool owns the rest
        return -(-size // g) * g

    def _borrow(self, size: int, stream: int, most: int | None) -> Block | None:
        """A free block of another stream, with ``stream`` ordered after its last use."""
        for (o, s), fl in self._lists.items():
            if o is not None or s == stream or s in self._capturing:
                continue  # (an event recorded on a capturing stream would be captured)
            b = fl.pop_fit(size, most)
            if b is not None:
                ev = self.backend.record(s)
                if ev is not None:
                    self.backend.wait(stream, ev)
                b.stream = stream
                b.seg.streams.add(stream)
                self.num_cross_stream += 1
                return b
        return None

    # ------------------------------------------------------------------ free
    def _drain(self) -> None:
        """Process queued frees and destroyed streams (under the lock, not re-entered)."""
        self._busy = True
        try:
            self._forget_gone()
            freed, live = self._freed, self._live
            while freed:
                ptr, _ = freed.popitem()
                self._free_locked(live.pop(ptr))
        finally:
            self._busy = False

    def _forget_gone(self, freeing: Block | None = None) -> None:
        """Process the queued stream destructions; ``freeing`` is a block being freed (out of
        ``_live`` already: the hot paths process queued frees before anything else)."""
        while self._gone:
            ptr = self._gone.pop()
            self._forget_stream(ptr)
            if freeing is not None:
                self._forget_block(freeing, ptr)
        self._update_slow()

    def _free_locked(self, b: Block) -> None:
        if self._gone:
            self._forget_gone(b)
        self.allocated -= b.size
        self.requested -= b.req
        b.free = True
        if self._recording is not None:
            self._recording.append(("f", b.ptr, 0, 0))
        if b.uses:
            self._await_uses(b)
        elif b.seg.owner is None and b.stream != DEAD_STREAM:
            q = self._quick.get(b.stream)
            if q is None:
                q = self._quick[b.stream] = {}
            lst = q.get(b.size)
            if lst is None:
                q[b.size] = [b]
            else:
                lst.append(b)
            b.quick = True
        else:
            self._insert_free(b)

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
        if DEAD_STREAM in streams:
            self.backend.synchronize()
            return []
        return [self.backend.record(s) for s in streams]

    def _insert_free(self, b: Block) -> None:
        if b.stream == DEAD_STREAM:  # reused after a device synchronize
            self._orphans.append(b)
            if self._closed_private(b.seg.owner) and not self._capturing:
                self._adopt_orphans()  # a closed graph's memory goes back now, not at some miss
            return
        fl = self._list(b.seg.owner, b.stream)
        p, n = b.prev, b.next
        if (p is not None and p.free and not p.quick and p.events is None
                and p.stream == b.stream):
            fl.remove(p)
            p.size += b.size
            p.next = n
            if n is not None:
                n.prev = p
            b = p
        if (n is not None and n.free and not n.quick and n.events is None
                and n.stream == b.stream):
            fl.remove(n)
            b.size += n.size
            b.next = n.next
            if n.next is not None:
                n.next.prev = b
        fl.push(b)
        # a closed graph's whole free segment goes back, except while a graph is being captured
        # (freeing device memory is illegal then: end_private releases it)
        if b.prev is None and b.next is None and self._closed_private(b.seg.owner) \
                and not self._capturing:
            self._release_segment(b, fl)

    def _process_pending(self, wait: bool = False) -> bool:
        """Move blocks whose cross-stream events completed to the free lists (no capture may
        be running)."""
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

    def _update_slow(self) -> None:
        self._slow = bool(self._capturing or self._gone or self._recording is not None)

    def record_stream(self, b: Block, stream: int, stream_obj: Any = None) -> None:
        """Mark ``b`` as used on ``stream`` (PyTorch's ``record_stream``); the pool watches
        ``stream_obj``, the stream's object, to learn when it is destroyed."""
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

    # ---------------------------------------------------------------- streams
    def watch_stream(self, stream_obj: Any, ptr: int) -> None:
        """Release the free list of ``stream_obj``'s stream when the object is destroyed."""
        import weakref  # noqa: PLC0415

        with self._lock:
            self._watched.add(ptr)
        try:
            weakref.finalize(stream_obj, self._stream_gone, ptr)
        except TypeError:
            pass

    def _stream_gone(self, ptr: int) -> None:
        """The stream object at ``ptr`` was destroyed (a finalizer: only queue it)."""
        self._gone.append(ptr)
        self._slow = True

    def _forget_stream(self, ptr: int) -> None:
        """Cached blocks of a destroyed stream become orphans (no event can be recorded on a
        dead stream), reused on the default stream after a device synchronize."""
        self._watched.discard(ptr)
        for b in itertools.chain(self._live.values(), self._pending, self._deferred):
            self._forget_block(b, ptr)
        orphans = [b for by_size in self._quick.pop(ptr, {}).values() for b in by_size]
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

    def _closed_private(self, owner: Any) -> bool:
        info = self._private.get(owner) if owner is not None else None
        return info is not None and info["closed"]

    def _adopt_orphans(self) -> None:
        self.backend.synchronize()  # whatever the dead streams queued has finished
        orphans, self._orphans = self._orphans, []
        for b in orphans:
            b.stream = 0
            if b.seg.stream == DEAD_STREAM:
                b.seg.stream = 0
            b.seg.streams.add(0)
            self._insert_free(b)

    # -------------------------------------------------------------- segments
    def _release_segment(self, b: Block, fl: _FreeList) -> None:
        seg = b.seg
        fl.remove(b)
        for s in seg.streams:  # order the release after every stream that used it
            if s != b.stream:
                ev = self.backend.record(s)
                if ev is not None:
                    self.backend.wait(b.stream, ev)
        if seg.owner is None:
            self.backend.free(seg.ptr, seg.nbytes, b.stream)
        else:
            self.backend.free_private(seg.ptr, seg.nbytes)
        del self._segments[seg.ptr]
        self.reserved -= seg.nbytes
        self.num_segment_free += 1
        if seg.owner is not None:
            info = self._private.get(seg.owner)
            if info is not None:
                info["segments"] -= 1
                if info["closed"] and info["segments"] == 0:
                    del self._private[seg.owner]

    def _release_free_segments(self, owner: Any = None, kept: bool = True) -> int:
        n = 0
        for (o, _), fl in list(self._lists.items()):
            if o != owner:
                continue
            for b in [b for b in fl.blocks()
                      if b.prev is None and b.next is None and (kept or not b.seg.keep)]:
                self._release_segment(b, fl)
                n += 1
        return n

    def _settle(self) -> None:
        """Process queued frees and coalesce the exact-size cache (for exact reports)."""
        if not self._busy:
            self._drain()
            self._busy = True
            try:
                self._flush_quick()
            finally:
                self._busy = False

    def empty_cache(self) -> int:
        """Return every fully free segment to the backend; the number released.

        While a graph is being captured nothing can be released (freeing device
        memory would invalidate the capture): it then releases nothing and returns 0.
        """
        with self._lock:
            if self._capturing:
                return 0
            self._settle()
            self._process_pending()
            if self._orphans:
                self._adopt_orphans()
            return self._release_free_segments()

    # ---------------------------------------------------------------- warm-up
    @contextlib.contextmanager
    def _warm(self):
        """Segments made inside are kept: any request may split them, and a miss does not
        release them (only :meth:`empty_cache` does)."""
        self._warming = True
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
        with self._warm():
            blocks = [self.alloc(n, stream) for n in sizes]
            for b in blocks:
                self.free(b)

    def start_recording(self) -> None:
        with self._lock:
            self._drain()
            self._recording = []
            self._slow = True
            self._rec_peak_base = self.allocated
            self.peak_allocated = self.allocated

    def stop_recording(self) -> tuple[list[tuple], int]:
        """(allocation/free events, peak allocated bytes above the start) since start_recording."""
        with self._lock:
            self._drain()
            events, self._recording = self._recording or [], None
            self._update_slow()
            return events, self.peak_allocated - self._rec_peak_base

    def replay(self, events: list[tuple], rounds: int = 2, keep: bool = True) -> int:
        """Dry-run recorded allocation events (no kernels) so the cache fits their pattern.

        Placement decides whether a pattern fits in a given reserve, so the
        pattern is replayed ``rounds`` times: whatever it needs is then held.
        With ``keep`` the segments made are kept (served to any request and
        released only by :meth:`empty_cache`); without it they are ordinary
        segments, and a backend that reuses released memory for any size
        (``cheap_release``) keeps what the pattern needed in its own reserve.
        Returns the segments the replay made.
        """
        n0 = self.num_segment_alloc
        with self._warm() if keep else contextlib.nullcontext():
            for _ in range(rounds):
                live: dict[int, Block] = {}
                for op, key, nbytes, stream in events:
                    if op == "a":
                        live[key] = self.alloc(nbytes, stream)
                    elif key in live:
                        self.free(live.pop(key))
                for b in live.values():
                    self.free(b)
        return self.num_segment_alloc - n0

    # ------------------------------------------------------- private (graphs)
    def begin_private(self, stream: int) -> int:
        """Route allocations on ``stream`` to a new private pool; returns its id."""
        with self._lock:
            owner = self._next_owner
            self._next_owner += 1
            self._private[owner] = {"closed": False, "segments": 0}
            self._capturing[stream] = owner
            self._slow = True
            return owner

    def end_private(self, stream: int) -> None:
        """The capture on ``stream`` ended; with no capture left, closed graphs' memory that
        became free meanwhile goes back."""
        with self._lock:
            self._capturing.pop(stream, None)
            self._update_slow()
            if not self._capturing and not self._busy:
                self._drain()
                self._process_pending()
                self._release_closed()

    def close_private(self, owner: int) -> None:
        """The graph that owns ``owner`` is gone: release its segments once they are free
        (if a graph is being captured, when the capture ends)."""
        with self._lock:
            self._settle()
            info = self._private.get(owner)
            if info is None:
                return
            info["closed"] = True
            if info["segments"] == 0:
                del self._private[owner]
            elif not self._capturing:
                self._release_closed()

    def _release_closed(self) -> None:
        """Give back the free segments of closed private pools (no capture may be running)."""
        closed = [o for o, info in self._private.items() if info["closed"]]
        if not closed:
            return
        if any(self._closed_private(b.seg.owner) for b in self._orphans):
            self._adopt_orphans()  # blocks of a destroyed capture stream
        for owner in closed:
            self._release_free_segments(owner)
            info = self._private.get(owner)
            if info is not None and info["segments"] == 0:
                del self._private[owner]

    # ------------------------------------------------------------- reporting
    def stats(self) -> dict[str, Any]:
        """Counters with PyTorch's key names, plus cache hits and misses per size class."""
        with self._lock:
            if not self._busy:
                self._drain()
            free = list(self._free_blocks())
            inactive_split = sum(b.size for b in free if b.prev is not None or b.next is not None)
            free_cached = sum(b.size for b in free)
            s: dict[str, Any] = {
                "allocated_bytes.all.current": self.allocated,
                "allocated_bytes.all.peak": self.peak_allocated,
                "reserved_bytes.all.current": self.reserved,
                "reserved_bytes.all.peak": self.peak_reserved,
                "active_bytes.all.current": self.allocated + self.pending_bytes,
                "active_bytes.all.peak": self.peak_active,
                "requested_bytes.all.current": self.requested,
                "requested_bytes.all.peak": self.peak_requested,
                "inactive_split_bytes.all.current": inactive_split,
                "free_cached_bytes": free_cached,
                "allocation.all.current": len(self._live),
                "segment.all.current": len(self._segments),
                "num_alloc": self.num_alloc,
                "num_free": self.num_alloc - len(self._live),
                "num_alloc_retries": self.num_alloc_retries,
                "num_ooms": self.num_ooms,
                "num_device_alloc": self.num_device_alloc,
                "num_device_free": self.backend.device_frees - self._device_base[1],
                "num_segment_alloc": self.num_segment_alloc,
                "num_segment_free": self.num_segment_free,
                "num_cross_stream_reuse": self.num_cross_stream,
                "num_pending_cross_stream": len(self._pending) + len(self._deferred),
                "private_pools": len(self._private),
                "cache_hits": sum(self.hits.values()),
                "cache_misses": sum(self.misses.values()),
                "backend": self.backend.name,
                "limit_bytes": self.limit,
            }
            per: dict[int, list[int]] = {}
            for d, j in ((self.hits, 0), (self.misses, 1)):
                for size, cnt in d.items():
                    per.setdefault(size_class(size), [0, 0])[j] += cnt
            s["size_classes"] = {c: {"hits": h, "misses": m} for c, (h, m) in sorted(per.items())}
            dev = self.backend.device_reserved()
            if dev is not None:
                s["device_reserved_bytes.current"], s["device_reserved_bytes.peak"] = dev
            return s

    def snapshot(self) -> list[dict[str, Any]]:
        """Segments with their blocks, in address order."""
        with self._lock:
            self._settle()
            out = []
            for ptr, seg in sorted(self._segments.items()):
                b = seg.first
                blocks = []
                while b is not None:
                    blocks.append({"offset": b.ptr - seg.ptr, "size": b.size,
                                   "state": "free" if b.free and b.events is None else
                                   ("pending" if b.free else "active"),
                                   "requested": 0 if b.free else b.req, "stream": b.stream})
                    b = b.next
                out.append({"address": seg.ptr, "size": seg.nbytes, "stream": seg.stream,
                            "private_pool": seg.owner, "blocks": blocks})
            return out

    def _free_blocks(self) -> Iterable[Block]:
        """Every cached free block: coalesced lists and the exact-size cache."""
        for fl in self._lists.values():
            yield from fl.blocks()
        for by_size in self._quick.values():
            for lst in by_size.values():
                yield from lst

    def _oom_message(self, size: int, what: str) -> str:
        largest = max((b.size for b in self._free_blocks()), default=0)
        return (f"cuflow.memory: out of memory: {_fmt(size)} requested from {what}; the pool "
                f"reserves {_fmt(self.reserved)} of which {_fmt(self.allocated)} is in use "
                f"(largest free block {_fmt(largest)}). Free arrays you no longer need "
                f"(del x), call cuflow.memory.empty_cache(), lower batch sizes, or raise the "
                f"limit (cuflow.memory.set_limit / CUFLOW_MEMORY_LIMIT).")


def _fmt(n: int | None) -> str:
    if n is None:
        return "no limit"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)
