"""cuflow.dask on a real ``distributed.LocalCluster``: two worker processes, nothing mocked.

The workers use the backend the test process uses (the NumPy backend in CI; a GPU run
starts them on the GPU), so darray chunks, the pool plugin and the frame sharding run
exactly as on a GPU cluster, through the NumPy backend.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
import warnings

import numpy as np
import pytest

distributed = pytest.importorskip("distributed", reason="cuflow.dask needs dask.distributed "
                                                        "(pip install cuflow[dask])")
da = pytest.importorskip("dask.array", reason="cuflow.dask needs dask.array")

import cuflow  # noqa: E402
import cuflow.dask as cfd  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def client():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        backend = cuflow.get_backend().name
    before = os.environ.get("CUFLOW_BACKEND")
    os.environ["CUFLOW_BACKEND"] = backend  # the workers use the client's backend
    try:
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      dashboard_address=None,
                                      worker_dashboard_address=None) as cl, \
                distributed.Client(cl) as c:
            yield c
    finally:
        if before is None:
            del os.environ["CUFLOW_BACKEND"]
        else:
            os.environ["CUFLOW_BACKEND"] = before


@pytest.fixture
def ccf(client):
    """cuflow on the backend the workers use."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cuflow.set_backend(client.run(_backend_name).popitem()[1])
    return cuflow


def _backend_name():
    return cuflow.get_backend().name


def test_two_worker_processes(client):
    pids = client.run(os.getpid)
    assert len(pids) == 2 and os.getpid() not in pids.values()


def _chunk_info(block):
    rt = cuflow.get_backend()
    return np.array([[isinstance(block, rt.darray), type(block).__module__ == "cuflow"]])


def test_chunks_are_darrays_on_the_workers(ccf, client, rng):
    x = cfd.from_host(rng.standard_normal((40, 30)).astype(np.float32), chunks=(10, 15))
    assert isinstance(x._meta, ccf.darray)
    info = x.map_blocks(_chunk_info, dtype=bool, chunks=(1, 2), meta=np.empty((0, 0), bool))
    assert cfd.to_host(info).compute().all()


def _cuflow_block(b):
    return cuflow.sqrt(cuflow.abs(b)) * 2 + cuflow.sum(b, axis=1, keepdims=True)


def test_map_blocks_with_cuflow_ops(ccf, client, rng):
    host = rng.standard_normal((64, 48)).astype(np.float32)
    x = cfd.from_host(host, chunks=(16, 48))
    y = x.map_blocks(_cuflow_block, dtype=np.float32, meta=cfd.meta(np.float32, 2))
    got = cfd.to_host(y).compute()
    want = np.sqrt(np.abs(host)) * 2 + host.sum(axis=1, keepdims=True)
    assert type(got) is np.ndarray
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_meta_checks_ndim_and_dtype(cf):
    m = cfd.meta(np.int16, np.int64(3))
    assert isinstance(m, cf.darray) and m.shape == (0, 0, 0) and m.dtype == np.int16
    assert cfd.meta(np.float32, 0).shape == ()
    for bad in (2.7, True, "2", None):
        with pytest.raises(cuflow.ArgumentTypeError, match=r"cuflow.dask.meta: ndim must be an "
                                                           r"int in \[0, \d+\], got "):
            cfd.meta(np.float32, bad)
    with pytest.raises(cuflow.ArgumentError, match=r"ndim must be in \[0, \d+\], got -1"):
        cfd.meta(np.float32, -1)
    for bad in ("notadtype", object):
        with pytest.raises(cuflow.ArgumentTypeError, match="cuflow.dask.meta: dtype must"):
            cfd.meta(bad, 1)


def test_meta_takes_the_backends_most_dimensions(cf):
    """meta checks ndim's upper bound itself, the backend's (NumPy 2's 64, NumPy 1's 32)."""
    with pytest.raises(cuflow.ArgumentError,
                       match=r"cuflow.dask.meta: ndim must be in \[0, (\d+)\], got 65") as ei:
        cfd.meta(np.float32, 65)
    top = int(re.search(r"\[0, (\d+)\]", str(ei.value)).group(1))
    if not cf.get_backend().is_gpu:
        assert top == (64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32)
    assert top in (32, 64)
    m = cfd.meta(np.int8, top)
    assert isinstance(m, cf.darray) and m.ndim == top and m.dtype == np.int8
    with pytest.raises(cuflow.ArgumentError, match=rf"ndim must be in \[0, {top}\], got "
                                                   rf"{top + 1}$"):
        cfd.meta(np.int8, top + 1)


