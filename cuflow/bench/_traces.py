"""Allocation traces and their replay against cuflow's pool, CuPy's pools and PyTorch's.

R0 (random-shape inference), G (monotonic growth) and S (random 2-D shapes)
are the pool's reference workloads; bytes are fp16 for R0/G.  The traces
recorded from real workloads (``_realtraces``, ``bench/traces/``) are named
``real:<name>``.  A trace is a
list of ``(op, key, nbytes)`` with op ``"a"`` (allocate) or ``"f"`` (free),
split into iterations.  Replays allocate real device arrays through each
library's normal path (``cupy.empty`` / ``torch.empty``), so host times include
the allocator hook.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from .. import memory
from ..memory import DriverPoolBackend, Pool, VirtualMemoryBackend, _pool
from . import _realtraces

H = 4096


def trace_r0(seed: int = 0, iterations: int = 200, layers: int = 8) -> list[list[tuple]]:
    rng = random.Random(seed)
    its, k = [], 0
    for it in range(iterations):
        t = 8192 if it == 0 else int(math.exp(rng.uniform(math.log(128), math.log(8192))))
        ops: list[tuple] = []
        k += 1
        x = k
        ops.append(("a", x, t * H * 2))
        for _ in range(layers):
            small = []
            for _ in range(3):
                k += 1
                small.append(k)
                ops.append(("a", k, rng.randint(1, 64) * 1024))
            qkv, att, mlp, out = k + 1, k + 2, k + 3, k + 4
            k += 4
            ops += [("a", qkv, t * 3 * H * 2), ("a", att, t * H * 2), ("f", qkv, 0),
                    ("a", mlp, t * 4 * H * 2), ("a", out, t * H * 2), ("f", mlp, 0),
                    ("f", att, 0)] + [("f", s, 0) for s in small] + [("f", x, 0)]
            x = out
        ops.append(("f", x, 0))
        its.append(ops)
    return its


def trace_g(layers: int = 4) -> list[list[tuple]]:
    its, k = [], 0
    for t in range(512, 8192 + 1, 64):
        ops: list[tuple] = []
        k += 1
        x = k
        ops.append(("a", x, t * H * 2))
        for _ in range(layers):
            qkv, att, mlp, out = k + 1, k + 2, k + 3, k + 4
            k += 4
            ops += [("a", qkv, t * 3 * H * 2), ("a", att, t * H * 2), ("f", qkv, 0),
                    ("a", mlp, t * 4 * H * 2), ("a", out, t * H * 2), ("f", mlp, 0),
                    ("f", att, 0), ("f", x, 0)]
            x = out
        ops.append(("f", x, 0))
        its.append(ops)
    return its


def trace_s(seed: int = 0, n: int = 400, alive: int = 4) -> list[list[tuple]]:
    rng = random.Random(seed)
    its, live = [], []
    for k in range(n):
        ops: list[tuple] = []
        if len(live) == alive:
            ops.append(("f", live.pop(0), 0))
        ops.append(("a", k, 4096 * rng.randint(256, 4096) * 4))
        live.append(k)
        if k == n - 1:
            ops += [("f", x, 0) for x in live]
        its.append(ops)
    return its


TRACES: dict[str, Callable[..., list[list[tuple]]]] = {"R0": trace_r0, "G": trace_g, "S": trace_s}
TRACES.update({name: functools.partial(_realtraces.load, path)
               for name, path in _realtraces.saved().items()})


#: steps of the recorded traces replayed as loops of fixed shapes: (trace, step index)
LOOPS = (("real:resnet50_infer_bs1-64", 1), ("real:resnet50_infer_bs1-64", 9),
         ("real:transformer_seq7-2048", 4), ("real:transformer_seq7-2048", 11),
         ("real:resnet18_train_bs2-64", 4))


def fixed_loop(name: str, step: int, steps: int = 30) -> list[list[tuple]]:
    """Step ``step`` of trace ``name`` repeated ``steps`` times, a loop of fixed shapes: the
    step's own allocations and their frees, what it still holds freed at its end."""
    ops = TRACES[name]()[step]
    mine = {key for op, key, _ in ops if op == "a"}
    ops = [o for o in ops if o[0] == "a" or o[1] in mine]
    held: dict[int, None] = {}
    for op, key, _ in ops:
        if op == "a":
            held[key] = None
        else:
            held.pop(key)
    return [ops + [("f", key, 0) for key in held]] * steps


