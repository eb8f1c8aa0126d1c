"""The caching allocator's logic, independent of where memory comes from.

Layout: the pool holds *segments* from a backend (see ``_backends``); a
segment is carved into address-ordered *blocks* (``prev``/``next`` links).
Free blocks sit in one free list per (owner, stream), indexed by size; owner
``None`` is the general pool, any other owner is a graph-private pool.

Hot path: a freed block goes, without coalescing, to a per-stream cache of
exact sizes (``_quick``), and an allocation of that size on that stream takes
it back: two dictionary lookups and a list pop.  A block of a segment a warm-up
kept is coalesced as it is freed instead (best fit over such a segment packs a
recorded pattern tighter), unless it is under 1 MiB and the next request asks for its
very size (handed straight back, as any freed block is).  The CuPy hook frees by
storing the pointer in ``_freed`` (a C-level dictionary store, safe from
finalizers and other threads); the next pool operation drains it.

Compiled paths (``_hotpath.c``, where the extension was built): the hot path
and the general path below for the general pool (flush, best fit, split,
coalescing, statistics), the same decisions on the same containers; the
counters and flags are a C struct (``_state``: ``PoolState``, whose fields
the ``Pool`` properties ``allocated`` ... read and write).  A miss on one
stream with nothing pending is compiled too (segment release, new segment from
the source); a refused segment's retries, borrowing and pending cross-stream
frees, graph-private pools, destroyed streams and recording run in Python.
Without the extension (or with
``CUFLOW_POOL_HOTPATH=python``) the Python closure of :meth:`Pool._make_alloc`
and :meth:`Pool._alloc_miss` make every decision; the tests run both.

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
(for a request of 1 MiB or more, a whole number of granules: the backend's
``segment_granularity``, or less while the pool is small, see :func:`granule`).
A segment that the limit refuses is first asked for again once the wholly free
segments are released (a pool at its limit meets the refusal often); past that,
a refusal by the limit or by the device starts one retry sequence: collect
garbage, process queued frees, release every wholly free segment (kept ones
too: memory is short), wait for pending cross-stream frees, then take the smallest fit of
any size on the stream, else borrow one of any
size from another stream, else try one last segment; then
:class:`~cuflow.OutOfMemoryError`.  A request whose rounding would pass 2**63
(see :func:`max_request`) is refused at once.  Coalescing joins free neighbours
of the same stream.
A block used on other streams (``record_stream``) is not reused until events
recorded on those streams at free time have completed.

One state and one lock, with its concerns in mixins (the compiled paths read
and write that state, so they share it rather than wrap it): ``_streams`` (cross-stream
use, destroyed streams),
``_graphs`` (graph-private pools), ``_warmup`` (kept segments, recording,
replay), ``_stats`` (statistics, snapshot, summary); ``_blocks`` has the units.
"""

from __future__ import annotations

import gc
import numbers
import operator
import sys
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from .._checks import is_integer
from .._errors import CuflowError, OutOfMemoryError
from ._backends import Backend
from ._env import POOL_HOTPATH
from ._blocks import (DEAD_STREAM, LARGE_ROUND, LARGE_SPLIT_MAX, MIN_SEGMENT, SMALL, SPLIT_MIN,
                      Block, FreeList, Segment, check_stream, round_size, size_class)
from ._exceptions import DoubleFreeError, MemoryTypeError, MemoryValueError
from ._graphs import GraphPoolsMixin
from ._limit import LimitExceeded, LimitingAdaptor, limit_of
from ._stats import StatsMixin, fmt_bytes
from ._streams import StreamsMixin
from ._warmup import WarmupMixin

try:  # the compiled hot path (an optional extension: a source install without a compiler
    # runs the same operations in Python)
    from ._hotpath import FreeList as CFreeList
    from ._hotpath import HotAlloc, PoolLock, PoolState
except ImportError:
    HotAlloc = PoolLock = PoolState = CFreeList = None
if POOL_HOTPATH == "python":
    HotAlloc = PoolLock = PoolState = CFreeList = None


#: the largest stream handle (the compiled paths hold one in 64 bits)
_MAX_STREAM = sys.maxsize


def _idle(b: Block) -> bool:
    """``b`` sits in a free list: free, not in the exact-size cache, awaiting no event, of a
    live stream."""
    return b.free and not b.quick and b.events is None and b.stream != DEAD_STREAM