def test_to_host_takes_a_dask_array(cf):
    for x in (np.ones(2), cf.ones(2), [1.0, 2.0]):
        with pytest.raises(cuflow.ArgumentTypeError,
                           match=r"cuflow.dask.to_host: x must be a dask.array.Array, got "
                                 r".*cuflow.asnumpy"):
            cfd.to_host(x)


def test_reductions(ccf, client, rng):
    host = rng.standard_normal((60, 50)).astype(np.float64)
    x = cfd.from_host(host, chunks=(15, 25))
    got = client.compute([x.sum(), x.mean(axis=0), x.max(axis=1), x.std()], sync=True)
    want = [host.sum(), host.mean(axis=0), host.max(axis=1), host.std()]
    for g, w in zip(got, want):
        np.testing.assert_allclose(ccf.asnumpy(g), w, rtol=1e-10)


def test_rechunk_and_compute_back_to_the_client(ccf, client, rng):
    host = rng.integers(-1000, 1000, size=(36, 36), dtype=np.int32)
    x = cfd.from_host(host, chunks=(6, 36)).rechunk((36, 4))
    assert x.chunks == ((36,), (4,) * 9)
    whole = x.compute()  # the chunks concatenated on the client: a darray
    assert isinstance(whole, ccf.darray)
    np.testing.assert_array_equal(ccf.asnumpy(whole), host)
    np.testing.assert_array_equal(cfd.to_host(x.T).compute(), host.T)


def test_concatenate_and_tensordot(ccf, client, rng):
    a = rng.standard_normal((20, 8)).astype(np.float32)
    b = rng.standard_normal((8, 12)).astype(np.float32)
    x, y = cfd.from_host(a, chunks=(5, 4)), cfd.from_host(b, chunks=(4, 6))
    cat = da.concatenate([x, x * 2], axis=0)
    np.testing.assert_allclose(cfd.to_host(cat).compute(), np.concatenate([a, 2 * a]),
                               rtol=1e-6)
    np.testing.assert_allclose(cfd.to_host(da.tensordot(x, y, axes=1)).compute(), a @ b,
                               rtol=1e-4, atol=1e-4)
    # darray chunks all the way (Dask's concatenate, tensordot and take dispatch)
    for r in (cat.compute(), da.tensordot(x, y, axes=1).compute(), x[[0, 3, 17]].compute()):
        assert isinstance(r, ccf.darray), type(r)
    np.testing.assert_array_equal(ccf.asnumpy(x[[0, 3, 17]].compute()), a[[0, 3, 17]])


def test_take_shuffle_and_fancy_indexing_give_darrays(cf, rng):
    """Dask's take lookup (fancy indexing, take, shuffle) gives darrays.  darray's own take
    re-classes its result, which NumPy's and CuPy's take functions call, so this holds
    through the base type's lookup as well as through the registered one.  (``vindex``
    builds its chunks otherwise: the next test.)"""
    host = (rng.standard_normal((9, 4)) + 5).astype(np.float32)
    x = cfd.from_host(host, chunks=(4, 2))
    order = rng.permutation(9)
    cases = [(x[order], host[order]), (da.take(x, order[:5], axis=0), host[order[:5]])]
    if hasattr(x, "shuffle"):  # (Dask 2024.8 on)
        groups = [order[:4].tolist(), order[4:].tolist()]
        cases.append((x.shuffle(groups, axis=0), host[np.concatenate(groups)]))
    for y, want in cases:
        got = y.compute(scheduler="synchronous")
        assert isinstance(got, cf.darray), type(got)
        np.testing.assert_array_equal(cf.asnumpy(got), want)


def test_vindex_gives_darrays_on_numpy_and_base_arrays_on_the_gpu(cf, rng):
    """``vindex`` merges the points of each output chunk into ``numpy.empty_like`` of a chunk,
    which no registration reaches: NumPy's keeps the subclass (a darray), CuPy's builds the
    base type (a ``cupy.ndarray``; it takes no ``subok``).  map_blocks(cuflow.asarray) makes
    darrays of it on both backends."""
    host = (rng.standard_normal((9, 4)) + 5).astype(np.float32)
    x = cfd.from_host(host, chunks=(4, 2))
    rows, cols = rng.permutation(9)[:3], [0, 1, 3]
    y, want = x.vindex[rows, cols], host[rows, cols]
    assert isinstance(y._meta, cf.darray)
    rt = cf.get_backend()
    got = y.compute(scheduler="synchronous")
    if rt.is_gpu:
        assert isinstance(got, rt.ndarray) and not isinstance(got, cf.darray), type(got)
    else:
        assert isinstance(got, cf.darray), type(got)
    np.testing.assert_array_equal(cf.asnumpy(got), want)
    wrapped = y.map_blocks(cf.asarray, dtype=y.dtype, meta=cfd.meta(y.dtype, y.ndim))
    got = wrapped.compute(scheduler="synchronous")
    assert isinstance(got, cf.darray), type(got)
    np.testing.assert_array_equal(cf.asnumpy(got), want)


