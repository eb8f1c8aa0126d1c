"""The hot path (cuflow/memory/_pool.py, _hotpath.c): the compiled and the Python one make
the same decisions; exact-size hits and queued frees."""

from __future__ import annotations

import ctypes
import random
import threading

import pytest

import cuflow
from hypothesis import given, settings
from hypothesis import strategies as st

from cuflow.memory import HostBackend, HostExpandableBackend, Pool, _pool, round_size

from .conftest import needs_compiled, python_hot_path, python_pool


class _Granular(HostBackend):
    """Large segments of whole granules, fewer while the pool is small (the driver's way)."""

    segment_granularity = 8 << 20
    segment_granularity_min = 1 << 20


@pytest.mark.parametrize("arena", [False, True])
@pytest.mark.parametrize("streams", [1, 3])
@pytest.mark.parametrize("backend", [HostBackend, _Granular, HostExpandableBackend])
def test_both_hot_paths_make_the_same_decisions(backend, streams, arena):
    """The same random sequence (queued frees, exact-size hits, misses, splits, coalescing,
    segment releases, borrowing across streams) gives the same pointers and statistics
    through the compiled and the Python path, over expandable segments too; with
    ``arena``, after a replay that keeps an arena, whose blocks are coalesced as they are
    freed."""
    needs_compiled()
    kept = [("a", 1, 8 << 20, 0), ("a", 2, 3 << 20, 0), ("f", 1, 0, 0), ("a", 3, 5000, 0),
            ("f", 2, 0, 0), ("f", 3, 0, 0)]
    rng = random.Random(7 + streams)
    ops = [(rng.random() < 0.6, rng.choice([0, 100, 512, 5000, 70000, 3 << 20, 9 << 20,
                                            rng.randrange(1, 5 << 20)]),
            rng.randrange(streams), rng.randrange(10**6)) for _ in range(3000)]
    results = []
    for pool in (Pool(backend()), python_hot_path(Pool(backend())), python_pool(backend())):
        if arena:
            assert pool.replay(kept) == 1 and next(iter(pool._segments.values())).keep
        # where each block lies: (segment's rank, offset); the segments are held so that no
        # later one reuses an id
        segs, held, live, trace = {}, [], [], []
        for is_alloc, n, stream, pick in ops:
            if is_alloc or not live:
                p = pool.alloc_ptr(n, stream)
                seg = pool._live[p].seg
                held.append(seg)
                trace.append((segs.setdefault(id(seg), len(segs)), p - seg.ptr))
                live.append(p)
            else:
                pool._freed[live.pop(pick % len(live))] = 0
        s = pool.stats()
        results.append((trace, {k: v for k, v in s.items() if k != "backend"}))
    assert type(Pool(HostBackend()).alloc_ptr).__name__ == "HotAlloc"
    assert results[0] == results[1] == results[2]


def test_a_plain_miss_runs_in_the_compiled_hot_path(monkeypatch):
    """With nothing to borrow and nothing pending, a miss (segment release, new segment) does
    not call Pool._alloc_slow, and a refused segment still goes through its retries."""
    needs_compiled()
    calls = []
    slow, refused = Pool._alloc_slow, Pool._segment_refused
    monkeypatch.setattr(Pool, "_alloc_slow", lambda self, *a: calls.append("slow") or slow(self, *a))
    monkeypatch.setattr(Pool, "_segment_refused",
                        lambda self, *a: calls.append(("retry", type(a[-1]))) or refused(self, *a))
    pool = Pool(_Granular(capacity=40 << 20))
    rng = random.Random(3)
    for _ in range(200):
        ptrs = [pool.alloc_ptr(rng.randrange(1, 12 << 20), 0) for _ in range(3)]
        for p in ptrs:
            pool._freed[p] = 0
    s = pool.stats()
    assert s["cache_misses"] > 20 and s["num_segment_free"] > 10
    assert calls == []
    assert pool.reserved == sum(seg.nbytes for seg in pool._segments.values())
    with pytest.raises(cuflow.OutOfMemoryError):
        pool.alloc_ptr(64 << 20, 0)
    assert calls == [("retry", cuflow.OutOfMemoryError)] and pool.stats()["num_alloc_retries"] == 1