def loop_names() -> list[str]:
    """``loop:<trace>:<step>`` for each of :data:`LOOPS` whose recorded trace is here (an
    installed wheel carries none)."""
    return [f"loop:{name}:{step}" for name, step in LOOPS if name in TRACES]


def trace_its(name: str) -> list[list[tuple]]:
    """The iterations of trace ``name``: a key of :data:`TRACES`, or ``loop:<trace>:<step>``
    (:func:`fixed_loop`)."""
    if name.startswith("loop:"):
        trace, step = name[5:].rsplit(":", 1)
        return fixed_loop(trace, int(step))
    return TRACES[name]()


def peak_requested(its: list[list[tuple]]) -> int:
    live: dict[int, int] = {}
    cur = peak = 0
    for ops in its:
        for op, key, n in ops:
            if op == "a":
                live[key] = n
                cur += n
                peak = max(peak, cur)
            else:
                cur -= live.pop(key)
    return peak


# -------------------------------------------------------------- allocators
class _CupyAllocator:
    """Routes ``cupy.empty`` to ``self.pool.malloc`` inside :meth:`context`."""

    cupy: Any
    pool: Any

    def context(self) -> Any:
        return self.cupy.cuda.using_allocator(self.pool.malloc)


class _Cuflow(_CupyAllocator):
    """cuflow's pool, with its compiled hot path (when built) or, with ``python``, the
    Python one a build without a C compiler runs."""

    name = "cuflow"

    def __init__(self, cupy: Any, python: bool = False, fixed_granule: bool = False,
                 vmm: bool = False) -> None:
        self.cupy = cupy
        device = cupy.cuda.runtime.getDevice()
        self.pool = Pool(VirtualMemoryBackend(device) if vmm else DriverPoolBackend(device))
        if vmm:
            self.name = "cuflow vmm"
        if fixed_granule:  # every large segment a whole number of 64 MiB granules
            self.pool.backend.segment_granularity_min = 0
        saved = _pool.HotAlloc
        if python:
            _pool.HotAlloc = None
        try:
            self.pool.malloc  # noqa: B018  (builds the hook now, with the chosen hot path)
        finally:
            _pool.HotAlloc = saved

    def empty(self, n: int) -> Any:
        return self.cupy.empty((n,), self.cupy.uint8)

    def reserved_peak(self) -> int:
        return self.pool.backend.device_reserved()[1]

    def device_allocs(self) -> int:
        return self.pool.num_device_alloc

    def close(self) -> None:
        self.pool.empty_cache()
        if isinstance(self.pool.backend, VirtualMemoryBackend):
            self.pool.backend.close()  # (its address range: a replay reserves one)


class _CupyPool(_CupyAllocator):
    name = "cupy MemoryPool"

    def __init__(self, cupy: Any) -> None:
        self.cupy = cupy
        self.pool = cupy.cuda.MemoryPool()
        self.peak = 0
        self.grows = 0

    def empty(self, n: int) -> Any:
        before = self.pool.total_bytes()
        a = self.cupy.empty((n,), self.cupy.uint8)
        tb = self.pool.total_bytes()
        if tb > before:
            self.grows += 1
            self.peak = max(self.peak, tb)
        return a

    def reserved_peak(self) -> int:
        return self.peak

    def device_allocs(self) -> int:
        return self.grows

    def close(self) -> None:
        self.pool.free_all_blocks()


