"""cuflow.memory: a caching GPU allocator installed under every CuPy allocation.

With the CuPy backend, cuflow makes its :class:`Pool` CuPy's allocator on the
first allocation, so plain CuPy calls made by or alongside cuflow use it too;
``CUFLOW_POOL=off`` leaves CuPy's own pool in place, and :func:`using_pool`
scopes a pool to a block (thread-local).  Its hit path is C (an optional
extension, ``_hotpath.c``; a Python closure where it was not built) behind
CuPy's ``PythonFunctionAllocator`` (see the README for both host times
against CuPy's Cython pool).  One pool per device; segments come
from a private CUDA stream-ordered pool by default
(``CUFLOW_POOL_BACKEND=driver|cudamalloc``).

What it gives over CuPy's pool (see the README for measured figures):

* footprint: blocks are split and coalesced; large segments are whole multiples
  of 64 MiB (the driver pool reserves 32 MiB chunks and packs their rest poorly, so
  the pool keeps the rest and splits it); a large request does not split a cached
  block larger than twice its size or than its own segment would be (that pins
  it and fragments memory) but misses, and a miss returns the free segments to
  the driver pool, which reuses them for any size;
* hot path: a freed block waits, uncoalesced, in a per-stream exact-size cache
  that the next allocation of that size takes back; frees from CuPy are queued
  by a C-level dictionary store, so finalizers never re-enter the pool;
* warm-up: :func:`warmup` runs a function once with the largest inputs and
  keeps the segments its pattern needs (kept segments serve any smaller request
  and are released only by :func:`empty_cache`), so later calls make no
  device allocation (``stats()["num_device_alloc"]`` proves it);
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
import os
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import numpy

from ._backends import Backend, CudaMallocBackend, DriverPoolBackend, HostBackend
from ._pool import Block, _fmt, round_size, size_class
from ._pool import Pool as _CorePool
from ..core._streams import as_cupy_stream
from ..core._runtime import get_backend, on_select, runtime

__all__ = [
    "Pool", "Backend", "DriverPoolBackend", "CudaMallocBackend", "HostBackend",
    "get_pool", "using_pool", "stats", "summary", "snapshot", "empty_cache",
    "reset_peak_stats", "set_limit", "warmup", "record_stream", "empty_pinned",
    "zeros_pinned", "round_size", "size_class", "Block",
]


class Pool(_CorePool):
    """A caching allocator (see the module docstring), with CuPy's pool methods.

    ``Pool(backend)`` builds one over any :class:`Backend`; :func:`get_pool`
    returns the one cuflow installed for a device.
    """

    def __init__(self, backend: Backend, limit: int | None = None) -> None:
        super().__init__(backend, limit)
        self._cupy_malloc: Callable[[int], Any] | None = None

    # -- CuPy allocator protocol (cupy.cuda.set_allocator(pool.malloc)) --------
    @property
    def malloc(self) -> Callable[[int], Any]:
        """CuPy's allocator hook: ``malloc(nbytes)`` gives a ``cupy.cuda.MemoryPointer`` on
        the current stream; pass it to ``cupy.cuda.set_allocator`` or ``using_allocator``."""
        if self._cupy_malloc is None:
            self._cupy_malloc = _make_cupy_malloc(self)
        return self._cupy_malloc

    # -- CuPy MemoryPool methods -----------------------------------------------
    def used_bytes(self) -> int:
        self.flush_frees()
        return self.allocated

    def total_bytes(self) -> int:
        self.flush_frees()
        return self.reserved

    def free_bytes(self) -> int:
        self.flush_frees()
        return self.reserved - self.allocated

    def n_free_blocks(self) -> int:
        with self._lock:
            self.flush_frees()
            return sum(1 for _ in self._free_blocks())

    def free_all_blocks(self, stream: Any = None) -> None:
        self.empty_cache()

    def set_limit(self, size: int | None = None, fraction: float | None = None) -> None:
        """Most bytes the pool may reserve: ``size`` bytes, or ``fraction`` of device memory."""
        self.limit = _limit_bytes(size, fraction, self.backend)

    def warmup(self, shapes_or_nbytes: Iterable[Any], dtype: Any = None,  # type: ignore[override]
               stream: Any = None) -> None:
        """Prepare the cache so allocations of these sizes never reach the device allocator.

        ``shapes_or_nbytes``: byte counts, or shapes (with ``dtype``, default
        float32).  All are allocated at once, then freed, on ``stream``.
        """
        super().warmup(_sizes_of(shapes_or_nbytes, dtype), _stream_ptr(stream))

    def reserve(self, nbytes: int, stream: Any = None) -> None:  # type: ignore[override]
        """Hold at least ``nbytes`` of free cache (one segment) for the coming allocations."""
        super().reserve(nbytes, _stream_ptr(stream))

    def get_limit(self) -> int:
        return self.limit or 0

    def summary(self) -> str:
        """A readable table of :meth:`stats`."""
        s = self.stats()
        rows = [("allocated (in use)", "allocated_bytes.all"), ("requested", "requested_bytes.all"),
                ("active", "active_bytes.all"), ("reserved (segments)", "reserved_bytes.all")]
        lines = [f"cuflow memory pool [{s['backend']} backend, device {self.backend.device_id}, "
                 f"limit {_fmt(s['limit_bytes'])}]",
                 f"{'':24s}{'current':>14s}{'peak':>14s}"]
        for label, key in rows:
            lines.append(f"{label:24s}{_fmt(s[key + '.current']):>14s}"
                         f"{_fmt(s.get(key + '.peak', 0)):>14s}")
        if "device_reserved_bytes.current" in s:
            lines.append(f"{'device reserved':24s}{_fmt(s['device_reserved_bytes.current']):>14s}"
                         f"{_fmt(s['device_reserved_bytes.peak']):>14s}")
        lines.append(f"{'inactive split':24s}{_fmt(s['inactive_split_bytes.all.current']):>14s}")
        lines.append(
            f"allocations {s['num_alloc']}  frees {s['num_free']}  hits {s['cache_hits']}  "
            f"misses {s['cache_misses']}  device allocs {s['num_device_alloc']}  device frees "
            f"{s['num_device_free']}  segments made {s['num_segment_alloc']}  cross-stream "
            f"{s['num_cross_stream_reuse']}  retries {s['num_alloc_retries']}  OOMs {s['num_ooms']}  segments "
            f"{s['segment.all.current']}  private pools {s['private_pools']}")
        if s["size_classes"]:
            lines.append(f"{'size class (<=)':>16s}{'hits':>10s}{'misses':>10s}")
            for c, hm in s["size_classes"].items():
                lines.append(f"{_fmt(c):>16s}{hm['hits']:>10d}{hm['misses']:>10d}")
        return "\n".join(lines)


def _stream_ptr(stream: Any) -> int | None:
    if stream is None or isinstance(stream, int):
        return stream

    s = as_cupy_stream(stream)
    return None if s is None else s.ptr


def _limit_bytes(size: int | None, fraction: float | None, backend: Backend) -> int | None:
    if size is not None and fraction is not None:
        raise ValueError("cuflow.memory.set_limit: give size or fraction, not both")
    if fraction is not None:
        if not 0 < fraction <= 1:
            raise ValueError(f"cuflow.memory.set_limit: fraction must be in (0, 1], got {fraction}")
        return int(fraction * _device_total(backend))
    if size is not None and size < 0:
        raise ValueError(f"cuflow.memory.set_limit: size must be >= 0 bytes, got {size}")
    return size


def _device_total(backend: Backend) -> int:
    if isinstance(backend, HostBackend):
        if backend.capacity is None:
            raise ValueError("a fraction limit needs a backend with a known capacity")
        return backend.capacity
    from cupy_backends.cuda.api import runtime  # noqa: PLC0415

    return int(runtime.memGetInfo()[1])


def _parse_limit_env(value: str, backend: Backend) -> int | None:
    """``CUFLOW_MEMORY_LIMIT``: bytes (``8e9``, ``8GiB``, ``512MB``) or a fraction (``0.8``, ``80%``)."""
    v = value.strip()
    if not v:
        return None
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 10**3, "mb": 10**6,
             "gb": 10**9, "b": 1}
    low = v.lower()
    try:
        if low.endswith("%"):
            return _limit_bytes(None, float(low[:-1]) / 100, backend)
        for u, mult in units.items():
            if low.endswith(u):
                return int(float(low[: -len(u)]) * mult)
        x = float(low)
    except ValueError:
        raise ValueError(f"CUFLOW_MEMORY_LIMIT={value!r}: expected bytes (8e9, 8GiB, 512MB) or "
                         f"a fraction of device memory (0.8, 80%)") from None
    return _limit_bytes(None, x, backend) if x <= 1 else int(x)


# ---------------------------------------------------------------- CuPy glue
def _make_cupy_malloc(pool: Pool) -> Callable[[int], Any]:
    """CuPy's allocator hook over ``pool``.

    CuPy's ``PythonFunctionAllocator`` builds the memory objects in Cython and
    calls the pool's hot path (compiled where it was built; it reads the current
    stream through CuPy's C API).  Its free callback is the pool's
    ``_freed.__setitem__``, a C call that queues the pointer without running
    Python code (so it is safe from finalizers and the garbage collector); the
    pool's next operation processes the queue.  (CuPy's ``CFunctionAllocator``
    would save a Python-level call, but CuPy 14.2 turns an exception raised in
    its C malloc, such as the pool's out-of-memory error, into a SystemError.)
    """
    import cupy  # noqa: PLC0415
    from cupy.cuda.memory import PythonFunctionAllocator  # noqa: PLC0415

    get_stream = cupy.cuda.get_current_stream

    def new_stream(ptr: int) -> None:  # the pool's slow path meets a stream for the first time
        so = get_stream()
        if so.ptr == ptr and ptr > 2:  # not the legacy / per-thread default stream
            pool.watch_stream(so, ptr)

    pool._on_new_stream = new_stream
    return PythonFunctionAllocator(pool._make_alloc(get_stream, runtime().stream_ptr_fn),
                                   pool._freed.__setitem__).malloc


_POOLS: dict[int, Pool] = {}
_SCOPED: weakref.WeakSet[Pool] = weakref.WeakSet()  # pools used by using_pool, for record_stream
_INSTALLED = False


def _new_pool(device_id: int) -> Pool:
    kind = os.environ.get("CUFLOW_POOL_BACKEND", "driver").strip().lower()
    if kind in ("driver", "async", ""):
        backend: Backend = DriverPoolBackend(device_id)
    elif kind == "cudamalloc":
        backend = CudaMallocBackend(device_id)
    else:
        raise ValueError(f"CUFLOW_POOL_BACKEND={kind!r}: expected 'driver' or 'cudamalloc'")
    pool = Pool(backend)
    env = os.environ.get("CUFLOW_MEMORY_LIMIT")
    if env:
        pool.limit = _parse_limit_env(env, backend)
    return pool


def get_pool(device: int | None = None) -> Pool:
    """The pool cuflow uses for ``device`` (default: the current device).

    On the NumPy backend a host-memory pool is returned, so code that reads
    statistics runs unchanged.
    """

    b = get_backend()
    if not b.is_gpu:
        dev = -1
        if dev not in _POOLS:
            _POOLS[dev] = Pool(HostBackend())
        return _POOLS[dev]
    if device is None:
        device = b.xp.cuda.runtime.getDevice()
    pool = _POOLS.get(device)
    if pool is None:
        pool = _POOLS[device] = _new_pool(device)
    return pool


def _install(backend: Any) -> None:
    """Make cuflow's pool CuPy's allocator (lazily: no CUDA call until the first allocation).

    Called by the runtime (:func:`~cuflow.core._runtime.on_select`) whenever a
    backend becomes active.
    """
    global _INSTALLED
    if _INSTALLED or not backend.is_gpu:
        return
    if os.environ.get("CUFLOW_POOL", "on").strip().lower() in ("off", "0", "false", "no"):
        return
    cupy = backend.xp
    single = backend.device_count == 1

    def first_malloc(nbytes: int) -> Any:
        if single:
            m = get_pool(0).malloc
            cupy.cuda.set_allocator(m)  # later calls go straight to the pool's hook
            return m(nbytes)
        return get_pool().malloc(nbytes)

    try:
        cupy.cuda.set_allocator(first_malloc)
    except ValueError as e:  # first cuflow use inside cupy.cuda.using_allocator(...)
        import warnings  # noqa: PLC0415

        warnings.warn(f"cuflow: memory pool not installed ({e}); CuPy keeps its allocator",
                      RuntimeWarning, stacklevel=4)
        return
    _INSTALLED = True


@contextlib.contextmanager
def using_pool(pool: Pool):
    """Route this thread's CuPy allocations to ``pool`` inside the block (thread-local)."""

    b = get_backend()
    if not b.is_gpu:
        yield pool
        return
    _SCOPED.add(pool)
    with b.xp.cuda.using_allocator(pool.malloc):
        yield pool


