"""The pool's statistics (PyTorch's key names), snapshot and readable summary.

The counters themselves (``allocated``, ``requested``, ``peak_*``, ``hits`` ...)
are plain attributes of the pool, updated where allocations and frees happen:
the compiled hot path writes them in the pool's instance dictionary.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from ._blocks import Block, size_class

__all__ = ["StatsMixin", "fmt_bytes"]


class StatsMixin:
    """Statistics of :class:`~cuflow.memory._pool.Pool` (its state, its lock)."""

    def _init_stats(self) -> None:
        self.misses: defaultdict[int, int] = defaultdict(int)
        self._reset_counters()  # (not the backend's device peak: it may serve other pools)

    @property
    def hits(self) -> dict[int, int]:
        """Cache hits by size class (:func:`~cuflow.memory.size_class`)."""
        return self._state.hit_counts()

    @property
    def where(self) -> str:
        """``"device N"``, or ``"host memory"`` for a pool of host memory."""
        dev = self.backend.device_id
        return "host memory" if dev < 0 else f"device {dev}"

    def reset_stats(self) -> None:
        """Zero the accumulated counters (hits, misses, segment and device allocations,
        retries, out-of-memory errors, cross-stream reuses) and bring the peaks down to the
        current values.  The bytes lent and reserved at the call are still held, so they
        stay counted (PyTorch's ``reset_accumulated_memory_stats`` and
        ``reset_peak_memory_stats``), the backend's device peak included."""
        self._reset_counters()
        self.backend.reset_device_peak()

    def _reset_counters(self) -> None:
        with self._lock:
            if not self._busy:
                self._drain()
            self.peak_allocated, self.peak_requested = self.allocated, self.requested
            self.peak_reserved = self.reserved
            self.peak_active = self.allocated + self.pending_bytes
            self.num_segment_alloc = self.num_segment_free = 0
            self._device_base = (self.backend.device_allocs, self.backend.device_frees)
            self.num_alloc_retries = self.num_ooms = self.num_cross_stream = 0
            self._state.clear_hits()
            self.misses.clear()
            self._live_base = len(self._live)  # blocks lent before: their frees still count

    def reset_peak_stats(self) -> None:
        """Set the peaks (allocated, requested, reserved, active) to their current values."""
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
        return sum(self._state.hit_counts().values()) + sum(self.misses.values())

    def stats(self) -> dict[str, Any]:
        """Counters with PyTorch's key names, plus cache hits and misses per size class.

        Returns
        -------
        dict
            ``allocated_bytes.all.current`` and ``.peak``, ``reserved_bytes.all.*``,
            ``requested_bytes.all.*``, ``active_bytes.all.*``, ``num_alloc``,
            ``num_device_alloc``, ``cache_hits``, ``cache_misses``, ``size_classes``, the
            backend and the limit, among others; the keys PyTorch's ``memory_stats`` has
            too mean what they mean there.
        """
        with self._lock:
            if not self._busy:
                self._drain()
            hits = self._state.hit_counts()
            free = list(self._free_blocks())
            lent = _segments_with_lent_blocks(free)
            inactive_split = sum(b.size for b in free if id(b.seg) in lent)
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
                "num_free": self.num_alloc - (len(self._live) - self._live_base),
                "num_alloc_retries": self.num_alloc_retries,
                "num_ooms": self.num_ooms,
                "num_device_alloc": self.num_device_alloc,
                "num_device_free": self.backend.device_frees - self._device_base[1],
                "num_segment_alloc": self.num_segment_alloc,
                "num_segment_free": self.num_segment_free,
                "num_cross_stream_reuse": self.num_cross_stream,
                "num_pending_cross_stream": len(self._pending) + len(self._deferred),
                "private_pools": len(self._private),
                "cache_hits": sum(hits.values()),
                "cache_misses": sum(self.misses.values()),
                "backend": self.backend.name,
                "limit_bytes": self.limit,
            }
            per: dict[int, list[int]] = {}
            for d, j in ((hits, 0), (self.misses, 1)):
                for size, cnt in d.items():
                    per.setdefault(size_class(size), [0, 0])[j] += cnt
            s["size_classes"] = {c: {"hits": h, "misses": m} for c, (h, m) in sorted(per.items())}
            dev = self.backend.device_reserved()
            if dev is not None:
                s["device_reserved_bytes.current"], s["device_reserved_bytes.peak"] = dev
            return s

    def snapshot(self) -> list[dict[str, Any]]:
        """Segments with their blocks, in address order.

        Returns
        -------
        list of dict
            One dict per segment (its address, size, stream and blocks), each block with its
            offset, size and state, as PyTorch's ``memory_snapshot`` lists them.
        """
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

    def _free_runs(self) -> int:
        """How many free blocks there would be with the exact-size cache coalesced: runs of
        adjacent free blocks (the cache keeps neighbours apart until it is flushed)."""
        runs = 0
        for b in self._free_blocks():
            runs += b.prev is None or not b.prev.free
        return runs

    def _free_blocks(self) -> Iterable[Block]:
        """Every cached free block: coalesced lists, the exact-size cache, and the blocks of
        destroyed streams awaiting their adoption (the orphans)."""
        for fl in self._lists.values():
            yield from fl.blocks()
        for by_size in self._quick.values():
            for lst in by_size.values():
                yield from lst
        yield from self._orphans

    def _oom_message(self, size: int, seg_bytes: int, limit: int | None = None) -> str:
        """Why a request of ``size`` bytes (rounded up as blocks are) failed: its new segment
        of ``seg_bytes`` is past ``limit``, or, without one, the device could not give it."""
        largest, f = max((b.size for b in self._free_blocks()), default=0), fmt_bytes
        held = (f"which the device could not give; the pool reserves {f(self.reserved)}"
                if limit is None else
                f"but the pool reserves {f(self.reserved)} under its limit of {f(limit)} "
                f"({f(max(limit - self.reserved, 0))} left)")
        return (f"cuflow.memory: out of memory: {f(size)} requested (rounded up to the pool's "
                f"block size) needs a new segment of {f(seg_bytes)}, {held}, of which "
                f"{f(self.allocated)} is in use (largest free block {f(largest)}). Free arrays "
                f"you no longer need (del x), call cuflow.memory.empty_cache(), lower batch "
                f"sizes, or raise the limit (cuflow.memory.set_limit / CUFLOW_MEMORY_LIMIT).")

    def summary(self) -> str:
        """A readable table of :meth:`stats`.

        Returns
        -------
        str
            The table, as PyTorch's ``memory_summary`` prints one.
        """
        s, f = self.stats(), fmt_bytes
        rows = [("allocated (in use)", "allocated_bytes.all"), ("requested", "requested_bytes.all"),
                ("active", "active_bytes.all"), ("reserved (segments)", "reserved_bytes.all")]
        limit = "no limit" if s["limit_bytes"] is None else f"limit {f(s['limit_bytes'])}"
        lines = [f"cuflow memory pool [{s['backend']} backend, {self.where}, {limit}]",
                 f"{'':24s}{'current':>14s}{'peak':>14s}"]
        for label, key in rows:
            lines.append(f"{label:24s}{f(s[key + '.current']):>14s}"
                         f"{f(s.get(key + '.peak', 0)):>14s}")
        if "device_reserved_bytes.current" in s:
            lines.append(f"{'device reserved':24s}{f(s['device_reserved_bytes.current']):>14s}"
                         f"{f(s['device_reserved_bytes.peak']):>14s}")
        lines.append(f"{'inactive split':24s}{f(s['inactive_split_bytes.all.current']):>14s}")
        lines.append(
            f"allocations {s['num_alloc']}  frees {s['num_free']}  hits {s['cache_hits']}  "
            f"misses {s['cache_misses']}  device allocs {s['num_device_alloc']}  device frees "
            f"{s['num_device_free']}  segments made {s['num_segment_alloc']}  cross-stream "
            f"{s['num_cross_stream_reuse']}  retries {s['num_alloc_retries']}  OOMs "
            f"{s['num_ooms']}  segments {s['segment.all.current']}  private pools "
            f"{s['private_pools']}")
        if s["size_classes"]:
            lines.append(f"{'size class (<=)':>16s}{'hits':>10s}{'misses':>10s}")
            for c, hm in s["size_classes"].items():
                lines.append(f"{f(c):>16s}{hm['hits']:>10d}{hm['misses']:>10d}")
        return "\n".join(lines)


def fmt_bytes(n: int | None) -> str:
    """``n`` bytes in readable units; ``None`` is no limit."""
    if n is None:
        return "no limit"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def _segments_with_lent_blocks(free: list[Block]) -> set[int]:
    """``id`` of each segment of ``free``'s blocks that holds a block not free: a free block
    there is split from a lent one (a wholly free segment is not split, coalesced or not)."""
    seen: dict[int, bool] = {}
    for b in free:
        key = id(b.seg)
        if key not in seen:
            x = b.seg.first
            while x is not None and x.free:
                x = x.next
            seen[key] = x is not None
    return {k for k, v in seen.items() if v}