def _first_chunk(x):
    return x.blocks[(0,) * x.ndim].compute(scheduler="synchronous")


def test_dasks_empty_lookup_makes_darrays_for_a_darray_chunk(cf, rng):
    """Dask's empty lookup, as its percentile calls it (on the type of an array): for a
    darray it makes a darray."""
    from dask.array.dispatch import empty_lookup

    chunk = _first_chunk(cfd.from_host(rng.standard_normal(6) + 5, chunks=3))
    assert isinstance(chunk, cf.darray)
    shape = tuple(int(n) for n in rng.integers(1, 6, size=2))
    got = empty_lookup.dispatch(type(chunk))(shape, dtype=np.int16)
    assert isinstance(got, cf.darray) and got.shape == shape and got.dtype == np.int16


def test_to_numpy_dispatch_and_to_backend_give_host_arrays(cf, rng):
    from dask.array.dispatch import to_numpy_dispatch

    host = rng.standard_normal((6, 4)) + 5
    x = cfd.from_host(host, chunks=3)
    got = to_numpy_dispatch(_first_chunk(x))
    assert type(got) is np.ndarray
    np.testing.assert_array_equal(got, host[:3, :3])
    if hasattr(x, "to_backend"):  # (Dask 2023.2 on)
        whole = x.to_backend("numpy").compute(scheduler="synchronous")
        # Dask keeps the NumPy backend's darray chunks as they are (its meta is a NumPy
        # array already); on the GPU each chunk goes to the host through the lookup
        assert isinstance(whole, np.ndarray)
        if cf.get_backend().is_gpu:
            assert type(whole) is np.ndarray
        np.testing.assert_array_equal(whole, host)


def test_dask_ops_that_give_base_arrays_and_their_rewrap(cf, rng):
    """zeros_like, ones_like, full_like and a 1-d percentile declare darray meta but build
    their chunks with NumPy's functions, out of reach of the registrations (the module
    docstring and docs/scaling.md list them); map_blocks(cuflow.asarray) makes darrays of
    them."""
    host = (rng.standard_normal((6, 4)) + 5).astype(np.float32)
    x = cfd.from_host(host, chunks=(3, 2))
    fill = float(rng.integers(2, 9))
    q = [10.0, 50.0, 90.0]
    percentile = da.percentile(da.from_array(host[:, 0], chunks=3), q)
    cases = [(da.zeros_like(x), np.zeros_like(host)), (da.ones_like(x), np.ones_like(host)),
             (da.full_like(x, fill), np.full_like(host, fill)),
             (da.percentile(x[:, 0], q), percentile.compute(scheduler="synchronous"))]
    base = cf.get_backend().ndarray
    for y, want in cases:
        assert isinstance(y._meta, cf.darray)
        got = y.compute(scheduler="synchronous")
        assert isinstance(got, base) and not isinstance(got, cf.darray), type(got)
        np.testing.assert_allclose(cf.asnumpy(got), want, rtol=1e-6)
        wrapped = y.map_blocks(cf.asarray, dtype=y.dtype, meta=cfd.meta(y.dtype, y.ndim))
        got = wrapped.compute(scheduler="synchronous")
        assert isinstance(got, cf.darray), type(got)
        np.testing.assert_allclose(cf.asnumpy(got), want, rtol=1e-6)


WARM_N = 1024


def _warm():
    return float(cuflow.sum(cuflow.ones(WARM_N)))


def test_pool_plugin_reports_back(ccf, client):
    client.register_plugin(cfd.CuflowPool("8MiB", limit="1GiB", warmup=_warm))
    stats = cfd.pool_stats(client)
    assert len(stats) == 2
    for s in stats.values():
        assert s["backend"] == ccf.get_backend().name
        assert s["setup"]["reserved_at_setup"] >= 8 << 20
        warm = s["setup"]["warmup"]  # what cuflow.memory.warmup reported on the worker
        assert set(warm) == {"peak_bytes", "allocations", "extra_segments", "reserved_bytes"}
        if ccf.get_backend().is_gpu:
            # _warm's float64 ones came from the pool, and the replay kept them reserved
            assert warm["allocations"] >= 1 and warm["peak_bytes"] >= WARM_N * 8
            assert warm["reserved_bytes"] >= warm["peak_bytes"]
        else:
            # NumPy's arrays never come from the (host) pool: nothing recorded or reserved
            assert warm == {"peak_bytes": 0, "allocations": 0, "extra_segments": 0,
                            "reserved_bytes": 0}
        assert s["stats"]["limit_bytes"] == 1 << 30


