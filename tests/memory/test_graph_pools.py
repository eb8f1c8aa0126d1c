"""Graph-private pools (cuflow/memory/_graphs.py): isolation, release when the graph closes,
and nothing freed or synchronized while a stream captures."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import cuflow
from cuflow.memory import HostBackend, Pool

from .conftest import CaptureBackend, begin_capture, end_capture


def test_private_pool_isolated_and_released():
    pool = Pool(HostBackend())
    owner = pool.begin_private(7)
    g = pool.alloc(1 << 20, 7)
    tmp = pool.alloc(1 << 20, 7)
    pool.free(tmp)  # freed during capture: back to the private pool only
    pool.end_private(7)
    x = pool.alloc(1 << 20, 7)
    assert x.seg.owner is None and x.seg is not g.seg and x.seg is not tmp.seg
    assert pool.stats()["private_pools"] == 1
    pool.close_private(owner)
    assert pool.stats()["private_pools"] == 1  # g still alive
    pool.free(g)
    assert pool.stats()["private_pools"] == 0
    assert all(s["private_pool"] is None for s in pool.snapshot())


@pytest.mark.parametrize("free_first", [False, True])
def test_closed_graph_pool_is_released_after_its_stream_dies(free_first):
    """A graph's private segment goes back once the graph is closed and its blocks are
    free, even when the capture stream was destroyed first (its blocks are orphans)."""
    be = HostBackend()
    pool = Pool(be)
    owner = pool.begin_private(7)
    b = pool.alloc(3 << 20, 7)
    pool.end_private(7)
    pool._stream_gone(7)
    if free_first:
        pool.free(b)
    pool.flush_frees()
    pool.close_private(owner)
    if not free_first:
        assert pool.stats()["private_pools"] == 1  # its output is still alive
        pool.free(b)
    assert pool.stats()["private_pools"] == 0 and be.in_use == 0


@pytest.mark.parametrize("stream_dies", [False, True])
def test_closed_graph_memory_freed_during_a_capture_goes_back_when_it_ends(stream_dies):
    """A closed graph's last array freed while another graph captures (a garbage collection
    can do that at any time): nothing is freed during the capture, and the memory goes back
    when it ends, also when the first graph's stream was destroyed (its blocks are orphans)."""
    be = CaptureBackend()
    pool = Pool(be)
    g1 = begin_capture(pool, be, 7)
    out = pool.alloc(3 << 20, 7)
    end_capture(pool, be, 7)
    pool.close_private(g1)
    if stream_dies:
        pool._stream_gone(7)
    g2 = begin_capture(pool, be, 8)
    pool.free(out)
    tmp = pool.alloc(1000, 8)  # the capture goes on
    assert pool.stats()["private_pools"] == 2
    end_capture(pool, be, 8)
    assert pool.stats()["private_pools"] == 1  # g1's segment went back
    pool.close_private(g2)
    pool.free(tmp)
    assert pool.stats()["private_pools"] == 0 and be.in_use == 0


def test_graph_closed_during_a_capture_goes_back_when_it_ends():
    """Closing a graph while another captures (its ``__del__`` may run then) frees nothing
    until the capture ends; nor does ``empty_cache``.  A graph that allocated nothing is
    forgotten at once."""
    be = CaptureBackend()
    pool = Pool(be)
    g1 = begin_capture(pool, be, 7)
    pool.free(pool.alloc(3 << 20, 7))
    end_capture(pool, be, 7)
    nothing = begin_capture(pool, be, 9)
    end_capture(pool, be, 9)
    g2 = begin_capture(pool, be, 8)
    pool.close_private(g1)
    pool.close_private(nothing)
    assert pool.stats()["private_pools"] == 2  # g1 (waiting for the capture's end) and g2
    assert pool.empty_cache() == 0
    end_capture(pool, be, 8)
    pool.close_private(g2)
    assert pool.stats()["private_pools"] == 0 and be.in_use == 0


