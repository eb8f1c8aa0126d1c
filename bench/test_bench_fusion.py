"""Fused chains (``cuflow.fuse``) against unfused CuPy, ``cupy.fuse`` and PyTorch, 16M+ elements.

The chains are those of ``python -m cuflow bench``'s fusion section
(``cuflow/bench/_fusion.py``): one input and two, uint8 to float, float16,
per-channel broadcast, where/clip, transcendental, trailing reductions.  Per-call
time from loops closed by one synchronize (device-bound at these sizes), with
the bytes moved against the copy bandwidth.  Also: the host time of a fused
call on 100x100 beside one ``add(a, b, dst=c)``, and the op zoo's host times.
"""

from __future__ import annotations

import numpy
import pytest

import cuflow
from cuflow.bench import _fusion, _opzoo


@pytest.mark.parametrize("lib", ["cuflow.fuse", "cupy", "cupy.fuse", "torch", "torch.compile"])
@pytest.mark.parametrize("chain", list(_fusion.CHAINS))
def test_chain(gpu_bench, copy_tbps, benchmark, lib, chain):
    import cupy  # noqa: PLC0415  (optional dependency)

    benchmark.group = f"fused chain {chain} (us/call)"
    fn_chain, _ = _fusion.CHAINS[chain]
    host = _fusion._inputs(chain, numpy.random.default_rng(3))
    args = tuple(cuflow.asarray(a) for a in host)
    torch = None
    if lib.startswith("torch"):
        torch = pytest.importorskip("torch")
    spaces = _fusion.namespaces(cuflow, cupy, torch)
    if lib == "cuflow.fuse":
        m = spaces["cuflow"]
        f = cuflow.fuse(lambda *a: fn_chain(m, *a))
        fn = lambda: f(*args)  # noqa: E731
    elif lib.startswith("cupy"):
        m = spaces["cupy"]
        cargs = tuple(a.view(cupy.ndarray) for a in args)
        if lib == "cupy":
            fn = lambda: fn_chain(m, *cargs)  # noqa: E731
        else:
            g = cupy.fuse(kernel_name=f"bench_{chain}")(lambda *a: fn_chain(m, *a))
            try:
                g(*cargs)
            except Exception as e:  # noqa: BLE001
                pytest.skip(f"cupy.fuse cannot run {chain}: {type(e).__name__}")
            fn = lambda: g(*cargs)  # noqa: E731
    else:
        m = spaces["torch"]
        targs = tuple(torch.from_dlpack(a) for a in args)
        g = (lambda *a: fn_chain(m, *a))
        if lib == "torch.compile":
            torch._dynamo.reset()  # each chain compiled afresh (no recompile limit reached)
            g = torch.compile(g)
        fn = lambda: g(*targs)  # noqa: E731
    out = fn()
    nbytes = sum(a.nbytes for a in args) + int(numpy.prod(out.shape)) * out.dtype.itemsize
    gpu_bench(fn, number=50, rounds=10, nbytes=nbytes, copy_tbps=copy_tbps)


@pytest.mark.parametrize("case", ["add(a, b, dst=c)", "fused gelu(a)", "fused gelu(a, dst=c)"])
def test_fused_call_host_time(gpu_bench, benchmark, case):
    benchmark.group = "fused call on 100x100 float32 vs add(dst=) (host us/call)"
    a = cuflow.testing.random_array((100, 100), "float32")
    b = cuflow.testing.random_array((100, 100), "float32")
    c = cuflow.empty_like(a)
    gelu = cuflow.fuse(lambda v: 0.5 * v * (1 + cuflow.tanh(0.79788456 * (v + 0.044715 * v ** 3))))
    fn = {"add(a, b, dst=c)": lambda: cuflow.add(a, b, dst=c),
          "fused gelu(a)": lambda: gelu(a),
          "fused gelu(a, dst=c)": lambda: gelu(a, dst=c)}[case]
    gpu_bench(fn, number=2000, rounds=15)


@pytest.mark.parametrize("lib", ["cuflow", "cupy", "torch"])
@pytest.mark.parametrize("op", list(_opzoo.zoo_cases(None, *([None] * 7))))
def test_op_zoo(gpu_bench, benchmark, lib, op):
    import cupy  # noqa: PLC0415  (optional dependency)

    benchmark.group = f"op zoo {op}, 1000 float32 (host us/call)"
    arrs = {k: cuflow.asarray(v) for k, v in _opzoo.zoo_inputs().items()}
    if lib == "cuflow":
        fn = _opzoo.zoo_cases(cuflow, **arrs)[op]
    elif lib == "cupy":
        fn = _opzoo.zoo_cases(cupy, kind="cupy",
                              **{k: v.view(cupy.ndarray) for k, v in arrs.items()})[op]
    else:
        torch = pytest.importorskip("torch")
        fn = _opzoo.zoo_cases(torch, kind="torch",
                              **{k: torch.from_dlpack(v) for k, v in arrs.items()})[op]
    gpu_bench(fn, number=2000, rounds=10)
