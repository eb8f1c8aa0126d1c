"""A ``distributed`` worker plugin that sets up cuflow's memory pool on every worker."""

from __future__ import annotations

import inspect
import numbers
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy
from distributed import Client, WorkerPlugin

from .. import memory
from .._errors import ArgumentError, ArgumentTypeError
from ..memory import MemoryValueError
from ..memory._limit import check_limit_text, limit_bytes, limit_of
from ..core import runtime
from ._chunks import register
from ._frames import check_client

__all__ = ["CuflowPool", "pool_stats"]


def _bytes(name: str, v: Any) -> int | float | str | None:
    """``size`` (bytes: an int or a string such as ``'8GiB'``) or ``limit`` (also a fraction
    of the device's memory in (0, 1], or a string as ``set_limit`` takes), checked here, on
    the client, by ``set_limit``'s rules: sizes are whole numbers, never bools."""
    if v is None:
        return None
    forms = ("bytes (an int, or a string such as '8GiB')"
             + (" or a fraction of the device's memory in (0, 1]" if name == "limit" else ""))
    if isinstance(v, bool | numpy.bool_) or not isinstance(v, numbers.Real | str):
        raise ArgumentTypeError(f"cuflow.dask.CuflowPool: {name} must be {forms}, got {v!r}")
    if isinstance(v, str):
        try:  # set_limit's string forms
            kind, x = check_limit_text(v, f"cuflow.dask.CuflowPool: {name}")
        except MemoryValueError:
            kind, x = "none", 0.0
        if name == "limit" and kind != "none":
            return v  # set_limit reads it on the worker (a fraction needs the device)
        n = int(x) if kind == "bytes" else -1
    elif isinstance(v, numbers.Integral):
        n = int(v)
    elif name == "limit" and 0 < float(v) <= 1:
        return float(v)  # a fraction of the device's memory
    else:
        raise ArgumentError(f"cuflow.dask.CuflowPool: {name} must be {forms}, got {v!r}")
    if n < 0:
        raise ArgumentError(f"cuflow.dask.CuflowPool: {name} must be {forms}, got {v!r}")
    return n


def _limit_bytes(limit: int | float | str | None) -> int | None:
    """``limit`` (as :func:`_bytes` gives it) in bytes, where that needs no device: ``None``
    for no limit (0 bytes, as for ``set_limit``) or a fraction of the device's memory."""
    if isinstance(limit, str):
        kind, x = check_limit_text(limit, "cuflow.dask.CuflowPool: limit")
        return limit_bytes(int(x), None, None) if kind == "bytes" else None
    return limit_bytes(limit, None, None) if isinstance(limit, int) else None


class _Shared:
    """What the :class:`CuflowPool` setups of one process did to one pool: how many completed
    setups use it, and its limit before the first of them.

    Workers of one process (``LocalCluster(processes=False)``) share the pool of their
    device: the first setup keeps the limit it found, and only the last teardown puts that
    limit back and releases the free memory, which the other workers' setups still count on
    until then.
    """

    __slots__ = ("limit_set", "previous", "users")

    def __init__(self, previous: int | None) -> None:
        self.previous = previous  # the pool's limit before any setup of the plugin
        self.limit_set = False  # whether a setup changed the limit (limit not None)
        self.users = 0  # completed setups not yet torn down


# {pool: its _Shared}, for the pools a setup of this process uses (a Pool hashes by identity)
_SHARED: dict[Any, _Shared] = {}
# setups and teardowns of one process, one at a time: each reads and updates _SHARED, and a
# warm-up records on the pool, which allows one recording at a time
_SHARED_LOCK = threading.Lock()


