"""The pool's units: segments, the blocks they are carved into, and free lists.

A segment (from a backend, see ``_backends``) is carved into address-ordered
blocks (``prev``/``next`` links); free blocks sit in one :class:`FreeList` per
(owner, stream), indexed by size.
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Iterable
from typing import Any

from .._checks import is_integer
from ._exceptions import MemoryTypeError, MemoryValueError

__all__ = ["DEAD_STREAM", "LARGE_ROUND", "LARGE_SPLIT_MAX", "MIN_SEGMENT", "SMALL", "SPLIT_MIN",
           "Block", "FreeList", "Segment", "check_stream", "round_size", "size_class"]

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


def _check_bytes(name: str, n: Any) -> None:
    if not is_integer(n):
        raise MemoryTypeError(f"cuflow.memory.{name}: n must be an int number of bytes, got "
                              f"{type(n).__name__} {n!r}")
    if n < 0:
        raise MemoryValueError(f"cuflow.memory.{name}: n must be a number of bytes >= 0, got "
                               f"{n}")


def check_stream(where: str, stream: Any) -> int:
    """``stream`` as an int, checked: a stream handle is an int in [0, 2**63) (not a bool;
    the pool keeps -1 for destroyed streams, and the compiled paths hold a handle in 64
    bits)."""
    if not is_integer(stream):
        raise MemoryTypeError(f"cuflow.memory.{where}: stream must be a stream handle, an int "
                              f"in [0, 2**63), got {type(stream).__name__} {stream!r}")
    if not 0 <= stream <= sys.maxsize:
        raise MemoryValueError(f"cuflow.memory.{where}: stream must be a stream handle, an "
                               f"int in [0, 2**63), got {stream}")
    return int(stream)


def round_size(n: int) -> int:
    """Bytes actually reserved for a request of ``n`` bytes (an int >= 0).

    Parameters
    ----------
    n : int
        The bytes requested, >= 0 (a Python or NumPy integer, not a bool).

    Returns
    -------
    int
        ``n`` rounded up to a multiple of 512 below 1 MiB (512 for 0), and to a multiple of
        128 KiB from 1 MiB on.

    Raises
    ------
    MemoryTypeError
        ``n`` is not an integer.
    MemoryValueError
        ``n`` is negative.
    """
    _check_bytes("round_size", n)
    n = int(n)
    if n < SMALL:
        return ((n + 511) >> 9) << 9 if n > 0 else 512
    return (n + LARGE_ROUND - 1) & ~(LARGE_ROUND - 1)


def size_class(n: int) -> int:
    """Upper bound of ``n``'s statistics class: four classes per power of two, from 512 B
    (``n``: an int >= 0).

    Parameters
    ----------
    n : int
        A size in bytes, >= 0 (a Python or NumPy integer, not a bool).

    Returns
    -------
    int
        The class's upper bound, at least ``n``: 512 for ``n`` up to 512.

    Raises
    ------
    MemoryTypeError
        ``n`` is not an integer.
    MemoryValueError
        ``n`` is negative.
    """
    _check_bytes("size_class", n)
    n = int(n)
    if n <= 512:
        return 512
    k = (n - 1).bit_length()  # 2**(k-1) < n <= 2**k
    q = 1 << (k - 3)  # a quarter of the lower power of two
    return (1 << (k - 1)) + q * (((n - 1 - (1 << (k - 1))) // q) + 1)


class Segment:
    __slots__ = ("first", "keep", "nbytes", "owner", "ptr", "stream", "streams")

    def __init__(self, ptr: int, nbytes: int, stream: int, owner: Any) -> None:
        self.ptr, self.nbytes, self.stream, self.owner = ptr, nbytes, stream, owner
        # kept by a warm-up: split freely, not released by a miss (only by empty_cache, or
        # when a segment the limit or the device refused needs the memory)
        self.keep = False
        self.streams: set[int] = {stream}
        self.first: Block | None = None  # the lowest block; splitting and coalescing keep it


class Block:
    """A range of a segment, lent out or ``free``: a free block sits in a free list, in the
    exact-size cache (``quick``), or awaits other streams' work (``events``).

    The pool makes blocks (:meth:`Pool.alloc` lends one); a new block is free and linked to
    no neighbour.

    Parameters
    ----------
    ptr : int
        The address of the range.
    size : int
        Its bytes.
    seg : Segment
        The segment it lies in.
    stream : int
        The handle of the stream it is for (-1: a destroyed stream's).
    """

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


class FreeList:
    """Free blocks of one (owner, stream), indexed by size (lazy deletion of empty sizes);
    ``_hotpath.FreeList`` is the same in C, which the compiled paths use."""

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
        """The free blocks, in size order (as the compiled free list gives them)."""
        for s in self.sizes:
            yield from self.by_size[s]

