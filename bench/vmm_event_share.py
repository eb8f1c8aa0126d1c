"""The share of the expandable-segment backend's CUDA events in its host time on the traces.

    python bench/vmm_event_share.py [--rounds 5] [TRACE ...]

Per trace (default: R0, the transformer and its fixed-shape loop at step 4), alternated round
by round, host time per operation through ``cupy.empty`` (medians): CuPy's ``MemoryPool``,
cuflow's pool over the driver's pool after ``warmup``, over ``vmm`` after ``warmup``, and over
``vmm`` with the page heap's six event callables (``PageHeap.events``) swapped for no-op ones.
A replay launches no kernel, so no allocation depends on the events it skips; the difference
is their host cost.  Then one more ``vmm`` replay counts the calls of each event callable
per operation.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from typing import Any

_NAMES = ("create", "record", "query", "wait", "sync", "destroy")
_NOOP = (lambda: 1, lambda e, s: 0, lambda e: 0, lambda s, e, f: 0, lambda e: 0, lambda e: 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="*", default=["R0", "real:transformer_seq7-2048",
                                                  "loop:real:transformer_seq7-2048:4"])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error(f"--rounds must be >= 1, got {args.rounds}")

    import cuflow
    if not cuflow.get_backend().is_gpu:
        print("bench/vmm_event_share.py needs a GPU", file=sys.stderr)
        return 1
    import cupy

    from cuflow.bench import _traces as T

    known = set(T.TRACES) | set(T.loop_names())
    unknown = sorted(set(args.traces) - known)
    if unknown:
        ap.error(f"unknown traces {unknown}; the traces are {sorted(known)}")
    makers = T.allocators(cupy)
    makers = {k: makers[k] for k in ("cupy MemoryPool", "cuflow", "cuflow vmm")}
    T.warm_up(makers)
    counts: dict[str, int] = {}

    def vmm(events: Callable[[tuple], tuple] | None) -> Callable[[], Any]:
        def make() -> Any:
            a = makers["cuflow vmm"]()
            if events is not None:
                heap = a.pool.backend.heap
                heap.events = events(heap.events)
            return a
        return make

    def counted(real: tuple) -> tuple:
        def wrap(name: str, fn: Callable) -> Callable:
            def call(*a: Any) -> Any:
                counts[name] = counts.get(name, 0) + 1
                return fn(*a)
            return call
        return tuple(wrap(n, f) for n, f in zip(_NAMES, real))

    cases = {"cupy MemoryPool": (makers["cupy MemoryPool"], False),
             "cuflow after warmup": (makers["cuflow"], True),
             "cuflow vmm after warmup": (vmm(None), True),
             "the same, no-op events": (vmm(lambda real: _NOOP), True)}
    print(f"{'trace':36s}" + "".join(f"{k:>26s}" for k in cases) + "   event calls per op")
    for name in args.traces:
        its = T.trace_its(name)
        warm = T.warmup_for(name)
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(args.rounds):
            for k, (make, w) in cases.items():
                times[k].append(T.replay(make, its, warmup=warm if w else None)["host_us_per_op"])
        counts.clear()
        ops = T.replay(vmm(counted), its, warmup=warm)["ops"]
        per_op = {k: round(v / ops, 3) for k, v in counts.items() if v}
        print(f"{name:36s}" + "".join(f"{statistics.median(v):23.2f} us" for v in times.values())
              + f"   {per_op}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