class _OnceRefused(_Granular):
    """Refuses the first segment it is asked for: a transient out-of-memory."""

    refused = False

    def alloc(self, nbytes, stream):
        if not self.refused:
            self.refused = True
            raise MemoryError("transient")
        return super().alloc(nbytes, stream)


def test_a_refused_segment_is_retried_once_on_both_hot_paths():
    """The compiled miss hands the source's error to the Python retries, which make the
    same calls as the Python path: one retry counted, no extra allocation attempt."""
    needs_compiled()
    outcomes = []
    for pool in (Pool(_OnceRefused()), python_hot_path(Pool(_OnceRefused())),
                 python_pool(_OnceRefused())):
        pool.alloc_ptr(5 << 20, 0)
        s = pool.stats()
        outcomes.append((s["num_alloc_retries"], s["num_segment_alloc"], pool.backend.device_allocs))
    assert outcomes[0] == outcomes[1] == outcomes[2] == (1, 1, 1)


def test_compiled_hot_path_sizes_blocks_as_the_python_one():
    """The C paths' sizing constants are _blocks' (a build flag could change one side)."""
    from cuflow.memory import _blocks, _hotpath

    for name in ("SMALL", "LARGE_ROUND", "MIN_SEGMENT", "SPLIT_MIN", "LARGE_SPLIT_MAX",
                 "DEAD_STREAM"):
        assert getattr(_hotpath, name) == getattr(_blocks, name), name


def test_compiled_hot_path_checks_its_arguments():
    needs_compiled()
    pool = Pool(HostBackend())
    with pytest.raises(TypeError, match="2 positional"):
        pool.alloc_ptr(100)
    with pytest.raises(TypeError, match="capsule"):
        _pool.HotAlloc(pool, _pool.Block, "not a capsule")
    with pytest.raises(TypeError, match="__slots__"):
        _pool.HotAlloc(pool, type("NotABlock", (), {}))
    lock = _pool.PoolLock()
    with pytest.raises(RuntimeError, match="un-acquired"):
        lock.release()
    assert lock.acquire() and lock.acquire(False) and lock._is_owned()  # reentrant
    lock.release()
    lock.release()
    assert not lock._is_owned()
    held = threading.Event()
    done = threading.Event()

    def other():
        with lock:
            held.set()
            done.wait()

    t = threading.Thread(target=other)
    t.start()
    held.wait()
    assert lock.acquire(False) is False  # held by the other thread
    done.set()
    t.join()
    assert lock.acquire(False) is True
    lock.release()
    with pytest.raises(ValueError, match="negative"):
        pool.alloc_ptr(-5, 0)
    assert not pool._lock._is_owned()  # released on the error path


def test_memory_type_needs_the_fields_it_writes():
    """The compiled memory type is built only over types whose C fields it found: types
    that keep ``ptr``, ``size`` and ``device_id`` as Python objects get ``None`` (the hook
    then calls the types), and anything but two types is refused."""
    from cuflow.memory import _hotpath

    class Memory:
        __slots__ = ("device_id", "ptr", "size")

    class Pointer:
        def __init__(self, mem: Memory, offset: int) -> None:
            self.mem, self.ptr = mem, mem.ptr + offset

    assert _hotpath.memory_type(Memory, Pointer) is None
    assert _hotpath.memory_type(int, float) is None
    with pytest.raises(TypeError, match="two types"):
        _hotpath.memory_type(Memory)
    with pytest.raises(TypeError, match="two types"):
        _hotpath.memory_type(Memory(), Pointer)


