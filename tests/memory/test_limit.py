"""Limits (cuflow/memory/_limit.py): the pool's limit, the out-of-memory error, CUFLOW_MEMORY_LIMIT."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cuflow
from cuflow.memory import HostBackend, Pool
from cuflow.memory._limit import parse_limit_env

from .conftest import DeviceBytes, EventBackend, check, fill


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
    with pytest.raises(cuflow.OutOfMemoryError):  # (a CuflowError and a MemoryError)
        lim.alloc_private(2 << 20)
    assert lim.held == 2 << 20 and up.in_use == 2 << 20  # nothing taken by the refusals
    p = lim.alloc_private(1 << 20)
    lim.free(a, 2 << 20, 0)
    lim.free_private(p, 1 << 20)
    assert lim.held == 0 and up.in_use == 0 and lim.name == up.name


def test_the_adaptor_forwards_every_backend_default_it_does_not_implement():
    """Backend's defaults would hide the upstream's own methods and attributes from the
    adaptor's __getattr__: each one is the adaptor's own or forwarded to the upstream."""
    from cuflow.memory import Backend, LimitingAdaptor

    lim = LimitingAdaptor(HostBackend(), 1 << 20)
    hidden = [name for name in vars(Backend) if not name.startswith("_")
              and name not in vars(LimitingAdaptor) and name not in vars(lim)]
    assert not hidden, f"LimitingAdaptor hides the upstream's {hidden}"


@pytest.mark.parametrize("held, error", [(-1 << 30, cuflow.memory.MemoryValueError),
                                          ("x", cuflow.memory.MemoryTypeError),
                                          (True, cuflow.memory.MemoryTypeError)])
def test_the_adaptor_refuses_a_held_count_that_is_no_byte_count(held, error):
    """A negative held count would let the limit be passed by as much."""
    from cuflow.memory import LimitingAdaptor

    with pytest.raises(error, match="held must be"):
        LimitingAdaptor(HostBackend(), 16 << 20, held=held)
    lim = LimitingAdaptor(HostBackend(), 16 << 20, held=15 << 20)
    with pytest.raises(cuflow.OutOfMemoryError):
        lim.alloc(2 << 20, 0)


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
    with pytest.raises(cuflow.memory.MemoryValueError,
                       match=r"^cuflow.memory.Pool.set_limit: give size or fraction, not both"):
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


@pytest.mark.gpu
def test_a_refused_segment_leaves_the_device_free(gpu_cf):
    """A segment the device cannot give leaves the driver's pool with the reserve it held
    before the request.  The driver's pool takes every free byte of the device while it
    tries, and keeps them (its release threshold is at the maximum): the other libraries
    and processes on the device would be starved until ``empty_cache``."""
    be = gpu_cf.memory.DriverPoolBackend(DeviceBytes().rt.getDevice())
    pool = Pool(be)
    try:
        keep = pool.alloc(1 << 20, 0)
        held = be.device_reserved()[0]
        with pytest.raises(cuflow.OutOfMemoryError, match="which the device could not give"):
            pool.alloc(be.total_memory() + (1 << 30), 0)
        assert be.device_reserved()[0] <= held
        pool.free(keep)
        pool.free(pool.alloc(64 << 20, 0))  # and the pool goes on
    finally:
        pool.empty_cache()


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


def test_a_pool_over_a_limiting_adaptor_orders_streams_as_over_its_upstream():
    """The adaptor limits segments only: a block used on another stream (record_stream)
    is not reused while that stream's event is pending, as over the bare backend."""
    from cuflow.memory import LimitingAdaptor

    for backend in (EventBackend(), LimitingAdaptor(EventBackend(), 1 << 30)):
        pool = Pool(backend)
        a = pool.alloc(2 << 20, 1)
        pool.record_stream(a, 2)  # stream 2's work still uses a
        pool.free(a)
        b = pool.alloc(2 << 20, 1)
        assert b.ptr != a.ptr and pool.stats()["num_pending_cross_stream"] == 1
        pool.free(b)