def test_pool_plugin_refuses_bad_sizes():
    with pytest.raises(cuflow.ArgumentError, match="size must be bytes"):
        cfd.CuflowPool("lots")
    with pytest.raises(cuflow.ArgumentError, match="limit must be bytes"):
        cfd.CuflowPool(limit=-5)
    for bad in (3, lambda x: x):
        with pytest.raises(cuflow.ArgumentTypeError,
                           match=r"cuflow.dask.CuflowPool: warmup must be a callable of no "
                                 r"arguments or None, got "):
            cfd.CuflowPool(warmup=bad)
    # set_limit's rules: sizes are whole numbers, a fraction is in (0, 1], bools are no sizes
    for bad in (dict(size=0.5), dict(size=float("inf")), dict(limit=1.5), dict(limit=0.0),
                dict(limit=True), dict(limit="1.5"), dict(size=[1]), dict(size="1.5"),
                dict(size="50%")):
        with pytest.raises(cuflow.CuflowError, match="size|limit"):
            cfd.CuflowPool(**bad)
    assert cfd.CuflowPool(limit=np.float32(0.5)).limit == 0.5
    assert cfd.CuflowPool(np.int64(1 << 30), limit="80%").size == 1 << 30


def _frame(i):
    return np.random.default_rng(int(i)).integers(0, 256, size=(30, 40, 3), dtype=np.uint8)


def _summary(batch):
    return os.getpid(), cuflow.asnumpy(batch)


def test_map_frames_matches_one_pipeline(ccf, client):
    options = ccf.PipelineOptions(size=(16, 24), batch_size=4, mean=MEAN, std=STD)
    out = cfd.map_frames(client, range(22), options, load=_frame, consume=_summary)
    pids = {p for p, _ in out}
    got = np.concatenate([b for _, b in out])
    pipe = ccf.Pipeline((16, 24), 4, mean=MEAN, std=STD)
    want = np.concatenate([ccf.asnumpy(b) for b in pipe.batches(map(_frame, range(22)))])
    assert len(pids) == 2  # both workers took a shard
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # host frames as items, a batch copied back by default, several tasks per worker
    frames = [_frame(i) for i in range(9)]
    back = cfd.map_frames(client, frames, options, frames_per_task=3)
    assert [len(b) for b in back] == [4, 4, 1]  # 3 frames per task rounds up to one batch
    np.testing.assert_allclose(np.concatenate(back), want[:9], rtol=1e-6, atol=1e-6)


def test_map_frames_validates(ccf, client):
    with pytest.raises(cuflow.ArgumentTypeError,
                       match="options must be a cuflow.PipelineOptions, got dict"):
        cfd.map_frames(client, [1], {"size": 8})
    options = ccf.PipelineOptions(size=8, batch_size=2)
    with pytest.raises(cuflow.ArgumentTypeError,
                       match="cuflow.dask.map_frames: client must be a distributed.Client, "
                             "got NoneType"):
        cfd.map_frames(None, [1], options)
    with pytest.raises(cuflow.ArgumentTypeError, match="cuflow.dask.pool_stats: client must"):
        cfd.pool_stats("tcp://127.0.0.1:8786")
    assert cfd.map_frames(client, [], options) == []
    for kw in (dict(load="abc"), dict(consume=3), dict(reduce=3)):
        with pytest.raises(cuflow.ArgumentTypeError, match=f"{next(iter(kw))} must be a callable"):
            cfd.map_frames(client, [1], options, **kw)
    for bad in (None, 3, "frames"):
        with pytest.raises(cuflow.ArgumentTypeError, match="items must be a sequence"):
            cfd.map_frames(client, bad, options)
    for bad in (0.5, True, 0, -2):
        with pytest.raises(cuflow.CuflowError, match="frames_per_task"):
            cfd.map_frames(client, [1], options, frames_per_task=bad)
    frames = [_frame(i) for i in range(3)]
    assert len(cfd.map_frames(client, frames, options, frames_per_task=np.int64(2))) == 2


