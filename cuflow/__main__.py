"""``python -m cuflow info`` and ``python -m cuflow bench [--json PATH] [--quick]``."""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cuflow", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="backend, device, compute capability, driver/runtime, versions")
    pb = sub.add_parser("bench", help="headline comparisons against plain CuPy (and PyTorch)")
    pb.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    pb.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    args = p.parse_args(argv)

    import cuflow  # noqa: PLC0415

    if args.cmd == "info":
        for k, v in cuflow.backend_info().items():
            print(f"{k:20s} {v}")
        return 0
    from ._headline import format_table, run_headline  # noqa: PLC0415

    result = run_headline(quick=args.quick)
    print(format_table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