class _CupyAsync(_CupyAllocator):
    name = "cupy MemoryAsyncPool"

    def __init__(self, cupy: Any) -> None:
        rt = cupy.cuda.runtime
        self.cupy, self.rt = cupy, rt
        self.pool = cupy.cuda.MemoryAsyncPool()
        self.h = rt.deviceGetDefaultMemPool(rt.getDevice())
        cupy.cuda.runtime.deviceSynchronize()
        rt.memPoolTrimTo(self.h, 0)
        rt.memPoolSetAttribute(self.h, rt.cudaMemPoolAttrReservedMemHigh, 0)
        self.last = self.grows = 0

    def empty(self, n: int) -> Any:
        return self.cupy.empty((n,), self.cupy.uint8)

    def reserved_peak(self) -> int:
        return int(self.rt.memPoolGetAttribute(self.h, self.rt.cudaMemPoolAttrReservedMemHigh))

    def device_allocs(self) -> int:  # growth events of the driver's reserve, sampled per op
        return self.grows

    def sample(self) -> None:
        cur = int(self.rt.memPoolGetAttribute(self.h, self.rt.cudaMemPoolAttrReservedMemCurrent))
        if cur > self.last:
            self.grows += 1
        self.last = cur

    def close(self) -> None:
        self.cupy.cuda.runtime.deviceSynchronize()
        self.rt.memPoolTrimTo(self.h, 0)


class _Torch:
    name = "torch caching allocator"

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        self.base = torch.cuda.memory_stats().get("num_device_alloc", 0)

    def context(self) -> Any:
        return contextlib.nullcontext()

    def empty(self, n: int) -> Any:
        return self.torch.empty((n,), dtype=self.torch.uint8, device="cuda")

    def reserved_peak(self) -> int:
        return self.torch.cuda.max_memory_reserved()

    def device_allocs(self) -> int:
        return self.torch.cuda.memory_stats().get("num_device_alloc", 0) - self.base

    def close(self) -> None:
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()


def allocators(cupy: Any, torch: Any = None, python_hot_path: bool = False
               ) -> dict[str, Callable[[], Any]]:
    """Makers of the compared allocators; ``python_hot_path`` adds cuflow's pool over its
    Python hot path (for hit latency: its decisions, so its footprint, are the same)."""
    out: dict[str, Callable[[], Any]] = {
        "cuflow": lambda: _Cuflow(cupy), "cuflow vmm": lambda: _Cuflow(cupy, vmm=True),
        "cupy MemoryPool": lambda: _CupyPool(cupy),
        "cupy MemoryAsyncPool": lambda: _CupyAsync(cupy)}
    if python_hot_path:
        out["cuflow, Python hot path"] = lambda: _Cuflow(cupy, python=True)
    if torch is not None:
        out["torch caching allocator"] = lambda: _Torch(torch)
    return out


def replay(make: Callable[[], Any], its: list[list[tuple]], *,
           warmup: Callable[[Any], None] | None = None) -> dict[str, Any]:
    """Replay ``its``; footprint, device allocations after iteration 1 (or after ``warmup``)."""
    alloc = make()
    live: dict[int, Any] = {}
    nops = sum(len(i) for i in its)
    sample = getattr(alloc, "sample", None)
    with alloc.context():
        if warmup is not None:
            warmup(alloc)
        first_done = None
        t0 = time.perf_counter()
        for i, ops in enumerate(its):
            for op, key, n in ops:
                if op == "a":
                    live[key] = alloc.empty(n)
                    if sample is not None:
                        sample()
                else:
                    del live[key]
            if i == 0 and warmup is None:
                first_done = alloc.device_allocs()
        alloc.cupy.cuda.runtime.deviceSynchronize() if hasattr(alloc, "cupy") else \
            alloc.torch.cuda.synchronize()
        dt = time.perf_counter() - t0
    after = alloc.device_allocs() - (first_done if first_done is not None else
                                     getattr(alloc, "_after_warmup", 0))
    peak_req = peak_requested(its)
    res = {"allocator": alloc.name, "peak_requested_bytes": peak_req,
           "peak_reserved_bytes": alloc.reserved_peak(),
           "footprint": round(alloc.reserved_peak() / peak_req, 3),
           "device_allocs_steady": after, "host_us_per_op": round(dt / nops * 1e6, 3),
           "ops": nops}
    if isinstance(alloc, _Cuflow):
        s = alloc.pool.stats()
        res["pool_reserved_peak_bytes"] = s["reserved_bytes.all.peak"]
        res["cache_hits"], res["cache_misses"] = s["cache_hits"], s["cache_misses"]
    alloc.close()
    return res


