"""A model of an expandable-segment pool, replayed over the allocation traces on the CPU.

    python bench/heap_model.py            # every trace of `python -m cuflow bench traces`

The model is the design of a CUDA virtual-memory backend (PyTorch's expandable segments):
one reserved address range per pool, blocks placed by best fit (the smallest free range that
holds the request, rounded to 512 bytes) with free neighbours coalesced, and physical memory
mapped in 2 MiB pages as the range's top grows.  Two policies for the pages:

* ``grow``: pages stay mapped once mapped, so a replay after the first maps nothing;
* ``unmap``: before mapping new pages, every mapped page that no live block touches is
  unmapped, so the footprint follows the live blocks, and a block placed on unmapped pages
  maps them again.

Per trace it prints the footprint (peak mapped bytes over peak requested bytes, the
definition of ``python -m cuflow bench traces``) and the mapping calls of a first and a
second replay (a run of adjacent pages mapped at once counts one).  A mapping on the driver's
virtual-memory API (``cuMemCreate``, ``cuMemMap``, ``cuMemSetAccess``) costs 35-120 us on an
H100 (docs/performance.md), against 3-12 us for a segment of the driver's stream-ordered pool.
"""

from __future__ import annotations

import bisect
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cuflow.bench import _traces  # noqa: E402  (the checkout's package, not an installed one)

PAGE = 2 << 20
ALIGN = 512


class Heap:
    """Best fit over one growing address range; ``policy`` is ``"grow"`` or ``"unmap"``."""

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self.by_size: list[tuple[int, int]] = []  # free (size, address), sorted
        self.size_at: dict[int, int] = {}  # free address -> size
        self.start_of: dict[int, int] = {}  # free end -> address
        self.top = 0
        self.users: dict[int, int] = {}  # page -> live blocks on it
        self.mapped: set[int] = set()
        self.peak_mapped = 0
        self.maps = 0

    def _take(self, a: int) -> int:
        n = self.size_at.pop(a)
        del self.start_of[a + n]
        self.by_size.pop(bisect.bisect_left(self.by_size, (n, a)))
        return n

    def _put(self, a: int, n: int) -> None:
        self.size_at[a] = n
        self.start_of[a + n] = a
        bisect.insort(self.by_size, (n, a))

    def alloc(self, n: int) -> int:
        i = bisect.bisect_left(self.by_size, (n, -1))
        if i < len(self.by_size):
            size, a = self.by_size[i]
            self._take(a)
            if size > n:
                self._put(a + n, size - n)
        else:  # the top grows, from a free range that ends there if there is one
            a = self.start_of.get(self.top, self.top)
            if a != self.top:
                self._take(a)
            self.top = max(self.top, a + n)
        pages = range(a // PAGE, (a + n - 1) // PAGE + 1)
        missing = [p for p in pages if p not in self.mapped]
        if missing:
            if self.policy == "unmap":
                self.mapped -= {p for p in self.mapped if not self.users.get(p)} - set(pages)
            self.maps += sum(1 for k, p in enumerate(missing) if k == 0 or missing[k - 1] != p - 1)
            self.mapped.update(missing)
            self.peak_mapped = max(self.peak_mapped, len(self.mapped))
        for p in pages:
            self.users[p] = self.users.get(p, 0) + 1
        return a

    def free(self, a: int, n: int) -> None:
        for p in range(a // PAGE, (a + n - 1) // PAGE + 1):
            self.users[p] -= 1
        if a + n in self.size_at:
            n += self._take(a + n)
        if a in self.start_of:
            b = self.start_of[a]
            n += self._take(b)
            a = b
        self._put(a, n)


def replay(its: list[list[tuple]], policy: str) -> tuple[float, int, int]:
    """Footprint, and mapping calls of the first and of a second replay."""
    heap = Heap(policy)
    live: dict[int, tuple[int, int]] = {}
    maps = []
    for _ in range(2):
        before = heap.maps
        for ops in its:
            for op, key, n in ops:
                if op == "a":
                    size = max(-(-n // ALIGN) * ALIGN, ALIGN)
                    live[key] = (heap.alloc(size), size)
                else:
                    heap.free(*live.pop(key))
        maps.append(heap.maps - before)
    return heap.peak_mapped * PAGE / _traces.peak_requested(its), maps[0], maps[1]


def main() -> None:
    print(f"{'trace':40s} {'grow: footprint, maps':>24s} {'unmap: footprint, maps':>26s}")
    for name in [*_traces.TRACES, *_traces.loop_names()]:
        its = _traces.trace_its(name)
        cells = []
        for policy in ("grow", "unmap"):
            fp, first, second = replay(its, policy)
            cells.append(f"{fp:5.2f}, {first:4d} + {second:4d}")
        print(f"{name:40s} {cells[0]:>24s} {cells[1]:>26s}")


if __name__ == "__main__":
    main()
