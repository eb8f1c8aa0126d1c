"""The small evidence file of one GPU run: ``bench/results/<gpu-kind>-summary.json``.

Usage (from the repository root, after ``python -m cuflow bench --json H.json`` and,
optionally, ``python -m cuflow bench traces --json T.json``)::

    python3 bench/summarize.py H.json [--traces T.json] --commit REV --date YYYY-MM-DD \
        [--note TEXT ...] --out bench/results/h100-summary.json

It keeps every row's figures (times, ratios, shares of the floor, footprints) and leaves
out what only explains them (byte counts, cache counters, percentiles), so the file stays
small; the full JSON of a run is not committed.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

#: row fields that are bookkeeping, not figures
DROP = {"group", "case", "vs", "ops", "cache_hits", "cache_misses", "timer_us", "p99_us",
        "peak_requested_bytes", "peak_reserved_bytes", "pool_reserved_peak_bytes",
        "host_us_per_op_all", "delta_us", "kernels", "h2d_copies", "trace",
        "allocator"}


def _round(v: Any) -> Any:
    if isinstance(v, float):
        return float(f"{v:.4g}")
    return v


def _figures(row: dict[str, Any]) -> dict[str, Any]:
    return {k: _round(v) for k, v in row.items() if k not in DROP and v is not None}


def summarize(headline: dict[str, Any], traces: list[dict[str, Any]] | None,
              commit: str, date: str, notes: list[str]) -> dict[str, Any]:
    info = headline["info"]
    out: dict[str, Any] = {
        "gpu": info.get("device_name"), "date": date, "commit": commit,
        "driver_cuda": info.get("driver_version"), "runtime": info.get("runtime_version"),
        "cupy": info.get("cupy"), "numpy": info.get("numpy"),
        "pool_backend": info.get("pool_backend"), "notes": notes,
        "command": "python -m cuflow bench --json",
    }
    groups: dict[str, dict[str, Any]] = {}
    for row in headline["rows"]:
        groups.setdefault(row["group"], {})[row["case"]] = _figures(row)
    out["bench"] = groups
    if traces:
        by: dict[str, dict[str, Any]] = {}
        for row in traces:
            by.setdefault(row["trace"], {})[row["allocator"]] = _figures(row)
        out["traces"] = {"command": "python -m cuflow bench traces --json", "rows": by}
    return out


def _load(p: argparse.ArgumentParser, option: str, path: str, kind: type) -> Any:
    """``path``'s JSON, of ``kind`` (a headline run's dict, bench traces' list of rows)."""
    try:
        with open(path) as f:
            value = json.load(f)
    except (OSError, ValueError) as e:
        p.error(f"{option} {path}: {e}")
    if not isinstance(value, kind) or (kind is dict and not {"info", "rows"} <= value.keys()):
        what = ("a headline run's JSON (python -m cuflow bench --json)" if kind is dict else
                "bench traces' rows (python -m cuflow bench traces --json)")
        p.error(f"{option} {path}: not {what}")
    return value


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("headline", help="python -m cuflow bench --json's file")
    p.add_argument("--traces", help="python -m cuflow bench traces --json's file")
    p.add_argument("--commit", required=True, help="the commit the run measured")
    p.add_argument("--date", required=True, help="the run's date (YYYY-MM-DD)")
    p.add_argument("--note", action="append", default=[], help="a line of notes (repeatable)")
    p.add_argument("--out", required=True, help="the summary JSON to write")
    a = p.parse_args(argv)
    headline = _load(p, "headline", a.headline, dict)
    traces = None if not a.traces else _load(p, "--traces", a.traces, list)
    text = dumps(summarize(headline, traces, a.commit, a.date, a.note))
    try:
        with open(a.out, "w") as f:
            f.write(text)
    except OSError as e:
        p.error(f"--out {a.out}: {e}")


def dumps(obj: Any, depth: int = 0) -> str:
    """JSON with one line per case: nested down to the cases, whose figures stay inline."""
    if not isinstance(obj, dict) or depth == 3 or not any(isinstance(v, dict)
                                                          for v in obj.values()):
        return json.dumps(obj)
    pad = " " * (depth + 1)
    items = [f"{pad}{json.dumps(k)}: {dumps(v, depth + 1)}" for k, v in obj.items()]
    return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}" + ("\n" if depth == 0 else "")


if __name__ == "__main__":
    main()