def test_pool_plugin_refuses_a_size_past_its_limit():
    for size, limit, shown in ((2 << 30, 1 << 30, "size=2147483648 (2147483648 bytes) and "
                                                   "limit=1073741824 (1073741824 bytes)"),
                               ("2GiB", "1GB", "size='2GiB' (2147483648 bytes) and "
                                               "limit='1GB' (1000000000 bytes)")):
        with pytest.raises(cuflow.ArgumentError,
                           match=r"cuflow.dask.CuflowPool: size must be at most limit") as ei:
            cfd.CuflowPool(size, limit=limit)
        assert shown in str(ei.value)
    assert cfd.CuflowPool("1GiB", limit="1GiB").size == 1 << 30  # equal is fine
    assert cfd.CuflowPool("2GiB", limit=0.5).limit == 0.5  # a fraction: checked on the worker


class _Worker:
    """Stands for a distributed.Worker: setup records the plugin on it."""


def test_pool_plugin_setup_that_fails_leaves_the_pools_limit(cf):
    """A setup that cannot reserve its size restores the pool's previous limit and records
    no report: a fraction limit below the size is refused before anything changes, and a
    reserve the device refuses puts the previous limit back."""
    from cuflow.memory._limit import device_total

    pool = cf.memory.get_pool()
    old = pool.limit
    try:
        pool.limit = 3 << 40
        total = device_total(pool.backend)
        worker = _Worker()
        small = cfd.CuflowPool(8 << 20, limit=(1 << 20) / total)  # a fraction: 1 MiB
        with pytest.raises(cuflow.ArgumentError, match=r"size must be at most limit, got "
                                                       r"size=8388608 bytes"):
            small.setup(worker)
        too_big = cfd.CuflowPool(total + (1 << 30), limit=total + (2 << 30))
        with pytest.raises(cuflow.OutOfMemoryError):
            too_big.setup(worker)
        assert pool.limit == 3 << 40 and cf.memory.stats()["limit_bytes"] == 3 << 40
        assert not hasattr(worker, "cuflow_pool") and too_big.report == small.report == {}
        ok = cfd.CuflowPool(1 << 20, limit=64 << 20)
        ok.setup(worker)
        assert worker.cuflow_pool is ok and ok.report["reserved_at_setup"] >= 1 << 20
        assert pool.limit == 64 << 20
        ok.teardown(worker)
        assert pool.limit == 3 << 40
    finally:
        pool.limit = old


def test_pool_plugins_sharing_a_pool_restore_it_at_the_last_teardown(cf, rng):
    """Workers of one process share their device's pool: a teardown while another worker's
    setup holds leaves the limit and the reserve, and the last one puts back the limit from
    before the first setup."""
    pool = cf.memory.get_pool()
    old = pool.limit
    before = int(rng.integers(200, 400)) << 20
    try:
        pool.limit = before
        first, second = _Worker(), _Worker()
        cfd.CuflowPool("1MiB", limit="64MiB").setup(first)
        cfd.CuflowPool("2MiB", limit="32MiB").setup(second)
        assert pool.limit == 32 << 20  # the latest setup's limit holds
        reserved = cf.memory.stats()["reserved_bytes.all.current"]
        assert reserved >= 2 << 20
        first.cuflow_pool.teardown(first)
        assert not hasattr(first, "cuflow_pool") and pool.limit == 32 << 20
        assert cf.memory.stats()["reserved_bytes.all.current"] == reserved  # still reserved
        second.cuflow_pool.teardown(second)
        assert pool.limit == before and cf.memory.stats()["limit_bytes"] == before
        after = cf.memory.stats()["reserved_bytes.all.current"]
        # the reserve went back; on the GPU a segment that a live array shares with the reserve
        # stays, so only "no more" holds there; the NumPy backend's host pool holds no array
        assert after <= reserved if cf.get_backend().is_gpu else after <= reserved - (2 << 20)
    finally:
        pool.limit = old


def test_from_host_checks_x_and_chunks(cf):
    x = np.arange(8.0)
    # NumPy chunk sizes (no ambiguous truth value), for host and Dask arrays
    for src in (x, da.from_array(x, chunks=2)):
        y = cfd.from_host(src, chunks=np.array([4, 4]))
        assert y.chunks == ((4, 4),)
    for bad in (None, np.array([1, "a"], dtype=object), "abc", np.array(["x"])):
        with pytest.raises(cuflow.ArgumentTypeError,
                           match=r"cuflow.dask.from_host: x must be an array of numbers"):
            cfd.from_host(bad)
    with pytest.raises(cuflow.ArgumentTypeError, match="got None"):
        cfd.from_host(None)
    with pytest.raises(cuflow.ArgumentTypeError, match="got an array of dtype object"):
        cfd.from_host(da.from_array(np.array([1, "a"], dtype=object), chunks=1), chunks=2)
    for src in (x, da.from_array(x, chunks=2)):
        for chunks, cause in ((0, ZeroDivisionError), (((3, 3),), ValueError)):
            with pytest.raises(cuflow.ArgumentError,
                               match=r"cuflow.dask.from_host: chunks must be 'auto'") as ei:
                cfd.from_host(src, chunks=chunks)
            assert isinstance(ei.value.__cause__, cause) and repr(chunks) in str(ei.value)


