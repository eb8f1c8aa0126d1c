"""cuflow.memory: a caching GPU allocator installed under every CuPy allocation.

With the CuPy backend, cuflow makes its :class:`Pool` CuPy's allocator on the
first allocation, so plain CuPy calls made by or alongside cuflow use it too;
``CUFLOW_POOL=off`` leaves CuPy's own pool in place, and :func:`using_pool`
scopes a pool to a block (thread-local).  Its allocation paths are C (an
optional extension, ``_hotpath.c``; the same decisions in Python where it was
not built) behind CuPy's allocator hook (host time against CuPy's
pools on synthetic and recorded traces: ``python -m cuflow bench traces``,
bench/test_bench_memory.py).  One pool per
device (every function takes ``device=``, checked against the visible
devices); segments come from a private CUDA stream-ordered pool by default
(``CUFLOW_POOL_BACKEND=driver|vmm|cudamalloc``; ``vmm``: expandable segments).  The
pool's environment variables are read at import and checked there, except
``CUFLOW_MEMORY_LIMIT``, which every pool checks before it is built (``_env``).

What it gives over CuPy's pool (footprint and device allocations:
bench/test_bench_memory.py::test_trace):

* footprint: blocks are split and coalesced; large segments are whole multiples
  of 64 MiB (the driver pool reserves 32 MiB chunks and packs their rest poorly, so
  the pool keeps the rest and splits it), or of less while the pool is small; a large
  request does not split a cached
  block larger than twice its size or than its own segment would be (that pins
  it and fragments memory) but misses, and a miss returns the free segments to
  the driver pool, which reuses them for any size (with the default backend; over
  expandable segments, ``CUFLOW_POOL_BACKEND=vmm``, cuflow places the segments in one
  address range and maps pages only where they lie);
* hot path: a freed block waits, uncoalesced, in a per-stream exact-size cache
  that the next allocation of that size takes back; frees from CuPy are queued
  by a C-level dictionary store, so finalizers never re-enter the pool;
* warm-up: :func:`warmup` runs a function once with the largest inputs and
  keeps the segments its pattern needs (kept segments serve any smaller request;
  an ordinary miss does not release them, :func:`empty_cache` does, and so does a
  miss whose new segment the limit or the device refuses), so later calls make no
  device allocation (``stats()["num_device_alloc"]`` proves it); where one segment of
  at most 1.25 times the pattern's peak fits it, that one segment is kept
  (an *arena*), over expandable segments too, where otherwise the mapped pages serve
  later placements;
* streams: a block is reused on another stream only after an event ordering
  (no host synchronization), and :func:`record_stream` marks cross-stream use
  with PyTorch's meaning;
* graphs: allocations while a stream captures under :func:`cuflow.graph.capture`
  come from a private pool that lives as long as the graph;
* statistics with PyTorch's key names, ``summary()``, ``snapshot()``,
  ``empty_cache()``, ``set_limit()`` / ``CUFLOW_MEMORY_LIMIT``, and CuPy's pool
  methods (``used_bytes`` ...) on :class:`Pool`.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import numpy

from ..core._creation import check_shape
from ..core._runtime import on_select, runtime
from ..core._streams import as_cupy_stream
from ._backends import Backend, CudaMallocBackend, DriverPoolBackend, HostBackend
from ._expandable import ExpandableBackend, HostExpandableBackend, VirtualMemoryBackend
from ._blocks import Block, round_size, size_class
from ._cupy import Pool, device_malloc
from ._env import MEMORY_LIMIT, POOL_BACKEND, POOL_ON, check_memory_limit
from ._exceptions import DoubleFreeError, MemoryLimitWarning, MemoryTypeError, MemoryValueError
from ._limit import LimitingAdaptor, parse_limit_env
from ._pool import Pool as _CorePool

__all__ = [
    "Pool", "Backend", "DriverPoolBackend", "CudaMallocBackend", "HostBackend",
    "ExpandableBackend", "VirtualMemoryBackend", "HostExpandableBackend",
    "get_pool", "using_pool", "stats", "summary", "snapshot", "empty_cache",
    "reset_peak_stats", "set_limit", "warmup", "record_stream", "empty_pinned",
    "zeros_pinned", "round_size", "size_class", "Block", "DoubleFreeError", "MemoryValueError",
    "MemoryTypeError", "MemoryLimitWarning", "LimitingAdaptor",
]


_POOLS: dict[int, Pool] = {}
_SCOPED: weakref.WeakSet[Pool] = weakref.WeakSet()  # pools used by using_pool, for record_stream
_INSTALLED = False


def _new_pool(device_id: int) -> Pool:
    check_memory_limit()  # (before the backend: a refused limit builds nothing)
    backend: Backend = (CudaMallocBackend(device_id) if POOL_BACKEND == "cudamalloc"
                        else VirtualMemoryBackend(device_id) if POOL_BACKEND == "vmm"
                        else DriverPoolBackend(device_id))
    return _env_limited(Pool(backend))


def _env_limited(pool: Pool) -> Pool:
    """``pool`` with ``CUFLOW_MEMORY_LIMIT``'s limit, where it is set."""
    if MEMORY_LIMIT:
        pool.limit = parse_limit_env(MEMORY_LIMIT, pool.backend)
    return pool