def test_device_malloc_picks_the_current_devices_pool():
    """With several devices CuPy's hook is ``_hotpath.DeviceMalloc``: it reads the current
    device through a C function (here a ctypes callback standing in for cuCtxGetDevice),
    looks each device's malloc up once, and asks for the current one (``None``) while the
    thread has no current context; errors of either call reach the caller."""
    from cuflow.memory import _hotpath

    current = {"device": 0, "status": 0}

    @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int))
    def get_device(out):
        out[0] = current["device"]
        return current["status"]

    looked_up = []

    def malloc_of(device):
        looked_up.append(device)
        if device == 3:
            raise ValueError("device 3 is not visible")

        def malloc(nbytes):
            if nbytes < 0:
                raise MemoryError("negative")
            return (device, nbytes)
        return malloc

    hook = _hotpath.DeviceMalloc(ctypes.cast(get_device, ctypes.c_void_p).value, malloc_of)
    assert hook(100) == (0, 100) and hook(7) == (0, 7)
    current["device"] = 1
    assert hook(5) == (1, 5) and hook(6) == (1, 6)
    assert looked_up == [0, 1] and hook.devices() == [0, 1]
    current["status"] = 201  # CUDA_ERROR_INVALID_CONTEXT: no current context in this thread
    assert hook(9) == (None, 9) and looked_up == [0, 1, None]
    current.update(device=3, status=0)
    with pytest.raises(ValueError, match="not visible"):
        hook(1)
    assert hook.devices() == [0, 1]  # a failed lookup is not kept
    current["device"] = 0
    with pytest.raises(MemoryError, match="negative"):
        hook(-1)
    with pytest.raises(ValueError, match="non-zero address"):
        _hotpath.DeviceMalloc(0, malloc_of)
    with pytest.raises(ValueError, match="callable"):
        _hotpath.DeviceMalloc(ctypes.cast(get_device, ctypes.c_void_p).value, None)


def test_hot_path_reuses_exact_size_and_drains_queued_frees():
    pool = Pool(HostBackend())
    p = pool.alloc_ptr(5000, 3)
    pool._freed[p] = 0  # how CuPy's hook frees: a C-level dict store, processed later
    assert pool.alloc_ptr(5000, 3) == p  # the same block, from the exact-size cache
    q = pool.alloc_ptr(5000, 4)
    assert q != p  # another stream does not take it unordered
    pool._freed[p] = pool._freed[q] = 0
    s = pool.stats()  # reports process the queue first
    assert s["allocated_bytes.all.current"] == 0 and s["allocation.all.current"] == 0
    assert s["num_alloc"] == s["num_free"] == 3
    assert s["cache_hits"] == 2 and s["cache_misses"] == 1  # stream 4 borrowed, event-ordered
    (seg,) = pool.snapshot()  # coalesced per stream for exact reports
    assert {b["state"] for b in seg["blocks"]} == {"free"} and len(seg["blocks"]) == 2


@settings(max_examples=40, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.sampled_from([100, 512, 5000, 70000, 3 << 20]),
                              st.integers(0, 2), st.integers(0, 10**6)), max_size=80))
def test_hot_path_queued_frees_never_overlap(ops):
    """The CuPy hook's path: alloc_ptr, frees queued as dict stores, drained by the next
    allocation (the block just freed may be handed straight back)."""
    pool = Pool(HostBackend())
    live = {}  # ptr -> (nbytes, stream, byte)
    for k, (is_alloc, n, stream, pick) in enumerate(ops):
        if is_alloc or not live:
            p = pool.alloc_ptr(n, stream)
            assert p not in live
            ctypes.memset(p, k % 251, n)
            live[p] = (n, k % 251)
        else:
            p = list(live)[pick % len(live)]
            pool._freed[p] = 0
            del live[p]
        for q, (m, byte) in live.items():
            assert ctypes.string_at(q, m) == bytes([byte]) * m
    s = pool.stats()
    assert s["requested_bytes.all.current"] == sum(m for m, _ in live.values())
    assert s["allocated_bytes.all.current"] == sum(round_size(m) for m, _ in live.values())
    assert s["allocation.all.current"] == len(live)


def test_free_during_a_pool_operation_is_queued():
    pool = Pool(HostBackend())
    a, b = pool.alloc(100, 0), pool.alloc(100, 0)
    pool._busy = True  # as if a finalizer ran inside the pool
    pool.free(a)
    assert pool.allocated == 2 * 512  # not processed yet
    pool._busy = False
    pool.free(b)
    assert pool.allocated == 0
    with pytest.raises(RuntimeError, match="twice"):
        pool.free(a)