def test_from_host_reads_chunks_by_one_rule_for_host_and_dask_data(cf, rng):
    line = rng.standard_normal(8) + 10
    plane = rng.integers(1, 100, size=(4, 6), dtype=np.int32)
    refused = [(line, (3, 3), cuflow.ArgumentError, r"Chunks do not add up"),
               (line, ((4, 4), (1,)), cuflow.ArgumentError, r"same length"),
               (line, {5: 2}, cuflow.ArgumentError, r"keys are axes, ints in \[-1, 1\).* a key "
                                                    r"is 5$"),
               (line, {"a": 2}, cuflow.ArgumentTypeError, r"a key is a str, 'a'$"),
               (line, 0, cuflow.ArgumentError, r"an int >= 1 .* a chunk size is 0 for an axis "),
               (line, -2, cuflow.ArgumentError, r"an int >= 1 .* a size is -2$"),
               (line, ((9, -1),), cuflow.ArgumentError, r"axis 0 has sizes \(9, -1\)$"),
               (line, 2.5, cuflow.ArgumentTypeError, r"no bools or floats.* a size is a float"),
               (line, (4.0, 4), cuflow.ArgumentTypeError, r"a size is a float, 4.0$"),
               (plane, (2,), cuflow.ArgumentError, r"same length"),
               (plane, {0: 2, -2: 3}, cuflow.ArgumentError, r"axis 0 is given twice$")]
    for host, chunks, err, found in refused:
        for src in (host, da.from_array(host, chunks=2)):
            with pytest.raises(err, match=r"cuflow.dask.from_host: chunks must be 'auto', .*"
                                          + found) as ei:
                cfd.from_host(src, chunks=chunks)
            assert f"x's shape {host.shape}" in str(ei.value)
            assert f"got chunks={chunks!r}" in str(ei.value)
    accepted = [(line, (4, 4), ((4, 4),)), (line, {-1: 3}, ((3, 3, 2),)),
                (line, [[5, 3]], ((5, 3),)), (line, "auto", None),
                (plane, (2, -1), ((2, 2), (6,))), (plane, (None, 4), ((4,), (4, 2))),
                (plane, np.int64(3), ((3, 1), (3, 3))), (plane, np.array([3, 4]), ((3, 1), (4, 2))),
                (plane, {0: 1, -1: (1, 5)}, ((1, 1, 1, 1), (1, 5)))]
    for host, chunks, want in accepted:
        for src in (host, da.from_array(host, chunks=2)):
            x = cfd.from_host(src, chunks=chunks)
            if want is not None:
                assert x.chunks == want, (type(src), chunks)
            got = x.compute(scheduler="synchronous")
            assert isinstance(got, cf.darray)
            np.testing.assert_array_equal(cf.asnumpy(got), host)
    # "auto" keeps a Dask array's chunks; a dict's axes left out keep x's chunks, a Dask
    # array's own and the whole axis of host data
    assert cfd.from_host(da.from_array(line, chunks=3)).chunks == ((3, 3, 2),)
    assert cfd.from_host(plane, chunks={1: 4}).chunks == ((4,), (4, 2))
    assert cfd.from_host(da.from_array(plane, chunks=(2, 3)), chunks={1: 4}).chunks == (
        (2, 2), (4, 2))


def test_from_host_refuses_to_rechunk_unknown_chunk_sizes(cf, rng):
    host = rng.standard_normal(10) + 10
    d = da.from_array(host, chunks=4)
    unknown = d[d > 10]
    with pytest.raises(cuflow.ArgumentError, match=r"x's chunk sizes are unknown .* "
                                                   r"chunks=2; .*compute_chunk_sizes"):
        cfd.from_host(unknown, chunks=2)
    got = cfd.from_host(unknown).compute(scheduler="synchronous")
    np.testing.assert_array_equal(cf.asnumpy(got), host[host > 10])


