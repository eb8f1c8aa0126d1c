"""Shard a stream of frames over the workers' GPUs, one cuflow Pipeline per worker."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

from distributed import Client

from .._checks import is_integer
from .._errors import ArgumentError, ArgumentTypeError
from ..core import asnumpy
from ..pipeline import Pipeline, PipelineOptions

__all__ = ["map_frames"]

_local = threading.local()

#: Pipelines a worker thread keeps, the most recently used; each holds its buffers (device
#: memory) and staging threads, so the least recently used one past this is closed.
MAX_PIPELINES = 4


def _pipeline(options: PipelineOptions) -> Pipeline:
    """This worker thread's Pipeline for ``options``: made once, its buffers and kernels reused."""
    cache = getattr(_local, "pipelines", None)
    if cache is None:
        cache = _local.pipelines = collections.OrderedDict()
    key = repr(options)  # options may hold lists (mean=[...]): not hashable
    pipe = cache.get(key)
    if pipe is None:
        fields = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
        pipe = cache[key] = Pipeline(**fields)
        while len(cache) > MAX_PIPELINES:
            cache.popitem(last=False)[1].close()
    cache.move_to_end(key)
    return pipe


def check_client(name: str, client: Any) -> None:
    """``client`` is a running, synchronous ``distributed.Client`` (what ``name`` submits its
    work through and waits on)."""
    if not isinstance(client, Client):
        raise ArgumentTypeError(f"cuflow.dask.{name}: client must be a distributed.Client, got "
                                f"{type(client).__name__}")
    if client.status != "running":
        raise ArgumentError(f"cuflow.dask.{name}: client must be a running distributed.Client, "
                            f"got one whose status is {client.status!r}")
    if client.asynchronous:  # its calls would return awaitables, not results
        raise ArgumentError(f"cuflow.dask.{name}: client must be a synchronous "
                            f"distributed.Client (cuflow.dask waits for the results), got one "
                            f"made with asynchronous=True, called in its event loop")


def _identity(x: Any) -> Any:
    return x


def run_shard(items: Sequence[Any], options: PipelineOptions,
              load: Callable[[Any], Any] | None = None,
              consume: Callable[[Any], Any] | None = None,
              reduce: Callable[[list[Any]], Any] | None = None) -> Any:
    """One shard on this process's device: ``[consume(batch) for batch of Pipeline(load(item))]``.

    With ``reduce``, ``reduce`` of that list.
    """
    pipe = _pipeline(options)
    frames = map(load or _identity, items)
    # closed even when consume raises: the traceback the worker keeps would otherwise hold
    # the iteration open, and the cached Pipeline would refuse the next shard
    with contextlib.closing(pipe.batches(frames)) as batches:
        out = [(consume or asnumpy)(b) for b in batches]
    return out if reduce is None else reduce(out)


def map_frames(client: Client, items: Sequence[Any], options: PipelineOptions, *,
               load: Callable[[Any], Any] | None = None,
               consume: Callable[[Any], Any] | None = None,
               reduce: Callable[[list[Any]], Any] | None = None,
               frames_per_task: int | None = None) -> list[Any]:
    """Pre-process ``items`` on every worker's GPU; the per-batch results, in order.

    Parameters
    ----------
    client : distributed.Client
    items : sequence
        What each frame is made from: host frames (uint8 ``(H, W, C)``), file
        names, indices... ``load`` turns one into a frame on the worker, so
        only the items travel.
    options : PipelineOptions
        What each frame becomes (the :class:`cuflow.Pipeline`'s options).
    load : callable, optional
        ``item -> numpy.ndarray`` frame, run on the worker (default: the item is the frame).
    consume : callable, optional
        ``batch -> result``, run on the worker on each batch (a darray on the
        worker's device, valid until the next batch); its result comes back.
        Default: the batch copied to the host (``cuflow.asnumpy``).
    reduce : callable, optional
        ``list -> result``, run on the worker on the ``consume`` results of one
        task (for example a device-side sum turned into one host number, so a
        task synchronizes once, not once a batch).
    frames_per_task : int, optional
        Frames per task; default: the items split evenly over the workers.
        Rounded up to a multiple of the batch size, so every batch but the
        last is full.

    Returns
    -------
    list
        ``consume``'s result of each batch, in the order of ``items``; with
        ``reduce``, its result of each task, in order.

    Notes
    -----
    Contiguous shards of ``items`` go to the workers in turn (a preference: a
    shard whose worker is gone runs on another, and Dask's balancing may move a
    waiting shard to an idle worker).  Each worker thread keeps a
    Pipeline per ``options``, so later calls reuse its buffers and compiled
    kernels; it keeps the 4 most recently used and closes the others.  The
    functions travel with cloudpickle (lambdas too).  When a task fails, the
    call cancels the others and raises the task's exception.
    """
    check_client("map_frames", client)
    if not isinstance(options, PipelineOptions):
        raise ArgumentTypeError(f"cuflow.dask.map_frames: options must be a "
                                f"cuflow.PipelineOptions, got {type(options).__name__}")
    if frames_per_task is not None and not is_integer(frames_per_task):
        raise ArgumentTypeError(f"cuflow.dask.map_frames: frames_per_task must be an int >= 1 "
                                f"or None, got {frames_per_task!r}")
    if frames_per_task is not None and frames_per_task < 1:
        raise ArgumentError(f"cuflow.dask.map_frames: frames_per_task must be an int >= 1 or "
                            f"None, got {frames_per_task!r}")
    # checked here, before any task is sent: a worker would raise them one by one
    for what, fn in (("load", load), ("consume", consume), ("reduce", reduce)):
        if fn is not None and not callable(fn):
            raise ArgumentTypeError(f"cuflow.dask.map_frames: {what} must be a callable or "
                                    f"None, got {type(fn).__name__} {fn!r:.60}")
    if isinstance(items, str | bytes) or not hasattr(items, "__iter__"):
        raise ArgumentTypeError(f"cuflow.dask.map_frames: items must be a sequence (of frames, "
                                f"file names, indices...), got {type(items).__name__}")
    items = list(items)
    # asked of the scheduler each call (scheduler_info can return a cached identity without
    # its workers when the scheduler is slow to answer, which read as no workers at all)
    workers = sorted(client.nthreads())
    if not workers:
        raise ArgumentError("cuflow.dask.map_frames: the client's cluster has no workers")
    if not items:
        return []
    b = options.batch_size
    per = int(frames_per_task or math.ceil(len(items) / len(workers)))
    per = math.ceil(per / b) * b
    futures = []
    for k, start in enumerate(range(0, len(items), per)):
        futures.append(client.submit(run_shard, items[start:start + per], options, load,
                                     consume, reduce, workers=[workers[k % len(workers)]],
                                     allow_other_workers=True, pure=False))
    try:
        shards = client.gather(futures)
    except BaseException:
        client.cancel(futures)  # the other shards' work and results are of no use now
        raise
    if reduce is not None:
        return shards
    return [r for shard in shards for r in shard]
