"""``python -m cuflow info``, ``python -m cuflow bench [--json PATH] [--quick] [--plot PNG]``
and ``python -m cuflow run-notebook PATH [--write]``."""

from __future__ import annotations

import argparse
import json
import sys

import cuflow

from .bench._headline import format_table, run_headline
from .bench._traces import bench_traces
from .bench._plot import plot
from .testing import output_text, run_notebook


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cuflow", description=__doc__)
    sub = p.add_subparsers(dest="cmd")
    sub.add_parser("info", help="backend, device, compute capability, driver/runtime, versions")
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
    pn = sub.add_parser("run-notebook", help="execute a notebook's code cells without Jupyter")
    pn.add_argument("path")
    pn.add_argument("--write", action="store_true", help="store the outputs in the notebook")
    args = p.parse_args(argv)
    if args.cmd is None:  # no verb: say what the verbs are
        p.print_help()
        return 0

    if args.cmd == "run-notebook":
        for i, outputs in enumerate(run_notebook(args.path, write=args.write)):
            text = output_text(outputs)
            print(f"[{i + 1}] {text}", end="" if text.endswith("\n") else "\n")
        return 0

    if args.cmd == "info":
        for k, v in cuflow.backend_info().items():
            print(f"{k:20s} {v}")
        return 0
    if args.section == "traces":
        return bench_traces(record=args.record, quick=args.quick, json_path=args.json,
                            variants=args.variants)
    if args.from_json:
        if not args.plot:
            p.error("--from-json only makes sense with --plot")
        with open(args.from_json) as f:
            result = json.load(f)
    else:
        result = run_headline(quick=args.quick)
        print(format_table(result))
    if args.json and not args.from_json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"\nwrote {args.json}")
    if args.plot:
        plot(result, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
