"""The headline comparisons behind ``python -m cuflow bench``.

Each comparison times cuflow and plain CuPy (and PyTorch when installed) in the
same run, interleaved round by round so drift on a shared machine hits both
alike, and reports medians and ratios.  On the NumPy backend the same code
times the CPU and says so.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import cuflow as cf

from ..testing import copy_bandwidth_tbps, device_time_us, host_time_us
from . import _traces
from ._fusion import cold_start_rows, fusion_rows
from ._image import image_rows
from ._opzoo import opzoo_rows
from ._pipeline import pipeline_rows

__all__ = ["run_headline"]


def _interleaved(cases: dict[str, Callable[[], object]], rounds: int, number: int,
                 timer=host_time_us) -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(rounds):
        for k, fn in cases.items():
            samples[k].append(timer(fn, number=number, repeat=1, warmup=max(number // 10, 3))
                              .median_us)
    return {k: statistics.median(v) for k, v in samples.items()}


def _torch():
    try:
        import torch  # noqa: PLC0415  (optional dependency)
    except Exception:
        return None
    return torch if torch.cuda.is_available() else None


def run_headline(quick: bool = False) -> dict[str, Any]:
    """Run the comparisons; return ``{"info": ..., "rows": [...]}``."""
    info = cf.backend_info()
    gpu = info["backend"] == "cupy"
    rounds, number = (3, 300) if quick else (15, 2000)
    rows: list[dict[str, Any]] = []

    def row(group, name, us, ref_us=None, ref_name=None, **extra):
        r = {"group": group, "case": name, "us": round(us, 3)}
        if ref_us:
            r["vs"] = ref_name
            r["ratio"] = round(us / ref_us, 3)
            r["delta_us"] = round(us - ref_us, 3)
        r.update(extra)
        rows.append(r)

    # 1. Dolphin's documented example and cuflow's per-op overhead, 100x100 float32.
    a = cf.testing.random_array((100, 100), "float32")
    b = cf.testing.random_array((100, 100), "float32")
    c = cf.empty_like(a)
    cases: dict[str, Callable[[], object]] = {
        "cuflow c = a + b": lambda: a + b,
        "cuflow add(src=a, other=b, dst=c)": lambda: cf.add(src=a, other=b, dst=c),
        "cuflow add(a, b, dst=c)": lambda: cf.add(a, b, dst=c),
        "cuflow a.sum()": lambda: a.sum(),
        "cuflow a[1:]": lambda: a[1:],
    }
    base = {}
    if gpu:
        import cupy  # noqa: PLC0415  (optional dependency)

        pa, pb = a.view(cupy.ndarray), b.view(cupy.ndarray)
        pc = c.view(cupy.ndarray)
        base = {
            "cupy c = a + b": lambda: pa + pb,
            "cupy add(a, b, out=c)": lambda: cupy.add(pa, pb, out=pc),
            "cupy a.sum()": lambda: pa.sum(),
            "cupy a[1:]": lambda: pa[1:],
        }
        torch = _torch()
        if torch is not None:
            ta, tb = torch.from_dlpack(pa), torch.from_dlpack(pb)
            tc = torch.empty_like(ta)
            base["torch a + b"] = lambda: ta + tb
            base["torch add(a, b, out=c)"] = lambda: torch.add(ta, tb, out=tc)
    t = _interleaved({**cases, **base}, rounds, number)
    pairs = {
        "cuflow c = a + b": "cupy c = a + b",
        "cuflow add(src=a, other=b, dst=c)": "cupy add(a, b, out=c)",
        "cuflow add(a, b, dst=c)": "cupy add(a, b, out=c)",
        "cuflow a.sum()": "cupy a.sum()",
        "cuflow a[1:]": "cupy a[1:]",
    }
    for k, v in t.items():
        ref = pairs.get(k)
        row("small op 100x100 float32, host us/call", k, v, t.get(ref), ref)

    # 2. dst= allocates nothing (the pool's used bytes unchanged across 100 calls).
    if gpu:
        import cupy  # noqa: PLC0415  (optional dependency)

        pool = cf.memory.get_pool() if cf.memory._INSTALLED else cupy.get_default_memory_pool()
        cf.synchronize()
        before = pool.used_bytes()
        for _ in range(100):
            cf.add(a, b, dst=c)
            a.sum(dst=c[0, 0])
        cf.synchronize()
        rows.append({"group": "allocation", "case": "pool used bytes change over 100 dst= calls",
                     "bytes": int(pool.used_bytes() - before)})

    # 3. A large add against device-to-device copy bandwidth.
    if gpu:
        import cupy  # noqa: PLC0415  (optional dependency)

        bw = copy_bandwidth_tbps(1 << 30)
        h, w = 2160, 3840
        x = cf.testing.random_array((h, w), "float32")
        y = cf.testing.random_array((h, w), "float32")
        z = cf.empty_like(x)
        px, py, pz = (v.view(cupy.ndarray) for v in (x, y, z))
        nbytes = 3 * x.nbytes
        floor_us = nbytes / (bw * 1e12) * 1e6
        dev = _interleaved({"cuflow add(x, y, dst=z)": lambda: cf.add(x, y, dst=z),
                            "cupy add(x, y, out=z)": lambda: cupy.add(px, py, out=pz)},
                           rounds, 20, timer=device_time_us)
        rows.append({"group": "large add 2160x3840 float32", "case": "d2d copy bandwidth",
                     "TBps": round(bw, 3), "floor_us": round(floor_us, 2)})
        for k, v in dev.items():
            row("large add 2160x3840 float32, device us", k, v,
                pct_of_copy_bw=round(100 * floor_us / v, 1))
    if gpu:
        rows += _elementwise_sweep(cf, quick, bw)
        rows += image_rows(cf, quick, bw, _interleaved, device_time_us, _torch())
        rows += cold_start_rows(cf)
        rows += fusion_rows(cf, quick, bw, _interleaved, device_time_us, _torch())
        rows += opzoo_rows(cf, quick, _interleaved, host_time_us, _torch())
        rows += _pool_comparison(quick)
        # last: its GPU activity traces leave CUPTI attached to the process (see there)
        rows += pipeline_rows(cf, quick, bw, device_time_us, host_time_us, _torch())
    return {"info": info, "rows": rows}


def _pool_comparison(quick: bool) -> list[dict[str, Any]]:
    """cuflow's pool against CuPy's and PyTorch's on the synthetic and recorded traces
    (footprint and steady-state device allocations of one replay each: the host time per
    operation is ``python -m cuflow bench traces``' figure, medians of alternated rounds);
    hit latency."""
    import cupy  # noqa: PLC0415  (optional dependency)

    torch = _torch()
    makers = _traces.allocators(cupy, torch)
    rows: list[dict[str, Any]] = []
    _traces.warm_up(makers)
    for name, gen in _traces.TRACES.items():
        its = gen(iterations=40) if (quick and name == "R0") else gen()
        runs = [(aname, _traces.replay(make, its)) for aname, make in makers.items()]
        runs += [(f"{aname} after warmup",
                  _traces.replay(makers[aname], its, warmup=_traces.warmup_for(name)))
                 for aname in ("cuflow", "cuflow vmm")]
        for case, r in runs:
            rows.append({"group": f"allocation trace {name}: peak reserved / peak requested",
                         "case": case, **{k: v for k, v in r.items()
                                          if k not in ("allocator", "host_us_per_op")}})
    for nbytes in (4096, 1 << 20, 64 << 20):
        lats = _traces.empty_latency(_traces.allocators(cupy, torch, python_hot_path=True),
                                     nbytes, n=5000 if quick else 20000)
        ref = lats["cupy MemoryPool"]["median_us"]
        for aname, lat in lats.items():
            rows.append({"group": f"empty + free on a pool hit, {nbytes} bytes (host us)",
                         "case": aname, **lat,
                         "ratio_vs_cupy_pool": round(lat["median_us"] / ref, 3)})
    return rows


def _elementwise_sweep(cf, quick: bool, copy_tbps: float) -> list[dict[str, Any]]:
    """cuflow's elementwise kernels against CuPy's ufuncs, 100 to 1e8 elements, with dst=.

    Small sizes measure host time per call (the GPU keeps up), large ones the
    device (a loop of calls then one synchronize): per call either way.
    """
    import cupy  # noqa: PLC0415  (optional dependency)

    sizes = (100, 10_000, 1_000_000, 100_000_000) if quick else (
        100, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000)
    ops = ("add", "multiply", "maximum", "negative") if quick else (
        "add", "subtract", "multiply", "divide", "maximum", "minimum", "negative", "absolute")
    rows = []
    for n in sizes:
        x = cf.testing.random_array((n,), "float32")
        y = cf.testing.random_array((n,), "float32")
        z = cf.empty_like(x)
        px, py, pz = (v.view(cupy.ndarray) for v in (x, y, z))
        cases: dict[str, Callable[[], object]] = {}
        for op in ops:
            f, u = getattr(cf, op), getattr(cupy, op)
            if u.nin == 2:
                cases[f"cuflow {op}"] = lambda f=f: f(x, y, dst=z)
                cases[f"cupy {op}"] = lambda u=u: u(px, py, pz)
            else:
                cases[f"cuflow {op}"] = lambda f=f: f(x, dst=z)
                cases[f"cupy {op}"] = lambda u=u: u(px, pz)
        number = max(10, min(2000, int(2e9 // (n * 12 + 1))))
        t = _interleaved(cases, 3 if quick else 5, number)
        for op in ops:
            nbytes = (3 if getattr(cupy, op).nin == 2 else 2) * 4 * n
            us, ref = t[f"cuflow {op}"], t[f"cupy {op}"]
            rows.append({
                "group": "elementwise float32 with dst=, us/call (cuflow kernels vs CuPy ufuncs)",
                "case": f"{op} n={n:.0e}", "us": round(us, 3), "vs": f"cupy {op}",
                "ratio": round(us / ref, 3), "delta_us": round(us - ref, 3),
                "cupy_us": round(ref, 3),
                "pct_of_copy_bw": round(100 * nbytes / (us * 1e-6) / (copy_tbps * 1e12), 1),
                "cupy_pct_of_copy_bw": round(100 * nbytes / (ref * 1e-6) / (copy_tbps * 1e12), 1),
            })
        del x, y, z, px, py, pz
    return rows


def format_table(result: dict[str, Any]) -> str:
    info = result["info"]
    lines = [f"cuflow bench on {info.get('device_name', 'CPU (NumPy backend)')} "
             f"[{info['backend']}; cupy {info.get('cupy', '-')}; numpy {info['numpy']}]"]
    if info["backend"] != "cupy":
        lines.append("NOTE: no usable GPU, these are NumPy-backend CPU timings, not GPU figures.")
    group = None
    for r in result["rows"]:
        if r["group"] != group:
            group = r["group"]
            lines.append(f"\n{group}")
        extra = {k: v for k, v in r.items() if k not in ("group", "case")}
        cells = []
        if "us" in extra:
            cells.append(f"{extra.pop('us'):9.3f} us")
        if "ratio" in extra:
            cells.append(f"x{extra.pop('ratio'):.3f} ({extra.pop('delta_us'):+.3f} us) vs "
                         f"{extra.pop('vs')}")
        cells += [f"{k}={v}" for k, v in extra.items()]
        lines.append(f"  {r['case']:42s} " + "  ".join(cells))
    return "\n".join(lines)