def _device(device: Any, where: str) -> int:
    """``device=`` checked against the runtime's devices (``None``: the current one)."""
    b = runtime()
    if device is None:
        return int(b.current_device())
    if isinstance(device, bool) or not isinstance(device, numbers.Integral):
        raise MemoryTypeError(f"cuflow.memory.{where}: device must be an int device ordinal or "
                              f"None, got {type(device).__name__} {device!r}")
    n = max(b.device_count, 1)  # the NumPy backend has one (host) device
    if not 0 <= device < n:
        raise MemoryValueError(f"cuflow.memory.{where}: device must be in [0, {n}) ({n} "
                               f"device{'s' if n > 1 else ''} visible), got {device}")
    return int(device)


def get_pool(device: int | None = None) -> Pool:
    """The pool cuflow uses for ``device`` (default: the current device).

    On the NumPy backend a host-memory pool per device is returned, so code
    that reads statistics runs unchanged.

    Parameters
    ----------
    device : int, optional
        The device whose pool; the current device when omitted.

    Returns
    -------
    Pool
        The device's pool, made on first use.

    Raises
    ------
    MemoryTypeError, MemoryValueError
        ``device`` is not an int, or not a visible device.
    """

    dev = _device(device, "get_pool")
    b = runtime()
    if not b.is_gpu:
        key = -1 - dev  # host pools apart from device pools
        if key not in _POOLS:  # (its capacity, the host's memory, is what a fraction
            # limit is of: set_limit(0.8) and CUFLOW_MEMORY_LIMIT=0.8 run as on the GPU)
            check_memory_limit()
            _POOLS[key] = _env_limited(Pool(HostBackend(capacity=_host_memory())))
        return _POOLS[key]
    pool = _POOLS.get(dev)
    if pool is None:
        pool = _POOLS[dev] = _new_pool(dev)
    return pool


