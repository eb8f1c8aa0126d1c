"""Same-process A/B of two cuflow trees: host time of ``add(a, b, dst=c)``, of ``add(a, b)``
returning a new array, of a fused GELU (a new array, and into ``dst=``) and of the views
``a[1:]`` and ``a[:, 0]``; device time of an 8x1080p ``image.normalize`` and of a graph
replay of ``slow_function`` (2000 small kernels); the pool's hit (``cupy.empty``
of 1 MiB, then free), and host time of a ``Bufferizer.append`` from the producer's stream
and into the Bufferizer's own;
with ``--traces``, the host time per operation of replays of those allocation traces
(``python -m cuflow bench traces``) through each tree's pool after its ``warmup``, over the
driver's pool and over ``vmm``.

The old tree is copied, its package renamed ``cuflow_old`` (every ``cuflow`` identifier in its
sources), and built in place, so both trees import into one process and share one GPU, one
CUDA context and one clock. Each round times old and new back to back, in alternating order;
the pool rows switch CuPy's allocator to the tree being timed. The report gives, per
measurement, the median over rounds of the per-round ratio new / old, and the spread of those
ratios (the 10th and 90th percentiles), so a bound such as "within 3%" can be read against
the noise it was measured in.

Usage (on the GPU machine):
``python3 bench/ab.py OLD_CHECKOUT [--rounds N] [--json PATH] [--traces TRACE ...]``
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

WORK = Path("/tmp/cuflow-ab")


def _prepare_old(checkout: Path) -> Path:
    """Copy ``checkout``'s package as ``cuflow_old`` and build its extensions in place."""
    if WORK.exists():
        shutil.rmtree(WORK)
    pkg = WORK / "cuflow_old"
    shutil.copytree(checkout / "cuflow", pkg,
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    shutil.copy(checkout / "setup.py", WORK / "setup.py")
    word = re.compile(r"\bcuflow\b")
    for path in [*pkg.rglob("*.py"), *pkg.rglob("*.c"), WORK / "setup.py"]:
        path.write_text(word.sub("cuflow_old", path.read_text()))
    # a bare setup.py build: the old pyproject's metadata is not needed to compile
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=WORK,
                   check=True, capture_output=True)
    # the recorded traces of this checkout, which both trees replay (the old tree finds them
    # beside its package, in what looks like a checkout: pyproject.toml at the root)
    here = Path(__file__).resolve().parents[1]
    if (here / "bench" / "traces").is_dir():
        shutil.copytree(here / "bench" / "traces", WORK / "bench" / "traces")
        shutil.copy(here / "pyproject.toml", WORK / "pyproject.toml")
    return WORK


