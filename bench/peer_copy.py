"""Copies between GPUs with ``darray.to_device``: correctness and bandwidth of every ordered pair.

    python bench/peer_copy.py --mib 256 --repeat 10 --json peer-copy.json

Each pair (i, j): a random array made on device i is copied to device j, checked
byte for byte, then timed with CUDA events on a stream of device j (warm-up
first, median of ``--repeat``).  ``peer`` says whether j can read i's memory
directly (else the driver stages the copy through the host).  A copy within
device 0 is the reference.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

import cuflow


def timed_copy(src, dev, repeat):
    """Median GB/s of ``src.to_device(dev)`` (bytes moved once), timed on a stream of ``dev``."""
    with cuflow.Device(dev):
        s = cuflow.Stream()
        start, stop = cuflow.Event(), cuflow.Event()
    src.to_device(dev, stream=s)  # warm-up: peer access, the destination pool
    s.synchronize()
    ms = []
    for _ in range(repeat):
        with cuflow.Device(dev):
            start.record(s)
        out = src.to_device(dev, stream=s)
        with cuflow.Device(dev):
            stop.record(s)
        ms.append(start.elapsed_time(stop))
        del out
    med = statistics.median(ms)
    return src.nbytes / (med * 1e-3) / 1e9, med


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--json")
    a = p.parse_args(argv)
    if a.mib < 1 or a.repeat < 1:
        p.error(f"--mib and --repeat must be at least 1, got {a.mib} and {a.repeat}")
    rt = cuflow.get_backend()
    n = cuflow.Device().count
    info = cuflow.backend_info()
    rng = np.random.default_rng(0)
    host = rng.integers(0, 256, size=a.mib << 20, dtype=np.uint8)
    out = {"device": info.get("device_name", rt.name), "devices": n, "mib": a.mib,
           "repeat": a.repeat, "date": time.strftime("%Y-%m-%d"), "pairs": []}
    srcs = []
    for i in range(n):
        with cuflow.Device(i):
            srcs.append(cuflow.asarray(host))
    if rt.is_gpu:  # the reference: the same copy (cudaMemcpyAsync) within device 0
        with cuflow.Device(0):
            s = cuflow.Stream()
            start, stop = cuflow.Event(), cuflow.Event()
            dst = cuflow.empty_like(srcs[0])
            ms = []
            for _ in range(a.repeat + 1):
                start.record(s)
                dst.data.copy_from_device_async(srcs[0].data, srcs[0].nbytes, s.cupy)
                stop.record(s)
                ms.append(start.elapsed_time(stop))
            out["same_device_gbps"] = srcs[0].nbytes / (statistics.median(ms[1:]) * 1e-3) / 1e9
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            got = srcs[i].to_device(j)
            ok = bool(np.array_equal(cuflow.asnumpy(got), host))
            peer = bool(rt.xp.cuda.runtime.deviceCanAccessPeer(j, i)) if rt.is_gpu else False
            gbps, ms = timed_copy(srcs[i], j, a.repeat)
            out["pairs"].append({"src": i, "dst": j, "correct": ok, "peer": peer,
                                 "gbps": gbps, "median_ms": ms})
            print(f"device {i} -> {j}: {gbps:7.1f} GB/s (peer access: {peer}), correct: {ok}")
    if n < 2:
        print("one device: no pair to copy between")
    if "same_device_gbps" in out:
        print(f"within device 0: {out['same_device_gbps']:.1f} GB/s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    result = main()
    # a wrong copy fails the run (the JSON above keeps the figures)
    sys.exit(1 if any(not pair["correct"] for pair in result["pairs"]) else 0)