def _takes_no_arguments(fn: Callable) -> bool:
    """Whether ``fn()`` binds (a signature that cannot be read is given the benefit)."""
    try:
        inspect.signature(fn).bind()
    except TypeError:
        return False
    except ValueError:  # (no signature: a builtin)
        return True
    return True


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
        :class:`cuflow.OutOfMemoryError`.  0 bytes (``0``, ``"0"``, ``"0B"``)
        removes the pool's limit, as for :func:`cuflow.memory.set_limit`;
        None leaves it as it is.
    warmup : callable, optional
        Run once on each worker, once its limit is set and before ``size`` is reserved,
        through :func:`cuflow.memory.warmup`, so its allocations are cached (compile
        kernels, build a Pipeline's buffers...).  Must be picklable.

    Notes
    -----
    Register with ``client.register_plugin(CuflowPool(...))`` (workers that
    join later run it too).  The plugin also registers darray with
    ``dask.array`` on each worker.  :func:`pool_stats` reads each worker's
    statistics back.  ``client.unregister_worker_plugin(CuflowPool.name)``
    (and a worker's shutdown) undoes the setup: the worker's previous limit
    comes back and the pool's free memory is released.  Workers that share a
    process share their device's pool (``LocalCluster(processes=False)``): the
    limit the pool had before the first of their setups comes back, and the free
    memory is released, when the last of them is torn down.
    """

    name = "cuflow-pool"

    def __init__(self, size: int | str | None = None, *, limit: int | str | float | None = None,
                 warmup: Callable[[], Any] | None = None) -> None:
        if warmup is not None and not (callable(warmup) and _takes_no_arguments(warmup)):
            raise ArgumentTypeError(f"cuflow.dask.CuflowPool: warmup must be a callable "
                                    f"of no arguments or None, got {warmup!r:.80}")
        self.size = _bytes("size", size)
        self.limit = _bytes("limit", limit)
        cap = _limit_bytes(self.limit)
        if self.size and cap is not None and self.size > cap:
            raise ArgumentError(f"cuflow.dask.CuflowPool: size must be at most limit (the "
                                f"pool reserves size under its limit), got size={size!r} "
                                f"({self.size} bytes) and limit={limit!r} ({cap} bytes)")
        self.warmup = warmup
        self.report: dict[str, Any] = {}

    def setup(self, worker: Any) -> None:
        """Prepare ``worker``'s pool: the limit, the warm-up and the reserve, and the record
        for :func:`pool_stats` (called by Dask on each worker).

        Parameters
        ----------
        worker : distributed.Worker
            The worker Dask runs the plugin on; its device's pool (the current device's) is
            set up, and its ``cuflow_pool`` attribute is this plugin once the setup succeeds.

        Raises
        ------
        cuflow.ArgumentError
            ``size`` is larger than ``limit`` on this worker's device (a fraction of the
            device's memory is known only there).
        cuflow.OutOfMemoryError
            The reserve does not fit under the limit or in the device's memory.

        Notes
        -----
        The setup registers darray with ``dask.array``, sets the limit, runs the warm-up
        (:func:`cuflow.memory.warmup`) and then reserves ``size`` (keeps at least ``size``
        bytes free in the cache: the workers of one process, which share the pool, hold one
        reserve between them).  When a step raises, the pool's previous limit comes back and
        the exception propagates (the warm-up's own among them), and this plugin leaves no
        record for :func:`pool_stats`.  The setups of one process run one at a time.

        Stream semantics: the warm-up's work is queued on the streams it uses, as
        :func:`cuflow.memory.warmup` runs it; the reserve launches no kernel, its segment is
        taken from the backend on the current stream.
        """
        rt = runtime()
        register()
        self.report = {}  # (filled when the setup succeeds)
        pool = memory.get_pool()
        if self.limit is not None and self.size:  # a fraction is known here, on the device
            cap = limit_of(self.limit, pool.backend)
            if cap is not None and self.size > cap:
                raise ArgumentError(f"cuflow.dask.CuflowPool: size must be at most limit, got "
                                    f"size={self.size} bytes and limit={self.limit!r} "
                                    f"({cap} bytes on this worker's device)")
        with _SHARED_LOCK:
            old = pool.limit
            try:
                if self.limit is not None:
                    memory.set_limit(self.limit)
                warm = None
                if self.warmup is not None:  # first: a warm-up gives back the cached segments
                    warm = memory.warmup(self.warmup)
                if self.size:  # (at least size free: a reserve the pool caches already serves)
                    pool.reserve(int(self.size))
            except BaseException:
                # a failed setup leaves no limit of its own on the worker's pool (nor a report)
                pool.limit = old
                raise
            shared = _SHARED.setdefault(pool, _Shared(old))
            shared.users += 1
            shared.limit_set |= self.limit is not None
        self.report = {"backend": rt.name, "device": rt.current_device(), "pid": os.getpid(),
                       "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                       "reserved_at_setup": memory.stats()["reserved_bytes.all.current"],
                       "warmup": warm}
        worker.cuflow_pool = self
        # the pool set up, for the teardown: the current device or pool may differ by then
        worker.cuflow_pool_setup = pool

    def teardown(self, worker: Any) -> None:
        """Undo :meth:`setup` on ``worker``: its previous limit back, the pool's free memory
        (the reserve among it) released, and no record of this plugin for :func:`pool_stats`.

        Parameters
        ----------
        worker : distributed.Worker
            The worker Dask runs the plugin on.  Where this plugin's setup did not complete
            (its ``cuflow_pool`` attribute is not this plugin), nothing is done.

        Notes
        -----
        The previous limit comes back only where a setup set one (``limit`` not None); the
        free segments go back to the device through :meth:`cuflow.memory.Pool.empty_cache`.
        Where workers of one process share the pool, the last of their teardowns does both,
        with the limit the pool had before the first of their setups; the others leave the
        pool as it is, since the remaining workers still use its limit and reserve.
        """
        if getattr(worker, "cuflow_pool", None) is not self:
            return  # this plugin's setup did not complete there
        del worker.cuflow_pool
        pool = getattr(worker, "cuflow_pool_setup", None)
        if pool is None:
            return
        del worker.cuflow_pool_setup
        with _SHARED_LOCK:
            shared = _SHARED.get(pool)
            if shared is None:  # (no setup of this process completed on the pool)
                return
            shared.users -= 1
            if shared.users > 0:
                return  # another worker of this process still uses the pool as set up
            del _SHARED[pool]
            if shared.limit_set:
                pool.limit = shared.previous
            pool.empty_cache()


def _worker_stats(dask_worker: Any = None) -> dict[str, Any]:
    plugin = getattr(dask_worker, "cuflow_pool", None)
    rt = runtime()
    return {"backend": rt.name, "device": rt.current_device(), "stats": memory.stats(),
            "setup": dict(plugin.report) if plugin is not None else None}


def pool_stats(client: Client) -> dict[str, dict[str, Any]]:
    """Each worker's pool: ``{address: {"backend", "device", "stats", "setup"}}``.

    ``stats`` is :func:`cuflow.memory.stats` there; ``setup`` what
    :class:`CuflowPool` did (None on a worker without the plugin).

    Parameters
    ----------
    client : distributed.Client
        A running, synchronous client of the cluster; the statistics are read on each of
        its workers through ``client.run``.

    Returns
    -------
    dict
        One entry per worker address: ``backend`` (the backend's name), ``device`` (the
        worker's current device), ``stats`` and ``setup`` (a dict with ``backend``,
        ``device``, ``pid``, ``visible_devices``, ``reserved_at_setup`` and ``warmup``, the
        result of :func:`cuflow.memory.warmup` or None).

    Raises
    ------
    cuflow.ArgumentTypeError
        ``client`` is not a ``distributed.Client``.
    cuflow.ArgumentError
        ``client`` is not running, or was made with ``asynchronous=True``.
    """
    check_client("pool_stats", client)
    return client.run(_worker_stats)
