"""Core benchmarks: Dolphin's documented dst= example, per-op overhead, a large add.

Host times (small arrays) are per call from loops of many calls with one
synchronize per round; the large add reports achieved bandwidth against the
device-to-device copy bandwidth measured in the same pytest session.
"""

from __future__ import annotations

import pytest

import cuflow

SMALL = (100, 100)
LARGE = (2160, 3840)


@pytest.fixture(scope="module")
def small(backend):
    a = cuflow.testing.random_array(SMALL, "float32")
    b = cuflow.testing.random_array(SMALL, "float32")
    return a, b, cuflow.empty_like(a)


def _plain(x):
    import cupy  # noqa: PLC0415  (optional dependency)

    return x.view(cupy.ndarray)


@pytest.mark.benchmark(group="dolphin example 100x100 float32 (host us/call)")
@pytest.mark.parametrize("impl", ["cuflow c=a+b", "cuflow add(dst=c)", "cupy c=a+b",
                                  "cupy add(out=c)", "torch a+b", "torch add(out=c)"])
def test_small_add(gpu_bench, small, impl):
    import cupy  # noqa: PLC0415  (optional dependency)

    a, b, c = small
    if impl.startswith("torch"):
        torch = pytest.importorskip("torch")
        ta, tb, tc = (torch.from_dlpack(x) for x in (a, b, c))
        fn = (lambda: ta + tb) if impl == "torch a+b" else (lambda: torch.add(ta, tb, out=tc))
    elif impl.startswith("cupy"):
        pa, pb, pc = _plain(a), _plain(b), _plain(c)
        fn = (lambda: pa + pb) if impl == "cupy c=a+b" else (lambda: cupy.add(pa, pb, out=pc))
    else:
        fn = (lambda: a + b) if impl == "cuflow c=a+b" else (
            lambda: cuflow.add(src=a, other=b, dst=c))
    gpu_bench(fn, number=2000)


@pytest.mark.benchmark(group="overhead 100x100 float32 (host us/call)")
@pytest.mark.parametrize("lib", ["cuflow", "cupy"])
@pytest.mark.parametrize("op", ["sum", "slice"])
def test_small_overhead(gpu_bench, small, lib, op):
    a = small[0] if lib == "cuflow" else _plain(small[0])
    fn = (lambda: a.sum()) if op == "sum" else (lambda: a[1:])
    gpu_bench(fn, number=2000)


@pytest.mark.benchmark(group="add 2160x3840 float32 (bandwidth)")
@pytest.mark.parametrize("impl", ["cuflow add(dst=)", "cupy add(out=)", "torch add(out=)"])
def test_large_add(gpu_bench, backend, copy_tbps, impl):
    import cupy  # noqa: PLC0415  (optional dependency)

    x = cuflow.testing.random_array(LARGE, "float32")
    y = cuflow.testing.random_array(LARGE, "float32")
    z = cuflow.empty_like(x)
    if impl.startswith("cuflow"):
        fn = lambda: cuflow.add(x, y, dst=z)  # noqa: E731
    elif impl.startswith("cupy"):
        px, py, pz = _plain(x), _plain(y), _plain(z)
        fn = lambda: cupy.add(px, py, out=pz)  # noqa: E731
    else:
        torch = pytest.importorskip("torch")
        tx, ty, tz = (torch.from_dlpack(v) for v in (x, y, z))
        fn = lambda: torch.add(tx, ty, out=tz)  # noqa: E731
    gpu_bench(fn, number=50, rounds=20, nbytes=3 * x.nbytes, copy_tbps=copy_tbps)
