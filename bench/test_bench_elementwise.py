"""cuflow's elementwise engine against CuPy's ufuncs, with dst=, from 100 to 1e8 elements.

Per-call time from loops of calls closed by one synchronize: host-bound for
small arrays, device-bound (and reported against copy bandwidth) for large.
"""

from __future__ import annotations

import pytest

import cuflow
from cuflow.core import runtime

SIZES = [100, 10_000, 1_000_000, 100_000_000]


# lib varies fastest, so each cuflow case runs right beside its CuPy twin (a shared host
# drifts between distant time windows, which would land on one side only)
@pytest.mark.parametrize("lib", ["cuflow", "cupy"])
@pytest.mark.parametrize("n", SIZES, ids=lambda n: f"{n:.0e}")
@pytest.mark.parametrize("op", ["add", "multiply", "maximum", "negative"])
def test_elementwise(gpu_bench, copy_tbps, benchmark, lib, op, n):
    import cupy  # noqa: PLC0415  (optional dependency)

    benchmark.group = f"elementwise float32 {op} n={n:.0e} (us/call)"
    x = cuflow.testing.random_array((n,), "float32")
    y = cuflow.testing.random_array((n,), "float32")
    z = cuflow.empty_like(x)
    if lib == "cupy":
        x, y, z = (v.view(cupy.ndarray) for v in (x, y, z))
        f = getattr(cupy, op)
        fn = (lambda: f(x, y, z)) if f.nin == 2 else (lambda: f(x, z))
    else:
        f = getattr(cuflow, op)
        fn = (lambda: f(x, y, dst=z)) if f.nin == 2 else (lambda: f(x, dst=z))
    nbytes = (3 if op != "negative" else 2) * x.nbytes
    gpu_bench(fn, number=max(10, min(2000, int(2e9 // (n * 12)))), rounds=10,
              nbytes=nbytes, copy_tbps=copy_tbps)


# The launch path alone: the compiled launcher (_ewlaunch.c, what pip install builds) against
# the backend's ufunc (what runs without a C compiler, or with CUFLOW_EW_ENGINE=0), beside
# CuPy, on a host-bound small add.
@pytest.mark.parametrize("launch", ["compiled", "backend", "cupy"])
def test_add_dst_launch_path(gpu_bench, benchmark, monkeypatch, launch):
    import cupy  # noqa: PLC0415  (optional dependency)

    benchmark.group = "add(a, b, dst=c) 100x100 float32, launch path (us/call)"
    a = cuflow.testing.random_array((100, 100), "float32")
    b = cuflow.testing.random_array((100, 100), "float32")
    c = cuflow.empty_like(a)
    if launch == "cupy":
        pa, pb, pc = (v.view(cupy.ndarray) for v in (a, b, c))
        fn = lambda: cupy.add(pa, pb, out=pc)  # noqa: E731
    else:
        fast = runtime().fast  # the elementwise launcher the ops ask the runtime for
        if fast is None or fast.compiled is None:
            pytest.skip("the _ewlaunch extension was not built (or CUFLOW_FAST=0)")
        if launch == "backend":
            monkeypatch.setattr(fast, "ew", lambda op, args, dst: None)
        fn = lambda: cuflow.add(a, b, dst=c)  # noqa: E731
    gpu_bench(fn, number=2000, rounds=15)