# ------------------------------------------------------------ module level
def stats(device: int | None = None) -> dict[str, Any]:
    """:meth:`Pool.stats` of the current device's pool (PyTorch's key names)."""
    return get_pool(device).stats()


def summary(device: int | None = None) -> str:
    return get_pool(device).summary()


def snapshot(device: int | None = None) -> list[dict[str, Any]]:
    return get_pool(device).snapshot()


def empty_cache(device: int | None = None) -> int:
    """Return cached, fully free segments to the device; the number released."""
    return get_pool(device).empty_cache()


def reset_peak_stats(device: int | None = None) -> None:
    get_pool(device).reset_peak_stats()


def set_limit(limit: int | float | None, device: int | None = None) -> None:
    """Cap the pool's reserved bytes: an int is bytes, a float in (0, 1] a fraction of memory."""
    pool = get_pool(device)
    if isinstance(limit, float) and limit <= 1:
        pool.set_limit(fraction=limit)
    else:
        pool.set_limit(size=None if limit is None else int(limit))


def record_stream(array: Any, stream: Any) -> None:
    """Mark ``array`` as used on ``stream``: its memory is not reused until that work is done.

    PyTorch's ``Tensor.record_stream``.  Needed when an array allocated on one
    stream is read or written by work queued on another and then freed.  The
    pool learns when a CuPy (or cuflow) stream is destroyed; a PyTorch or
    cuda.core stream must outlive the array's free.
    """

    ptr = getattr(getattr(getattr(array, "data", None), "mem", None), "ptr", None)
    if ptr is None:
        return  # host memory (the NumPy backend)
    for pool in list(_POOLS.values()) + list(_SCOPED):
        block = pool.block_of(ptr)
        if block is not None:
            s = as_cupy_stream(stream)
            # the pool watches the life of streams CuPy owns (an ExternalStream made here for
            # a PyTorch or cuda.core stream would die at once, though that stream lives on)
            import cupy  # noqa: PLC0415  (a pool block: CuPy is there)

            owned = None if isinstance(s, cupy.cuda.ExternalStream) else s
            pool.record_stream(block, 0 if s is None else s.ptr, owned)
            return
    # not from a cuflow pool (CUFLOW_POOL=off, or memory CuPy did not allocate)