class PyPoolState:
    """The pool's counters and flags where the extension was not built (``_hotpath.PoolState``
    otherwise, whose fields the compiled paths read and write directly)."""

    __slots__ = ("allocated", "busy", "hits", "max_request", "num_segment_alloc",
                 "num_segment_free", "peak_active", "peak_allocated", "peak_requested",
                 "peak_reserved", "pending_bytes", "requested", "reserved", "slow")

    def __init__(self) -> None:
        self.requested = self.allocated = self.peak_requested = self.peak_allocated = 0
        self.peak_active = self.pending_bytes = self.reserved = self.peak_reserved = 0
        self.num_segment_alloc = self.num_segment_free = 0
        self.max_request = sys.maxsize - LARGE_ROUND  # (the pool sets its own)
        self.busy = self.slow = False
        self.hits: defaultdict[int, int] = defaultdict(int)

    def count_hit(self, size: int) -> None:
        """One more cache hit of a block of ``size`` bytes."""
        self.hits[size_class(size)] += 1

    def hit_counts(self) -> dict[int, int]:
        """{size class: cache hits}, for the classes with hits."""
        return dict(self.hits)

    def clear_hits(self) -> None:
        self.hits.clear()


def _hex(ptr: Any) -> str:
    """``ptr`` in hex where it is an integer (a pointer), else its repr."""
    return hex(ptr) if isinstance(ptr, numbers.Integral) else repr(ptr)


