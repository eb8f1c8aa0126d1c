"""``python -m cuflow bench --plot FILE.png``: one bar chart per comparison group."""

from __future__ import annotations

import math
import reprlib
from typing import Any

__all__ = ["plot", "unplottable"]

# The figure each row is drawn by, first found wins, and whether higher is better.
_METRICS = (("fps", "frames/s", True), ("ms", "ms", False), ("us", "us", False),
            ("device_us", "device us", False), ("median_us", "us", False),
            ("footprint", "peak reserved / peak requested", False),
            ("host_us_per_append", "host us per append", False))
#: the most bars in one panel: a larger group is drawn over several panels
_PANEL_ROWS = 12


def _metric(rows: list[dict[str, Any]]) -> tuple[str, str, bool] | None:
    for key, label, higher in _METRICS:
        if all(key in r for r in rows):
            return key, label, higher
    return None


def unplottable(result: dict[str, Any]) -> str | None:
    """What in a loaded ``--json`` result (a dict with a list of rows) :func:`plot` cannot
    draw, the first such thing, or None: rows are objects with a string ``group`` and
    ``case`` and numbers for the figures drawn, ``info`` an object."""
    info = result.get("info", {})
    if not isinstance(info, dict):
        return f'"info" must be an object, got {reprlib.repr(info)}'
    for i, r in enumerate(result["rows"]):
        if not isinstance(r, dict):
            return f"row {i} must be an object, got {reprlib.repr(r)}"
        for key in ("group", "case"):
            if not isinstance(r.get(key), str):
                return f'row {i} must have a string "{key}", got {reprlib.repr(r)}'
        for key, _, _ in _METRICS:
            v = r.get(key)
            if key in r and (isinstance(v, bool) or not isinstance(v, int | float)):
                return f'row {i}: "{key}" must be a number, got {reprlib.repr(v)}'
    return None


def plot(result: dict[str, Any], path: str) -> str:
    """Draw ``result`` (what ``run_headline`` returns, or its JSON) into the PNG ``path``
    (written as PNG whatever its suffix); returns ``path``."""
    try:
        import matplotlib  # noqa: PLC0415  (optional dependency)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415  (optional dependency)
    except ImportError as e:
        raise SystemExit("--plot needs matplotlib: python3 -m pip install matplotlib") from e
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in result["rows"]:
        groups.setdefault(r["group"], []).append(r)
    panels = []
    for g, rows in groups.items():
        m = _metric(rows)
        if m is None or len(rows) < 2:
            continue
        parts = math.ceil(len(rows) / _PANEL_ROWS)
        for k in range(parts):
            part = rows[k * _PANEL_ROWS:(k + 1) * _PANEL_ROWS]
            panels.append((g if parts == 1 else f"{g} ({k + 1}/{parts})", part, m))
    if not panels:
        raise SystemExit("--plot: nothing to draw in this result")
    cols = 3
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6.5 * cols, 0.5 + 0.42 * 9 * nrows),
                             squeeze=False)
    for ax, (group, rows, (key, label, higher)) in zip(axes.flat, panels, strict=False):
        names = [r["case"] for r in rows]
        vals = [float(r[key]) for r in rows]
        colors = ["#76b900" if n.startswith("cuflow") else "#8c8c8c" for n in names]
        ax.barh(range(len(vals)), vals, color=colors)
        ax.set_yticks(range(len(vals)), names, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(f"{label} ({'higher' if higher else 'lower'} is better)", fontsize=8)
        ax.set_title(group, fontsize=8, wrap=True)
        ax.tick_params(axis="x", labelsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    info = result.get("info", {})
    fig.suptitle(f"cuflow bench on {info.get('device_name', 'CPU (NumPy backend)')}", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    try:
        fig.savefig(path, dpi=110, format="png")
    finally:  # (an unwritable path raises here: the figure is freed all the same)
        plt.close(fig)
    return path