@pytest.mark.parametrize("order", [">", "<"])
def test_from_host_declares_the_chunks_native_dtype(cf, order):
    host = np.arange(6, dtype=f"{order}f4")
    for src in (host, da.from_array(host, chunks=3)):
        x = cfd.from_host(src, chunks=3)
        assert x.dtype == np.float32 and x.dtype.isnative and x._meta.dtype == np.float32
        got = x.compute(scheduler="synchronous")
        assert got.dtype == x.dtype and got.dtype.isnative
        np.testing.assert_array_equal(cf.asnumpy(got), host)
    assert cfd.meta(f"{order}i8").dtype == np.int64 and cfd.meta(np.dtype(">c8")).dtype.isnative


def _failing_consume(batch):
    raise RuntimeError("consume failed on purpose")


def test_map_frames_after_a_consume_that_raised(ccf, client):
    """The worker's cached Pipeline is left closed when consume raises: the next call with
    the same options runs on it."""
    options = ccf.PipelineOptions(size=(10, 12), batch_size=2)
    frames = [_frame(i) for i in range(4)]
    for _ in range(2):
        with pytest.raises(RuntimeError, match="consume failed on purpose"):
            cfd.map_frames(client, frames, options, consume=_failing_consume)
        out = cfd.map_frames(client, frames, options)
        assert [b.shape for b in out] == [(2, 3, 10, 12)] * 2


def _slow_or_broken(i):
    if i == 0:
        raise ValueError("frame 0 is broken")
    time.sleep(0.3)
    return _frame(i)


def _shard_keys(dask_scheduler):
    return {str(k): ts.state for k, ts in dask_scheduler.tasks.items()
            if str(k).startswith("run_shard")}


def test_a_failed_map_frames_cancels_its_other_shards(ccf, client):
    before = set(client.run_on_scheduler(_shard_keys))
    options = ccf.PipelineOptions(size=8, batch_size=1)
    with pytest.raises(ValueError, match="frame 0 is broken"):  # (its traceback holds the futures)
        cfd.map_frames(client, range(4), options, load=_slow_or_broken)  # 2 shards of 2
    left = {}
    for _ in range(50):
        left = {k: s for k, s in client.run_on_scheduler(_shard_keys).items() if k not in before}
        if not left:
            break
        time.sleep(0.1)
    assert not left, f"shards of the failed call still held: {left}"


def _staging_threads():
    return sum(t.name.startswith("cuflow-staging") for t in threading.enumerate())


def test_map_frames_asks_the_scheduler_for_its_workers(ccf, client, monkeypatch):
    """A scheduler slow to answer leaves the client's cached identity without workers
    (``scheduler_info`` then lists none): map_frames still finds them."""
    monkeypatch.setattr(client, "scheduler_info", lambda *a, **k: {"workers": {}})
    options = ccf.PipelineOptions(size=(8, 8), batch_size=1)
    assert len(cfd.map_frames(client, [_frame(i) for i in range(2)], options)) == 2


def test_each_worker_thread_keeps_a_few_pipelines(ccf, client):
    """A Pipeline per options, at most 4 per worker thread: the others are closed (their
    staging threads stopped)."""
    frames = [_frame(i) for i in range(2)]
    for k in range(8):
        options = ccf.PipelineOptions(size=(8, 8 + k), batch_size=1, copy_threads=1)
        assert len(cfd.map_frames(client, frames, options)) == 2
    staging = client.run(_staging_threads)
    assert max(staging.values()) <= 4, staging


@pytest.mark.parametrize("name", ["argmax", "argmin", "nanargmax", "nanargmin"])
def test_arg_reductions_match_dask_on_numpy_chunks(cf, rng, name):
    host = rng.standard_normal((12, 10)).astype(np.float32)
    if name.startswith("nan"):
        host[::3, 1::4] = np.nan
    f = getattr(da, name)
    for axis in (None, 0, 1):
        want = f(da.from_array(host, chunks=(5, 4)), axis=axis, split_every=2)
        got = f(cfd.from_host(host, chunks=(5, 4)), axis=axis, split_every=2)
        want, got = want.compute(scheduler="synchronous"), got.compute(scheduler="synchronous")
        # (the backend's array: CuPy's nanargmax, which Dask calls through NumPy's
        # __array_function__, returns a cupy.ndarray of a darray)
        assert isinstance(got, cf.get_backend().ndarray) and got.dtype == want.dtype
        np.testing.assert_array_equal(cf.asnumpy(got), want)


