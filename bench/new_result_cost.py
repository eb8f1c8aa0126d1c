"""Where a new result's host time goes, against an op that writes into ``dst=``.

    python bench/new_result_cost.py [--rounds 7] [--number 3000]

On 100x100 float32, host time per call (``cuflow.testing.host_time_us``), the cases timed
round by round in alternating order, medians: ``cuflow.add`` with ``dst=`` and returning a
new array, a new ``darray`` from the compiled launcher's ``empty``, ``cupy.empty``, a
``cupy.ndarray`` built over a pointer already held (the array object alone), ``cupy.cuda.alloc``
(the pool's allocator hook and its pointer objects alone), and PyTorch's ``add`` with and
without ``out=`` and ``torch.empty`` where PyTorch has CUDA.  Each call's result is freed
before the next, so every case pays for its object's creation and its release.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--number", type=int, default=3000)
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.number < 1:
        ap.error(f"--rounds and --number must be >= 1, got {args.rounds} and {args.number}")

    from cuflow.core._runtime import probe_cupy

    _, n_gpus, why = probe_cupy()
    if n_gpus < 1:
        print(f"bench/new_result_cost.py needs a GPU: {why}", file=sys.stderr)
        return 1
    import cupy
    import numpy

    import cuflow as cf
    from cuflow.core._runtime import runtime
    from cuflow.testing import host_time_us

    fast = runtime().fast
    f32 = numpy.dtype(numpy.float32)
    a = cf.asarray(numpy.random.default_rng(0).standard_normal((100, 100), dtype=numpy.float32))
    b, c = a * 2, cf.empty_like(a)
    held = cupy.cuda.alloc(a.nbytes)
    cases: dict[str, Callable[[], object]] = {
        "cf.add(a, b, dst=c)": lambda: cf.add(a, b, dst=c),
        "cf.add(a, b), a new result": lambda: cf.add(a, b),
        "a new darray, the launcher's empty": lambda: fast.empty((100, 100), f32),
        "cupy.empty((100, 100))": lambda: cupy.empty((100, 100), f32),
        "cupy.ndarray over a pointer held": lambda: cupy.ndarray((100, 100), f32, held),
        "cupy.cuda.alloc: the pool's hook": lambda: cupy.cuda.alloc(a.nbytes),
    }
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        ta = torch.randn(100, 100, device="cuda")
        tb, tc = ta * 2, torch.empty_like(ta)
        cases.update({
            "torch.add(ta, tb, out=tc)": lambda: torch.add(ta, tb, out=tc),
            "torch.add(ta, tb), a new result": lambda: torch.add(ta, tb),
            "torch.empty((100, 100), device='cuda')":
                lambda: torch.empty((100, 100), device="cuda"),
        })
    times: dict[str, list[float]] = {k: [] for k in cases}
    for r in range(args.rounds):
        order = list(cases.items())
        for name, fn in order if r % 2 == 0 else reversed(order):
            times[name].append(host_time_us(fn, number=args.number, repeat=3).median_us)
    base = statistics.median(times["cf.add(a, b, dst=c)"])
    print(f"{'case':42s} {'host us':>8s}  against add(dst=)")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:42s} {m:8.3f}  {m / base:5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
