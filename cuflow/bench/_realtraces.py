"""Allocation traces recorded from real workloads: recording, files, and loading.

``python -m cuflow bench traces --record`` records, on a GPU, the allocation
sequences of

* torchvision CNNs (ResNet-50 inference, ResNet-18 training steps) at batch
  sizes varying from 1 to 64 (PyTorch's memory history,
  ``torch.cuda.memory._record_memory_history``);
* a transformer encoder at sequence lengths varying from 7 to 2048;
* a cuflow image pipeline (upload, resize + normalize) over batches of frames
  of varying size and count (the pool's own recording).

Each is stored in ``bench/traces/<name>.json.gz``: per iteration (one forward
pass, one training step, one batch) a list of integers, ``n > 0`` an
allocation of ``n`` bytes (keys are allocation numbers, counted over the whole
trace) and ``-(k + 1)`` the free of allocation ``k``.  The replay
(``cuflow.bench._traces``) turns them into the same ``(op, key, nbytes)``
iterations as the synthetic traces.
"""

from __future__ import annotations

import gzip
import json
import math
import random
from pathlib import Path
from typing import Any

import numpy

import cuflow

from .. import memory

__all__ = ["TRACE_DIR", "decode", "encode", "in_checkout", "load", "record_all", "saved"]

#: the committed traces (a source checkout; an installed package has none)
TRACE_DIR = Path(__file__).resolve().parents[2] / "bench" / "traces"


def in_checkout() -> bool:
    """Whether :data:`TRACE_DIR` lies in a source checkout (its root holds pyproject.toml):
    for an installed package it would be a folder beside site-packages."""
    return (TRACE_DIR.parents[1] / "pyproject.toml").is_file()


def encode(its: list[list[tuple]]) -> list[list[int]]:
    """``(op, key, nbytes)`` iterations -> the file's integers (keys renumbered)."""
    keys: dict[Any, int] = {}
    out, count = [], 0
    for ops in its:
        row = []
        for op, key, n in ops:
            if op == "a":
                keys[key] = count
                count += 1
                row.append(max(int(n), 1))
            elif key in keys:
                row.append(-(keys.pop(key) + 1))
        out.append(row)
    return out


def decode(rows: list[list[int]]) -> list[list[tuple]]:
    """The file's integers -> ``(op, key, nbytes)`` iterations."""
    its, k = [], 0
    for row in rows:
        ops = []
        for v in row:
            if v > 0:
                ops.append(("a", k, v))
                k += 1
            else:
                ops.append(("f", -v - 1, 0))
        its.append(ops)
    return its


def save(path: Path, its: list[list[tuple]], source: str) -> dict[str, Any]:
    rows = encode(its)
    with gzip.open(path, "wt", compresslevel=9) as f:
        json.dump({"source": source, "iterations": rows}, f, separators=(",", ":"))
    return {"file": path.name, "iterations": len(rows), "ops": sum(len(r) for r in rows),
            "kbytes": round(path.stat().st_size / 1024, 1)}


def load(path: Path) -> list[list[tuple]]:
    with gzip.open(path, "rt") as f:
        return decode(json.load(f)["iterations"])


def saved(directory: Path = TRACE_DIR) -> dict[str, Path]:
    """The recorded traces in ``directory`` by name (``real:<file stem>``)."""
    if not directory.is_dir():
        return {}
    return {"real:" + p.name[: -len(".json.gz")]: p
            for p in sorted(directory.glob("*.json.gz"))}


# ----------------------------------------------------------------- recording
def _torch_history(torch: Any, steps: list[Any]) -> list[list[tuple]]:
    """Run each of ``steps`` (callables) under PyTorch's memory history; one iteration each."""
    mem = torch.cuda.memory
    torch.cuda.synchronize()
    mem._record_memory_history(max_entries=1_000_000)
    bounds = []
    try:
        for step in steps:
            step()
            torch.cuda.synchronize()
            bounds.append(len(mem._snapshot()["device_traces"][torch.cuda.current_device()]))
        events = mem._snapshot()["device_traces"][torch.cuda.current_device()]
    finally:
        mem._record_memory_history(enabled=None)
    its, start, live = [], 0, set()
    requested = any(e["action"] == "free_requested" for e in events)
    free_action = "free_requested" if requested else "free_completed"
    for end in bounds:
        ops = []
        for e in events[start:end]:
            if e["action"] == "alloc":
                live.add(e["addr"])
                ops.append(("a", e["addr"], int(e["size"])))
            elif e["action"] == free_action and e["addr"] in live:
                live.discard(e["addr"])
                ops.append(("f", e["addr"], 0))
        its.append(ops)
        start = end
    return its