@pytest.mark.gpu
def test_graph_replay_never_overwrites_live_arrays(pooled):
    gpu_cf = pooled
    import cupy

    cf = gpu_cf
    pool = cf.memory.get_pool()
    gc.collect()  # earlier tests' graphs held by reference cycles go now, not during this one
    before = pool.stats()["private_pools"]
    x = cf.asarray(np.arange(1 << 16, dtype=np.float32))
    with cf.graph.capture() as g:
        tmp = cf.multiply(x, x)  # allocated inside the capture
        y = cf.add(tmp, x)
        del tmp  # freed during capture: must stay the graph's
    g.replay()
    g.stream.synchronize()
    live = [cupy.full((1 << 16,), 5.0, cupy.float32) for _ in range(8)]  # after capture
    for _ in range(3):
        g.replay()
    g.stream.synchronize()
    for a in live:
        assert float(a.min()) == 5.0 and float(a.max()) == 5.0
    xs = np.arange(1 << 16, dtype=np.float32)
    np.testing.assert_array_equal(cf.asnumpy(y), xs * xs + xs)
    assert pool.stats()["private_pools"] == before + 1
    g.close()
    del y
    assert pool.stats()["private_pools"] == before


@pytest.mark.gpu
@pytest.mark.parametrize("stream_dies", [False, True])
def test_closed_graph_array_freed_during_another_capture(pooled, stream_dies):
    """A closed graph's last array freed while another graph captures (a garbage collection
    can do that at any time): the capture is not disturbed, and the memory goes back when it
    ends, also after the first graph's capture stream was destroyed."""
    cf = pooled
    pool = cf.memory.get_pool()
    gc.collect()
    before = pool.stats()["private_pools"]
    xs = np.arange(1 << 16, dtype=np.float32)
    x = cf.asarray(xs)
    with cf.graph.capture() as g1:
        out = cf.multiply(x, x)
    g1.close()
    if stream_dies:
        del g1
    with cf.graph.capture() as g2:
        y = cf.add(x, x)
        del out
        z = cf.add(y, x)  # the pool runs while capturing
    assert pool.stats()["private_pools"] == before + 1
    g2.replay()
    g2.stream.synchronize()
    np.testing.assert_array_equal(cf.asnumpy(z), 3 * xs)
    g2.close()
    del y, z
    assert pool.stats()["private_pools"] == before


@pytest.mark.gpu
def test_failed_capture_releases_private_pool(pooled):
    gpu_cf = pooled
    cf = gpu_cf
    pool = cf.memory.get_pool()
    before = pool.stats()["private_pools"]
    with pytest.raises(ZeroDivisionError), cf.graph.capture():
        cf.empty((1000,), dtype=cf.float32)
        1 / 0  # noqa: B018
    assert pool.stats()["private_pools"] == before


@pytest.mark.parametrize(("call", "exc", "shown"), [
    (lambda pool: pool.begin_private("x"), TypeError, "begin_private: stream must be a stream "
                                                      "handle, an int in [0, 2**63), got str 'x'"),
    (lambda pool: pool.begin_private(-1), ValueError, "begin_private: stream must be a stream "
                                                      "handle, an int in [0, 2**63), got -1"),
    (lambda pool: pool.end_private(None), TypeError, "end_private: stream must be a stream "
                                                     "handle"),
    (lambda pool: pool.close_private([]), TypeError, "close_private: owner must be an int id "
                                                     "that begin_private returned, got list []"),
    (lambda pool: pool.close_private(True), TypeError, "got bool True"),
    (lambda pool: pool.close_private(5), ValueError, "close_private: owner must be an id that "
                                                     "this pool's begin_private returned, in "
                                                     "[1, 2), got 5"),
    (lambda pool: pool.close_private(0), ValueError, "in [1, 2), got 0"),
])
def test_private_pool_calls_name_their_rule(call, exc, shown):
    """begin_private / end_private take a stream handle, close_private an id begin_private
    returned: anything else is the module's error, naming the rule, and changes nothing."""
    pool = Pool(HostBackend())
    owner = pool.begin_private(7)
    pool.end_private(7)
    with pytest.raises(cuflow.CuflowError) as ei:
        call(pool)
    assert isinstance(ei.value, exc) and shown in str(ei.value)
    assert not pool._capturing and pool.stats()["private_pools"] == 1
    pool.close_private(owner)
    pool.close_private(owner)  # again: nothing to do
    assert pool.stats()["private_pools"] == 0
