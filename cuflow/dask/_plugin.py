"""A ``distributed`` worker plugin that sets up cuflow's memory pool on every worker."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from dask.utils import parse_bytes
from distributed import Client, WorkerPlugin

from .. import memory
from .._errors import ArgumentError
from ..core import runtime
from ._chunks import register

__all__ = ["CuflowPool", "pool_stats"]


def _bytes(name: str, v: Any) -> int | float | None:
    if v is None:
        return None
    if isinstance(v, float) and 0 < v <= 1 and name == "limit":
        return v  # a fraction of the device's memory
    try:
        n = parse_bytes(v) if isinstance(v, str) else int(v)
    except (TypeError, ValueError):
        n = -1
    if n < 0 or isinstance(v, bool):
        raise ArgumentError(f"CuflowPool: {name} must be bytes (an int, or a string such as "
                            f"'8GiB'){' or a fraction in (0, 1]' if name == 'limit' else ''}, "
                            f"got {v!r}")
    return n


class CuflowPool(WorkerPlugin):
    """Set up cuflow's pool on each worker: reserved size, limit and a warm-up function.

    Parameters
    ----------
    size : int or str, optional
        Bytes to reserve in the pool at start (``"8GiB"``), like dask-cuda's
        ``rmm_pool_size``: the first allocations then come from the cache.
    limit : int, str or float, optional
        Cap on the pool's reserved bytes (a float in (0, 1] is a fraction of
        the device's memory); an allocation past it raises
        :class:`cuflow.OutOfMemoryError`.
    warmup : callable, optional
        Run once on each worker after the pool is set up, through
        :func:`cuflow.memory.warmup`, so its allocations are cached (compile
        kernels, build a Pipeline's buffers...).  Must be picklable.

    Notes
    -----
    Register with ``client.register_plugin(CuflowPool(...))`` (workers that
    join later run it too).  The plugin also registers darray with
    ``dask.array`` on each worker.  :func:`pool_stats` reads each worker's
    statistics back.
    """

    name = "cuflow-pool"

    def __init__(self, size: int | str | None = None, *, limit: int | str | float | None = None,
                 warmup: Callable[[], Any] | None = None) -> None:
        if warmup is not None and not callable(warmup):
            raise ArgumentError(f"CuflowPool: warmup must be callable or None, got "
                                f"{type(warmup).__name__}")
        self.size = _bytes("size", size)
        self.limit = _bytes("limit", limit)
        self.warmup = warmup
        self.report: dict[str, Any] = {}

    def setup(self, worker: Any) -> None:
        rt = runtime()
        register()
        if self.limit is not None:
            memory.set_limit(self.limit)
        warm = None
        if self.warmup is not None:  # first: a warm-up returns the pool's cached segments
            warm = memory.warmup(self.warmup)
        if self.size:
            memory.get_pool().reserve(int(self.size))
        self.report = {"backend": rt.name, "device": rt.current_device(), "pid": os.getpid(),
                       "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                       "reserved_at_setup": memory.stats()["reserved_bytes.all.current"],
                       "warmup": warm}
        worker.cuflow_pool = self


def _worker_stats(dask_worker: Any = None) -> dict[str, Any]:
    plugin = getattr(dask_worker, "cuflow_pool", None)
    rt = runtime()
    return {"backend": rt.name, "device": rt.current_device(), "stats": memory.stats(),
            "setup": dict(plugin.report) if plugin is not None else None}


def pool_stats(client: Client) -> dict[str, dict[str, Any]]:
    """Each worker's pool: ``{address: {"backend", "device", "stats", "setup"}}``.

    ``stats`` is :func:`cuflow.memory.stats` there; ``setup`` what
    :class:`CuflowPool` did (None on a worker without the plugin).
    """
    return client.run(_worker_stats)
