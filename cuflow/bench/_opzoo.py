"""The op zoo for ``python -m cuflow bench``: host time of everyday ops on small arrays.

Each op is timed as host microseconds per call (a loop of many calls, one
synchronize at the end) on 1000 float32 elements, for cuflow, plain CuPy and
PyTorch eager, interleaved round by round.  A fused call on 100x100 is set
against one ``add(a, b, dst=c)``; ``slow_function`` (500 steps of four small ops on 5
floats) is timed eager and replayed from a CUDA graph.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy

from ._pipeline import _interleaved_ms, graph_cases

__all__ = ["zoo_cases", "opzoo_rows"]


def zoo_cases(xp, x, y, m, m2, o, x2, f16, kind: str = "cuflow") -> dict[str, Callable[[], object]]:
    """The zoo, written once against ``xp`` (``kind``: cuflow, cupy or torch)."""
    if kind == "torch":
        import torch as T  # noqa: PLC0415  (optional dependency)

        return {
            "x * 2": lambda: x * 2, "x + 1": lambda: x + 1, "-x": lambda: -x,
            "abs(x)": lambda: T.abs(x), "tanh(x)": lambda: T.tanh(x),
            "sqrt(x)": lambda: T.sqrt(x), "exp(x)": lambda: T.exp(x),
            "log(x)": lambda: T.log(x), "maximum(x, 0.0)": lambda: T.clamp_min(x, 0.0),
            "minimum(x, y)": lambda: T.minimum(x, y), "clip(x, 0, 1)": lambda: T.clamp(x, 0, 1),
            "where(m, x, y)": lambda: T.where(m, x, y), "x > 0.5": lambda: x > 0.5,
            "x == y": lambda: x == y, "logical_and(m, m2)": lambda: T.logical_and(m, m2),
            "x.sum()": lambda: x.sum(), "x.mean()": lambda: x.mean(),
            "x.max()": lambda: x.max(), "x.min()": lambda: x.min(),
            "x.argmax()": lambda: x.argmax(), "x2.sum(axis=-1)": lambda: x2.sum(dim=-1),
            "x.astype(float16)": lambda: x.to(T.float16), "x.copy()": lambda: x.clone(),
            "o.fill(0)": lambda: o.fill_(0), "add(x, y, dst=o)": lambda: T.add(x, y, out=o),
            "x + f16 (mixed)": lambda: x + f16,
            "empty(1000)": lambda: T.empty(1000, device=x.device),
            "zeros_like(x)": lambda: T.zeros_like(x),
            "x[1:]": lambda: x[1:], "x2[:, 0]": lambda: x2[:, 0],
        }
    return {
        "x * 2": lambda: x * 2, "x + 1": lambda: x + 1, "-x": lambda: -x,
        "abs(x)": lambda: xp.abs(x), "tanh(x)": lambda: xp.tanh(x),
        "sqrt(x)": lambda: xp.sqrt(x), "exp(x)": lambda: xp.exp(x), "log(x)": lambda: xp.log(x),
        "maximum(x, 0.0)": lambda: xp.maximum(x, 0.0), "minimum(x, y)": lambda: xp.minimum(x, y),
        "clip(x, 0, 1)": lambda: xp.clip(x, 0, 1), "where(m, x, y)": lambda: xp.where(m, x, y),
        "x > 0.5": lambda: x > 0.5, "x == y": lambda: x == y,
        "logical_and(m, m2)": lambda: xp.logical_and(m, m2), "x.sum()": lambda: x.sum(),
        "x.mean()": lambda: x.mean(), "x.max()": lambda: x.max(), "x.min()": lambda: x.min(),
        "x.argmax()": lambda: x.argmax(), "x2.sum(axis=-1)": lambda: x2.sum(axis=-1),
        "x.astype(float16)": lambda: x.astype(numpy.float16), "x.copy()": lambda: x.copy(),
        "o.fill(0)": lambda: o.fill(0),
        "add(x, y, dst=o)": (lambda: xp.add(x, y, dst=o)) if kind == "cuflow" else (
            lambda: xp.add(x, y, out=o)),
        "x + f16 (mixed)": lambda: x + f16,
        "empty(1000)": lambda: xp.empty(1000, numpy.float32),
        "zeros_like(x)": lambda: xp.zeros_like(x),
        "x[1:]": lambda: x[1:], "x2[:, 0]": lambda: x2[:, 0],
    }


def zoo_inputs() -> dict[str, numpy.ndarray]:
    """The zoo's host operands: 1000 float32 (two), their masks, an output, 10x100, float16."""
    rng = numpy.random.default_rng(5)
    xs = rng.uniform(0.1, 2.0, 1000).astype(numpy.float32)
    ys = rng.uniform(0.1, 2.0, 1000).astype(numpy.float32)
    return dict(x=xs, y=ys, m=xs > 1, m2=ys > 1, o=numpy.empty(1000, numpy.float32),
                x2=rng.uniform(0.1, 2.0, (10, 100)).astype(numpy.float32),
                f16=ys.astype(numpy.float16))


