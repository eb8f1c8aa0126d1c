"""A model of an expandable-segment pool, replayed over the allocation traces on the CPU.

    python bench/heap_model.py            # every trace of `python -m cuflow bench traces`

Each trace's requests (rounded to 512 bytes) go straight into one reserved address range,
free neighbours coalesced, physical memory mapped in 2 MiB pages as blocks first lie on
them.  Three policies:

* ``grow``: pages stay mapped once mapped, so a replay after the first maps nothing;
* ``unmap``: before mapping new pages, every mapped page that no live block touches is
  unmapped, so the footprint follows the live blocks, and a block placed on unmapped pages
  maps them again;
* ``threshold``: the placement of ``CUFLOW_POOL_BACKEND=vmm``
  (:class:`cuflow.memory._expandable.PageHeap`, which this model runs): first fit over the
  mapped free space, and free pages unmapped only when mapping new ones would take the
  mapped bytes over 1.25 times the peak requested bytes so far.  So the footprint stays at
  most 1.25 while free pages allow it, and a replay after the first maps little or nothing.

Per trace it prints the footprint (peak mapped bytes over peak requested bytes, the
definition of ``python -m cuflow bench traces``) and the mapping calls of a first and a
second replay (a run of adjacent pages mapped at once counts one; for ``threshold`` the
calls are maps plus unmaps, counted alike, while the ``unmap`` column counts maps only).  The
blocks a trace never frees stay allocated through the second replay.  It is a model on the
CPU, without the pool's caching in front of the placement; ``python -m cuflow bench
traces`` measures the pool over ``CUFLOW_POOL_BACKEND=vmm`` on a GPU ("cuflow vmm").
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cuflow.bench import _traces  # noqa: E402  (the checkout's package, not an installed one)
from cuflow.memory._expandable import ALIGN, PAGE, PageHeap  # noqa: E402


class Heap(PageHeap):
    """One address range; ``policy`` is ``"grow"``, ``"unmap"`` or ``"threshold"``."""

    def __init__(self, policy: str) -> None:
        super().__init__(capacity=1 << 60)
        self.policy = policy
        self.maps = self.unmaps = 0

    def _spot(self, n: int) -> tuple[int, int, int, bool] | None:
        if self.policy == "threshold":
            return super()._spot(n)
        i = bisect.bisect_left(self.by_size, (n, -1))  # best fit
        if i == len(self.by_size):
            return None
        size, a = self.by_size[i]
        return a, a, size, False

    def _map(self, pages: list[int], peak: int) -> None:
        if self.policy == "threshold":
            super()._map(pages, peak)
            return
        if self.policy == "unmap":  # every free page, before mapping new ones
            self._unmap_free(None)
        self.map_pages(pages)
        self._runs = None
        self.peak_mapped = max(self.peak_mapped, len(self.mapped))

    def map_pages(self, pages: list[int]) -> None:
        self.maps += sum(1 for k, p in enumerate(pages) if k == 0 or pages[k - 1] != p - 1)
        super().map_pages(pages)

    def unmap_pages(self, pages: list[int]) -> None:
        """Unmap ``pages``, none of which a live block touches."""
        self.unmaps += self.policy == "threshold"
        super().unmap_pages(pages)


def replay(its: list[list[tuple]], policy: str, heap: Heap | None = None,
           after: Callable[[int], None] | None = None) -> tuple[float, int, int]:
    """Footprint, and mapping calls (maps and unmaps) of the first and of a second replay
    (through ``heap``, a new ``Heap(policy)`` by default; ``after(i)`` once replay ``i`` is
    done)."""
    heap = heap if heap is not None else Heap(policy)
    live: dict[int, tuple[int, int, int]] = {}
    calls = []
    requested = peak = 0
    for i in range(2):
        before = heap.maps + heap.unmaps
        for ops in its:
            for op, key, n in ops:
                if op == "a":
                    size = max(-(-n // ALIGN) * ALIGN, ALIGN)
                    requested += n
                    peak = max(peak, requested)
                    live[key] = (heap.alloc(size, peak), size, n)
                else:
                    a, size, n = live.pop(key)
                    heap.free(a, size)
                    requested -= n
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