def record_cnn_inference(torch: Any, torchvision: Any, batches: list[int]) -> list[list[tuple]]:
    model = torchvision.models.resnet50(weights=None).cuda().eval().half()
    with torch.no_grad():
        model(torch.randn(2, 3, 224, 224, device="cuda", dtype=torch.half))

    def step(n: int) -> Any:
        def run() -> None:
            with torch.no_grad():
                x = torch.randn(n, 3, 224, 224, device="cuda", dtype=torch.half)
                model(x).float().softmax(1).argmax(1).cpu()
        return run

    return _torch_history(torch, [step(n) for n in batches])


def record_cnn_training(torch: Any, torchvision: Any, batches: list[int]) -> list[list[tuple]]:
    model = torchvision.models.resnet18(weights=None).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    def step(n: int) -> Any:
        def run() -> None:
            x = torch.randn(n, 3, 224, 224, device="cuda")
            y = torch.randint(0, 1000, (n,), device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return run

    step(2)()  # the optimizer's state exists before the recording
    return _torch_history(torch, [step(n) for n in batches])


def record_transformer(torch: Any, lengths: list[int], batch: int = 8) -> list[list[tuple]]:
    layer = torch.nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048,
                                             batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=6).cuda().eval().half()

    def step(t: int) -> Any:
        def run() -> None:
            with torch.no_grad():
                x = torch.randn(batch, t, 512, device="cuda", dtype=torch.half)
                model(x).mean(1).cpu()
        return run

    return _torch_history(torch, [step(t) for t in lengths])


def record_cuflow_pipeline(cf: Any, batches: list[tuple[int, int, int]]) -> list[list[tuple]]:
    """Upload uint8 frames, resize + normalize to 224 x 224, reduce; one batch per iteration
    (frames of ``(n, h, w)``), recorded by cuflow's pool itself."""
    pool = memory.get_pool()
    rng = numpy.random.default_rng(5)
    its: list[list[tuple]] = []
    for n, h, w in batches:
        host = rng.integers(0, 256, (n, h, w, 3), dtype=numpy.uint8)
        cf.synchronize()
        pool.start_recording()
        try:
            x = cf.asarray(host)
            y = cf.image.resize_normalize(x, (224, 224), mean=(0.485, 0.456, 0.406),
                                          std=(0.229, 0.224, 0.225))
            cf.asnumpy(cf.sum(y, axis=(1, 2, 3)))
            del x, y
        finally:
            events, _ = pool.stop_recording()
        its.append([(op, key, n_) for op, key, n_, _ in events])
    return its


def _log_uniform(rng: random.Random, lo: int, hi: int, n: int) -> list[int]:
    return [int(math.exp(rng.uniform(math.log(lo), math.log(hi)))) for _ in range(n)]


def record_all(directory: Path = TRACE_DIR) -> dict[str, dict[str, Any]]:
    """Record every real workload's trace into ``directory``; a summary per trace."""
    import torch  # noqa: PLC0415  (optional dependency)
    import torchvision  # noqa: PLC0415  (optional dependency)

    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(11)
    out = {}
    batches = [1, 8, 32, 64, 4, 16, 2, 48, 1, 24]
    jobs = {
        "resnet50_infer_bs1-64": lambda: record_cnn_inference(torch, torchvision, batches),
        "resnet18_train_bs2-64": lambda: record_cnn_training(torch, torchvision,
                                                             [2, 16, 64, 8, 32, 4]),
        "transformer_seq7-2048": lambda: record_transformer(
            torch, [7, 2048] + _log_uniform(rng, 7, 2048, 14)),
        "cuflow_pipeline": lambda: record_cuflow_pipeline(
            cuflow, [(rng.choice([1, 2, 4, 8, 16, 32]),) + rng.choice(
                [(480, 640), (720, 1280), (1080, 1920), (360, 480)]) for _ in range(16)]),
    }
    for name, job in jobs.items():
        try:
            its = job()
        except Exception as e:  # noqa: BLE001  (one workload's failure leaves the others)
            out[name] = {"error": f"{type(e).__name__}: {e}"}
            continue
        out[name] = save(directory / f"{name}.json.gz", its, name)
    return out