@pytest.mark.gpu
def test_installed_hook_runs_the_compiled_hot_path_on_the_current_stream(pooled):
    """CuPy's hook over the pool calls the compiled hot path, which asks CuPy's C API for
    the current stream: blocks are lent on the stream the array is made on."""
    import cupy

    pool = pooled.memory.get_pool()
    stream_fn = pooled.get_backend().stream_ptr_fn
    assert stream_fn is not None, "CuPy no longer exports get_current_stream_ptr"
    hot = pool._make_alloc(cupy.cuda.get_current_stream, stream_fn)
    assert type(hot).__name__ == "HotAlloc"
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        x = cupy.empty(1000, cupy.float32)
        assert pool.block_of(x.data.ptr).stream == s.ptr
        ptr = x.data.ptr
        del x
        y = cupy.empty(1000, cupy.float32)  # the block just freed, handed back on its stream
        assert y.data.ptr == ptr and pool.block_of(ptr).stream == s.ptr
    z = cupy.empty(1000, cupy.float32)
    assert pool.block_of(z.data.ptr).stream == cupy.cuda.get_current_stream().ptr != s.ptr
    del y, z
    s.synchronize()


@pytest.mark.gpu
def test_hook_memory_is_one_object_that_gives_the_block_back(pooled):
    """Where the extension was built, an array's memory is the compiled PoolMemory over
    CuPy's BaseMemory, with its fields as CuPy reads them; deleting the array, or losing it
    in a collected reference cycle, gives the block back; 0-byte arrays lend nothing."""
    import gc

    import cupy
    from cupy.cuda.memory import BaseMemory, MemoryPointer

    from cuflow.memory import _cupy

    pool = pooled.memory.get_pool()
    x = cupy.empty(1000, cupy.float32)
    mem = x.data.mem
    assert type(mem).__name__ == "PoolMemory" and isinstance(mem, BaseMemory)
    if _cupy.memory_type is not None:
        assert type(mem).__module__ == "cuflow.memory" and type(mem).__base__ is BaseMemory
        with pytest.raises(TypeError, match="cannot create"):  # only the hook makes them
            type(mem)(mem.ptr, 4000, None, mem.device_id)
        assert repr(mem).startswith(f"<cuflow pool block {mem.ptr:#x}, 4000 bytes")
    assert isinstance(x.data, MemoryPointer)
    assert (mem.ptr, mem.size, mem.device_id) == (x.data.ptr, 4000, x.device.id)
    assert x.data.device_id == x.device.id and pool.block_of(x.data.ptr) is not None
    x[...] = 3.0
    assert float(x.sum()) == 3000.0
    ptr = x.data.ptr
    del x, mem
    pool.flush_frees()
    assert pool.block_of(ptr) is None
    cycle = [cupy.empty(333, cupy.uint8)]
    cycle.append(cycle)
    ptr = cycle[0].data.ptr
    del cycle
    gc.collect()
    pool.flush_frees()
    assert pool.block_of(ptr) is None
    z = cupy.empty(0, cupy.float32)
    assert z.data.ptr == 0 and z.data.mem.size == 0
    del z


def test_an_exact_size_hit_counts_pending_bytes_in_the_active_peak():
    """An exact-size hit below the allocated peak still raises the active peak when bytes
    freed since (used on another stream) are pending, on both hot paths (not only with a new
    allocated peak)."""
    from .conftest import EventBackend

    pool = Pool(EventBackend())
    y, b = pool.alloc(2 << 20, 0), pool.alloc(1 << 20, 0)
    pool.free(y)
    pool.free(b)  # both in the exact-size cache
    pool.reset_peak_stats()
    pool.free(pool.alloc(2 << 20, 0))  # allocated peak: 2 MiB
    b = pool.alloc(1 << 20, 0)
    pool.record_stream(b, 5)
    pool.free(b)  # pending: stream 5's event has not completed
    y = pool.alloc(2 << 20, 0)  # a hit: allocated 2 MiB again, plus 1 MiB pending
    s = pool.stats()
    assert s["allocated_bytes.all.peak"] == 2 << 20
    assert s["active_bytes.all.current"] == 3 << 20
    assert s["active_bytes.all.peak"] == 3 << 20
    pool.free(y)


_NO_SIZES = st.one_of(st.booleans(), st.floats(), st.text(max_size=3), st.none(),
                      st.lists(st.integers(), max_size=1), st.integers(max_value=-1))