def warmup(fn: Callable[..., Any], *largest_inputs: Any, pool: Pool | None = None,
           **kwargs: Any) -> dict[str, int]:
    """Run ``fn(*largest_inputs, **kwargs)`` once and keep what its steady state needs.

    The pool records ``fn``'s allocations, returns every cached segment and
    replays the recorded pattern twice (host-side only, no kernels).  With the
    default driver-pool backend the replay leaves what the pattern needs in the
    driver's reserve, which serves the pool's later segments of any size; with
    ``cudaMalloc`` segments the replay's segments are kept (split by any
    request, released only by :func:`empty_cache`).  Later calls with inputs up
    to these sizes then make no device allocation (measured on traces R0 and G:
    ``stats()["num_device_alloc"]`` stays put).

    Returns
    -------
    dict
        ``peak_bytes`` (most bytes ``fn`` held at once), ``allocations`` (made by
        ``fn``), ``extra_segments`` (segments the replay made) and ``reserved_bytes``.

    Other Parameters
    ----------------
    pool : Pool, optional
        The pool to prepare (default: the current device's); ``fn`` runs with it.
    """

    if pool is None:
        pool = get_pool()
    pool.start_recording()
    try:
        with using_pool(pool):
            fn(*largest_inputs, **kwargs)
        if get_backend().is_gpu:
            get_backend().xp.cuda.get_current_stream().synchronize()
    finally:
        events, peak = pool.stop_recording()
    pool.empty_cache()
    pool.backend.trim()  # the replay then lays its segments out in a fresh reserve
    # A backend that reuses released memory for any size (the driver's pool) holds what the
    # pattern needs in its reserve, and the pool keeps releasing segments to it on a miss
    # (kept segments fragment: they were measured at 1.36x the peak on trace R0 against 1.14x
    # without keeping); with cudaMalloc segments the replay's segments are kept.
    extra = pool.replay(events, keep=not pool.backend.cheap_release)
    return {"peak_bytes": peak, "allocations": sum(1 for e in events if e[0] == "a"),
            "extra_segments": extra, "reserved_bytes": pool.reserved}


