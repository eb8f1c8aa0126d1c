"""pytest-benchmark fixtures for GPU work: a pytest plugin (``pytest_plugins = ["cuflow.bench.fixtures"]``).

* ``gpu_bench(fn, number=...)`` times ``number`` calls of ``fn`` followed by one
  device synchronize, per round, after explicit warm-up rounds: the timer never
  stops while GPU work is still queued.  Reported times are per call.
* ``backend`` skips a benchmark where no GPU is usable; ``copy_tbps`` is the
  device-to-device copy bandwidth, measured once per session.
* Machine info gets the GPU, compute capability, driver/runtime and library versions.
* ``extra_info`` carries bytes moved and achieved bandwidth where it means something.

Run: ``python -m pytest bench --benchmark-enable --benchmark-json bench/results/<gpu-kind>-bench.json``
(``bench/gpu_run.sh`` does it, with the rest of a GPU run's evidence).
"""

from __future__ import annotations

import platform

import pytest

import cuflow

from ..testing import copy_bandwidth_tbps

__all__ = ["backend", "copy_tbps", "gpu_bench", "pytest_benchmark_update_machine_info"]


def pytest_benchmark_update_machine_info(config, machine_info):
    info = cuflow.backend_info()
    machine_info["cuflow"] = {**info, "cuflow": cuflow.__version__,
                              "python": platform.python_version()}
    try:
        import torch  # noqa: PLC0415  (optional dependency)

        machine_info["cuflow"]["torch"] = torch.__version__
    except Exception:
        pass


@pytest.fixture(scope="session")
def backend():
    b = cuflow.get_backend()
    if b.name != "cupy":
        pytest.skip("benchmarks measure the GPU; no usable GPU here")
    return b


@pytest.fixture(scope="session")
def copy_tbps(backend):
    return copy_bandwidth_tbps(1 << 30)


@pytest.fixture
def gpu_bench(benchmark, backend):
    def run(fn, *, number=1000, rounds=15, warmup_rounds=3, nbytes=None, copy_tbps=None):
        def loop():
            for _ in range(number):
                fn()
            cuflow.synchronize()

        benchmark.extra_info["calls_per_round"] = number
        result = benchmark.pedantic(loop, rounds=rounds, iterations=1, warmup_rounds=warmup_rounds)
        per_call_us = benchmark.stats.stats.median / number * 1e6
        benchmark.extra_info["median_us_per_call"] = per_call_us
        if nbytes is not None:
            benchmark.extra_info["bytes_moved"] = nbytes
            tbps = nbytes / (per_call_us * 1e-6) / 1e12
            benchmark.extra_info["achieved_TBps"] = tbps
            if copy_tbps:
                benchmark.extra_info["copy_TBps"] = copy_tbps
                benchmark.extra_info["pct_of_copy_bandwidth"] = 100 * tbps / copy_tbps
        return result

    return run