def largest_iteration(its: list[list[tuple]]) -> list[tuple]:
    """The iteration of ``its`` that holds the most bytes at once, as one call of the step
    from a fresh start makes it: what earlier iterations allocated and still hold when it
    begins (a training step's gradients, say, which such a call allocates itself) first,
    then the iteration's own operations."""
    best, most = its[0], -1
    live: dict[int, int] = {}
    for ops in its:
        step = [("a", key, n) for key, n in live.items()] + list(ops)
        p = peak_requested([step])
        if p > most:
            best, most = step, p
        for op, key, n in ops:
            if op == "a":
                live[key] = n
            else:
                live.pop(key, None)
    return best


def warmup_for(trace: str) -> Callable[[Any], None]:
    """cuflow's documented warm-up for each trace: the largest input once."""

    def run(alloc: Any) -> None:
        pool = alloc.pool
        with alloc.cupy.cuda.using_allocator(pool.malloc):
            if trace == "S":
                pool.warmup([(4096, 4096)] * 4, dtype="float32")
            else:
                its = (trace_r0(iterations=1) if trace == "R0" else trace_g()[-1:]
                       if trace == "G" else [largest_iteration(trace_its(trace))])

                def fn() -> None:
                    live = {}
                    for op, key, n in its[0]:
                        if op == "a":
                            live[key] = alloc.empty(n)
                        else:
                            del live[key]

                memory.warmup(fn, pool=pool)
        alloc._after_warmup = pool.num_device_alloc

    return run


