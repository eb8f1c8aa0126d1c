"""Fused chains for ``python -m cuflow bench``: ``cuflow.fuse`` against CuPy, ``cupy.fuse`` and PyTorch.

Each chain is one Python function written once against a namespace ``m``
(cuflow, CuPy or PyTorch through a thin adapter), run on 16M elements or
more, and timed on the device (CUDA events, medians, the implementations
interleaved round by round).  The floor is the bytes the chain must read and
write over the device-to-device copy bandwidth measured in the same run.
``cupy.fuse`` and ``torch.compile`` are reported where they run the chain, and a
device-to-device copy of the same bytes (``cudaMemcpyAsync``) in the same rounds: the share
of the floor that any kernel of that size reaches.
"""

from __future__ import annotations


import json
import subprocess
import sys
import time
import types
from collections.abc import Callable
from typing import Any

import numpy

from ..testing import host_time_us

__all__ = ["CHAINS", "COPY", "fusion_rows", "namespaces", "cold_start_rows"]

#: the reference case of each chain: a device-to-device copy of the chain's floor bytes
COPY = "copy of the same bytes"


# ----------------------------------------------------------------- chains
def gelu(m, x):
    return 0.5 * x * (1 + m.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


def axpby_relu(m, x, y):
    return m.maximum(1.5 * x - 0.25 * y, 0.0) ** 2


def img_gamma(m, img, scale, offset):
    f = m.astype(img, m.float32) / 255
    lin = m.where(f > 0.04045, ((f + 0.055) / 1.055) ** 2.4, f / 12.92)
    return m.clip(lin * scale + offset, 0.0, 1.0)


def half_chain(m, x, y):
    return m.sqrt(m.abs(x * y) + 1) - x


def normalize_nchw(m, x, mean, inv_std):
    return (x - mean) * inv_std


def leaky_clip(m, x):
    return m.clip(m.where(x > 0, x, 0.01 * x), -6.0, 6.0)


def erf_gelu(m, x):
    return 0.5 * x * (1 + m.erf(x * 0.7071067811865476))


def u8_to_half(m, img):
    return (m.astype(img, m.float16) - 128) * 0.0078125


def u8_normalize(m, img, mean, inv_std):
    return (m.astype(img, m.float32) * (1 / 255) - mean) * inv_std


def sq_diff_sum(m, a, b):
    return m.sum((a - b) ** 2)


def row_sum_exp(m, x):
    return m.sum(m.exp(x - 1), axis=-1)


def _inputs(name: str, rng) -> tuple:
    # The uint8 chains take a batch of four 4K frames and row_sum_exp 64M elements: on one
    # 4K frame (67-124 MB) a kernel's launch gap, ramp-up and tail hold even a copy of the
    # same bytes to 78-89% of the floor (``python bench/chain_sizes.py``).
    n = 1 << 24
    frames = (4, 2160, 3840, 3)
    f32 = lambda *s: rng.standard_normal(s, dtype=numpy.float32)  # noqa: E731
    if name == "img_gamma":
        return (rng.integers(0, 256, frames, dtype=numpy.uint8),
                numpy.array([0.9, 1.0, 1.1], numpy.float32),
                numpy.array([0.01, 0.0, -0.01], numpy.float32))
    if name == "u8_normalize":  # HWC frames, ImageNet's per-channel mean and 1 / std
        return (rng.integers(0, 256, frames, dtype=numpy.uint8),
                numpy.array([0.485, 0.456, 0.406], numpy.float32),
                1 / numpy.array([0.229, 0.224, 0.225], numpy.float32))
    if name == "u8_to_half":
        return (rng.integers(0, 256, frames, dtype=numpy.uint8),)
    if name == "half_chain":
        return (f32(n).astype(numpy.float16), f32(n).astype(numpy.float16))
    if name == "normalize_nchw":
        return (f32(8, 3, 1024, 1024), numpy.array([0.485, 0.456, 0.406], numpy.float32)
                .reshape(3, 1, 1), (1 / numpy.array([0.229, 0.224, 0.225], numpy.float32))
                .reshape(3, 1, 1))
    if name in ("axpby_relu", "sq_diff_sum"):
        return (f32(n), f32(n))
    if name == "row_sum_exp":
        return (f32(16384, 4096),)
    return (f32(n),)


#: name -> (function, kind)
CHAINS: dict[str, tuple[Callable, str]] = {
    "gelu": (gelu, "one input, transcendental (tanh)"),
    "axpby_relu": (axpby_relu, "two inputs"),
    "img_gamma": (img_gamma, "uint8 -> float, where, clip, per-channel vectors"),
    "half_chain": (half_chain, "float16, two inputs"),
    "normalize_nchw": (normalize_nchw, "broadcast per-channel (3,1,1) vectors"),
    "leaky_clip": (leaky_clip, "where / clip"),
    "erf_gelu": (erf_gelu, "transcendental (erf)"),
    "u8_to_half": (u8_to_half, "uint8 -> float16"),
    "u8_normalize": (u8_normalize, "uint8 HWC -> float32, per-channel (3,) vectors"),
    "sq_diff_sum": (sq_diff_sum, "trailing reduction (everything)"),
    "row_sum_exp": (row_sum_exp, "trailing reduction (last axis)"),
}


def namespaces(cf, cupy, torch) -> dict[str, Any]:
    """The adapters the chains are written against: cuflow, CuPy and PyTorch."""
    def ns(mod, **extra):
        d = {n: getattr(mod, n) for n in ("tanh", "sqrt", "abs", "exp", "where", "sum",
                                          "float32", "float16") if hasattr(mod, n)}
        d.update(extra)
        return types.SimpleNamespace(**d)

    out = {"cuflow": ns(cf, maximum=cf.maximum, clip=cf.clip, astype=cf.astype,
                        erf=cf.fusion.erf)}
    if cupy is not None:
        from cupyx.scipy import special  # noqa: PLC0415  (optional dependency)

        out["cupy"] = ns(cupy, maximum=cupy.maximum, clip=cupy.clip, erf=special.erf,
                         astype=lambda x, d: x.astype(d))
    if torch is not None:
        def maximum(a, b):
            return torch.clamp(a, min=b) if isinstance(b, (int, float)) else torch.maximum(a, b)

        def tsum(x, axis=None):
            return x.sum() if axis is None else x.sum(dim=axis)

        out["torch"] = ns(torch, maximum=maximum, clip=torch.clamp, erf=torch.erf,
                          astype=lambda x, d: x.to(d), sum=tsum)
    return out


def _nbytes(args, out) -> int:
    return sum(a.nbytes for a in args if hasattr(a, "nbytes")) + out.nbytes


def fusion_rows(cf, quick: bool, copy_tbps: float, interleaved, device_time_us,
                torch=None, compile_torch: bool = True,
                names: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Device time of each chain: cuflow.fuse, CuPy unfused, cupy.fuse, torch eager/compile."""
    import cupy  # noqa: PLC0415  (optional dependency)

    rng = numpy.random.default_rng(3)
    spaces = namespaces(cf, cupy, torch)
    rows: list[dict[str, Any]] = []
    rounds = 3 if quick else 7
    for name in names or tuple(CHAINS):
        chain, kind = CHAINS[name]
        host = _inputs(name, rng)
        cf_args = tuple(cf.asarray(a) for a in host)
        cp_args = tuple(a.view(cupy.ndarray) for a in cf_args)
        m = spaces["cuflow"]
        tc_ms = None
        fused = cf.fuse(lambda *a, _c=chain: _c(m, *a), options=cf.FuseOptions(name=name))
        t0 = time.perf_counter()
        out = fused(*cf_args)
        cf.synchronize()
        first_ms = (time.perf_counter() - t0) * 1e3
        floor_us = _nbytes(cf_args, out) / (copy_tbps * 1e12) * 1e6
        cases: dict[str, Callable[[], object]] = {"cuflow.fuse": lambda: fused(*cf_args)}
        mc = spaces["cupy"]
        cases["cupy unfused"] = lambda: chain(mc, *cp_args)
        try:
            cfu = cupy.fuse(kernel_name=f"cupy_fuse_{name}")(
                lambda *a, _c=chain: _c(mc, *a))
            cfu(*cp_args)
            cases["cupy.fuse"] = lambda: cfu(*cp_args)
        except Exception as e:  # cupy.fuse cannot run this chain
            rows.append({"group": f"fusion {name}", "case": "cupy.fuse",
                         "fails": f"{type(e).__name__}: {str(e)[:60]}"})
        if torch is not None:
            mt = spaces["torch"]
            t_args = tuple(torch.from_dlpack(a) for a in cp_args)
            cases["torch eager"] = lambda: chain(mt, *t_args)
            if compile_torch:
                try:
                    # a fresh cache per chain: the same wrapper compiled for many chains would
                    # reach dynamo's recompile limit and silently run eager
                    torch._dynamo.reset()
                    tc = torch.compile(lambda *a, _c=chain: _c(mt, *a))
                    t0 = time.perf_counter()
                    tc(*t_args)
                    torch.cuda.synchronize()
                    tc_ms = (time.perf_counter() - t0) * 1e3
                    cases["torch.compile"] = lambda: tc(*t_args)
                except Exception as e:
                    tc_ms = None
                    rows.append({"group": f"fusion {name}", "case": "torch.compile",
                                 "fails": f"{type(e).__name__}: {str(e)[:60]}"})
        # the floor's bytes moved by the copy engine's own path: what a kernel of this size
        # can reach at all (a short kernel pays its launch gap, ramp-up and tail)
        half = _nbytes(cf_args, out) // 32 * 16
        c_src, c_dst = cupy.empty(half, cupy.uint8), cupy.empty(half, cupy.uint8)
        cases[COPY] = lambda: cupy.cuda.runtime.memcpyAsync(
            c_dst.data.ptr, c_src.data.ptr, half, 3, cupy.cuda.get_current_stream().ptr)
        times = interleaved(cases, rounds, 10, timer=device_time_us)
        base = times["cuflow.fuse"]
        group = f"fusion {name}: {kind}, floor {floor_us:.1f} us, device us"
        for k, us in times.items():
            r = {"group": group, "case": k, "us": round(us, 2),
                 "pct_of_floor": round(100 * floor_us / us, 1)}
            if k != "cuflow.fuse":
                r["cuflow_speedup"] = round(us / base, 2)
            elif k == "cuflow.fuse":
                r["first_call_ms"] = round(first_ms, 1)
            if k == "torch.compile" and tc_ms is not None:
                r["first_call_ms"] = round(tc_ms, 1)
            rows.append(r)
    return rows


def _cold_chain(cf, k: float):
    return cf.fuse(lambda v: cf.tanh(v * k) + cf.exp(-v) * 0.5)


# a second process: the same chain, its kernel on disk from the first process
_SECOND_PROCESS = """
import json, sys, time
import cuflow as cf
from cuflow.bench._fusion import _cold_chain
x = cf.ones((1 << 10,), cf.float32)
cf.synchronize()
f = _cold_chain(cf, float(sys.argv[1]))
t0 = time.perf_counter()
f(x)
cf.synchronize()
print(json.dumps({"ms": (time.perf_counter() - t0) * 1e3, **cf.fusion.stats()}))
"""


def cold_start_rows(cf, processes: int = 3) -> list[dict[str, Any]]:
    """First call of a new chain: compiled in this process, then read from the disk cache in new ones.

    The second-process figure is the median over ``processes`` fresh interpreters,
    each timing its first call of the chain this process compiled, after its own
    CUDA context is up (an array is made first).
    """
    x = cf.ones((1 << 10,), cf.float32)
    stamp = repr(time.time_ns())
    # a constant no earlier run has seen: a true compile (not a disk-cache hit)
    k = float(int(stamp[-6:]) + 1) / 7.0
    f = _cold_chain(cf, k)
    t0 = time.perf_counter()
    f(x)
    cf.synchronize()
    first = (time.perf_counter() - t0) * 1e3
    steady = host_time_us(lambda: f(x), number=100, repeat=7, warmup=0).median_us
    seconds = []
    for _ in range(processes):
        out = subprocess.run([sys.executable, "-c", _SECOND_PROCESS, repr(k)], check=True,
                             capture_output=True, text=True).stdout
        seconds.append(json.loads(out.strip().splitlines()[-1]))
    second = sorted(seconds, key=lambda r: r["ms"])[len(seconds) // 2]
    return [{"group": "fusion cold start", "case": "first call of a new chain (compile)",
             "ms": round(first, 1)},
            {"group": "fusion cold start",
             "case": "first call in a second process, warm disk cache",
             "ms": round(second["ms"], 2), "disk_hits": second["disk_hits"],
             "compiles": second["compiles"]},
            {"group": "fusion cold start", "case": "later calls (host us)", "us": round(steady, 2)},
            {"group": "fusion cold start", "case": "engine statistics",
             **cf.fusion.stats()}]