def test_limiting_adaptor_is_its_upstream_but_for_segments():
    from cuflow.memory import LimitingAdaptor

    class Granular(EventBackend):
        cheap_release = False
        segment_granularity = 4 << 20
        segment_granularity_min = 1 << 20
        device_id = 3
        extra = "the upstream's own attribute"

        def current_stream(self):
            return 7

    up = Granular()
    lim = LimitingAdaptor(up, 1 << 30)
    for name in ("cheap_release", "segment_granularity", "segment_granularity_min",
                 "device_id", "extra"):
        assert getattr(lim, name) == getattr(up, name), name
    assert lim.current_stream() == 7
    ev = lim.record(2)
    assert up.events == [ev] and not lim.done(ev)
    lim.wait(1, ev)
    assert up.waits == [(1, 2)]
    p = lim.alloc(1 << 20, 0)
    assert lim.device_reserved() == up.device_reserved() == (1 << 20, 1 << 20)
    assert lim.device_allocs == up.device_allocs == 1
    lim.free(p, 1 << 20, 0)
    assert lim.held == 0 and lim.device_frees == 1
    with pytest.raises(AttributeError):
        lim.no_such_attribute  # noqa: B018


def test_a_limit_given_as_the_backend_is_the_pools_limit():
    """Pool(LimitingAdaptor(be, n)): the pool's limit is the adaptor's, ``limit = None``
    removes it, and the pool reads its backend's statistics through it."""
    from cuflow.memory import LimitingAdaptor

    up = HostBackend(capacity=64 << 20)
    lim = LimitingAdaptor(up, 4 << 20)
    pool = Pool(lim)
    assert pool.limit == 4 << 20 and pool.backend is up
    with pytest.raises(cuflow.OutOfMemoryError, match="limit"):
        pool.alloc(5 << 20, 0)
    pool.limit = None
    assert pool.limit is None and pool.stats()["limit_bytes"] is None
    b = pool.alloc(5 << 20, 0)  # past the old limit
    assert pool.stats()["num_device_alloc"] == 1
    pool.free(b)
    pool.set_limit(fraction=0.25)  # a fraction of the upstream's capacity
    assert pool.limit == 16 << 20
    assert Pool(LimitingAdaptor(up, 4 << 20), limit=8 << 20).limit == 8 << 20


class _Gated(HostBackend):
    """Its segments wait for the test's word (a slow device allocation in another thread)."""

    def __init__(self):
        super().__init__()
        self.entered, self.go = threading.Event(), threading.Event()

    def alloc(self, nbytes, stream):
        self.entered.set()
        assert self.go.wait(30)
        return super().alloc(nbytes, stream)


def test_a_limit_set_while_another_thread_takes_a_segment_counts_that_segment():
    """Setting a limit waits for a segment another thread is taking, so the limit counts
    it: after it goes back, the pool still reserves at most the limit."""
    be = _Gated()
    pool = Pool(be)
    got = {}
    taker = threading.Thread(target=lambda: got.setdefault("b", pool.alloc(8 << 20, 0)))
    taker.start()
    assert be.entered.wait(30)
    setter = threading.Thread(target=lambda: setattr(pool, "limit", 10 << 20))
    setter.start()
    setter.join(0.2)  # (it waits for the pool's lock; without it, it sets the limit now)
    be.go.set()
    taker.join()
    setter.join()
    pool.free(got["b"])
    pool.empty_cache()
    a = pool.alloc(9 << 20, 0)
    with pytest.raises(cuflow.OutOfMemoryError, match="limit"):
        pool.alloc(7 << 20, 0)
    assert pool.reserved <= pool.limit
    pool.free(a)


@pytest.mark.parametrize("refuser", ["limit", "device"])
def test_a_refused_segment_takes_a_larger_free_block_of_the_stream(refuser):
    """When the limit or the device refuses a segment, a free block more than twice the
    request (which a first attempt leaves alone) serves it rather than OutOfMemoryError."""
    pool = (Pool(HostBackend(), limit=11 << 20) if refuser == "limit"
            else Pool(HostBackend(capacity=11 << 20)))
    pool.free(pool.alloc(10 << 20, 0))
    small = pool.alloc(512, 0)  # splits the 10 MiB segment: ~10 MiB free in it
    b = pool.alloc(3 << 20, 0)
    assert b.seg is small.seg and pool.stats()["num_alloc_retries"] == 1
    assert pool.stats()["num_ooms"] == 0
    for x in (b, small):
        pool.free(x)


@pytest.mark.parametrize("refuser", ["limit", "device"])
def test_a_refused_segment_borrows_a_large_free_block_of_another_stream(refuser):
    pool = (Pool(HostBackend(), limit=12 << 20) if refuser == "limit"
            else Pool(HostBackend(capacity=12 << 20)))
    pool.free(pool.alloc(10 << 20, 1))
    small = pool.alloc(512, 1)  # ~10 MiB free on stream 1, in a segment that stays
    b = pool.alloc(3 << 20, 0)
    assert b.seg is small.seg and b.stream == 0
    assert pool.stats()["num_cross_stream_reuse"] == 1 and pool.stats()["num_ooms"] == 0
    for x in (b, small):
        pool.free(x)