def empty_latency(makers: dict[str, Callable[[], Any]], nbytes: int, n: int = 20000,
                  rounds: int = 5, loop: int = 100) -> dict[str, dict[str, float]]:
    """Host microseconds of one ``empty`` + free of ``nbytes`` on a pool hit, per allocator.

    Every allocator is driven the same way: ``cupy.empty((nbytes,), uint8)``
    under its allocator (``torch.empty`` for PyTorch) and ``del``, with no
    bookkeeping in the timed code.

    * ``median_us``: as the reference figures were taken, loops of ``loop``
      pairs timed as a whole, the median over loops of the time per pair;
    * ``p99_us``: the 99th percentile of pairs timed one by one, less the
      cost of reading the clock (``timer_us``, the median of back-to-back reads).

    Interleaved: each of ``rounds`` rounds runs every allocator in turn, so a
    shared host's drift does not land on one allocator.
    """
    allocs = {k: m() for k, m in makers.items()}
    loops: dict[str, list[float]] = {k: [] for k in allocs}
    single: dict[str, list[int]] = {k: [] for k in allocs}
    pc = time.perf_counter_ns
    timer = statistics.median(-(pc() - pc()) for _ in range(10001))
    per_round = max(n // rounds, loop)
    for r in range(rounds):
        for k, alloc in allocs.items():
            if isinstance(alloc, _Torch):
                t = alloc.torch
                empty = functools.partial(t.empty, (nbytes,), dtype=t.uint8, device="cuda")
            else:
                empty = functools.partial(alloc.cupy.empty, (nbytes,), alloc.cupy.uint8)
            out, one = loops[k], single[k]
            with alloc.context():
                for _ in range(200 if r == 0 else 20):
                    a = empty()
                    del a
                for _ in range(per_round // loop):
                    t0 = pc()
                    for _ in range(loop):
                        a = empty()
                        del a
                    out.append((pc() - t0) / loop)
                for _ in range(per_round // 4):
                    t0 = pc()
                    a = empty()
                    del a
                    one.append(pc() - t0)
    res = {}
    for k, alloc in allocs.items():
        alloc.close()
        v = sorted(single[k])
        res[k] = {"median_us": round(statistics.median(loops[k]) / 1e3, 3),
                  "p99_us": round(max(v[int(0.99 * len(v))] - timer, 0) / 1e3, 3),
                  "timer_us": round(timer / 1e3, 3)}
    return res


def warm_up(makers: dict[str, Callable[[], Any]]) -> None:
    """One untimed replay of a short R0 through each allocator: a process's first replay
    pays one-time driver costs (R0 through cuflow first in a process: 6-7 us per operation,
    then 1.7), which would otherwise land on whichever allocator runs first."""
    its = trace_r0(iterations=40)
    for make in makers.values():
        replay(make, its)


def compare(names: list[str] | None = None, rounds: int = 3, torch: Any = None,
            variants: bool = False) -> list[dict[str, Any]]:
    """Every trace through every allocator (and cuflow and cuflow vmm after their warm-ups),
    ``rounds`` times with the allocators alternated, after one untimed replay each; per
    trace and allocator the median host time per operation, and footprint and steady-state
    device allocations of the median run.
    ``variants`` adds cuflow's pool with whole 64 MiB granules for every large segment."""
    import cupy  # noqa: PLC0415  (optional dependency)

    makers = allocators(cupy, torch)
    if variants:
        makers["cuflow, 64 MiB granules"] = lambda: _Cuflow(cupy, fixed_granule=True)
    rows = []
    warm_up(makers)
    for name in names or list(TRACES):
        its = trace_its(name)
        runs: dict[str, list[dict[str, Any]]] = {}
        for _ in range(rounds):
            for aname, make in makers.items():
                runs.setdefault(aname, []).append(replay(make, its))
            for aname in ("cuflow", "cuflow vmm"):
                runs.setdefault(f"{aname} after warmup", []).append(
                    replay(makers[aname], its, warmup=warmup_for(name)))
        ref = statistics.median(r["host_us_per_op"] for r in runs["cupy MemoryPool"])
        for aname, rs in runs.items():
            rs = sorted(rs, key=lambda r: r["host_us_per_op"])
            r = rs[len(rs) // 2]
            rows.append({"trace": name, "allocator": aname, **{k: v for k, v in r.items()
                                                               if k != "allocator"},
                         "host_us_per_op_all": [x["host_us_per_op"] for x in rs],
                         "ratio_vs_cupy_pool": round(r["host_us_per_op"] / ref, 3)})
    return rows


def format_compare(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'trace':36s} {'allocator':26s} {'us/op':>7s} {'x cupy':>7s} "
             f"{'footprint':>9s} {'dev allocs':>10s}"]
    for r in rows:
        lines.append(f"{r['trace']:36s} {r['allocator']:26s} {r['host_us_per_op']:7.3f} "
                     f"{r['ratio_vs_cupy_pool']:7.3f} {r['footprint']:9.3f} "
                     f"{r['device_allocs_steady']:10d}")
    return "\n".join(lines)


def bench_traces(record: bool = False, quick: bool = False, json_path: str | None = None,
                 variants: bool = False, rounds: int | None = None) -> int:
    """``python -m cuflow bench traces [--record]``: record the real workloads' traces (with
    ``--record``), then compare the allocators on every trace, in ``rounds`` alternated
    rounds (3; 1 with ``quick``)."""
    if record:
        for name, info in _realtraces.record_all().items():
            print(f"recorded {name}: {info}")
        TRACES.update({name: functools.partial(_realtraces.load, path)
                       for name, path in _realtraces.saved().items()})
    try:
        import torch  # noqa: PLC0415  (optional dependency)

        torch = torch if torch.cuda.is_available() else None
    except ImportError:
        torch = None
    if rounds is None:
        rounds = 1 if quick else 3
    if not _realtraces.saved():
        print(f"python -m cuflow bench traces: no recorded real-model traces in "
              f"{_realtraces.TRACE_DIR} (a source checkout's bench/traces/): the synthetic "
              f"traces only", file=sys.stderr)
    rows = compare(list(TRACES) + loop_names(), rounds=rounds, torch=torch, variants=variants)
    print(format_compare(rows))
    if json_path is not None:
        try:
            with open(json_path, "w") as f:
                json.dump(rows, f, indent=1)
        except OSError as e:  # the table above keeps the figures
            print(f"python -m cuflow bench traces: cannot write --json {json_path}: {e}",
                  file=sys.stderr)
            return 1
    return 0