def granule(backend: Backend, reserved: int) -> int:
    """The multiple a large segment is rounded to: the backend's ``segment_granularity``, or,
    with a ``segment_granularity_min``, the power of two at or below a quarter of what the
    pool reserves, between the two (a small pool does not pay for whole large granules)."""
    g, least = backend.segment_granularity, backend.segment_granularity_min
    if least:
        r = max(least, reserved // 4)
        g = min(g, 1 << (r.bit_length() - 1))
    return g


def max_request(backend: Backend) -> int:
    """Most bytes a request to a pool over ``backend`` may ask for: rounded up to a block
    (:data:`LARGE_ROUND`) and then to a whole granule, it must stay a size the compiled paths
    can hold (below 2**63), or it would wrap around to a small or negative one."""
    return sys.maxsize - LARGE_ROUND - max(backend.segment_granularity, 1)


def _state_field(name: str, doc: str) -> property:
    get = operator.attrgetter("_state." + name)

    def set_(self: Pool, value: Any) -> None:
        setattr(self._state, name, value)

    return property(get, set_, doc=doc)

__all__ = ["Block", "Pool", "round_size", "size_class"]


class Pool(StatsMixin, StreamsMixin, GraphPoolsMixin, WarmupMixin):
    """A caching allocator over ``backend`` (statistics with PyTorch's key names).

    Parameters
    ----------
    backend : Backend
        Segment source (:class:`~cuflow.memory.DriverPoolBackend` on the GPU by default,
        :class:`~cuflow.memory.VirtualMemoryBackend` with ``CUFLOW_POOL_BACKEND=vmm``).  A
        :class:`~cuflow.memory.LimitingAdaptor` is taken as the pool's limit over its
        upstream backend, which is then :attr:`backend`: ``limit`` reads and changes the
        adaptor's, and ``limit = None`` removes it.
    limit : int, float, str, optional
        Most bytes the pool may reserve, in any form :func:`cuflow.memory.set_limit` takes;
        ``None`` or 0 bytes for no limit (``None`` keeps an adaptor's limit).
    """

    requested = _state_field("requested", "Bytes requested by the lent blocks.")
    allocated = _state_field("allocated", "Bytes of the lent blocks (rounded sizes).")
    peak_requested = _state_field("peak_requested", "Most requested bytes since a reset.")
    peak_allocated = _state_field("peak_allocated", "Most allocated bytes since a reset.")
    peak_active = _state_field("peak_active", "Most allocated plus pending bytes.")
    pending_bytes = _state_field("pending_bytes", "Freed bytes awaiting other streams' work.")
    reserved = _state_field("reserved", "Bytes of the pool's segments.")
    peak_reserved = _state_field("peak_reserved", "Most reserved bytes since a reset.")
    num_segment_alloc = _state_field("num_segment_alloc", "Segments taken from the source.")
    num_segment_free = _state_field("num_segment_free", "Segments given back to the source.")
    _busy = _state_field("busy", "A slow path runs: frees wait in ``_freed``.")
    _slow = _state_field("slow", "The hot path defers to the general one.")

    def __init__(self, backend: Backend, limit: int | float | str | None = None) -> None:
        if not isinstance(backend, Backend):
            raise MemoryTypeError(f"cuflow.memory.Pool: backend must be a "
                                  f"cuflow.memory.Backend, got {type(backend).__name__}")
        #: counters and flags (a C struct where the extension was built: the compiled
        #: paths use its fields; the properties above read and write them)
        self._state = PyPoolState() if PoolState is None else PoolState()
        # Reentrant: a finalizer may call free() while this thread is inside the pool; the
        # slow paths set _busy and such frees then wait in _freed for the end of the operation.
        self._lock = threading.RLock() if PoolLock is None else PoolLock()
        #: where segments come from: the backend, or adaptors over it (a limit)
        self._source: Backend = backend
        if isinstance(backend, LimitingAdaptor):
            # a limit given as the backend is the pool's limit: the pool reads the stream
            # semantics of what it limits, and ``limit = None`` removes it
            backend = backend.upstream
        self.backend = backend
        backend.attach(self._state)
        self._state.max_request = max_request(backend)
        if limit is not None:
            self.limit = limit
        self._busy = False
        self._live: dict[int, Block] = {}  # pointer -> lent block
        self._freed: dict[int, Any] = {}  # pointers given back, not yet processed
        self._quick: dict[int, dict[int, list[Block]]] = {}  # stream -> size -> freed blocks
        self._gone: list[int] = []  # destroyed streams, not yet processed
        #: free lists: the compiled ones where the compiled paths run (they work on those)
        self._freelist_type = FreeList if HotAlloc is None or CFreeList is None else CFreeList
        self._lists: dict[tuple[Any, int], FreeList] = {}
        self._general: dict[int, FreeList] = {}  # stream -> self._lists[(None, stream)]
        self._segments: dict[int, Segment] = {}
        #: the general pool's segments that became wholly free since the last miss (by
        #: pointer): what a miss releases, found without a look at every segment
        self._whole: dict[int, Segment] = {}
        self._pending: list[Block] = []
        self._deferred: list[Block] = []  # freed during a capture, used on a capturing stream
        self._capturing: dict[int, Any] = {}  # stream -> private owner id
        self._private: dict[Any, dict[str, Any]] = {}
        self._next_owner = 1
        self._recording: list[tuple] | None = None
        self._rec_lent: dict[int, int] = {}  # a recording's blocks (pointer -> bytes)
        self._rec_bytes = self._rec_peak = 0  # their current bytes, and their peak (_warmup)
        #: a stream captures, a stream was destroyed, or allocations are recorded: the hot
        #: path then defers to the general one (see _update_slow)
        self._slow = False
        self._warming = False  # segments made now are kept (reserve / warmup / replay)
        self._watched: set[int] = set()
        self._on_new_stream: Callable[[int], None] | None = None  # set by the CuPy glue
        self._orphans: list[Block] = []
        self._init_stats()
        #: ``alloc_ptr(nbytes, stream)``: the device pointer of a new block of at least
        #: ``nbytes`` for work on ``stream``; give it back with :meth:`free_ptr`.  Its
        #: arguments follow :meth:`alloc`'s rules (``nbytes`` an int >= 0, not a bool;
        #: ``stream`` an int handle in [0, 2**63)), with the same MemoryTypeError and
        #: MemoryValueError, both hot paths alike.  They are checked off the hit path, where a
        #: request is not served from the exact-size cache (every stream's and every size's
        #: first request is not): a value equal to a valid one (``True`` for 1, ``0.0`` for
        #: stream 0) may be served from that cache as the int it equals.
        self.alloc_ptr = self._make_alloc()

    def _model(self, backend: Backend) -> Pool:
        """A pool that decides as this one, over ``backend`` (warm-up's arena search replays
        a pattern on such pools)."""
        return Pool(backend)

    # ----------------------------------------------------------- allocation
    def _make_alloc(self, stream_of: Callable[[], Any] | None = None,
                    stream_fn: Any = None) -> Callable[[int, int], int]:
        """The pool's hot path.

        ``alloc(nbytes, stream)`` gives the device pointer of a block of at least
        ``nbytes`` for work on ``stream``; with ``stream_of`` (a callable giving
        the current stream object) or ``stream_fn`` (a capsule of a C function
        giving the current stream's handle), it is the callback
        ``alloc(nbytes, device_id)`` of CuPy's allocator hook (``make_cupy_malloc``) on the
        current stream.  It first processes queued frees (one each, usually: back
        to the exact-size cache), then hands back an exact-size block freed
        earlier on the stream; anything else goes to :meth:`_alloc_miss`.

        The compiled ``_hotpath.HotAlloc`` does this when it was built (it needs
        ``stream_fn`` for CuPy's callback); otherwise, or with
        ``CUFLOW_POOL_HOTPATH=python``, a Python closure over the pool's
        containers does the same operations.
        """
        if HotAlloc is not None and (stream_of is None or stream_fn is not None):
            return HotAlloc(self, Block, stream_fn, segment_type=Segment,
                            freelist_type=self._freelist_type)
        pool, quick, live, freed = self._state, self._quick, self._live, self._freed
        count_hit = pool.count_hit
        free_other, miss, args = self._free_locked, self._alloc_miss, self._alloc_args
        acquire, release = self._lock.acquire, self._lock.release  # cheaper than ``with``

        def alloc(nbytes: int, arg: int) -> int:
            stream = arg if stream_of is None else stream_of().ptr
            acquire()
            try:
                if freed and not pool.busy:
                    slow, again = pool.slow, 0
                    while freed:  # the queued frees, inlined for the common case
                        ptr = freed.popitem()[0]
                        b = live[ptr]
                        if slow or not b.plain:
                            del live[ptr]
                            free_other(b)
                        elif (not again and b.req == nbytes and b.stream == stream
                              and not (b.size >= SMALL and b.seg.keep)):
                            # the block just freed was asked for with this very size: hand it
                            # straight back (it stays lent, its statistics are unchanged; the
                            # other queued frees still go on).  Not a kept block of 1 MiB or
                            # more: handed back where it lies, a transformer step's blocks
                            # need 1.3-1.8x its peak in one segment, coalesced 1.13-1.22x
                            # (tests/memory/test_warmup.py, the arenas)
                            count_hit(b.size)
                            again = ptr
                        elif b.seg.keep:  # (a kept segment's block: coalesced at once)
                            del live[ptr]
                            free_other(b)
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
                if not pool.slow and nbytes >= 0:
                    q = quick.get(stream)
                    if q is not None:
                        lst = q.get(size)
                        if lst:
                            b = lst.pop()
                            b.quick = b.free = False
                            b.req = nbytes
                            count_hit(size)
                            n = pool.requested = pool.requested + nbytes
                            if n > pool.peak_requested:
                                pool.peak_requested = n
                            n = pool.allocated = pool.allocated + size
                            if n > pool.peak_allocated:
                                pool.peak_allocated = n
                            # not nested: blocks freed since the allocated peak may be pending
                            if n + pool.pending_bytes > pool.peak_active:
                                pool.peak_active = n + pool.pending_bytes
                            live[b.ptr] = b
                            return b.ptr
                return miss(size, nbytes, stream)
            except (TypeError, OverflowError) as e:
                # the arithmetic above met arguments it does not take (a float, a string, an
                # unhashable stream): the pool's error for them, out of the hit path's way
                # (a try costs nothing until it catches); a NumPy integer it overflows on is
                # the int it stands for
                if isinstance(e, CuflowError) or (type(nbytes) is int and type(stream) is int):
                    raise  # (the miss path's own check, or not the arguments' fault)
                n, s = args(nbytes, stream)
                return alloc(n, s if stream_of is None else arg)
            finally:
                release()

        return alloc

    def _alloc_miss(self, size: int, nbytes: int, stream: int) -> int:
        """Everything but an exact-size hit (under the lock), and where :meth:`alloc_ptr`'s
        arguments are checked: each first request of a stream and of a size comes here, so
        a value the hit path would misread never reaches a block (see :meth:`_alloc_args`)."""
        if nbytes.__class__ is not int or nbytes < 0 or stream.__class__ is not int \
                or stream < 0 or stream > _MAX_STREAM:
            nbytes, stream = self._alloc_args(nbytes, stream)
            size = round_size(nbytes) if nbytes <= self._state.max_request else nbytes
        if nbytes > self._state.max_request:
            # (both hot paths send such a size here before rounding it)
            self.num_ooms += 1
            raise OutOfMemoryError(
                f"cuflow.memory: out of memory: {nbytes} bytes ({fmt_bytes(nbytes)}) "
                f"requested; a request must be at most {self._state.max_request} bytes, so "
                f"that its block and segment sizes stay below 2**63 (no address space holds "
                f"more)")
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

    def _alloc_args(self, nbytes: Any, stream: Any,
                    where: str = "Pool.alloc_ptr") -> tuple[int, int]:
        """:meth:`alloc_ptr`'s and :meth:`alloc`'s arguments as ints, checked: ``nbytes`` an
        integer >= 0 (Python's or NumPy's, not a bool), ``stream`` a stream handle, an int in
        [0, 2**63) (a negative one is the pool's mark of a destroyed stream)."""
        # (from None: the hot path's handler calls this while the TypeError that sent it
        # here is handled, and that one says nothing the message below does not)
        if isinstance(nbytes, bool) or not isinstance(nbytes, numbers.Integral):
            raise MemoryTypeError(f"cuflow.memory.{where}: nbytes must be an int, got "
                                  f"{type(nbytes).__name__} {nbytes!r}") from None
        try:
            stream = check_stream(where, stream)
        except CuflowError as e:
            raise e from None
        nbytes = int(nbytes)
        if nbytes < 0:
            raise MemoryValueError(f"cuflow.memory.{where}: nbytes must be >= 0 (a negative "
                                   f"size cannot be allocated), got {nbytes}") from None
        return nbytes, stream

    def free_ptr(self, ptr: int) -> None:
        """Give back the block at ``ptr`` (from :meth:`alloc_ptr`); safe from finalizers.

        Parameters
        ----------
        ptr : int
            The block's pointer.

        Notes
        -----
        Stream semantics: nothing is queued; the block is reused at once on its stream, and
        by another stream only after the work of the streams that used it.

        Raises
        ------
        MemoryTypeError
            ``ptr`` is not an integer.  (Checked off the fast path, where ``ptr`` is no lent
            block: a number equal to a lent block's pointer, ``float(ptr)``, is taken as
            that pointer, and frees that block.)
        DoubleFreeError
            ``ptr`` is no block this pool lends now (freed already, or from elsewhere).
        """
        # checked here, not when the queue is processed: there a KeyError would come out of
        # whichever later pool operation (someone else's allocation) drains it
        try:
            lent = ptr in self._live and ptr not in self._freed
        except TypeError:  # unhashable: no pointer
            lent = None
        if not lent:
            if lent is None or not is_integer(ptr):
                raise MemoryTypeError(f"cuflow.memory.Pool.free_ptr: ptr must be the int "
                                      f"pointer of a block this pool lends now, got "
                                      f"{type(ptr).__name__} {ptr!r}")
            raise DoubleFreeError(f"cuflow.memory.Pool.free_ptr: ptr must be a block this "
                                  f"pool lends now, got {_hex(ptr)}: freed twice, or not from "
                                  f"this pool")
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

        With several devices, call it with the pool's device current, as cuflow's allocator
        hook is: a miss may release segments, which records events on their streams, and an
        event belongs to the device current when it is made.

        Parameters
        ----------
        nbytes : int
            The bytes asked for (rounded up to the pool's block sizes).
        stream : int, optional
            The handle of the stream the block is for; the current stream when omitted.

        Returns
        -------
        Block
            The block; give it back with :meth:`free`.

        Notes
        -----
        Stream semantics: nothing is queued; the block is ready for work on ``stream`` (a
        block another stream freed is lent only after that stream's work, or with an event
        ``stream`` waits for).

        Raises
        ------
        MemoryTypeError
            ``nbytes`` is not an integer (a bool neither), or ``stream`` is not an int.
        MemoryValueError
            ``nbytes`` is negative, or ``stream`` is not in [0, 2**63).
        cuflow.OutOfMemoryError
            After freeing cached blocks, collecting garbage and retrying; at once for a size
            past the address space.
        """
        nbytes, stream = self._alloc_args(
            nbytes, self.backend.current_stream() if stream is None else stream, "Pool.alloc")
        return self._live[self.alloc_ptr(nbytes, stream)]

    def free(self, b: Block) -> None:
        """Return ``b``; reused at once on its stream, or after its other streams' work.

        Parameters
        ----------
        b : Block
            A block this pool lends now (:class:`DoubleFreeError` otherwise).

        Notes
        -----
        Stream semantics: nothing is queued; where other streams used ``b``
        (:meth:`record_stream`), an event on each orders its reuse after their work.

        A :class:`Block` is the pool's own record of its memory, and the next allocation of
        the same size may lend the same object again: drop the handle at ``free``, as a C
        pointer after ``free()``.  A handle kept and freed again after it was lent anew
        frees the new owner's block, which the pool cannot tell from a rightful free.
        (Arrays do not meet this: each of CuPy's allocations holds a memory object of its
        own.)
        """
        if not isinstance(b, Block):
            raise MemoryTypeError(f"cuflow.memory.Pool.free: b must be a Block of this pool, "
                                  f"got {type(b).__name__}")
        if self._live.get(b.ptr) is not b or b.ptr in self._freed:
            raise DoubleFreeError(f"cuflow.memory: block at {b.ptr:#x} freed twice (or not "
                               f"from this pool)")
        self._freed[b.ptr] = None  # (checked above: free_ptr's check again is not needed)
        self.flush_frees()

    def block_of(self, ptr: int) -> Block | None:
        """The lent block that starts at ``ptr``, or ``None``.

        Parameters
        ----------
        ptr : int
            A pointer.

        Returns
        -------
        Block or None

        Raises
        ------
        MemoryTypeError
            ``ptr`` is not an integer (a bool neither).
        """
        try:
            b = self._live.get(ptr)
        except TypeError:  # unhashable: no pointer (the check below names it)
            b = None
        if (b is None or ptr.__class__ is not int) and not is_integer(ptr):
            raise MemoryTypeError(f"cuflow.memory.Pool.block_of: ptr must be an int pointer, "
                                  f"got {type(ptr).__name__} {ptr!r}")
        return b

    def _alloc_locked(self, size: int, nbytes: int, stream: int) -> Block:
        owner = self._capturing.get(stream) if self._capturing else None
        self._flush_quick()
        fl = self._lists.get((owner, stream))
        most = None
        if size >= SMALL and self.backend.cheap_release:
            # at most twice the request, or the segment a miss would make for it (a size the
            # compiled free lists hold: no bound past 2**63 - 1)
            most = min(max(size * LARGE_SPLIT_MAX, self._segment_bytes(size, owner)),
                       sys.maxsize)
        b = fl.pop_fit(size, most) if fl is not None else None
        if b is None:
            b = self._alloc_slow(size, stream, owner, most)
        else:
            self._state.count_hit(size)
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
            self._record_lent(b)

    def _list(self, owner: Any, stream: int) -> FreeList:
        fl = self._lists.get((owner, stream))
        if fl is None:
            fl = self._lists[(owner, stream)] = self._freelist_type()
            if owner is None:
                self._general[stream] = fl
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
                self._state.count_hit(size)
                return b
        b = self._borrow(size, stream, most) if owner is None else None
        if b is not None:
            self._state.count_hit(size)
            return b
        if self._orphans and not capturing:
            self._adopt_orphans()
            b = self._list(owner, stream).pop_fit(size) if stream == 0 else None
            if b is not None:
                self._state.count_hit(size)
                return b
        self.misses[size] += 1
        try:
            seg_bytes = self._segment_bytes(size, owner)
            if self.backend.cheap_release and owner is None and not capturing:
                self._release_whole()
            return self._segment_block(size, stream, owner, seg_bytes)
        except BaseException:
            self._uncount_miss(size)
            raise

    def _uncount_miss(self, size: int) -> None:
        """A miss on ``size`` that raised (out of memory, or the backend's own error): it
        served nothing, so ``num_alloc`` and ``num_free`` do not count it
        (``_hotpath.c``'s ``uncount_miss`` does the same)."""
        self.misses[size] -= 1
        if not self.misses[size]:
            del self.misses[size]

    def _segment_block(self, size: int, stream: int, owner: Any, seg_bytes: int) -> Block:
        """The first block of a new segment of ``seg_bytes`` (for a request of ``size``), or
        what :meth:`_segment_refused` finds when the source refuses it."""
        try:
            ptr = self._new_segment(seg_bytes, stream, owner)
        except MemoryError as e:
            return self._segment_refused(size, stream, owner, seg_bytes, e)
        return self._add_segment(ptr, seg_bytes, stream, owner)

    def _segment_refused(self, size: int, stream: int, owner: Any, seg_bytes: int,
                         error: MemoryError) -> Block:
        """After the source refused a segment with ``error`` (the device is out of memory, or
        the limit refuses it; the same retries for both): collect garbage, process the queued
        frees, give the free segments back (kept ones too: memory is short) and wait for the
        frees pending on other streams' work; then the smallest fit of any size on the
        stream, a free block of another stream, or one last segment.  Raises
        :class:`~cuflow.OutOfMemoryError` when that fails too.

        A limit's refusal first gives the free segments back and asks once more: a pool
        that runs at its limit meets the refusal often, and the garbage collection and the
        wait for other streams are for when that is not enough."""
        capturing = bool(self._capturing)
        if isinstance(error, LimitExceeded) and not capturing:
            self._release_free_segments(split=True)
            try:
                ptr = self._new_segment(seg_bytes, stream, owner)
            except LimitExceeded:
                pass
            else:
                return self._add_segment(ptr, seg_bytes, stream, owner)
        self.num_alloc_retries += 1
        gc.collect()  # finalizers of collected arrays queue their frees; drain them
        self._drain()
        self._flush_quick()
        if not capturing:
            self._release_free_segments(split=True)
            self._process_pending(wait=True)
            self._release_free_segments(split=True)
        # no bound on the fit now: a large block split beats an out-of-memory error
        b = self._list(owner, stream).pop_fit(size)
        if b is None and owner is None:
            b = self._borrow(size, stream, None)
        if b is not None:
            return b
        try:
            ptr = self._new_segment(seg_bytes, stream, owner)
        except MemoryError as last:
            if isinstance(last, LimitExceeded):
                raise self._out_of_memory(size, seg_bytes, self.limit) from None
            raise self._out_of_memory(size, seg_bytes) from last
        return self._add_segment(ptr, seg_bytes, stream, owner)

    def _out_of_memory(self, size: int, seg_bytes: int,
                       limit: int | None = None) -> OutOfMemoryError:
        """The error for a request of ``size`` bytes whose new segment of ``seg_bytes`` the
        device cannot give, or ``limit`` refuses; it counts as an out-of-memory error (the
        miss, which served nothing, is uncounted where it was counted)."""
        self.num_ooms += 1
        return OutOfMemoryError(self._oom_message(size, seg_bytes, limit))

    def _add_segment(self, ptr: int, seg_bytes: int, stream: int, owner: Any) -> Block:
        """Take the new segment at ``ptr`` into the pool; its first block."""
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

    def _new_segment(self, nbytes: int, stream: int, owner: Any) -> int:
        """A new segment from the pool's source (the backend, or the adaptors over it)."""
        src = self._source
        return src.alloc(nbytes, stream) if owner is None else src.alloc_private(nbytes)

    @property
    def limit(self) -> int | None:
        """Most bytes the pool may reserve (``None``: no limit), set in any form
        :func:`cuflow.memory.set_limit` takes; 0 bytes, as ``None``, removes it.  A limit is a
        :class:`~cuflow.memory.LimitingAdaptor` over the backend, absent without one."""
        src = self._source
        return src.limit if isinstance(src, LimitingAdaptor) else None

    @limit.setter
    def limit(self, value: int | float | str | None) -> None:
        value = limit_of(value, self.backend)  # (None: no limit, 0 bytes included)
        # under the lock: a segment another thread is taking counts in ``reserved``, and so
        # in what a new adaptor holds, before the source changes
        with self.backend.on_device(), self._lock:  # (a lower limit may release memory)
            if value is None:
                self._source = self.backend
                self.backend.limit_memory(None)
            elif isinstance(self._source, LimitingAdaptor):
                self._source.limit = value
            else:
                self._source = LimitingAdaptor(self.backend, value, held=self.reserved)

    def _segment_bytes(self, size: int, owner: Any) -> int:
        """The segment a miss on a request of ``size`` bytes gets from the backend."""
        if size < SMALL:
            return max(size, MIN_SEGMENT)
        if owner is not None:  # a graph's private segment (cudaMalloc): exactly the request
            return size
        g = granule(self.backend, self.reserved)  # whole granules: the pool owns the rest
        return -(-size // g) * g

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

    def _free_locked(self, b: Block) -> None:
        if self._gone:
            self._forget_gone(b)
        self.allocated -= b.size
        self.requested -= b.req
        b.free = True
        if self._recording is not None:
            self._recording.append(("f", b.ptr, 0, 0))
            self._record_freed(b)
        if b.uses:
            self._await_uses(b)
        elif b.seg.owner is None and b.stream != DEAD_STREAM and not b.seg.keep:
            # (a kept segment's blocks are coalesced at once: best fit over them packs a
            # recorded transformer step in 1.13-1.22x its peak where the exact-size cache
            # needs up to 1.78x; tests/memory/test_warmup.py, the arenas)
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
        if b.prev is None and b.next is None:
            if b.seg.owner is None:
                self._whole[b.seg.ptr] = b.seg
            # a closed graph's whole free segment goes back, except while a graph is being
            # captured (freeing device memory is illegal then: end_private releases it)
            elif self._closed_private(b.seg.owner) and not self._capturing:
                self._release_segment(b, fl)

    def _update_slow(self) -> None:
        self._slow = bool(self._capturing or self._gone or self._recording is not None)

    # -------------------------------------------------------------- segments
    def _release_segment(self, b: Block, fl: FreeList) -> None:
        seg = b.seg
        fl.remove(b)
        for s in seg.streams:  # order the release after every stream that used it
            if s != b.stream:
                ev = self.backend.record(s)
                if ev is not None:
                    self.backend.wait(b.stream, ev)
                    self._retire(ev)  # (destroyed once complete: the wait holds what it needs)
        if seg.owner is None:
            self._source.free(seg.ptr, seg.nbytes, b.stream)
        else:
            self._source.free_private(seg.ptr, seg.nbytes)
        del self._segments[seg.ptr]
        # the segment no longer holds its block: without the Segment <-> Block cycle both go
        # as soon as the last reference does, rather than at the garbage collector's next
        # pass (a miss over ``vmm`` releases a segment at nearly every miss)
        seg.first = None
        if self._whole.get(seg.ptr) is seg:
            del self._whole[seg.ptr]
        self.reserved -= seg.nbytes
        self.num_segment_free += 1
        if seg.owner is not None:
            info = self._private.get(seg.owner)
            if info is not None:
                info["segments"] -= 1
                if info["closed"] and info["segments"] == 0:
                    del self._private[seg.owner]

    def _release_whole(self) -> None:
        """A miss's release: the general pool's wholly free segments, except those a warm-up
        kept, found among those that became wholly free since the last miss (``_whole``): a
        miss over a backend of exact-size segments, which holds hundreds, does not look at
        each (``python -m cuflow bench traces``, "cuflow vmm")."""
        whole = list(self._whole.values())
        self._whole.clear()
        for i, seg in enumerate(whole):
            b = seg.first
            if self._segments.get(seg.ptr) is seg and not seg.keep and b.next is None \
                    and _idle(b):
                try:
                    self._release_segment(b, self._lists[(None, b.stream)])
                except BaseException:  # the ones after it stay candidates
                    for seg in whole[i + 1:]:
                        if self._segments.get(seg.ptr) is seg:
                            self._whole.setdefault(seg.ptr, seg)
                    raise

    def _release_free_segments(self, owner: Any = None, split: bool = False) -> int:
        """Release ``owner``'s wholly free segments, kept ones too; the number released.  A
        segment is wholly free when its first block spans it and sits in a free list (free,
        not in the exact-size cache, awaiting no event, of a live stream).  With ``split``
        (``empty_cache``, an out-of-memory retry) a segment whose blocks are
        all so, on several streams (free neighbours of different streams never coalesce),
        goes back too, after the work of each of its streams."""
        n = 0
        for seg in list(self._segments.values()):
            b = seg.first
            if seg.owner != owner or not _idle(b):
                continue
            if b.next is not None:
                rest = []
                x = b.next
                while split and x is not None and _idle(x):
                    rest.append(x)
                    x = x.next
                if not split or x is not None:
                    continue
                for x in rest:  # one free block spanning the segment, on the first's stream
                    self._lists[(owner, x.stream)].remove(x)
                fl = self._lists[(owner, b.stream)]
                fl.remove(b)  # (the list is ordered by size)
                b.next, b.size = None, seg.nbytes
                fl.push(b)
            self._release_segment(b, self._lists[(owner, b.stream)])
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
        """Return every fully free segment to the device.

        The backend gives back what it keeps reserved beyond the pool's segments too (the
        driver pool's reserve, after a device synchronize; over expandable segments, the
        free mapped pages, after their last work), so the memory is free for other
        processes, as after ``torch.cuda.empty_cache()``.  While a graph is being captured
        nothing can be released (freeing device memory would invalidate the capture): it
        then releases nothing and returns 0.  It runs with the pool's device current
        (:meth:`~cuflow.memory.Backend.on_device`), whichever device the caller has current.

        Returns
        -------
        int
            The number of segments released.
        """
        with self.backend.on_device(), self._lock:  # (releases record events on its streams)
            if self._capturing:
                return 0
            self._settle()
            self._process_pending()
            if self._orphans:
                self._adopt_orphans()
            n = self._release_free_segments(split=True)
            held = self.backend.device_reserved()
            if n or (held is not None and held[0] > self.reserved) or \
                    self.backend.places_segments:  # (its pages: private segments are not)
                # (under the lock: no capture starts while it synchronizes the device)
                self.backend.trim()
            return n
