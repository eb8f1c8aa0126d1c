"""Backend fixtures: one test body runs on every backend present.

``cf`` is the cuflow module with the backend of the parameter switched on;
parameters are ``numpy`` (always) and ``cupy`` (marked ``gpu``; skipped with a
one-line reason when no GPU is usable).
"""

from __future__ import annotations

import collections
import warnings

import numpy as np
import pytest

import cuflow
from cuflow.core._runtime import probe_cupy as _probe_cupy

_CUPY, _NGPU, _WHY = _probe_cupy()
HAVE_GPU = _NGPU > 0


def pytest_collection_modifyitems(config, items):
    if HAVE_GPU:
        return
    skip = pytest.mark.skip(reason=f"needs a GPU ({_WHY})")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter):
    """One line per skip reason, with how many tests it skipped (``-rs`` lists them all)."""
    reasons: collections.Counter[str] = collections.Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    if reasons:
        terminalreporter.section("skipped, by reason", sep="-")
        for reason, n in reasons.most_common():
            terminalreporter.write_line(f"{n:6d}  {reason}")


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def cf(request):
    """cuflow, on the backend named by the parameter."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cuflow.set_backend(request.param)
    return cuflow


@pytest.fixture
def gpu_cf():
    """cuflow on the CuPy backend (for gpu-marked tests)."""
    cuflow.set_backend("cupy")
    return cuflow


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def poisons():
    """``poisons(shape, dtype)``: two outputs of the active backend, one filled with
    ``cuflow.testing.poisoned``'s value, one with the other end of the dtype's range.

    No element can equal both fills, so an element an op leaves unwritten shows in one of
    the two outputs; a single fill can equal a correct result (True for a comparison, an
    integer's max, NaN where the op gives NaN)."""
    from cuflow.testing import poisoned

    def make(shape, dtype):
        dt = np.dtype(dtype)
        if dt.kind == "b":
            other = False
        elif dt.kind in "iu":
            other = np.iinfo(dt).min
        else:
            other = np.finfo(dt).max
        return poisoned(shape, dt), cuflow.full(shape, other, dtype=dt)

    return make


_SPIN_SRC = r"""
extern "C" __global__ void cuflow_test_spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}"""
SPIN_MS = 150  # long against everything a test queues after it, short against a test's time


def _spin(stream, ms: float = SPIN_MS) -> None:
    import gc

    import cupy

    gc.collect()  # the memory of streams destroyed so far is taken back first: the pool
    cuflow.memory.empty_cache()  # synchronizes the device for it, which would wait for the spin
    kernel = cupy.RawKernel(_SPIN_SRC, "cuflow_test_spin")  # (CuPy caches the module)
    with getattr(stream, "cupy", stream):
        kernel((1,), (1,), (np.uint64(int(ms * 1e6)),))


@pytest.fixture
def spin():
    """``spin(stream, ms=150)`` holds ``stream`` (a cuflow or CuPy stream) busy for ``ms``
    ms of GPU time: work queued on another stream and not ordered after it runs first, so a
    missing ordering shows as a wrong value read back."""
    return _spin
