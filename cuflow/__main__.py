"""cuflow's command line: ``python -m cuflow info`` and ``python -m cuflow bench``.

``info`` prints what cuflow runs on (for bug reports); ``bench`` runs the headline
comparisons against plain CuPy and PyTorch (``--json PATH``, ``--quick``, ``--plot PNG``,
``--from-json PATH``).  With no verb, this help."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import warnings

import cuflow

from .bench._headline import format_table, run_headline
from .bench._traces import bench_traces
from .bench._plot import plot


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m cuflow", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="cuflow: GPU arrays with dst= outputs, explicit streams and fused kernels.",
        epilog="python -m cuflow bench --help lists the benchmark's options.")
    sub = p.add_subparsers(dest="cmd", title="commands", metavar="{info,bench}")
    sub.add_parser("info", help="what cuflow runs on: the backend and why, the GPU, its compute "
                                "capability, driver and runtime, versions, compiled paths")
    pb = sub.add_parser("bench", help="headline comparisons against plain CuPy (and PyTorch)")
    pb.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    pb.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    pb.add_argument("--plot", metavar="PNG", help="also draw the comparisons (needs matplotlib)")
    pb.add_argument("--from-json", metavar="PATH",
                    help="with --plot: draw a saved --json result instead of running")
    pb.add_argument("section", nargs="?", choices=["traces"],
                    help="traces: the memory pools on the allocation traces only")
    pb.add_argument("--record", action="store_true",
                    help="with traces: record the real workloads' traces into bench/traces/")
    pb.add_argument("--variants", action="store_true",
                    help="with traces: also cuflow's pool with whole 64 MiB granules")
    args = p.parse_args(argv)
    if args.cmd is None:  # no verb: say what the verbs are
        p.print_help()
        return 0

    try:
        return _run(args, pb)
    except cuflow.CuflowError as e:  # (a CUFLOW_* setting the backend refuses, say)
        print(f"python -m cuflow {args.cmd}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace, pb: argparse.ArgumentParser) -> int:
    if args.cmd == "info":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the backend's reason is one of the lines
            info = cuflow.backend_info()
        for k, v in info.items():
            print(f"{k:20s} {v}")
        return 0
    # every argument checked before minutes of benchmarks, not after them
    for path in (args.json, args.plot):
        folder = os.path.dirname(os.path.abspath(path)) if path else None
        if folder and not os.path.isdir(folder):
            pb.error(f"cannot write {path}: no folder {folder}")
        if path and os.path.isdir(path):
            pb.error(f"cannot write {path}: it is a folder; name a file in it")
        if folder and not os.access(folder, os.W_OK):
            pb.error(f"cannot write {path}: the folder {folder} is not writable")
    if args.section == "traces" and (args.plot or args.from_json):
        pb.error("the traces section takes --json (its rows), not --plot or --from-json")
    loaded = None
    if args.from_json:
        if not os.path.isfile(args.from_json):
            pb.error(f"--from-json: no file {args.from_json}")
        try:
            with open(args.from_json) as f:
                loaded = json.load(f)
        except (OSError, ValueError) as e:
            pb.error(f"--from-json: cannot read {args.from_json}: {e}")
        if not isinstance(loaded, dict) or not isinstance(loaded.get("rows"), list):
            pb.error(f"--from-json: {args.from_json} is no 'python -m cuflow bench --json' "
                     "result (a headline run's JSON, with its rows)")
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        pb.error("--plot needs matplotlib: python3 -m pip install matplotlib")
    if args.section != "traces" and (args.record or args.variants):
        pb.error("--record and --variants go with the traces section: "
                "python -m cuflow bench traces --record")
    if args.section == "traces":
        if cuflow.get_backend().name != "cupy":
            print("python -m cuflow bench traces replays the traces through the GPU's memory "
                  "pools (cuflow's, CuPy's, PyTorch's); this machine runs the NumPy backend: "
                  f"{cuflow.backend_info()['reason']}", file=sys.stderr)
            return 1
        return bench_traces(record=args.record, quick=args.quick, json_path=args.json,
                            variants=args.variants)
    if args.from_json:
        if not args.plot:
            pb.error("--from-json only makes sense with --plot")
        result = loaded
    else:
        result = run_headline(quick=args.quick)
        print(format_table(result))
    if args.json and not args.from_json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"\nwrote {args.json}")
    if args.plot:
        written = plot(result, args.plot)
        print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
