"""Soak: Pipelines run for minutes with varying batch sizes; the pool must stay flat and every
frame must be counted exactly.

    python bench/soak.py --minutes 10 --json soak.json          # on a GPU
    python bench/soak.py --seconds 10 --height 64 --width 96    # a CPU smoke run

Each round takes the next batch size of ``--batches`` (and a frame count that leaves a partial
last batch), pre-processes the frames with a Pipeline of that batch size, and checks that the
batches hold exactly the frames given (``frames_in == frames_out``, the sum of batch lengths,
nothing undelivered).  The pool's reserved bytes are sampled after every round; after the
warm-up (the first pass over every batch size), they must not grow.  The JSON holds the
samples (seconds, reserved bytes, frames so far), the totals and the verdicts; the exit status
is 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

import cuflow


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=None, help="overrides --minutes")
    ap.add_argument("--height", type=int, default=1080)
    ap.add_argument("--width", type=int, default=1920)
    ap.add_argument("--size", type=int, default=640, help="output frames are size x size")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 16, 32, 12])
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    for name in ("height", "width", "size"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if min(args.batches) < 1:
        ap.error(f"--batches must be at least 1, got {args.batches}")
    if args.json is not None and not args.json.parent.is_dir():
        ap.error(f"--json: no folder {args.json.parent}")
    duration = args.seconds if args.seconds is not None else 60.0 * args.minutes

    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (args.height, args.width, 3), dtype=np.uint8)
              for _ in range(4)]
    pipes = {b: cuflow.Pipeline(args.size, b) for b in args.batches}
    samples: list[tuple[float, int, int]] = []
    frames_in = frames_out = rounds = 0
    miscounted: list[dict] = []
    warm_rounds = len(args.batches)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < duration or rounds < 2 * warm_rounds:
        b = args.batches[rounds % len(args.batches)]
        n = 3 * b + 1 + rounds % 5  # a partial last batch, varying
        pipe = pipes[b]
        got = 0
        for batch in pipe.batches(frames[i % len(frames)] for i in range(n)):
            got += len(batch)
        cuflow.synchronize()
        frames_in += pipe.frames_in
        frames_out += got
        if not (pipe.frames_in == pipe.frames_out == got == n) or len(pipe.undelivered):
            miscounted.append({"round": rounds, "batch": b, "given": n, "in": pipe.frames_in,
                               "out": pipe.frames_out, "batched": got,
                               "undelivered": len(pipe.undelivered)})
        rounds += 1
        samples.append((round(time.perf_counter() - t0, 3),
                        int(cuflow.memory.stats()["reserved_bytes.all.current"]), frames_out))
    after_warm = [s[1] for s in samples[warm_rounds:]]
    flat = max(after_warm) <= after_warm[0]
    result = {
        "gpu": cuflow.get_backend().name, "seconds": round(time.perf_counter() - t0, 1),
        "rounds": rounds, "batch_sizes": args.batches,
        "frame": [args.height, args.width, 3], "size": args.size,
        "frames_in": frames_in, "frames_out": frames_out, "miscounted_rounds": miscounted,
        "reserved_bytes_after_warmup": {"first": after_warm[0], "max": max(after_warm),
                                        "last": after_warm[-1]},
        "reserved_flat_after_warmup": flat,
        "frames_exact": frames_in == frames_out and not miscounted,
        # every 1 in 50 samples, and the last: reserved bytes over time
        "samples_s_reserved_frames": samples[::50] + samples[-1:],
    }
    text = json.dumps(result, indent=1)
    if args.json:
        args.json.write_text(text)
    print(json.dumps({k: v for k, v in result.items() if k != "samples_s_reserved_frames"}))
    return 0 if flat and result["frames_exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
