"""Limits (cuflow/memory/_limit.py): the pool's limit, the out-of-memory error, CUFLOW_MEMORY_LIMIT."""

from __future__ import annotations

import pytest

import cuflow
from cuflow.memory import HostBackend, Pool
from cuflow.memory._limit import parse_limit_env

from .conftest import check, fill


def test_limit_and_oom_message_keep_live_data():
    pool = Pool(HostBackend(), limit=4 << 20)
    a = pool.alloc(3 << 20, 0)
    fill(a, 0xAB)
    with pytest.raises(cuflow.OutOfMemoryError) as ei:
        pool.alloc(3 << 20, 0)
    msg = str(ei.value)
    for word in ("requested", "reserves", "in use", "largest free block", "set_limit"):
        assert word in msg
    assert isinstance(ei.value, MemoryError)
    check(a, 0xAB)  # nothing already allocated is lost
    assert pool.stats()["num_ooms"] == 1


def test_limit_env_parsing():
    be = HostBackend(capacity=1000)
    assert parse_limit_env("8GiB", be) == 8 << 30
    assert parse_limit_env("512MB", be) == 512 * 10**6
    assert parse_limit_env("0.5", be) == 500
    assert parse_limit_env("25%", be) == 250
    assert parse_limit_env("123456", be) == 123456
    with pytest.raises(ValueError, match="CUFLOW_MEMORY_LIMIT"):
        parse_limit_env("lots", be)


@pytest.mark.gpu
def test_gpu_limit_raises_cuflow_oom(pooled):
    gpu_cf = pooled
    cf = gpu_cf
    pool = cf.memory.get_pool()
    keep = cf.ones((1 << 20,), dtype=cf.float32)
    old = pool.limit
    try:
        pool.set_limit(size=pool.reserved + (8 << 20))
        with pytest.raises(cf.OutOfMemoryError, match="requested"):
            cf.empty((1 << 30,), dtype=cf.uint8)
    finally:
        pool.limit = old
    assert float(keep.sum()) == float(1 << 20)


def test_memory_errors_are_cuflow_errors():
    """Errors the pool raises on purpose derive from cuflow.CuflowError (and the builtin)."""
    pool = Pool(HostBackend(capacity=8 << 20))
    b = pool.alloc(100, 0)
    pool.free(b)
    with pytest.raises(cuflow.CuflowError, match="twice"):
        pool.free(b)
    with pytest.raises(cuflow.CuflowError, match="negative"):
        pool.alloc(-1, 0)
    with pytest.raises(cuflow.CuflowError, match="CUFLOW_MEMORY_LIMIT"):
        parse_limit_env("lots", pool.backend)
    with pytest.raises(cuflow.CuflowError, match="fraction"):
        pool.set_limit(fraction=2.0)


def test_limiting_adaptor_alone():
    """The limit is an adaptor over any segment source: it holds at most its limit."""
    from cuflow.memory import LimitingAdaptor
    from cuflow.memory._limit import LimitExceeded

    up = HostBackend()
    lim = LimitingAdaptor(up, 3 << 20)
    a = lim.alloc(2 << 20, 0)
    with pytest.raises(LimitExceeded, match="limit"):
        lim.alloc(2 << 20, 0)
    with pytest.raises(MemoryError):
        lim.alloc_private(2 << 20)
    assert lim.held == 2 << 20 and up.in_use == 2 << 20  # nothing taken by the refusals
    p = lim.alloc_private(1 << 20)
    lim.free(a, 2 << 20, 0)
    lim.free_private(p, 1 << 20)
    assert lim.held == 0 and up.in_use == 0 and lim.name == up.name


def test_limit_is_absent_when_unused_and_counts_what_is_held():
    """An unlimited pool takes segments from its backend directly; a limit set on a pool in
    use counts the segments it already holds, and can be raised, lowered and removed."""
    from cuflow.memory import LimitingAdaptor

    pool = Pool(HostBackend())
    assert pool.limit is None and pool._source is pool.backend
    a = pool.alloc(3 << 20, 0)
    pool.limit = 4 << 20
    assert isinstance(pool._source, LimitingAdaptor) and pool._source.held == pool.reserved
    with pytest.raises(cuflow.OutOfMemoryError, match="limit"):
        pool.alloc(3 << 20, 0)
    pool.limit = 16 << 20
    b = pool.alloc(3 << 20, 0)
    for x in (a, b):
        pool.free(x)
    pool.empty_cache()
    assert pool._source.held == pool.reserved == 0
    pool.limit = None
    assert pool._source is pool.backend and pool.stats()["limit_bytes"] is None


