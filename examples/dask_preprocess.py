"""Pre-process frames on every GPU of a Dask cluster with cuflow, and measure frames/s.

Each worker of a ``dask_cuda.LocalCUDACluster`` owns one GPU and runs a
:class:`cuflow.Pipeline` (resize + normalize into batches) on its shard of the
frames; :func:`cuflow.dask.map_frames` hands out the shards and gathers the
results.  The frames are a directory of images (``--images``) or a synthetic
source (``--frames``), made on the workers so only their indices travel.

With ``--cpu`` the same code runs on a ``distributed.LocalCluster`` through
cuflow's NumPy backend.  ``--compare`` also runs one cuflow Pipeline in this
process on the same frames; ``--workers 1 2`` measures each cluster size.

    python examples/dask_preprocess.py --workers 1 --compare          # one GPU
    python examples/dask_preprocess.py --workers 1 2 --json out.json  # two GPUs
    python examples/dask_preprocess.py --cpu --frames 64 --height 120 --width 160 --size 64
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import time
import warnings

import numpy as np


class SyntheticFrames:
    """``i -> frame``: one of ``distinct`` random uint8 frames, made once per process.

    On a Dask worker the frames are kept on the worker, so every later task
    reuses them; pinned (page-locked) on the GPU, as a decoder's output is.
    """

    def __init__(self, height: int, width: int, distinct: int = 4, pinned: bool = True):
        self.shape = (height, width, 3)
        self.distinct = distinct
        self.pinned = pinned
        self._frames = None

    def __getstate__(self):
        return {**self.__dict__, "_frames": None}  # a task carries the recipe, not the frames

    def _make(self):
        import cuflow

        rng = np.random.default_rng(0)
        frames = []
        for _ in range(self.distinct):
            host = np.frombuffer(rng.bytes(int(np.prod(self.shape))), np.uint8).reshape(self.shape)
            if self.pinned and cuflow.get_backend().is_gpu:
                f = cuflow.memory.empty_pinned(self.shape, np.uint8)
                f[...] = host
                host = f
            frames.append(host)
        return frames

    def __call__(self, i):
        if self._frames is None:
            holder = _worker()
            key = (self.shape, self.distinct, self.pinned)
            store = getattr(holder, "_cuflow_example_frames", None) if holder else None
            if store is None:
                store = {}
                if holder is not None:
                    holder._cuflow_example_frames = store
            if key not in store:
                store[key] = self._make()
            self._frames = store[key]
        return self._frames[i % self.distinct]


def _worker():
    try:
        from distributed import get_worker

        return get_worker()
    except (ImportError, ValueError):
        return None


def load_image(path):
    """A file -> uint8 ``(H, W, 3)`` frame (needs Pillow)."""
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def batch_sum(batch):
    """What stands for the model here: a device-side sum of the batch (no host wait)."""
    import cuflow

    return cuflow.sum(batch, dtype=np.float64)


def total(sums):
    """The sums of one shard as one host number (the shard's one synchronization)."""
    import cuflow

    return float(cuflow.asnumpy(cuflow.stack(sums)).sum()) if sums else 0.0


def gpu_cluster(n):
    """``n`` workers, one GPU each: dask-cuda's LocalCUDACluster, else the same by hand."""
    try:
        from dask_cuda import LocalCUDACluster

        return LocalCUDACluster(n_workers=n, threads_per_worker=1, dashboard_address=None), \
            "dask_cuda.LocalCUDACluster"
    except Exception as e:  # not installed, or it cannot start here (NVML, versions)
        reason = f"{type(e).__name__}: {e}"
    import cupy
    from distributed import Nanny, Scheduler, SpecCluster

    ids = list(range(cupy.cuda.runtime.getDeviceCount()))
    workers = {i: {"cls": Nanny, "options": {"nthreads": 1, "env": {
        "CUDA_VISIBLE_DEVICES": ",".join(map(str, ids[i % len(ids):] + ids[:i % len(ids)]))}}}
        for i in range(n)}
    cluster = SpecCluster(scheduler={"cls": Scheduler, "options": {"dashboard_address": None}},
                          workers=workers)
    return cluster, f"distributed.SpecCluster, one GPU a worker (dask-cuda unusable: {reason})"


def cpu_cluster(n):
    from distributed import LocalCluster

    return LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                        dashboard_address=None), "distributed.LocalCluster (NumPy backend)"


