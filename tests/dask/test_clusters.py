"""cuflow.dask with clusters of their own: a worker that dies, closed and asynchronous clients."""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import warnings

import numpy as np
import pytest

distributed = pytest.importorskip("distributed", reason="cuflow.dask needs dask.distributed "
                                                        "(pip install cuflow[dask])")

import cuflow  # noqa: E402
import cuflow.dask as cfd  # noqa: E402


def _frame(i):
    return np.random.default_rng(int(i)).integers(0, 256, size=(12, 16, 3), dtype=np.uint8)


def _die_once(marker, i):
    """Frame ``i``; the first time frame 0 is asked for, the worker process dies instead."""
    if i == 0 and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return _frame(i)


def _cluster(**kw):
    return distributed.LocalCluster(threads_per_worker=1, dashboard_address=None,
                                    worker_dashboard_address=None, **kw)


def test_map_frames_runs_a_dead_workers_shard_on_another_worker(monkeypatch, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        backend = cuflow.get_backend().name
    monkeypatch.setenv("CUFLOW_BACKEND", backend)  # the workers use the client's backend
    options = cuflow.PipelineOptions(size=(8, 8), batch_size=2)
    load = functools.partial(_die_once, str(tmp_path / "died"))
    out: dict = {}
    with _cluster(n_workers=2, processes=True) as cl, distributed.Client(cl) as client:
        t = threading.Thread(target=lambda: out.setdefault(
            "batches", cfd.map_frames(client, range(8), options, load=load)), daemon=True)
        t.start()
        t.join(60)
        assert not t.is_alive(), "map_frames still waits for the shard of the dead worker"
    assert (tmp_path / "died").exists()  # a worker did die
    pipe = cuflow.Pipeline((8, 8), 2)
    want = [cuflow.asnumpy(b) for b in pipe.batches(map(_frame, range(8)))]
    assert len(out["batches"]) == len(want) == 4
    for got, w in zip(out["batches"], want):
        np.testing.assert_array_equal(got, w)


def test_a_closed_client_is_refused(cf):
    options = cf.PipelineOptions(size=8, batch_size=2)
    with _cluster(n_workers=1, processes=False) as cl:
        client = distributed.Client(cl)
        client.close()
        with pytest.raises(cuflow.ArgumentError,
                           match=r"cuflow.dask.map_frames: client must be a running "
                                 r"distributed.Client, got one whose status is 'closed'"):
            cfd.map_frames(client, range(2), options, load=_frame)
        with pytest.raises(cuflow.ArgumentError, match="cuflow.dask.pool_stats: client must "
                                                       "be a running"):
            cfd.pool_stats(client)


def test_an_asynchronous_client_is_refused(cf):
    options = cf.PipelineOptions(size=8, batch_size=2)

    async def main():
        async with _cluster(n_workers=1, processes=False, asynchronous=True) as cl, \
                distributed.Client(cl, asynchronous=True) as client:
            for call in (lambda: cfd.map_frames(client, range(2), options, load=_frame),
                         lambda: cfd.pool_stats(client)):
                with pytest.raises(cuflow.ArgumentError,
                                   match=r"client must be a synchronous distributed.Client .*"
                                         r"asynchronous=True"):
                    call()

    asyncio.run(main())


def test_workers_of_one_process_share_the_pool_plugins_setup(cf, rng):
    """Two workers of the client's process set up the one pool of its device: a plugin that
    replaces the first applies its own limit, and unregistering puts back the limit the pool
    had before the first setup."""
    pool = cf.memory.get_pool()
    old = pool.limit
    before = int(rng.integers(200, 400)) << 20
    try:
        pool.limit = before
        with _cluster(n_workers=2, processes=False) as cl, distributed.Client(cl) as client:
            client.register_plugin(cfd.CuflowPool("1MiB", limit="64MiB"))
            assert pool.limit == 64 << 20
            # the same name: each worker tears the first plugin down and sets this one up
            client.register_plugin(cfd.CuflowPool("2MiB", limit="32MiB"))
            stats = cfd.pool_stats(client)
            assert len(stats) == 2 and pool.limit == 32 << 20
            for s in stats.values():
                assert s["setup"]["pid"] == os.getpid() and s["stats"]["limit_bytes"] == 32 << 20
            reserved = cf.memory.stats()["reserved_bytes.all.current"]
            assert reserved >= 2 << 20
            client.unregister_worker_plugin(cfd.CuflowPool.name)
            assert pool.limit == before and cf.memory.stats()["limit_bytes"] == before
            for s in cfd.pool_stats(client).values():
                assert s["setup"] is None and s["stats"]["limit_bytes"] == before
            after = cf.memory.stats()["reserved_bytes.all.current"]
            # the reserve went back (on the GPU a segment that a live array shares with it
            # stays); the NumPy backend's host pool holds no array
            assert after <= reserved if cf.get_backend().is_gpu else after <= reserved - (2 << 20)
    finally:
        pool.limit = old
