"""cuflow's pool (over the driver's pool and over expandable segments) against CuPy's
MemoryPool / MemoryAsyncPool and PyTorch's allocator.

Traces R0, G, S (defined in ``cuflow.bench._traces``) and the traces recorded
from real workloads (``bench/traces/``, ``real:<name>``; ``python -m cuflow bench
traces --record`` records them): footprint (peak reserved over peak requested),
device allocations in steady state, host time per operation.  Then ``empty`` +
free latency on a pool hit.
"""

from __future__ import annotations

import functools

import pytest

from cuflow.bench import _traces
from cuflow.bench._headline import _torch
from cuflow.memory import ExpandableBackend, Pool

ALLOCATORS = ["cuflow", "cuflow after warmup", "cuflow vmm", "cuflow vmm after warmup",
              "cupy MemoryPool", "cupy MemoryAsyncPool", "torch caching allocator"]


def _makers():
    import cupy  # noqa: PLC0415  (optional dependency)

    return _traces.allocators(cupy, _torch(), python_hot_path=True)


@functools.cache
def _trace_rows(trace: str) -> dict[str, dict]:
    """Every allocator's replay of ``trace``: the median of three rounds with the allocators
    alternated, after one untimed replay each (``_traces.compare``, as ``python -m cuflow
    bench traces`` does), so that a process's one-time driver costs and a slow spell of the
    shared host do not land on whichever allocator was being timed."""
    return {r["allocator"]: r for r in _traces.compare([trace], rounds=3, torch=_torch())}


@pytest.mark.parametrize("alloc", ALLOCATORS)
@pytest.mark.parametrize("trace", list(_traces.TRACES))
def test_trace(benchmark, backend, trace, alloc):
    """The figures are in ``extra_info`` (the median replay's host time per operation,
    footprint and steady-state device allocations); the benchmark's own time is that of
    looking them up (the first allocator of each trace pays for the measurement)."""
    name = alloc.replace(" after warmup", "")
    if name not in _makers():
        pytest.skip(f"{name} not available")
    benchmark.group = f"allocation trace {trace}"
    out = {}

    def run():
        out.update(_trace_rows(trace)[alloc])

    benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info.update(out)


@functools.cache
def _hit_latencies(nbytes: int) -> dict[str, dict[str, float]]:
    """Every allocator's hit latency at ``nbytes``, measured once and interleaved round by
    round (as ``python -m cuflow bench`` does), so that a slow spell of the shared host
    lands on all of them alike instead of on whichever allocator was being timed."""
    return _traces.empty_latency(_makers(), nbytes)


@pytest.mark.parametrize("alloc", [a for a in ALLOCATORS if not a.endswith("warmup")]
                         + ["cuflow, Python hot path"])
@pytest.mark.parametrize("nbytes", [4096, 1 << 20, 64 << 20])
def test_empty_hit_latency(benchmark, backend, nbytes, alloc):
    """The figures are in ``extra_info`` (median and p99 per pair, from the interleaved
    measurement); the benchmark's own time is that of looking them up (the first
    allocator of each size pays for the measurement)."""
    if alloc not in _makers():
        pytest.skip(f"{alloc} not available")
    benchmark.group = f"empty + free on a pool hit, {nbytes} B"
    out = {}

    def run():
        out.update(_hit_latencies(nbytes)[alloc])

    benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info.update(out)
    benchmark.extra_info["bytes"] = nbytes


class _NoPages(ExpandableBackend):
    """Expandable segments over a terabyte of addresses and no memory: the placement alone."""

    name = "placement only"

    def __init__(self) -> None:
        super().__init__(1 << 40)
        self.heap.base = 1 << 44

    def _map_run(self, first: int, count: int) -> None:
        pass

    def _unmap_run(self, first: int, count: int) -> None:
        pass


@pytest.mark.parametrize("passes", [1, 200])
def test_placement_cost_flat(benchmark, passes):
    """Host time of one pass of a transformer's allocations over expandable segments (no
    device: the pool and the page heap alone), after ``passes`` passes.  The free space
    below the heap's top grows by hundreds of unmapped pages a pass; a placement that walked
    those pages took 8.8x as long a pass by the 200th."""
    trace = "loop:real:transformer_seq7-2048:11"
    its = _traces.trace_its(trace)
    pool = Pool(_NoPages())
    # the largest iteration replayed with ordinary segments (no arena, which would leave
    # no miss to place): each pass places the segments its misses take
    pool.replay([(op, key, max(n, 1), 0) for op, key, n in _traces.largest_iteration(its)],
                keep=False)
    live: dict[int, int] = {}
    # frees queued as CuPy's allocator hook queues them (an array's memory going), for the
    # next allocation to process: the order in which a device workload's frees reach the pool
    queued = pool._freed

    def one_pass():
        for ops in its:
            for op, key, n in ops:
                if op == "a":
                    live[key] = pool.alloc_ptr(max(n, 1), 0)
                else:
                    queued[live.pop(key)] = None
        pool.flush_frees()

    for _ in range(passes - 1):
        one_pass()
    benchmark.group = f"placement over expandable segments, {trace}"
    benchmark.pedantic(one_pass, rounds=5, iterations=1)
    benchmark.extra_info["passes before"] = passes - 1
    benchmark.extra_info["heap top, pages"] = pool.backend.heap.top >> 21