def measure(run, n_frames, repeat):
    """Median frames/s of ``run()`` over ``repeat`` timed runs, after one warm-up run."""
    run()
    times, checks = [], set()
    for _ in range(repeat):
        t = time.perf_counter()
        checks.add(round(run(), 3))
        times.append(time.perf_counter() - t)
    return n_frames / statistics.median(times), [n_frames / t for t in times], checks


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=pathlib.Path, help="a directory of images (else synthetic)")
    p.add_argument("--frames", type=int, default=4096, help="synthetic frames per run")
    p.add_argument("--height", type=int, default=1080)
    p.add_argument("--width", type=int, default=1920)
    p.add_argument("--size", type=int, default=640, help="output frames are size x size")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--workers", type=int, nargs="+", default=[1],
                   help="cluster sizes to measure (one GPU per worker)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs (the median is reported)")
    p.add_argument("--cpu", action="store_true",
                   help="a CPU LocalCluster with cuflow's NumPy backend")
    p.add_argument("--compare", action="store_true",
                   help="also one cuflow Pipeline in this process on the same frames")
    p.add_argument("--json", type=pathlib.Path, help="write the figures there")
    a = p.parse_args(argv)
    for name in ("frames", "height", "width", "size", "batch", "repeat"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(a, name)}")
    if min(a.workers) < 1:
        p.error(f"--workers must be at least 1, got {a.workers}")
    if a.cpu:
        os.environ["CUFLOW_BACKEND"] = "numpy"  # before cuflow chooses, and for the workers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import cuflow
        import cuflow.dask as cfd
        from distributed import Client

        rt = cuflow.set_backend("numpy") if a.cpu else cuflow.get_backend()
    if not a.cpu and rt.name != "cupy":
        p.error(f"this machine runs the NumPy backend ({cuflow.backend_info()['reason']}): "
                "pass --cpu for a LocalCluster of CPU workers")
    if a.images is not None and not a.images.is_dir():
        p.error(f"--images: no folder {a.images}")
    if a.json is not None and not a.json.parent.is_dir():
        p.error(f"--json: no folder {a.json.parent}")

    if a.images:
        items = sorted(str(f) for f in a.images.iterdir()
                       if f.suffix.lower() in (".jpg", ".jpeg", ".png", ".bmp", ".webp"))
        if not items:
            sys.exit(f"no images in {a.images}")
        load, source = load_image, f"{len(items)} images from {a.images}"
    else:
        items = range(a.frames)
        load = SyntheticFrames(a.height, a.width, pinned=not a.cpu)
        source = f"{a.frames} synthetic {a.height}x{a.width} frames"
    n = len(items)
    options = cuflow.PipelineOptions(size=(a.size, a.size), batch_size=a.batch,
                                     mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
                                     frames_reused=a.images is not None)
    info = cuflow.backend_info()
    result = {"device": info.get("device_name", rt.name), "backend": rt.name, "source": source,
              "size": [a.size, a.size], "batch": a.batch, "repeat": a.repeat,
              "date": time.strftime("%Y-%m-%d"), "runs": {}}
    print(f"{source} -> batches of {a.batch} x 3 x {a.size} x {a.size} on "
          f"{result['device']}")

    if a.compare:
        pipe = cuflow.Pipeline(**{f: getattr(options, f) for f in options.__dataclass_fields__})

        def single():
            return total([batch_sum(b) for b in pipe.batches(map(load, items))])

        fps, all_fps, checks = measure(single, n, a.repeat)
        result["runs"]["single_process"] = {"fps": fps, "all_fps": all_fps}
        print(f"  one cuflow Pipeline in this process: {fps:8.0f} frames/s")
        reference = checks

    for w in a.workers:
        cluster, kind = cpu_cluster(w) if a.cpu else gpu_cluster(w)
        with cluster, Client(cluster) as client:
            client.register_plugin(cfd.CuflowPool())
            seen = client.run(lambda: cuflow.get_backend().name)

            def sharded():
                return sum(cfd.map_frames(client, items, options, load=load,
                                          consume=batch_sum, reduce=total))

            fps, all_fps, checks = measure(sharded, n, a.repeat)
            stats = cfd.pool_stats(client)
        run = {"fps": fps, "all_fps": all_fps, "cluster": kind,
               "worker_backends": sorted(seen.values()),
               "pool_reserved_bytes": [s["stats"]["reserved_bytes.all.current"]
                                       for s in stats.values()]}
        if a.compare:
            run["vs_single_process"] = fps / result["runs"]["single_process"]["fps"]
            run["same_result"] = checks == reference
        result["runs"][f"dask_{w}"] = run
        line = f"  Dask, {w} worker(s) [{kind}]: {fps:8.0f} frames/s"
        if a.compare:
            line += f"  ({run['vs_single_process']:.2f}x one Pipeline, same result: " \
                    f"{run['same_result']})"
        print(line)
    base = result["runs"].get(f"dask_{min(a.workers)}")
    for w in a.workers:
        if base and w != min(a.workers):
            r = result["runs"][f"dask_{w}"]["fps"] / base["fps"]
            result["runs"][f"dask_{w}"][f"vs_{min(a.workers)}_worker"] = r
            print(f"  {w} workers / {min(a.workers)}: {r:.2f}x")
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
