"""cuflow on Dask: darray chunks in ``dask.array`` graphs, a worker pool plugin, frame sharding.

Dask schedules; cuflow computes.  With ``dask-cuda``'s ``LocalCUDACluster`` each
worker process owns one GPU, and cuflow arrays are the chunks of Dask arrays
(as CuPy arrays are in RAPIDS):

* :func:`register` teaches ``dask.array`` the darray chunk type (concatenate,
  tensordot, einsum, take, empty, and conversion to NumPy), so ``map_blocks``
  with cuflow ops, reductions, rechunking and ``compute()`` work on cuflow
  chunks.  :func:`from_host` / :func:`to_host` move a Dask array's chunks to
  the workers' devices and back; :func:`meta` is the ``meta=`` of a darray chunk.
  A few Dask ops (``zeros_like`` & co., ``percentile``, ``vindex`` on the GPU) make
  chunks of the base array type; ``map_blocks(cuflow.asarray)`` makes darrays of them.
* :class:`CuflowPool` is a ``distributed`` worker plugin that sets up cuflow's
  memory pool on every worker (reserved size, limit, warm-up function), like
  dask-cuda's ``rmm_pool_size``; :func:`pool_stats` gathers each worker's
  pool statistics.
* :func:`map_frames` shards a stream of frames (files, indices or host arrays)
  over the workers, runs a :class:`cuflow.Pipeline` on each worker's GPU and
  gathers the per-batch results in order.

Needs the optional dependencies ``dask`` and ``distributed`` (``pip install
cuflow[dask]``, which also brings ``dask-cuda``).
"""

from __future__ import annotations

from ._chunks import from_host, meta, register, to_host
from ._frames import map_frames
from ._plugin import CuflowPool, pool_stats

__all__ = ["register", "meta", "from_host", "to_host", "CuflowPool", "pool_stats", "map_frames"]