def test_the_first_attempt_still_leaves_much_larger_blocks_alone():
    """Without a refusal, a large request does not split a free block more than twice its
    size: it takes a new segment (only the retry after a refusal goes uncapped)."""
    pool = Pool(HostBackend(), limit=64 << 20)
    pool.free(pool.alloc(10 << 20, 0))
    small = pool.alloc(512, 0)
    b = pool.alloc(3 << 20, 0)
    assert b.seg is not small.seg and pool.stats()["num_alloc_retries"] == 0
    for x in (b, small):
        pool.free(x)


class _Holder:
    """An array-like owner of a block, garbage only through a reference cycle."""

    def __init__(self, pool, n):
        self.pool, self.b, self.me = pool, pool.alloc(n, 0), self

    def __del__(self):
        self.pool.free(self.b)


@pytest.mark.parametrize("refuser", ["limit", "device"])
def test_a_refused_segment_collects_garbage_first(refuser):
    pool = (Pool(HostBackend(), limit=8 << 20) if refuser == "limit"
            else Pool(HostBackend(capacity=8 << 20)))
    gc.disable()
    try:
        _Holder(pool, 6 << 20)  # garbage now, in a cycle
        b = pool.alloc(6 << 20, 0)
    finally:
        gc.enable()
    assert pool.stats()["num_ooms"] == 0 and pool.reserved <= 8 << 20
    pool.free(b)


@settings(max_examples=30, deadline=None)
@given(total=st.integers(1, 1 << 50), data=st.data())
def test_a_fraction_that_comes_to_0_bytes_is_refused(total, data):
    """A positive fraction so small that it comes to 0 bytes is refused: 0 bytes would read
    as no limit."""
    frac = data.draw(st.floats(min_value=1e-300, max_value=min(1.0, 1 / total),
                               exclude_max=True).filter(lambda f: int(f * total) == 0))
    pool = Pool(HostBackend(capacity=total), limit=1 << 20)
    for set_it in (lambda: setattr(pool, "limit", frac),
                   lambda: pool.set_limit(fraction=frac),
                   lambda: setattr(pool, "limit", f"{frac * 50!r}%")):  # (half: no rounding up)
        with pytest.raises(cuflow.memory.MemoryValueError) as ei:
            set_it()
        assert "at least 1 byte" in str(ei.value) and "0 bytes" in str(ei.value)
        assert pool.limit == 1 << 20


@pytest.mark.parametrize("zero", ["0", "0.0", " 0 ", "0e9", "0B"])
def test_zero_as_a_string_is_no_limit(zero):
    pool = Pool(HostBackend(capacity=64 << 20), limit=4 << 20)
    pool.limit = zero
    assert pool.limit is None
    assert parse_limit_env(zero, pool.backend) is None


@pytest.mark.parametrize(("value", "expected"), [("0", "None"), ("1e-18", "MemoryValueError")])
def test_memory_limit_env_of_zero_is_no_limit_and_of_a_vanishing_fraction_raises(value,
                                                                                 expected):
    env = {k: v for k, v in os.environ.items() if k != "CUFLOW_MEMORY_LIMIT"}
    env.update(CUFLOW_MEMORY_LIMIT=value, CUFLOW_BACKEND="numpy")
    code = "import cuflow.memory as m; print(m.get_pool().limit)"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if expected == "MemoryValueError":
        assert r.returncode != 0 and "MemoryValueError" in r.stderr
        assert "at least 1 byte" in r.stderr
        # the setting that was given names it, not a function that was not called
        assert f"MemoryValueError: CUFLOW_MEMORY_LIMIT={value!r}: a fraction limit" in r.stderr
        assert "set_limit" not in r.stderr
    else:
        assert r.returncode == 0 and r.stdout.strip() == expected, r.stderr


@pytest.mark.parametrize("limit, error", [(float("nan"), TypeError), ("1GB", TypeError),
                                          (1.5, TypeError), (True, TypeError),
                                          (0, ValueError), (-5, ValueError)])
def test_a_limiting_adaptor_takes_a_positive_byte_count(limit, error):
    from cuflow.memory import LimitingAdaptor

    with pytest.raises(error) as e:
        LimitingAdaptor(HostBackend(), limit)
    assert isinstance(e.value, cuflow.CuflowError)
    assert "limit" in str(e.value) and str(limit) in str(e.value)
