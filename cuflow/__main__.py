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

from .bench import _realtraces
from .bench._headline import format_table, run_headline
from .bench._traces import bench_traces
from .bench._plot import plot, unplottable
from .memory._env import MEMORY_LIMIT, check_memory_limit


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m cuflow", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="cuflow: GPU arrays with dst= outputs, explicit streams and fused kernels.",
        epilog="python -m cuflow bench --help lists the benchmark's options.")
    sub = p.add_subparsers(dest="cmd", title="commands", metavar="{info,bench}")
    sub.add_parser("info", help="what cuflow runs on: the backend and why, the GPU, its compute "
                                "capability, driver and runtime, versions, compiled paths, "
                                "the pool's backend and limit")
    pb = sub.add_parser("bench", help="headline comparisons against plain CuPy (and PyTorch)")
    pb.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    pb.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    pb.add_argument("--plot", metavar="PNG", help="also draw the comparisons (needs matplotlib)")
    pb.add_argument("--from-json", metavar="PATH",
                    help="with --plot (and nothing else): draw a saved --json result instead "
                         "of running")
    pb.add_argument("section", nargs="?", choices=["traces"],
                    help="traces: the memory pools on the allocation traces only")
    pb.add_argument("--record", action="store_true",
                    help="with traces: record the real workloads' traces into bench/traces/ "
                         "of a source checkout (needs a GPU, torch and torchvision; an "
                         "installed cuflow refuses it)")
    pb.add_argument("--variants", action="store_true",
                    help="with traces: also cuflow's pool with whole 64 MiB granules")
    pb.add_argument("--rounds", type=int, metavar="N",
                    help="with traces: alternated rounds, whose medians are reported "
                         "(default 3; 1 with --quick)")
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
        # read when the pool is built: a malformed value is named here, not on an allocation
        try:
            limited = check_memory_limit()
        except cuflow.CuflowError:
            print(f"{'memory_limit':20s} CUFLOW_MEMORY_LIMIT={MEMORY_LIMIT!r}, refused")
            raise
        print(f"{'memory_limit':20s} " + (
            f"{MEMORY_LIMIT.strip()}" if limited else
            f"none (CUFLOW_MEMORY_LIMIT={MEMORY_LIMIT!r})" if MEMORY_LIMIT else
            "none (CUFLOW_MEMORY_LIMIT unset)"))
        return 0
    # every argument checked before minutes of benchmarks, not after them
    paths = {"--json": args.json, "--plot": args.plot, "--from-json": args.from_json}
    for opt, path in paths.items():
        if path == "":
            pb.error(f"{opt} takes a file path, got an empty one: ''")
    for path in (args.json, args.plot):
        if path is None:
            continue
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            pb.error(f"cannot write {path}: no folder {folder}")
        if os.path.isdir(path):
            pb.error(f"cannot write {path}: it is a folder; name a file in it")
        if not os.access(folder, os.W_OK):
            pb.error(f"cannot write {path}: the folder {folder} is not writable")
    if args.plot is not None:
        for opt in ("--from-json", "--json"):
            if paths[opt] is not None and \
                    os.path.realpath(paths[opt]) == os.path.realpath(args.plot):
                pb.error(f"--plot {args.plot} is the {opt} file {paths[opt]}: the PNG would "
                         "overwrite the JSON; name another file")
    if args.section == "traces" and (args.plot is not None or args.from_json is not None):
        pb.error("the traces section takes --json (its rows), not --plot or --from-json")
    loaded = None
    if args.from_json is not None:
        if args.json is not None or args.quick:
            pb.error("--from-json redraws a saved run: it takes --plot only, not --json or "
                     "--quick")
        if args.plot is None:
            pb.error("--from-json only makes sense with --plot")
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
        bad = unplottable(loaded)
        if bad is not None:
            pb.error(f"--from-json: {args.from_json}: {bad}")
    if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
        pb.error("--plot needs matplotlib: python3 -m pip install matplotlib")
    if args.section != "traces" and (args.record or args.variants or args.rounds is not None):
        pb.error("--record, --variants and --rounds go with the traces section: "
                 "python -m cuflow bench traces --rounds 5")
    if args.rounds is not None and (args.rounds < 1 or args.quick):
        pb.error(f"--rounds must be at least 1, and goes without --quick, got {args.rounds}"
                 + (" with --quick" if args.quick else ""))
    if args.record:
        if not _realtraces.in_checkout():
            pb.error(f"--record writes the traces into a source checkout's bench/traces/, "
                     f"but this cuflow is not in one ({_realtraces.TRACE_DIR.parents[1]} has "
                     "no pyproject.toml): run it from a checkout (python3 -m pip install -e .)")
        missing = [m for m in ("torch", "torchvision") if importlib.util.find_spec(m) is None]
        if missing:
            pb.error(f"--record runs PyTorch workloads, which need {' and '.join(missing)}: "
                     f"python3 -m pip install {' '.join(missing)}")
    if args.section == "traces":
        if cuflow.get_backend().name != "cupy":
            print("python -m cuflow bench traces replays the traces through the GPU's memory "
                  "pools (cuflow's, CuPy's, PyTorch's); this machine runs the NumPy backend: "
                  f"{cuflow.backend_info()['reason']}", file=sys.stderr)
            return 1
        return bench_traces(record=args.record, quick=args.quick, json_path=args.json,
                            variants=args.variants, rounds=args.rounds)
    if loaded is not None:
        result = loaded
    else:
        result = run_headline(quick=args.quick)
        print(format_table(result))
    rc = 0
    if args.json is not None:
        rc |= _write("--json", args.json, lambda: _dump(result, args.json))
    if args.plot is not None:
        rc |= _write("--plot", args.plot, lambda: plot(result, args.plot))
    return rc


def _dump(result: dict, path: str) -> str:
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    return path


def _write(flag: str, path: str, write) -> int:
    """``write()`` for ``flag path``: 0, or 1 with a one-line error where it fails (the
    figures are on the screen already, and stay there)."""
    try:
        written = write()
    except OSError as e:
        print(f"python -m cuflow bench: cannot write {flag} {path}: {e}", file=sys.stderr)
        return 1
    print(f"wrote {written}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