@pytest.mark.parametrize("off", [dict(size=0), dict(fraction=0), dict(fraction=0.0), {}])
def test_cupy_set_limit_of_zero_or_nothing_removes_the_limit(off):
    """CuPy's MemoryPool.set_limit: 0 (size or fraction) or neither argument means no limit,
    and get_limit() then returns 0."""
    pool = Pool(HostBackend(capacity=64 << 20))
    pool.set_limit(size=4 << 20)
    assert pool.get_limit() == 4 << 20
    pool.set_limit(**off)
    assert pool.limit is None and pool.get_limit() == 0
    assert pool.stats()["limit_bytes"] is None
    b = pool.alloc(8 << 20, 0)  # past the old limit
    pool.free(b)
    pool.set_limit(fraction=0.25)
    assert pool.get_limit() == 16 << 20
    with pytest.raises(cuflow.memory.MemoryValueError, match="size or fraction, not both"):
        pool.set_limit(size=0, fraction=0)
    assert pool.get_limit() == 16 << 20


def test_oom_message_under_a_limit_gives_the_segment_the_limit_refused():
    pool = Pool(HostBackend(capacity=256 << 20), limit=8 << 20)
    a = pool.alloc(7 << 20, 0)
    with pytest.raises(cuflow.OutOfMemoryError) as ei:
        pool.alloc(512, 0)  # a small request needs a 2 MiB segment: 1 MiB is left
    msg = str(ei.value)
    assert msg.startswith("cuflow.memory: out of memory: 512 B requested")
    for words in ("needs a new segment of 2.00 MiB", "the pool reserves 7.00 MiB under its "
                  "limit of 8.00 MiB (1.00 MiB left)", "7.00 MiB is in use"):
        assert words in msg
    pool.free(a)


def test_oom_message_of_the_device_gives_the_segment_it_refused():
    pool = Pool(HostBackend(capacity=8 << 20))
    a = pool.alloc(7 << 20, 0)
    with pytest.raises(cuflow.OutOfMemoryError) as ei:
        pool.alloc(3 << 20, 0)
    msg = str(ei.value)
    assert ("3.00 MiB requested (rounded up to the pool's block size) needs a new segment of "
            "3.00 MiB, which the device could not give; the pool reserves 7.00 MiB") in msg
    pool.free(a)


@pytest.mark.parametrize("zero", [0, "0B", "0 MiB"])
def test_zero_bytes_is_no_limit_in_every_form(cf, rng, zero):
    """0 bytes means no limit wherever a limit is set, as CuPy's ``set_limit(size=0)`` does:
    ``cuflow.memory.set_limit``, ``Pool.limit``, ``Pool(limit=)`` and ``Pool.set_limit``
    agree (a cap of 0 bytes would refuse every segment)."""
    pool = cf.memory.get_pool()
    old = pool.limit
    try:
        cf.memory.set_limit(3 << 40)
        cf.memory.set_limit(zero)
        assert pool.limit is None and pool.get_limit() == 0
        assert cf.memory.stats()["limit_bytes"] is None
    finally:
        pool.limit = old
    cap = 64 << 20
    for p in (Pool(HostBackend(capacity=cap), limit=zero), Pool(HostBackend(capacity=cap))):
        p.set_limit(size=4 << 20)
        p.limit = zero
        assert p.limit is None and p.get_limit() == 0 and p.stats()["limit_bytes"] is None
        b = p.alloc(int(rng.integers(4 << 20, cap // 2)), 0)  # past the old limit
        p.free(b)
        p.empty_cache()
        p.limit = 4 << 20  # a limit of bytes still applies
        with pytest.raises(cuflow.OutOfMemoryError, match="limit"):
            p.alloc(int(rng.integers(5 << 20, cap // 2)), 0)