# ------------------------------------------------------------------ pinned
def empty_pinned(shape: Any, dtype: Any = numpy.float32) -> numpy.ndarray:
    """A host array in page-locked memory, for asynchronous host-to-device copies.

    Comes from CuPy's caching pinned-memory pool, which does not hand a buffer
    out again while a copy from it (``cuflow.asarray(x, stream=...)``, ``set``)
    is still in flight.  On the NumPy backend this is ``numpy.empty``.
    """

    dt = numpy.dtype(dtype)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    n = int(numpy.prod(shape, dtype=numpy.int64))
    b = get_backend()
    if not b.is_gpu:
        return numpy.empty(shape, dt)
    mem = b.xp.cuda.alloc_pinned_memory(max(n * dt.itemsize, 1))
    return numpy.frombuffer(mem, dt, n).reshape(shape)


def zeros_pinned(shape: Any, dtype: Any = numpy.float32) -> numpy.ndarray:
    """:func:`empty_pinned`, filled with zeros."""
    a = empty_pinned(shape, dtype)
    a.fill(0)
    return a


def _sizes_of(shapes_or_nbytes: Iterable[Any], dtype: Any) -> list[int]:
    out = []
    for s in shapes_or_nbytes:
        if isinstance(s, int | numpy.integer) and dtype is None:
            out.append(int(s))
        else:
            dt = numpy.dtype(numpy.float32 if dtype is None else dtype)
            shp = (s,) if isinstance(s, int | numpy.integer) else tuple(s)
            out.append(int(numpy.prod(shp, dtype=numpy.int64)) * dt.itemsize)
    return out


on_select(_install)
