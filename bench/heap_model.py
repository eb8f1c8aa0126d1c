"""A model of an expandable-segment pool, replayed over the allocation traces on the CPU.

    python bench/heap_model.py            # every trace of `python -m cuflow bench traces`

The model is the design of a CUDA virtual-memory backend (PyTorch's expandable segments):
one reserved address range per pool, blocks placed by best fit (the smallest free range that
holds the request, rounded to 512 bytes) with free neighbours coalesced, and physical memory
mapped in 2 MiB pages as the range's top grows.  Three policies:

* ``grow``: pages stay mapped once mapped, so a replay after the first maps nothing;
* ``unmap``: before mapping new pages, every mapped page that no live block touches is
  unmapped, so the footprint follows the live blocks, and a block placed on unmapped pages
  maps them again;
* ``threshold``: placement by first fit instead, over the free ranges cut at unmapped pages
  (the lowest address where the block lies on mapped pages only); when none holds it, the
  spot needing the fewest new pages among the free ranges and the top.  Pages stay mapped
  until mapping new ones would take the mapped bytes over ``F`` times the peak requested
  bytes so far; then free pages are unmapped, largest free runs first and each from its high
  end, only as many as that limit needs.  So the footprint stays at most ``F`` while free
  pages allow it, and a replay after the first maps little or nothing.

Per trace it prints the footprint (peak mapped bytes over peak requested bytes, the
definition of ``python -m cuflow bench traces``) and the mapping calls of a first and a
second replay (a run of adjacent pages mapped at once counts one; for ``threshold`` the
calls are maps plus unmaps, counted alike, while the ``unmap`` column counts maps only).  The
blocks a trace never frees stay allocated through the second replay.  It is a model on the
CPU, not a measurement on a GPU.  A mapping on the driver's virtual-memory API
(``cuMemCreate``, ``cuMemMap``, ``cuMemSetAccess``) costs 35-120 us on an H100
(docs/performance.md), against 3-12 us for a segment of the driver's stream-ordered pool.
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cuflow.bench import _traces  # noqa: E402  (the checkout's package, not an installed one)

PAGE = 2 << 20
ALIGN = 512
F = 1.25  # threshold policy: mapped bytes kept at most F x the peak requested bytes so far


class Heap:
    """One growing address range; ``policy`` is ``"grow"``, ``"unmap"`` or ``"threshold"``."""

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self.by_size: list[tuple[int, int]] = []  # free (size, address), sorted
        self.size_at: dict[int, int] = {}  # free address -> size
        self.start_of: dict[int, int] = {}  # free end -> address
        self.top = 0
        self.users: dict[int, int] = {}  # page -> live blocks on it
        self.mapped: set[int] = set()
        self.peak_mapped = 0
        self.maps = self.unmaps = 0
        self.requested = self.peak_requested = 0  # live requested bytes, and their peak
        self.runs: tuple[list[int], list[int]] | None = None  # mapped page runs (starts, ends)

    def _take(self, a: int) -> int:
        n = self.size_at.pop(a)
        del self.start_of[a + n]
        self.by_size.pop(bisect.bisect_left(self.by_size, (n, a)))
        return n

    def _put(self, a: int, n: int) -> None:
        self.size_at[a] = n
        self.start_of[a + n] = a
        bisect.insort(self.by_size, (n, a))

    def _new(self, a: int, n: int) -> int:
        return sum(p not in self.mapped for p in range(a // PAGE, (a + n - 1) // PAGE + 1))

    def _spot(self, n: int) -> tuple[int, int, int] | None:
        """(position, free range's address, its size) for n bytes; None: grow the top."""
        i = bisect.bisect_left(self.by_size, (n, -1))
        if self.policy != "threshold":  # best fit
            if i == len(self.by_size):
                return None
            size, a = self.by_size[i]
            return a, a, size
        if self.runs is None:
            pages = sorted(self.mapped)
            self.runs = ([p for p in pages if p - 1 not in self.mapped],
                         [p + 1 for p in pages if p + 1 not in self.mapped])
        starts, ends = self.runs
        fit, spots = None, []
        for size, a in self.by_size[i:]:
            end = a + size
            spots += [(a, a, size), (end - n, a, size)]
            j = max(bisect.bisect_right(starts, a // PAGE) - 1, 0)
            while j < len(starts) and starts[j] * PAGE < end:  # mapped runs over the range
                lo, hi = max(a, starts[j] * PAGE), min(end, ends[j] * PAGE)
                if hi - lo >= n and (fit is None or lo < fit[0]):
                    fit = (lo, a, size)
                if hi > a:
                    spots += [(p, a, size) for p in (lo, hi - n) if a <= p <= end - n]
                j += 1
        if fit or not spots:
            return fit
        best = min((self._new(p, n), size, p not in (a, a + size - n), p, a)
                   for p, a, size in spots)  # fewest new pages, then best fit
        if self._new(self.start_of.get(self.top, self.top), n) < best[0]:
            return None
        return best[3], best[4], best[1]

    def map_pages(self, pages: list[int]) -> None:
        """Map ``pages`` (ascending); the model records them (bench/vmm_heap.py maps them)."""
        self.mapped.update(pages)

    def unmap_pages(self, pages: set[int]) -> None:
        """Unmap ``pages``, none of which a live block touches."""
        self.mapped -= pages

    def _unmap(self, excess: float, keep: range) -> None:
        """Unmap free pages for excess bytes: largest free runs first, from their high end."""
        runs: list[list[int]] = []
        for p in sorted(p for p in self.mapped if not self.users.get(p) and p not in keep):
            if runs and runs[-1][-1] == p - 1:
                runs[-1].append(p)
            else:
                runs.append([p])
        need = -(-int(excess) // PAGE)
        for run in sorted(runs, key=len, reverse=True):
            if need <= 0:
                break
            self.unmap_pages(set(run[-need:]))
            self.unmaps += 1
            need -= len(run)

    def alloc(self, n: int, req: int) -> int:
        self.requested += req
        self.peak_requested = max(self.peak_requested, self.requested)
        spot = self._spot(n)
        if spot:
            a, b, size = spot
            self._take(b)
            if a > b:
                self._put(b, a - b)
            if a + n < b + size:
                self._put(a + n, b + size - a - n)
        else:  # the top grows, from a free range that ends there if there is one
            a = self.start_of.get(self.top, self.top)
            if a != self.top:
                self._take(a)
            self.top = max(self.top, a + n)
        pages = range(a // PAGE, (a + n - 1) // PAGE + 1)
        missing = [p for p in pages if p not in self.mapped]
        if missing:
            if self.policy == "unmap":
                self.unmap_pages({p for p in self.mapped if not self.users.get(p)} - set(pages))
            excess = (len(self.mapped) + len(missing)) * PAGE - F * self.peak_requested
            if self.policy == "threshold" and excess > 0:
                self._unmap(excess, pages)
            self.maps += sum(1 for k, p in enumerate(missing) if k == 0 or missing[k - 1] != p - 1)
            self.map_pages(missing)
            self.runs = None
            self.peak_mapped = max(self.peak_mapped, len(self.mapped))
        for p in pages:
            self.users[p] = self.users.get(p, 0) + 1
        return a

    def free(self, a: int, n: int, req: int) -> None:
        self.requested -= req
        for p in range(a // PAGE, (a + n - 1) // PAGE + 1):
            self.users[p] -= 1
        if a + n in self.size_at:
            n += self._take(a + n)
        if a in self.start_of:
            b = self.start_of[a]
            n += self._take(b)
            a = b
        self._put(a, n)


def replay(its: list[list[tuple]], policy: str, heap: Heap | None = None,
           after: Callable[[int], None] | None = None) -> tuple[float, int, int]:
    """Footprint, and mapping calls (maps and unmaps) of the first and of a second replay
    (through ``heap``, a new ``Heap(policy)`` by default; ``after(i)`` once replay ``i`` is
    done)."""
    heap = heap if heap is not None else Heap(policy)
    live: dict[int, tuple[int, int, int]] = {}
    calls = []
    for i in range(2):
        before = heap.maps + heap.unmaps
        for ops in its:
            for op, key, n in ops:
                if op == "a":
                    size = max(-(-n // ALIGN) * ALIGN, ALIGN)
                    live[key] = (heap.alloc(size, n), size, n)
                else:
                    heap.free(*live.pop(key))
        calls.append(heap.maps + heap.unmaps - before)
        if after is not None:
            after(i)
    return heap.peak_mapped * PAGE / _traces.peak_requested(its), calls[0], calls[1]


def main() -> None:
    print(f"{'trace':40s} {'grow: footprint, maps':>24s} {'unmap: footprint, maps':>26s}"
          f" {'threshold: footprint, calls':>31s}")
    for name in [*_traces.TRACES, *_traces.loop_names()]:
        its = _traces.trace_its(name)
        cells = []
        for policy in ("grow", "unmap", "threshold"):
            fp, first, second = replay(its, policy)
            cells.append(f"{fp:5.2f}, {first:4d} + {second:4d}")
        print(f"{name:40s} {cells[0]:>24s} {cells[1]:>26s} {cells[2]:>31s}")


if __name__ == "__main__":
    main()