_NO_STREAMS = st.one_of(st.booleans(), st.floats(), st.text(max_size=3), st.none(),
                        st.lists(st.integers(), max_size=1), st.integers(max_value=-1),
                        st.integers(min_value=2**63))


@settings(max_examples=150, deadline=None)
@given(nbytes=st.one_of(_NO_SIZES, st.integers(0, 5 << 20)),
       stream=st.one_of(_NO_STREAMS, st.integers(0, 3)))
def test_alloc_ptr_refuses_what_alloc_refuses_on_both_paths(nbytes, stream):
    """alloc_ptr (either hot path: conftest runs this on each) refuses a size that is no int
    >= 0 (a bool neither) and a stream that is no handle in [0, 2**63) (a negative one marks
    a destroyed stream's blocks) with Pool.alloc's errors and texts, naming alloc_ptr, and
    lends nothing; what is valid is lent on the stream asked for, as an int."""
    if stream is None:
        stream = -1  # (Pool.alloc takes None as the current stream; alloc_ptr has none)
    # (a fresh pool: its exact-size cache, which takes arguments unchecked, holds only what
    # alloc lends and frees just below, a valid request)
    pool = Pool(HostBackend())
    try:
        expected = pool.alloc(nbytes, stream)
    except cuflow.CuflowError as e:
        expected = e
    else:
        pool.free(expected)
    before = pool.stats()
    try:
        p = pool.alloc_ptr(nbytes, stream)
    except cuflow.CuflowError as e:
        assert isinstance(expected, cuflow.CuflowError), f"alloc took what alloc_ptr refused: {e}"
        assert type(e) is type(expected)
        assert str(e) == str(expected).replace("Pool.alloc:", "Pool.alloc_ptr:")
        assert e.__context__ is None or e.__suppress_context__  # its own error, not a chain
        after = pool.stats()
        assert after["num_alloc"] == before["num_alloc"]
        assert after["allocated_bytes.all.current"] == 0 and not pool._lock._is_owned()
        return
    assert not isinstance(expected, cuflow.CuflowError), f"alloc_ptr took it: {expected}"
    b = pool.block_of(p)
    assert type(p) is int and b.stream == stream and type(b.req) is int and b.req == nbytes
    pool.free_ptr(p)


@pytest.mark.parametrize(("nbytes", "stream", "exc", "shown"), [
    (100, -1, cuflow.memory.MemoryValueError, "got -1"),
    (100, -7, cuflow.memory.MemoryValueError, "got -7"),
    (100, 1 << 63, cuflow.memory.MemoryValueError, f"got {1 << 63}"),
    (True, 0, cuflow.memory.MemoryTypeError, "got bool True"),
    (1.5, 0, cuflow.memory.MemoryTypeError, "got float 1.5"),
    ("8", 0, cuflow.memory.MemoryTypeError, "got str '8'"),
    (100, None, cuflow.memory.MemoryTypeError, "got NoneType None"),
    (100, [], cuflow.memory.MemoryTypeError, "got list []"),
])
def test_alloc_ptr_lends_no_block_on_a_destroyed_streams_mark(nbytes, stream, exc, shown):
    """A negative stream is the pool's mark of a destroyed stream: a block lent on it would
    become an orphan, reused only after a device synchronize.  alloc_ptr refuses it, and
    every other argument Pool.alloc refuses, on either hot path, with no block lent and
    nothing synchronized."""

    class Counting(HostBackend):
        syncs = 0

        def synchronize(self):
            Counting.syncs += 1

    pool = Pool(Counting())
    pool.free_ptr(pool.alloc_ptr(5000, 0))  # a block cached for stream 0 (another size)
    with pytest.raises(exc, match=r"cuflow.memory.Pool.alloc_ptr: (nbytes|stream) must be") \
            as ei:
        pool.alloc_ptr(nbytes, stream)
    assert shown in str(ei.value)
    assert pool.stats()["num_alloc"] == 1 and not pool._lock._is_owned()
    pool.free_ptr(pool.alloc_ptr(100, 0))  # the pool works on, with no orphan to adopt
    s = pool.stats()
    assert s["num_alloc"] == 2 and Counting.syncs == 0 and s["num_cross_stream_reuse"] == 0