def opzoo_rows(cf, quick: bool, interleaved, host_time_us, torch=None,
               slow_function: bool = True) -> list[dict[str, Any]]:
    """Host us per call of the zoo: cuflow, CuPy, torch; a fused 100x100 call; slow_function."""
    import cupy  # noqa: PLC0415  (optional dependency)

    cfa = {k: cf.asarray(v) for k, v in zoo_inputs().items()}
    cpa = {k: v.view(cupy.ndarray) for k, v in cfa.items()}
    impls = {"cuflow": zoo_cases(cf, **cfa), "cupy": zoo_cases(cupy, kind="cupy", **cpa)}
    if torch is not None:
        ta = {k: torch.from_dlpack(v) for k, v in cpa.items()}
        impls["torch"] = zoo_cases(torch, kind="torch", **ta)
    rounds, number = (3, 300) if quick else (7, 2000)
    rows: list[dict[str, Any]] = []
    for op in impls["cuflow"]:
        cases = {f"{name} {op}": impl[op] for name, impl in impls.items()}
        t = interleaved(cases, rounds, number, timer=host_time_us)
        base = t[f"cuflow {op}"]
        r = {"group": "op zoo, 1000 float32, host us per call", "case": op,
             "us": round(base, 2), "cupy_us": round(t[f"cupy {op}"], 2),
             "vs_cupy": round(base / t[f"cupy {op}"], 2)}
        if torch is not None:
            r["torch_us"] = round(t[f"torch {op}"], 2)
            r["vs_torch"] = round(base / t[f"torch {op}"], 2)
        rows.append(r)

    # a fused chain on 100x100 against one add(a, b, dst=c), and against add(a, b): a call
    # that returns a new array pays for its allocation (the pool block and the array object)
    rng = numpy.random.default_rng(5)
    a = cf.asarray(rng.uniform(0.1, 2, (100, 100)).astype(numpy.float32))
    b = cf.asarray(rng.uniform(0.1, 2, (100, 100)).astype(numpy.float32))
    c = cf.empty_like(a)
    gelu = cf.fuse(lambda v: 0.5 * v * (1 + cf.tanh(0.7978845608 * (v + 0.044715 * v * v * v))))
    axpy = cf.fuse(lambda u, v: cf.maximum(1.5 * u - v, 0.0))
    t = interleaved({"add(a, b, dst=c)": lambda: cf.add(a, b, dst=c),
                     "add(a, b), a new array": lambda: cf.add(a, b),
                     "fused gelu(a)": lambda: gelu(a),
                     "fused gelu(a, dst=c)": lambda: gelu(a, dst=c),
                     "fused relu(1.5a - b)": lambda: axpy(a, b)}, rounds, number,
                    timer=host_time_us)
    base = t["add(a, b, dst=c)"]
    for k, us in t.items():
        rows.append({"group": "fused call on 100x100 float32, host us", "case": k,
                     "us": round(us, 2), "vs_add_dst": round(us / base, 2)})

    if slow_function:
        g = _interleaved_ms(graph_cases(cf, torch), 3 if quick else 7,
                            lambda: cupy.cuda.Device().synchronize())
        for k, ms in g.items():
            rows.append({"group": "slow_function (500 steps on 5 floats), ms", "case": k,
                         "ms": round(ms, 3)})
    return rows