def _fused_gelu(cf):
    """A tanh-approximation GELU fused by the tree ``cf``."""
    return cf.fuse(lambda x: 0.5 * x * (1 + cf.tanh(0.79788456 * (x + 0.044715 * x ** 3))))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", type=Path, help="a checkout of the old tree")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--traces", nargs="*", default=[], metavar="TRACE",
                    help="trace names of python -m cuflow bench traces (R0, real:..., loop:...)")
    args = ap.parse_args(argv)
    # every argument checked before the old tree is built and the rounds run
    if not (args.old / "cuflow" / "__init__.py").is_file() or not (args.old / "setup.py").is_file():
        ap.error(f"{args.old} is not a cuflow checkout (no cuflow/__init__.py and setup.py)")
    if args.rounds < 2:
        ap.error(f"--rounds must be at least 2 (the spread needs two), got {args.rounds}")
    if args.json is not None and not args.json.parent.is_dir():
        ap.error(f"--json {args.json}: the folder {args.json.parent} does not exist")
    if args.traces:
        from cuflow.bench import _traces as T

        known = set(T.TRACES) | set(T.loop_names())
        # the performance page's tables name the recorded traces without their "real:"
        def named(t: str) -> str:
            alias = "loop:real:" + t[5:] if t.startswith("loop:") else "real:" + t
            return alias if t not in known and alias in known else t

        args.traces = [named(t) for t in args.traces]
        unknown = [t for t in args.traces if t not in known]
        if unknown:
            ap.error(f"--traces: no trace named {', '.join(unknown)}; the traces are "
                     f"{', '.join(sorted(known))}")
    # checked before the old tree is copied and built; probe_cupy selects no backend, so
    # each tree still installs its own pool as CuPy's allocator below
    from cuflow.core._runtime import probe_cupy

    _, n_gpus, why = probe_cupy()
    if n_gpus < 1:
        print("bench/ab.py needs a GPU (it times two cuflow trees on one GPU through CuPy); "
              f"this machine has none: {why}", file=sys.stderr)
        return 1
    sys.path.insert(0, str(_prepare_old(args.old.resolve())))

    import importlib

    import cupy
    import numpy

    rng = numpy.random.default_rng(0)
    a_host = rng.standard_normal((100, 100), dtype=numpy.float32)
    frames_host = rng.integers(0, 256, (8, 1080, 1920, 3), dtype=numpy.uint8)
    allocators = {}
    probes = {}
    for name, module in (("old", "cuflow_old"), ("new", "cuflow")):
        # Import, select the backend and allocate once before the next tree is imported, so
        # each tree's pool is installed as CuPy's allocator and can be read back.
        cf = importlib.import_module(module)
        a, b = cf.asarray(a_host), cf.asarray(a_host[::-1].copy())
        c = cf.empty_like(a)
        frames = cf.asarray(frames_host)
        out = cf.empty((8, 3, 1080, 1920), dtype=numpy.float32)
        cupy.empty(1, dtype=numpy.uint8)  # the tree's pool installs itself on first use
        allocators[name] = cupy.cuda.get_allocator()
        assert name == "old" or allocators["new"] is not allocators["old"], "one allocator"

        def norm(cf=cf, frames=frames, out=out):
            cf.image.normalize(frames, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
                               dst=out)

        # appends of a 19 KiB element: into a Bufferizer on its own stream (the default),
        # and into one on the producer's stream
        element = cf.asarray(a_host[:48].reshape(3, 40, 40).copy())
        own = cf.Bufferizer((3, 40, 40), 4096, numpy.float32)
        same = cf.Bufferizer((3, 40, 40), 4096, numpy.float32, stream=cf.current_stream())

        def append(buf, x=element):
            if buf.full:
                buf.reset()
            buf.append(x)

        traces = importlib.import_module(module + ".bench._traces")
        makers = traces.allocators(cupy)
        # (the old tree names its pools "cuflow_old" too: every identifier was renamed)
        replays = {f"{t} {kind} after warmup, host_us_per_op": functools.partial(
            traces.replay, makers[kind.replace("cuflow", module, 1)], traces.trace_its(t),
            warmup=traces.warmup_for(t)) for t in args.traces for kind in ("cuflow", "cuflow vmm")}
        fused_gelu = _fused_gelu(cf)
        slow_graph = importlib.import_module(module + ".bench._pipeline").graph_cases(cf)[
            f"{module} graph replay"]  # (the old tree's rows are named cuflow_old)
        probes[name] = {**replays,
            "fused_gelu_new_host_us": lambda f=fused_gelu, a=a: f(a),
            "fused_gelu_dst_host_us": lambda f=fused_gelu, a=a, c=c: f(a, dst=c),
            "slow_function_graph_replay_device_us": slow_graph,
            "add_dst_host_us": lambda cf=cf, a=a, b=b, c=c: cf.add(a, b, dst=c),
            "add_new_host_us": lambda cf=cf, a=a, b=b: cf.add(a, b),
            "view_a[1:]_host_us": lambda a=a: a[1:],
            "view_a[:,0]_host_us": lambda a=a: a[:, 0],
            "normalize_8x1080p_device_us": norm,
            "pool_hit_1MiB_host_us": lambda: cupy.empty(1 << 20, dtype=numpy.uint8),
            # (bound now: a name looked up at call time would be the last tree's append)
            "bufferizer_append_host_us": lambda buf=same, f=append: f(buf),
            "bufferizer_append_own_stream_host_us": lambda buf=own, f=append: f(buf),
        }

    from cuflow.testing import device_time_us, host_time_us

    def time(name: str, key: str) -> float:
        cupy.cuda.set_allocator(allocators[name])
        fn = probes[name][key]
        if key.endswith("host_us_per_op"):  # (a replay: its own pool, its own clock)
            return fn()["host_us_per_op"]
        if key.endswith("device_us"):
            return device_time_us(fn, number=3 if "graph" in key else 10, repeat=9).median_us
        return host_time_us(fn, number=2000, repeat=7).median_us

    ratios: dict[str, list[float]] = {k: [] for k in probes["new"]}
    times: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    for r in range(args.rounds):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        for key, rs in ratios.items():
            got = {name: time(name, key) for name in order}
            for name in order:
                times[name].setdefault(key, []).append(got[name])
            rs.append(got["new"] / got["old"])

    result = {}
    for key, rs in ratios.items():
        q = statistics.quantiles(rs, n=10)
        o, n = statistics.median(times["old"][key]), statistics.median(times["new"][key])
        result[key] = {"old": round(o, 3), "new": round(n, 3),
                       "new_over_old_median": round(statistics.median(rs), 4),
                       "new_over_old_p10": round(q[0], 4), "new_over_old_p90": round(q[-1], 4),
                       "rounds": len(rs)}
        print(f"{key:52s} old {o:9.3f}  new {n:9.3f}  new/old {statistics.median(rs):.3f}"
              f"  (p10 {q[0]:.3f}, p90 {q[-1]:.3f}, {len(rs)} rounds)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
