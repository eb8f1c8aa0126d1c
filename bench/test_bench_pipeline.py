"""Pipelines: the documented graph and stream-overlap examples, Bufferizer appends, and
the end-to-end pipeline against a naive CuPy one and PyTorch/torchvision.

Each round is one whole call closed by a device synchronize (wall time of the GPU work).
The case builders are shared with ``python -m cuflow bench`` (``cuflow._bench_pipeline``),
which also reports the ratios and the GPU activity of the pipelines.
"""

from __future__ import annotations

import pytest

import cuflow
from cuflow.bench import _pipeline as bp
from cuflow.bench._headline import _torch


def _run(benchmark, fn, rounds):
    def once():
        fn()
        cuflow.synchronize()

    benchmark.pedantic(once, rounds=rounds, iterations=1, warmup_rounds=2)


@pytest.fixture(scope="module")
def graph_cases(backend):
    return bp.graph_cases(cuflow, _torch())


@pytest.mark.benchmark(group=f"CUDA graph: {bp.CHAIN_STEPS} x 4 small ops (s per call)")
@pytest.mark.parametrize("case", ["cuflow eager", "cuflow graph replay",
                                  "cuflow graph call, x copied in", "cupy eager",
                                  "cupy graph replay", "torch eager", "torch graph replay"])
def test_graph_example(benchmark, graph_cases, case):
    if case not in graph_cases:
        pytest.skip("PyTorch with CUDA is not installed")
    _run(benchmark, graph_cases[case], rounds=15)


@pytest.fixture(scope="module")
def overlap_cases(backend):
    return bp.overlap_cases(cuflow)


@pytest.mark.benchmark(group="overlap: matmul 8192^2 + 16 pinned 64 MiB uploads")
@pytest.mark.parametrize("case", ["cuflow one stream", "cuflow two streams"])
def test_overlap_example(benchmark, overlap_cases, case):
    _run(benchmark, overlap_cases[case], rounds=10)


@pytest.mark.benchmark(group="Bufferizer: 16 x 1080p uint8 frames")
@pytest.mark.parametrize("mode", ["append_one x16", "append_multiple"])
def test_bufferizer_append(benchmark, backend, copy_tbps, mode):
    frames = [cuflow.testing.random_array((bp.H, bp.W, 3), "uint8") for _ in range(bp.BATCH)]
    batch = cuflow.testing.random_array((bp.BATCH, bp.H, bp.W, 3), "uint8")
    buf = cuflow.Bufferizer((bp.H, bp.W, 3), bp.BATCH, cuflow.uint8)

    def fill():
        buf.reset()
        if mode == "append_multiple":
            buf.append_multiple(batch)
        else:
            for f in frames:
                buf.append_one(f)

    _run(benchmark, fill, rounds=30)
    nbytes = 2 * buf.nbytes
    benchmark.extra_info.update(bytes_moved=nbytes, copy_TBps=copy_tbps,
                                pct_of_copy_bandwidth=100 * nbytes / benchmark.stats.stats.median
                                / (copy_tbps * 1e12))


@pytest.fixture(scope="module")
def pipeline_cases(backend):
    return bp.pipeline_cases(cuflow, 128, _torch())


@pytest.mark.benchmark(group="pipeline: 128 host 1080p frames -> 16x3x640x640 float32 batches")
@pytest.mark.parametrize("case", ["cuflow Pipeline", "naive cupy", "torch+torchvision"])
def test_pipeline_fps(benchmark, pipeline_cases, case):
    if case not in pipeline_cases:
        pytest.skip("PyTorch with CUDA is not installed")
    _run(benchmark, pipeline_cases[case], rounds=5)
    benchmark.extra_info["frames"] = 128
    benchmark.extra_info["fps"] = 128 / benchmark.stats.stats.median
