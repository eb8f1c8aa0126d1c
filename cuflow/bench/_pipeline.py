"""Pipeline comparisons for ``python -m cuflow bench`` and ``bench/test_bench_pipeline.py``.

* the documented CUDA-graph example (500 x 4 small ops on 5 floats): eager
  against replay, for cuflow, CuPy and PyTorch;
* the documented overlap example (an 8192^2 matmul and 16 pinned 64 MiB
  uploads): one stream against two;
* Bufferizer appends of 1080p frames against the device-to-device copy;
* the pipeline's frames per second at 1080p -> 640x640, batch 16, against a
  naive CuPy pipeline (synchronous copies, unfused ops, new arrays per frame)
  and a PyTorch/torchvision one, with the GPU's idle time and the copy /
  compute overlap read from a CUPTI trace (``torch.profiler``).

Wall times are medians of rounds interleaved across the implementations.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy

__all__ = ["CHAIN_STEPS", "graph_cases", "overlap_cases", "pipeline_cases", "pipeline_rows",
           "gpu_activity"]

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
CHAIN_STEPS = 500
H, W, S, BATCH = 1080, 1920, 640, 16


def _wall_ms(fn: Callable[[], object], sync: Callable[[], None]) -> float:
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return (time.perf_counter() - t0) * 1e3


def _interleaved_ms(cases: dict[str, Callable[[], object]], rounds: int,
                    sync: Callable[[], None]) -> dict[str, float]:
    for fn in cases.values():  # warm-up: compile, allocate, capture
        _wall_ms(fn, sync)
    samples: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(rounds):
        for k, fn in cases.items():
            samples[k].append(_wall_ms(fn, sync))
    return {k: statistics.median(v) for k, v in samples.items()}


# ----------------------------------------------------------------------- graphs
def graph_cases(cf, torch=None) -> dict[str, Callable[[], object]]:
    """``slow_function``, 500 steps of four small ops on 5 floats (sigmoid spelled tanh, as
    NumPy/CuPy name it), eager and replayed."""
    import cupy  # noqa: PLC0415  (optional dependency)

    def chain(xp):
        relu = xp.relu if xp is torch else (lambda a: xp.maximum(a, 0.0))

        def f(x):
            for _ in range(CHAIN_STEPS):
                y = x * 2
                z = xp.tanh(y)
                a = z + 5.0
                x = relu(a)
            return x
        return f

    x = cf.ones((5,), dtype=cf.float32)
    cases: dict[str, Callable[[], object]] = {}
    f_cf = chain(cf)
    step = cf.graph.capture(f_cf, x)
    cases["cuflow eager"] = lambda: f_cf(x)
    # a replay on the captured inputs, as CuPy's and torch's below; step(x) copies x in first
    cases["cuflow graph replay"] = step.replay
    cases["cuflow graph call, x copied in"] = lambda: step(x)
    px = cupy.ones((5,), dtype=cupy.float32)
    f_cp = chain(cupy)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        f_cp(px)
        s.begin_capture()
        f_cp(px)
        g = s.end_capture()
    cases["cupy eager"] = lambda: f_cp(px)
    cases["cupy graph replay"] = lambda: g.launch(stream=cupy.cuda.get_current_stream())
    if torch is not None:
        tx = torch.ones((5,), device="cuda")
        f_t = chain(torch)
        tg = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            f_t(tx)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(tg):
            f_t(tx)
        cases["torch eager"] = lambda: f_t(tx)
        cases["torch graph replay"] = tg.replay
    return cases


# ---------------------------------------------------------------------- overlap
def overlap_cases(cf) -> dict[str, Callable[[], object]]:
    """The stream example: a big matmul and 16 pinned 64 MiB uploads."""
    a = cf.testing.random_array((8192, 8192), "float32")
    c = cf.empty_like(a)
    n = 64 << 20
    hosts = [cf.memory.empty_pinned((n // 4,), numpy.float32) for _ in range(16)]
    for h in hosts:
        h[:] = 1.0
    devs = [cf.empty((n // 4,), dtype=cf.float32) for _ in range(16)]
    compute, h2d = cf.streams(2)

    def sequential():
        cf.matmul(a, a, dst=c, stream=compute)
        for h, d in zip(hosts, devs, strict=True):
            cf.copy(h, dst=d, stream=compute)

    def two_streams():
        cf.matmul(a, a, dst=c, stream=compute)
        for h, d in zip(hosts, devs, strict=True):
            cf.copy(h, dst=d, stream=h2d)

    return {"cuflow one stream": sequential, "cuflow two streams": two_streams}


# -------------------------------------------------------------------- pipelines
def _frames(n_distinct: int = 8) -> list[numpy.ndarray]:
    rng = numpy.random.default_rng(3)
    return [rng.integers(0, 256, (H, W, 3), dtype=numpy.uint8) for _ in range(n_distinct)]


def pipeline_cases(cf, n_frames: int, torch=None,
                   pinned: bool = False) -> dict[str, Callable[[], object]]:
    """Each case turns ``n_frames`` host 1080p frames into (16, 3, 640, 640) float32 batches.

    ``pinned``: the frames sit in pinned memory (a decoder writing into pinned buffers),
    the same frames for every implementation.
    """
    import cupy  # noqa: PLC0415  (optional dependency)
    import cupyx.scipy.ndimage as ndi  # noqa: PLC0415  (optional dependency)

    pool = _frames()
    if pinned:
        pool = [numpy.copyto(p := cf.memory.empty_pinned(f.shape, f.dtype), f) or p
                for f in pool]
    frames = [pool[i % len(pool)] for i in range(n_frames)]
    sink: list[Any] = []
    # the frames sit in a list that nothing writes to: uploads may run back to back
    pipe = cf.Pipeline((S, S), BATCH, mean=MEAN, std=STD, frames_reused=False)

    def cuflow_pipeline():
        for batch in pipe.batches(frames):
            sink.append(batch)  # a consumer would launch the model here
        sink.clear()

    mean_c = cupy.asarray(MEAN, numpy.float32)
    std_c = cupy.asarray(STD, numpy.float32)

    def naive_cupy():
        batch = []
        for f in frames:
            x = cupy.asarray(f)                      # synchronous pageable upload
            x = x.astype(cupy.float32) / 255
            x = ndi.zoom(x, (S / H, S / W, 1), order=1)
            x = (x - mean_c) / std_c
            batch.append(cupy.ascontiguousarray(x.transpose(2, 0, 1)))
            if len(batch) == BATCH:
                sink.append(cupy.stack(batch))
                batch = []
        if batch:
            sink.append(cupy.stack(batch))
        sink.clear()

    cases = {"cuflow Pipeline": cuflow_pipeline, "naive cupy": naive_cupy}
    if torch is not None:
        import torchvision.transforms.v2.functional as tvf  # noqa: PLC0415  (optional dependency)

        out = torch.empty((BATCH, 3, S, S), device="cuda")

        def torchvision_pipeline():
            i = 0
            for f in frames:
                t = torch.from_numpy(f).pin_memory().cuda(non_blocking=True)
                t = tvf.resize(t.permute(2, 0, 1), [S, S], antialias=False)
                t = tvf.normalize(t.float().div_(255), MEAN, STD)
                out[i].copy_(t)
                i += 1
                if i == BATCH:
                    sink.append(out)
                    i = 0
            sink.clear()

        cases["torch+torchvision"] = torchvision_pipeline
    return cases


def gpu_activity(fn: Callable[[], object], torch) -> dict[str, float]:
    """Busy / idle time of the GPU and copy-compute overlap while ``fn`` runs (CUPTI trace).

    CUPTI stays attached to the process afterwards, and every later CUDA runtime
    call costs more: take host timings before calling this.
    """
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415  (optional dependency)

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    finally:
        os.unlink(path)
    kern, h2d, allv = [], [], []
    for e in events:
        cat = e.get("cat", "")
        if e.get("ph") != "X" or cat not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        iv = (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        allv.append(iv)
        if cat == "kernel":
            kern.append(iv)
        elif "HtoD" in e.get("name", ""):
            h2d.append(iv)
    if not allv:
        return {}
    span = max(b for _, b in allv) - min(a for a, _ in allv)
    busy = _union_len(allv)
    kern_u = _merge(kern)
    overlapped = sum(_intersect_len(iv, kern_u) for iv in h2d)
    h2d_total = sum(b - a for a, b in h2d)
    return {"span_ms": round(span / 1e3, 3), "gpu_idle_pct": round(100 * (span - busy) / span, 1),
            "kernels": len(kern), "h2d_copies": len(h2d),
            "h2d_overlapped_with_kernels_pct": round(100 * overlapped / h2d_total, 1)
            if h2d_total else 0.0}


def _merge(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _union_len(iv: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in _merge(iv))


def _intersect_len(x: tuple[float, float], merged: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(x[1], b) - max(x[0], a)) for a, b in merged)


# ------------------------------------------------------------------ the rows
def pipeline_rows(cf, quick: bool, copy_tbps: float, device_time_us, host_time_us,
                  torch=None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    rounds = 3 if quick else 7
    sync = cf.synchronize

    # 1. CUDA graphs.
    t = _interleaved_ms(graph_cases(cf, torch), rounds, sync)
    group = f"CUDA graph: {CHAIN_STEPS} x 4 small ops on 5 floats (ms per call)"
    for lib in ("cuflow", "cupy", "torch"):
        if f"{lib} eager" in t:
            e, g = t[f"{lib} eager"], t[f"{lib} graph replay"]
            rows.append({"group": group, "case": f"{lib} eager", "ms": round(e, 3)})
            rows.append({"group": group, "case": f"{lib} graph replay", "ms": round(g, 3),
                         "speedup_vs_eager": round(e / g, 2)})
    c = t["cuflow graph call, x copied in"]
    rows.append({"group": group, "case": "cuflow graph call, x copied in", "ms": round(c, 3),
                 "speedup_vs_eager": round(t["cuflow eager"] / c, 2)})

    # 2. Overlapping uploads with compute.
    t = _interleaved_ms(overlap_cases(cf), rounds, sync)
    group = "overlap: matmul 8192^2 + 16 pinned 64 MiB uploads (ms)"
    seq = t["cuflow one stream"]
    for k, v in t.items():
        rows.append({"group": group, "case": k, "ms": round(v, 3),
                     "speedup_vs_one_stream": round(seq / v, 2)})

    # 3. Bufferizer appends of 1080p uint8 frames.
    group = f"Bufferizer: {BATCH} x 1080p uint8 frames"
    frames = [cf.testing.random_array((H, W, 3), "uint8") for _ in range(BATCH)]
    batch = cf.testing.random_array((BATCH, H, W, 3), "uint8")
    # on the current stream: the device timer's events are recorded there
    buf = cf.Bufferizer((H, W, 3), BATCH, cf.uint8, stream=cf.current_stream())
    nbytes = 2 * BATCH * buf.element_nbytes

    def fill_one():
        buf.reset()
        for f in frames:
            buf.append_one(f)

    def fill_batch():
        buf.reset()
        buf.append_multiple(batch)

    ref = cf.empty_like(batch)
    for name, fn in (("append_one x16", fill_one), ("append_multiple (16, ...)", fill_batch),
                     ("d2d copy of the same bytes", lambda: cf.copy(batch, dst=ref))):
        dev = device_time_us(fn, number=5, repeat=5 if quick else 15).median_us
        host = host_time_us(fn, number=20, repeat=3 if quick else 7, warmup=5).median_us
        rows.append({"group": group, "case": name, "device_us": round(dev, 2),
                     "pct_of_copy_bw": round(100 * nbytes / (dev * 1e-6) / (copy_tbps * 1e12), 1),
                     "host_us_per_append": round(host / (BATCH if "x16" in name else 1), 2)})

    # The default Bufferizer has a stream of its own: an append also orders it after the
    # producer's stream (an event) and keeps the frame's memory from reuse until the copy
    # has read it (memory.record_stream).
    own = cf.Bufferizer((H, W, 3), BATCH, cf.uint8)

    def fill_own():
        own.reset()
        for f in frames:
            own.append_one(f)

    group = "Bufferizer: append_one of a 1080p uint8 frame, host time"
    for name, fn in (("producer's stream is the Bufferizer's", fill_one),
                     ("Bufferizer's own stream (the default)", fill_own)):
        host = host_time_us(fn, number=20, repeat=3 if quick else 7, warmup=5).median_us
        rows.append({"group": group, "case": name, "host_us_per_append": round(host / BATCH, 2)})
    own.stream.synchronize()

    # 4. The pipeline, frames per second and GPU activity, from pageable and pinned frames.
    # The activity traces come last: CUPTI stays attached to the process once
    # torch.profiler has run, and every later CUDA runtime call pays for it, which would
    # inflate host latencies measured afterwards (such as the pool hit of
    # bench/test_bench_memory.py::test_empty_hit_latency).
    n = 64 if quick else 256
    traced = []
    for pinned in (False, True):
        cases = pipeline_cases(cf, n, torch, pinned=pinned)
        t = _interleaved_ms(cases, 2 if quick else 5, sync)
        group = (f"pipeline: {n} {'pinned' if pinned else 'pageable'} host 1080p frames -> "
                 f"{BATCH} x 3 x {S} x {S} float32 batches")
        naive = n / t["naive cupy"] * 1e3
        for k, v in t.items():
            fps = n / v * 1e3
            rows.append({"group": group, "case": k, "fps": round(fps, 1), "ms": round(v, 1),
                         "x_naive_cupy": round(fps / naive, 2)})
            traced.append((rows[-1], cases[k]))
    if torch is not None:
        for r, fn in traced:
            r.update(gpu_activity(fn, torch))
    return rows
