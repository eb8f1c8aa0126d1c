"""Host 1080p frames -> cuflow.Pipeline -> a small PyTorch model, with nothing copied twice.

    python examples/pipeline_torch.py [--frames 256] [--profile] [--pinned]

Frames are uploaded through pinned staging buffers on a copy stream while the
previous frames are resized and normalized (one fused kernel each) into a
double-buffered batch on a compute stream; each full batch reaches PyTorch by
``torch.from_dlpack`` (zero-copy, ordered by an event).  ``--profile`` reads a
CUPTI trace (torch.profiler) and prints how much of the upload time overlapped
kernels and how long the GPU sat idle.  Run it with ``CUFLOW_NVTX=1`` under
Nsight Systems to see the same on a timeline, by name.

It needs a CUDA GPU, CuPy and PyTorch (``pip install "cuflow[cuda13,torch]"``, or
``cuda12``); on a machine without them it says so in one line and exits.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np

import cuflow
from cuflow.bench._pipeline import gpu_activity

try:
    import torch
except ImportError:
    torch = None


def gpu_missing() -> str | None:
    """Why this example cannot run here, or None when it can."""
    if torch is None:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA GPU"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reason is reported below, in one line
        backend = cuflow.get_backend()
    if backend.name != "cupy":
        return f"cuflow runs on {backend.name}: {backend.reason}"
    return None


def model() -> "torch.nn.Module":
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, stride=4), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, stride=4), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10),
    ).cuda().eval()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=256)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--pinned", action="store_true",
                   help="frames in pinned memory, as a decoder with pinned output gives them")
    args = p.parse_args()
    why = gpu_missing()
    if why is not None:
        sys.exit(f'pipeline_torch.py needs a CUDA GPU, CuPy and PyTorch '
                 f'(pip install "cuflow[cuda13,torch]"): {why}')

    rng = np.random.default_rng(0)
    decoded = [rng.integers(0, 256, (1080, 1920, 3), dtype=np.uint8) for _ in range(8)]
    if args.pinned:
        decoded = [np.copyto(p := cuflow.memory.empty_pinned(f.shape, f.dtype), f) or p
                   for f in decoded]
    frames = [decoded[i % 8] for i in range(args.frames)]   # stands in for a video decoder
    net = model()
    # the frames sit in a list nothing writes to: several are staged and uploaded at once
    pipe = cuflow.Pipeline((640, 640), 16, mean=(0.485, 0.456, 0.406),
                           std=(0.229, 0.224, 0.225), frames_reused=False)

    def run() -> list[torch.Tensor]:
        outs = []
        with torch.no_grad():
            for batch in pipe.batches(frames):                # a darray (n, 3, 640, 640)
                with cuflow.annotate("model", color="purple"):
                    outs.append(net(torch.from_dlpack(batch)).argmax(1))
        return outs

    run()  # warm-up: kernels compile, buffers are allocated
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    outs = run()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(f"{args.frames} frames in {dt * 1e3:.1f} ms: {args.frames / dt:.0f} frames/s, "
          f"{len(outs)} batches, first predictions {outs[0][:4].tolist()}")
    if args.profile:
        print("GPU activity:", gpu_activity(run, torch))


if __name__ == "__main__":
    main()