def test_einsum_takes_casting(cf, rng):
    a = rng.standard_normal((6, 4))
    b = rng.standard_normal((4, 5))
    x, y = cfd.from_host(a, chunks=3), cfd.from_host(b, chunks=2)
    got = da.einsum("ij,jk->ik", x, y, dtype=np.float32, casting="same_kind")
    got = got.compute(scheduler="synchronous")
    assert isinstance(got, cf.darray) and got.dtype == np.float32
    np.testing.assert_allclose(cf.asnumpy(got), a @ b, rtol=1e-5, atol=1e-5)
    # NumPy's default rule, 'safe', refuses float64 -> float32, as on NumPy chunks
    with pytest.raises(TypeError, match="'safe'"):
        da.einsum("ij,jk->ik", x, y, dtype=np.float32).compute(scheduler="synchronous")


def test_a_pool_limit_of_zero_bytes_is_no_limit(cf):
    pool = cf.memory.get_pool()
    old = pool.limit
    try:
        for zero in (0, "0", "0B"):
            pool.limit = 1 << 40
            plugin = cfd.CuflowPool("1MiB", limit=zero)
            worker = _Worker()
            plugin.setup(worker)
            assert pool.limit is None and cf.memory.stats()["limit_bytes"] is None
            assert worker.cuflow_pool is plugin
            plugin.teardown(worker)
            assert pool.limit == 1 << 40 and not hasattr(worker, "cuflow_pool")
    finally:
        pool.limit = old


def _set_limit(limit):
    cuflow.memory.set_limit(limit)


def test_unregistering_the_pool_plugin_undoes_its_setup(ccf, client):
    with contextlib.suppress(ValueError):  # (a plugin another test registered)
        client.unregister_worker_plugin(cfd.CuflowPool.name)
    client.run(_set_limit, 300 << 20)
    try:
        client.register_plugin(cfd.CuflowPool("1MiB", limit="64MiB"))
        stats = cfd.pool_stats(client)
        assert all(s["stats"]["limit_bytes"] == 64 << 20 for s in stats.values())
        reserved = {w: s["setup"]["reserved_at_setup"] for w, s in stats.items()}
        client.unregister_worker_plugin(cfd.CuflowPool.name)
        for w, s in cfd.pool_stats(client).items():
            assert s["setup"] is None and s["stats"]["limit_bytes"] == 300 << 20
            # the cache emptied: the reserve went back.  On the GPU a segment that a live
            # array of the worker shares with the reserve stays, so only "no more" holds
            # there; the NumPy backend's host pool holds the reserve alone
            after = s["stats"]["reserved_bytes.all.current"]
            assert after <= reserved[w] if ccf.get_backend().is_gpu else after < reserved[w]
    finally:
        client.run(_set_limit, None)


def _out_of_memory():
    raise cuflow.OutOfMemoryError("cuflow: out of memory on purpose")


def test_out_of_memory_on_a_worker_reaches_the_client_as_itself(client):
    with pytest.raises(cuflow.OutOfMemoryError, match="on purpose") as ei:
        client.submit(_out_of_memory, pure=False).result()
    assert isinstance(ei.value, MemoryError) and isinstance(ei.value, cuflow.CuflowError)


def test_from_host_refuses_ragged_data_and_bool_chunks(cf):
    with pytest.raises(cuflow.ArgumentError,
                       match=r"cuflow.dask.from_host: x must be an array of numbers, got a "
                             r"list that cannot be converted to an array: .*inhomogeneous") as ei:
        cfd.from_host([[1, 2], [3]])
    assert isinstance(ei.value.__cause__, ValueError)
    x = np.zeros((4, 4))
    for bad in (True, np.bool_(True), (2, False), ((2, 2), (True, 3)), {0: True},
                np.array([True, True])):
        with pytest.raises(cuflow.ArgumentTypeError,
                           match=r"cuflow.dask.from_host: chunks must be .* no bools"):
            cfd.from_host(x, chunks=bad)
        with pytest.raises(cuflow.ArgumentTypeError, match="no bools"):
            cfd.from_host(da.from_array(x, chunks=2), chunks=bad)
    assert cfd.from_host(x, chunks={0: 2, 1: -1}).chunks == ((2, 2), (4,))


def test_from_host_takes_a_device_array(cf, rng):
    host = rng.standard_normal((8, 6)).astype(np.float32)
    x = cfd.from_host(cf.asarray(host), chunks=(4, 3))
    assert x.chunks == ((4, 4), (3, 3)) and x.dtype == np.float32
    got = x.compute(scheduler="synchronous")
    assert isinstance(got, cf.darray)
    np.testing.assert_array_equal(cf.asnumpy(got), host)