def _host_memory() -> int | None:
    """Bytes of physical memory of this machine (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _install(backend: Any) -> None:
    """Make cuflow's pool CuPy's allocator (lazily: no CUDA call until the first allocation).

    Called by the runtime (:func:`~cuflow.core._runtime.on_select`) whenever a
    backend becomes active.
    """
    global _INSTALLED
    if _INSTALLED or not backend.is_gpu:
        return
    if not POOL_ON:
        return
    cupy = backend.xp
    single = backend.device_count == 1

    def first_malloc(nbytes: int) -> Any:
        if single:
            m = get_pool(0).malloc
            cupy.cuda.set_allocator(m)  # later calls go straight to the pool's hook
            return m(nbytes)
        return get_pool().malloc(nbytes)

    # with several devices, each allocation goes to the current device's pool: picked in C
    # where the extension was built (no Python frame per allocation), else by first_malloc
    hook = None if single else device_malloc(lambda dev: get_pool(dev).malloc)
    try:
        cupy.cuda.set_allocator(hook or first_malloc)
    except ValueError as e:  # first cuflow use inside cupy.cuda.using_allocator(...)
        warnings.warn(f"cuflow: memory pool not installed ({e}); CuPy keeps its allocator",
                      RuntimeWarning, stacklevel=4)
        return
    _INSTALLED = True


def using_pool(pool: Pool):
    """Route this thread's CuPy allocations to ``pool`` inside the block (thread-local).

    Parameters
    ----------
    pool : Pool
        The pool that serves the block's allocations.

    Returns
    -------
    contextmanager
        Entered with ``with``; it yields ``pool``.

    Raises
    ------
    MemoryTypeError
        ``pool`` is not a :class:`Pool`.
    """
    if not isinstance(pool, _CorePool):
        raise MemoryTypeError(f"cuflow.memory.using_pool: pool must be a cuflow.memory.Pool, "
                              f"got {type(pool).__name__} {pool!r}")
    return _using_pool(pool)


@contextlib.contextmanager
def _using_pool(pool: Pool):
    b = runtime()
    if not b.is_gpu:
        yield pool
        return
    _SCOPED.add(pool)
    with b.xp.cuda.using_allocator(pool.malloc):
        yield pool


# ------------------------------------------------------------ module level
def stats(device: int | None = None) -> dict[str, Any]:
    """:meth:`Pool.stats` of ``device``'s pool, with PyTorch's key names.

    Parameters
    ----------
    device : int, optional
        The device whose pool; the current device when omitted.

    Returns
    -------
    dict
        The counters and byte totals (:meth:`Pool.stats`).
    """
    return get_pool(_device(device, "stats")).stats()


def summary(device: int | None = None) -> str:
    """:meth:`Pool.summary` of ``device``'s pool.

    Parameters
    ----------
    device : int, optional
        The device whose pool; the current device when omitted.

    Returns
    -------
    str
        A table of the pool's use, as PyTorch's ``memory_summary``.
    """
    return get_pool(_device(device, "summary")).summary()


def snapshot(device: int | None = None) -> list[dict[str, Any]]:
    """:meth:`Pool.snapshot` of ``device``'s pool.

    Parameters
    ----------
    device : int, optional
        The device whose pool; the current device when omitted.

    Returns
    -------
    list of dict
        One entry per segment with its blocks (:meth:`Pool.snapshot`).
    """
    return get_pool(_device(device, "snapshot")).snapshot()


def empty_cache(device: int | None = None) -> int:
    """Return ``device``'s cached, fully free segments and the backend's unused reserve to
    the device (:meth:`Pool.empty_cache`, which makes the pool's device current for it).

    Parameters
    ----------
    device : int, optional
        The device whose pool; the current device when omitted.

    Returns
    -------
    int
        The number of segments released.
    """
    return get_pool(_device(device, "empty_cache")).empty_cache()


def reset_peak_stats(device: int | None = None) -> None:
    """Reset the peak statistics of ``device``'s pool.

    Parameters
    ----------
    device : int, optional
        The device whose pool; the current device when omitted.
    """
    get_pool(_device(device, "reset_peak_stats")).reset_peak_stats()


def set_limit(limit: int | float | str | None, device: int | None = None) -> None:
    """Cap the bytes ``device``'s pool reserves.

    Parameters
    ----------
    limit : int, float, str or None
        Bytes (an ``int``, or a string as ``CUFLOW_MEMORY_LIMIT`` takes: ``"8GiB"``,
        ``"512MB"``, ``"8e9"``), a fraction of the device's memory (a ``float`` in
        (0, 1], or ``"0.8"``, ``"80%"``), or ``None`` for no limit.  0 bytes in any
        form (``0``, ``"0"``, ``"0B"``, ``CUFLOW_MEMORY_LIMIT=0``) is no limit too, as
        ``size=0`` is for CuPy's ``MemoryPool.set_limit`` (and :meth:`Pool.set_limit`).
    device : int, optional
        Default: the current device.

    Raises
    ------
    MemoryTypeError
        ``limit`` is a bool or of another type.
    MemoryValueError
        A negative or NaN limit, a float outside (0, 1], a fraction that comes to 0 bytes
        (it would read as no limit), a malformed string.

    Warns
    -----
    MemoryLimitWarning
        The pool holds more than the new limit even after returning its free
        segments: the limit applies to new segments, so allocations that need
        one fail until enough memory is freed (nothing already allocated is lost).
    """
    pool = get_pool(_device(device, "set_limit"))
    with pool._lock:  # no segment taken between the limit and the release it asks for
        pool.limit = limit  # (set_limit's forms: the pool's limit reads them)
        over = pool.limit is not None and pool.reserved > pool.limit
        if over:
            pool.empty_cache()
            over = pool.reserved > pool.limit
    if over:
        warnings.warn(
            f"cuflow.memory.set_limit: the pool of {pool.where} reserves "
            f"{pool.reserved} bytes ({pool.allocated} in use), more than the new limit of "
            f"{pool.limit}; allocations that need a new segment raise OutOfMemoryError "
            f"until enough is freed", MemoryLimitWarning, stacklevel=2)


def record_stream(array: Any, stream: Any) -> None:
    """Mark ``array`` as used on ``stream``: its memory is not reused until that work is done.

    PyTorch's ``Tensor.record_stream``.  Needed when an array allocated on one
    stream is read or written by work queued on another and then freed.  The
    pool learns when a CuPy (or cuflow) stream is destroyed; a PyTorch or
    cuda.core stream must outlive the array's free.

    Parameters
    ----------
    array : darray
        An array of the pool's memory (host arrays are ignored).
    stream : cuflow.Stream or a CuPy, PyTorch or cuda.core stream
        The stream whose work uses it.

    Notes
    -----
    Stream semantics: nothing is queued now; when ``array`` is freed, the pool records an
    event on ``stream`` and reuses the memory only after it.
    """

    try:
        s = as_cupy_stream(stream)
    except TypeError as e:
        raise MemoryTypeError(f"cuflow.memory.record_stream: stream must be a stream object "
                              f"(cuflow.Stream, a CuPy, PyTorch or cuda.core stream), got "
                              f"{type(stream).__name__} {stream!r}") from e
    if not (hasattr(array, "shape") and hasattr(array, "dtype")):
        raise MemoryTypeError(f"cuflow.memory.record_stream: array must be an array (a darray "
                              f"of the pool's memory), got {type(array).__name__} {array!r}")
    ptr = getattr(getattr(getattr(array, "data", None), "mem", None), "ptr", None)
    if ptr is None:
        return  # host memory (the NumPy backend)
    # the device pools first: a WeakSet's iteration costs more than the lookup itself (bench:
    # the pipeline section's Bufferizer rows, an append from another stream)
    for pool in tuple(_POOLS.values()):  # (another thread may add a device's pool)
        block = pool.block_of(ptr)
        if block is not None:
            return _mark_used(pool, block, s)
    for pool in list(_SCOPED):
        block = pool.block_of(ptr)
        if block is not None:
            return _mark_used(pool, block, s)
    # not from a cuflow pool (CUFLOW_POOL=off, or memory CuPy did not allocate)


def _mark_used(pool: Pool, block: Block, s: Any) -> None:
    # the pool watches the life of streams CuPy owns (an ExternalStream made here for a
    # PyTorch or cuda.core stream would die at once, though that stream lives on); a pool
    # block means CuPy is there
    import cupy  # noqa: PLC0415  (optional dependency)

    owned = None if isinstance(s, cupy.cuda.ExternalStream) else s
    pool._mark_used(block, 0 if s is None else s.ptr, owned)


def warmup(fn: Callable[..., Any], *largest_inputs: Any, pool: Pool | None = None,
           keep: bool = True, **kwargs: Any) -> dict[str, int]:
    """Run ``fn(*largest_inputs, **kwargs)`` once and keep what its steady state needs.

    The pool records ``fn``'s allocations, returns every cached segment and
    replays the recorded pattern (host-side only, no kernels): into one arena (below)
    where one fits, else twice on the pool itself.  The segments the replay made are
    kept: any request may split them, and an ordinary miss does not release them.  :func:`empty_cache` does, and so does a miss whose new
    segment the limit or the device refuses: memory is short then, and the kept segments
    go back before the pool raises ``OutOfMemoryError``.  Later calls with inputs
    up to these sizes then take no segment that the pattern did not need, and make
    no device allocation (``stats()["num_device_alloc"]`` stays put;
    ``python -m cuflow bench traces``, "cuflow after warmup").

    The replay first looks for an *arena*: the smallest single segment in which the
    recorded pattern, placed by the pool's own best fit, needs no other segment (found
    on model pools that hold addresses only: host time, no memory).  Where one within
    1.25 times the pattern's peak fits, that one segment is kept instead
    of the replay's segments, over every backend: a loop of the pattern then takes no
    segment and maps no page, at a footprint of at most 1.25 (the recorded steps of
    ``python -m cuflow bench traces``: 1.04-1.22).  The arena's blocks, as every kept
    segment's, are coalesced as they are freed.  A pattern that best fit fragments past
    1.25 (the synthetic R0's first iteration), or that runs on several streams,
    keeps the replay's segments as below.

    With ``keep=False`` the replay's segments are ordinary ones, which a miss may
    release.  With the default driver-pool backend, the driver's reserve then holds
    what the pattern needs and serves the pool's later segments of any size.  That
    leaves a smaller footprint when later inputs vary in size, at the cost of the
    driver's calls on every miss.  A loop of fixed shapes then still misses on every
    step (a ResNet-50 inference step 5 to 18 times, a transformer step up to 36 times).
    Over expandable segments (``CUFLOW_POOL_BACKEND=vmm``) a pattern with no arena keeps
    no segment either way: the pages the replay mapped stay mapped and serve the later
    segments of any size, and a later segment that the mapped free space does not fit
    maps more pages (within 1.25 times the peak requested bytes, free pages unmapped
    first): fewer device calls, not always none.

    Parameters
    ----------
    fn : callable
        One step of the workload (an inference step, a preprocessing call).
    *largest_inputs
        Its positional arguments, at the largest sizes the later calls will use.
    pool : Pool, optional
        The pool to prepare (default: the current device's); ``fn`` runs with it.
    keep : bool, default True
        Keep the replay's segments (see above).
    **kwargs
        Its keyword arguments.

    Returns
    -------
    dict
        ``peak_bytes`` (the most bytes, in rounded block sizes, that the blocks lent while
        ``fn`` ran held at once; blocks lent before do not count), ``allocations`` (those
        made from the pool while ``fn`` ran), ``extra_segments`` (segments the replay made)
        and ``reserved_bytes`` (what the pool reserves after the replay).  Other threads'
        allocations from the pool meanwhile count too (see Notes).

    Notes
    -----
    Stream semantics: ``fn`` runs as called, its work queued on the streams it uses; the
    replay launches no kernel, it only takes segments from the backend, on the current
    stream.

    The recording is the pool's, not the calling thread's: what other threads allocate
    from the pool and free while ``fn`` runs is recorded with ``fn``'s, counts in
    ``peak_bytes`` and ``allocations``, and is replayed with it (the segments its replay
    makes are kept as ``fn``'s are).  Warm up before other threads use the pool, or while
    they leave it alone.  The pool's own statistics (``stats()``) go on as usual meanwhile.
    """

    if not callable(fn):
        raise MemoryTypeError(f"cuflow.memory.warmup: fn must be a callable run with the "
                              f"largest inputs, got {type(fn).__name__} {fn!r}")
    if not isinstance(keep, bool):
        raise MemoryTypeError(f"cuflow.memory.warmup: keep must be True or False, got "
                              f"{type(keep).__name__} {keep!r}")
    if pool is None:
        pool = get_pool()
    elif not isinstance(pool, Pool):
        raise MemoryTypeError(f"cuflow.memory.warmup: pool must be a cuflow.memory.Pool or "
                              f"None, got {type(pool).__name__}")
    pool.start_recording()
    try:
        with using_pool(pool):
            fn(*largest_inputs, **kwargs)
        if runtime().is_gpu:
            runtime().xp.cuda.get_current_stream().synchronize()
    finally:
        events, peak = pool.stop_recording()
    pool.empty_cache()  # (and the backend's reserve: the replay lays out a fresh one)
    # kept segments serve the pattern with no call to the driver, where ordinary ones go
    # back to it on misses and come back as new segments (python -m cuflow bench traces,
    # "cuflow after warmup")
    extra = pool.replay(events, keep=keep)
    return {"peak_bytes": peak, "allocations": sum(1 for e in events if e[0] == "a"),
            "extra_segments": extra, "reserved_bytes": pool.reserved}


# ------------------------------------------------------------------ pinned
def empty_pinned(shape: Any, dtype: Any = numpy.float32) -> numpy.ndarray:
    """A host array in page-locked memory, for asynchronous host-to-device copies.

    Comes from CuPy's caching pinned-memory pool, which does not hand a buffer
    out again while a copy from it (``cuflow.asarray(x, stream=...)``, ``set``)
    is still in flight.  On the NumPy backend this is ``numpy.empty``.

    Parameters
    ----------
    shape : int or sequence of ints
        The array's shape, sizes >= 0 (an int: one dimension).
    dtype : dtype, default float32
        Bool, an integer, real or complex dtype (``None``: float64, as for NumPy).

    Returns
    -------
    numpy.ndarray
        A C-contiguous array, not initialized, over the page-locked buffer.

    Raises
    ------
    cuflow.ArgumentTypeError
        ``shape`` is not an int or a sequence of ints, or ``dtype`` is not such a dtype.
    cuflow.ArgumentError
        A size in ``shape`` is negative.
    cuflow.OutOfMemoryError
        The array's bytes pass what any address space holds.
    """

    shape = check_shape("memory.empty_pinned", shape, dtype)  # the creation functions' rules
    dt = numpy.dtype(dtype)
    n = math.prod(shape)
    b = runtime()
    if not b.is_gpu:
        return numpy.empty(shape, dt)
    mem = b.xp.cuda.alloc_pinned_memory(max(n * dt.itemsize, 1))
    return numpy.frombuffer(mem, dt, n).reshape(shape)


def zeros_pinned(shape: Any, dtype: Any = numpy.float32) -> numpy.ndarray:
    """:func:`empty_pinned`, filled with zeros.

    Parameters
    ----------
    shape : int or sequence of ints
        The array's shape, sizes >= 0 (an int: one dimension).
    dtype : dtype, default float32
        Bool, an integer, real or complex dtype (``None``: float64, as for NumPy).

    Returns
    -------
    numpy.ndarray
        A C-contiguous array of zeros in page-locked memory (on the NumPy backend, in
        ordinary memory).

    Raises
    ------
    cuflow.ArgumentTypeError, cuflow.ArgumentError, cuflow.OutOfMemoryError
        As :func:`empty_pinned`.
    """
    a = empty_pinned(shape, dtype)
    a.fill(0)
    return a


on_select(_install)
