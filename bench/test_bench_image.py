"""cuflow.image's fused kernels against the unfused CuPy chain, 8 frames of 1080p.

Per-call time from loops of calls closed by one synchronize (device-bound at
these sizes); three input batches are rotated so the L2 cache does not
flatter the fused kernels.  ``extra_info`` has the bytes that must move and
the fraction of copy bandwidth reached.  The full comparison (PyTorch eager,
torch.compile, torchvision, batch 1) is in ``python -m cuflow bench``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import cuflow
from cuflow import image

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
N, H, W, S = 8, 1080, 1920, 640


@pytest.fixture(scope="module")
def frames(backend):
    rng = np.random.default_rng(0)
    return [cuflow.asarray(rng.integers(0, 256, (N, H, W, 3), dtype=np.uint8)) for _ in range(3)]


def _cases(frames):
    import cupy  # noqa: PLC0415  (optional dependency)

    mean, std = cupy.asarray(MEAN, np.float32), cupy.asarray(STD, np.float32)
    o32 = cuflow.empty((N, 3, H, W), np.float32)
    o16 = cuflow.empty((N, 3, H, W), np.float16)
    o640 = cuflow.empty((N, 3, S, S), np.float32)
    nv = [f.reshape(N, -1)[:, : H * W * 3 // 2].reshape(N, H * 3 // 2, W) for f in frames]
    nv = [cuflow.ascontiguousarray(x) for x in nv]
    return {
        "normalize float32": (lambda x, _: image.normalize(x, mean=MEAN, std=STD, dst=o32),
                              frames, N * H * W * 3 * 5),
        "normalize float16": (lambda x, _: image.normalize(x, mean=MEAN, std=STD,
                                                           dtype=np.float16, dst=o16),
                              frames, N * H * W * 3 * 3),
        "normalize cupy chain": (lambda x, _: cupy.ascontiguousarray(
            ((x.view(cupy.ndarray).astype(np.float32) / 255 - mean) / std).transpose(0, 3, 1, 2)),
            frames, N * H * W * 3 * 5),
        "resize_normalize 640": (lambda x, _: image.resize_normalize(x, S, mean=MEAN, std=STD,
                                                                      dst=o640),
                                 frames, N * H * W * 3 + o640.nbytes),
        "letterbox 640": (lambda x, _: image.letterbox(x, S, mean=MEAN, std=STD, dst=o640),
                          frames, N * H * W * 3 + o640.nbytes),
        "NV12 resize_normalize 640": (lambda x, _: image.resize_normalize(
            x, S, src_format="NV12", mean=MEAN, std=STD, dst=o640), nv,
            N * H * W * 3 // 2 + o640.nbytes),
    }


CASES = ["normalize float32", "normalize float16", "normalize cupy chain", "resize_normalize 640",
         "letterbox 640", "NV12 resize_normalize 640"]


@pytest.mark.parametrize("case", CASES)
def test_image(gpu_bench, copy_tbps, benchmark, frames, case):
    benchmark.group = "image 8x1080x1920 (us/call)"
    fn, srcs, nbytes = _cases(frames)[case]
    it = itertools.cycle(srcs)
    gpu_bench(lambda: fn(next(it), None), number=20, rounds=10, nbytes=nbytes,
              copy_tbps=copy_tbps)
