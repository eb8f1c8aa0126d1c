"""CuPy glue: the public :class:`Pool`, with CuPy's allocator hook and pool methods.

CuPy's allocator hook builds a memory object per block over the pool's hot path,
which queues the pointer back in the pool when it goes (see :func:`make_cupy_malloc`);
with several devices, :func:`device_malloc` sends each allocation to the current
device's pool.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable
from typing import Any

import numpy

from .._checks import is_integer
from .._errors import BackendError
from ..core._fastpath import driver_addresses
from ..core._runtime import runtime
from ..core._streams import as_cupy_stream
from ._backends import Backend
from ._env import POOL_HOTPATH
from ._exceptions import MemoryTypeError, MemoryValueError
from ._limit import limit_bytes
from ._pool import Pool as _CorePool

try:  # the allocator hook in C (the same extension as the pool's hot path)
    from ._hotpath import _C_API, CupyMalloc, DeviceMalloc, memory_type
except ImportError:
    _C_API = CupyMalloc = DeviceMalloc = memory_type = None
if POOL_HOTPATH == "python":
    CupyMalloc = DeviceMalloc = memory_type = None
try:  # the launcher, whose new results allocate through the hook's C entry
    from ..core._ewlaunch import use_pool
except ImportError:
    use_pool = None
if CupyMalloc is not None and use_pool is not None:
    use_pool(_C_API)  # (otherwise CuPy's memory.alloc, through the hook)

__all__ = ["Pool", "device_malloc", "make_cupy_malloc"]


class Pool(_CorePool):
    """A caching allocator (see the module docstring), with CuPy's pool methods.

    :func:`get_pool` returns the one cuflow installed for a device.

    Parameters
    ----------
    backend : Backend
        Where segments come from (the driver's pool, virtual memory, ``cudaMalloc``, or
        host memory for tests).
    limit : int, float, str or None, optional
        Most bytes the pool may reserve, in any form :func:`cuflow.memory.set_limit` takes;
        ``None`` or 0 bytes for none.
    """

    def __init__(self, backend: Backend, limit: int | float | str | None = None) -> None:
        super().__init__(backend, limit)
        self._cupy_malloc: Callable[[int], Any] | None = None

    # -- CuPy allocator protocol (cupy.cuda.set_allocator(pool.malloc)) --------
    @property
    def malloc(self) -> Callable[[int], Any]:
        """CuPy's allocator hook: ``malloc(nbytes)`` gives a ``cupy.cuda.MemoryPointer`` on
        the current stream; pass it to ``cupy.cuda.set_allocator`` or ``using_allocator``.

        Raises
        ------
        cuflow.BackendError
            The active backend is not CuPy (the hook makes CuPy memory objects).
        """
        if self._cupy_malloc is None:
            rt = runtime()
            if not rt.is_gpu:
                raise BackendError(f"cuflow.memory.Pool.malloc: CuPy's allocator hook needs "
                                   f"the CuPy backend, but the active backend is {rt.name!r}")
            self._cupy_malloc = make_cupy_malloc(self)
        return self._cupy_malloc

    # -- CuPy MemoryPool methods -----------------------------------------------
    def used_bytes(self) -> int:
        """Bytes lent out now (CuPy's ``MemoryPool.used_bytes``)."""
        self.flush_frees()
        return self.allocated

    def total_bytes(self) -> int:
        """Bytes the pool holds, lent or cached (CuPy's ``MemoryPool.total_bytes``)."""
        self.flush_frees()
        return self.reserved

    def free_bytes(self) -> int:
        """Bytes the pool holds and has not lent (CuPy's ``MemoryPool.free_bytes``)."""
        self.flush_frees()
        return self.reserved - self.allocated

    def n_free_blocks(self) -> int:
        """Runs of free memory the pool caches (CuPy's ``MemoryPool.n_free_blocks``)."""
        with self._lock:
            self.flush_frees()
            return self._free_runs()

    def free_all_blocks(self, stream: Any = None) -> None:
        """Give every unused cached block back (CuPy's ``MemoryPool.free_all_blocks``).

        Unlike CuPy's, it empties the whole cache: ``stream`` is taken for CuPy's signature,
        and the blocks cached for every stream go back, as :meth:`empty_cache`.

        Parameters
        ----------
        stream : object, optional
            Not used: the blocks cached for every stream go back (CuPy's pool, given a
            stream, gives back only the blocks of that stream's arena).

        Notes
        -----
        Stream semantics: as :meth:`empty_cache`: each segment goes back ordered after the
        work of the streams that used it, and giving back the backend's reserve may
        synchronize the device (the default backend's does); while a graph is being captured
        nothing is released.
        """
        self.empty_cache()

    def set_limit(self, size: int | None = None, fraction: float | None = None) -> None:
        """Most bytes the pool may reserve: ``size`` bytes, or ``fraction`` of device memory.

        As CuPy's ``MemoryPool.set_limit``: ``size=0``, ``fraction=0`` or neither argument
        removes the limit (:meth:`get_limit` then returns 0), as ``0`` and ``None`` do for
        :func:`cuflow.memory.set_limit` and :attr:`limit`.

        Parameters
        ----------
        size : int, optional
            The limit in bytes.
        fraction : float, optional
            The limit as a fraction of the device's memory, in (0, 1]; not with ``size``.
        """
        if size is None and isinstance(fraction, numbers.Real) \
                and not isinstance(fraction, bool) and fraction == 0:
            fraction = None  # (limit_bytes refuses 0 as a fraction: cuflow's own forms)
        self.limit = limit_bytes(size, fraction, self.backend, "cuflow.memory.Pool.set_limit")

    def warmup(self, shapes_or_nbytes: Iterable[Any], dtype: Any = None,  # type: ignore[override]
               stream: Any = None) -> None:
        """Prepare the cache so allocations of these sizes never reach the device allocator.

        All are allocated at once, then freed.

        Parameters
        ----------
        shapes_or_nbytes : iterable of int or of shapes
            Without ``dtype``: byte counts, or array shapes of float32.  With ``dtype``:
            array shapes of ``dtype``, an int being a 1-D shape (``[1024]`` with ``"f8"`` is
            8 KiB), as ``cupy.empty(1024, "f8")`` reads it.
        dtype : dtype, optional
            The dtype of the shapes.
        stream : cuflow.Stream, optional
            The stream the blocks are cached for; the current stream when omitted.

        Notes
        -----
        Stream semantics: no kernel is launched; the segments are taken from the backend on
        ``stream``, as the allocations they will serve.
        """
        super().warmup(sizes_of(shapes_or_nbytes, dtype), stream_ptr(stream))

    def reserve(self, nbytes: int, stream: Any = None) -> None:  # type: ignore[override]
        """Hold at least ``nbytes`` of free cache (one segment) for the coming allocations.

        Parameters
        ----------
        nbytes : int
            The bytes to hold free.
        stream : cuflow.Stream, optional
            The stream the segment is cached for; the current stream when omitted.

        Notes
        -----
        Stream semantics: no kernel is launched; the segment is taken from the backend on
        ``stream``.
        """
        super().reserve(nbytes, stream_ptr(stream))

    def get_limit(self) -> int:
        """The limit in bytes, 0 for none (CuPy's ``MemoryPool.get_limit``)."""
        return self.limit or 0


def stream_ptr(stream: Any) -> int | None:
    """The handle of ``stream`` (any stream object cuflow accepts); ints and ``None`` as given."""
    if stream is None or isinstance(stream, int):
        return stream
    s = as_cupy_stream(stream)
    return None if s is None else s.ptr


def make_cupy_malloc(pool: Pool) -> Callable[[int], Any]:
    """CuPy's allocator hook over ``pool``: ``malloc(nbytes)`` -> ``cupy.cuda.MemoryPointer``.

    The pointer comes from the pool's hot path (compiled where it was built; it reads the
    current stream through CuPy's C API).  The memory object is a :class:`PoolMemory`
    that gives the block back when it is deallocated, by queueing the pointer in the pool's
    ``_freed`` (no Python code runs, so it is safe from finalizers); the pool's next
    operation processes the queue.  Nothing the garbage collector clears holds that free,
    so a collected reference cycle cannot lose it, as it can with CuPy's
    ``PythonFunctionAllocator`` (whose memory keeps its free callback in a field the
    collector clears first).  ``_hotpath.CupyMalloc`` builds the objects in C; without the
    extension a Python function does.
    """
    import cupy  # noqa: PLC0415  (optional dependency)
    from cupy.cuda.memory import MemoryPointer  # noqa: PLC0415  (optional dependency)

    get_stream = cupy.cuda.get_current_stream

    def new_stream(ptr: int) -> None:  # the pool's slow path meets a stream for the first time
        so = get_stream()
        if so.ptr == ptr and ptr > 2:  # not the legacy / per-thread default stream
            pool.watch_stream(so, ptr)

    pool._on_new_stream = new_stream
    alloc = pool._make_alloc(get_stream, runtime().stream_ptr_fn)
    dev, freed, memory = pool.backend.device_id, pool._freed, pool_memory_type()
    if CupyMalloc is not None:
        return CupyMalloc(alloc, freed, memory, MemoryPointer, dev)

    def malloc(nbytes: int) -> Any:
        if not nbytes:
            return MemoryPointer(memory(0, 0, None, dev), 0)
        ptr = alloc(nbytes, dev)
        return MemoryPointer(memory(ptr, nbytes, _Lent(freed, ptr), dev), 0)

    return malloc


def device_malloc(malloc_of: Callable[[int | None], Callable[[int], Any]]
                  ) -> Callable[[int], Any] | None:
    """CuPy's allocator hook with several devices: ``malloc(nbytes)`` of the current device's
    pool, picked in C (``_hotpath.DeviceMalloc``: the driver's ``cuCtxGetDevice``, then a
    table of ``malloc_of(device)``, filled once per device; ``malloc_of(None)`` for a thread
    with no current context yet).  ``None`` where the extension or the driver is missing."""
    found = None if DeviceMalloc is None else driver_addresses("cuCtxGetDevice")
    return None if found is None else DeviceMalloc(found[0], malloc_of)


class _Lent:
    """``_hotpath.Lent`` in Python: ``__del__`` runs before a collection clears anything."""

    __slots__ = ("freed", "ptr")

    def __init__(self, freed: dict[int, Any], ptr: int) -> None:
        self.freed, self.ptr = freed, ptr

    def __del__(self) -> None:
        self.freed[self.ptr] = None


_MEMORY: list[type] = []


def pool_memory_type() -> type:
    """:class:`PoolMemory`, the memory object of a block of cuflow's pools: a C subclass of
    CuPy's ``BaseMemory`` that gives the block back itself (``_hotpath.memory_type``, one
    object per block where CuPy's ``UnownedMemory`` needs an owner object too), or else a
    subclass of ``UnownedMemory`` whose owner does."""
    if not _MEMORY:
        from cupy.cuda.memory import (  # noqa: PLC0415  (optional dependency)
            BaseMemory, MemoryPointer, UnownedMemory)

        compiled = None if memory_type is None else memory_type(BaseMemory, MemoryPointer)
        if compiled is not None:
            _MEMORY.append(compiled)
            return compiled

        class PoolMemory(UnownedMemory):
            """A block of cuflow's memory pool (given back when the last array using it goes)."""

            __slots__ = ()
            __module__ = "cuflow.memory"

        _MEMORY.append(PoolMemory)
    return _MEMORY[0]


def sizes_of(shapes_or_nbytes: Iterable[Any], dtype: Any) -> list[int]:
    """Byte counts of :meth:`Pool.warmup`'s ``shapes_or_nbytes`` (shapes in ``dtype``)."""
    rule = "a number of bytes (an int >= 0) or a shape (a tuple of ints >= 0)"
    try:
        dt = numpy.dtype(numpy.float32 if dtype is None else dtype)
    except TypeError as e:
        raise MemoryTypeError(f"cuflow.memory.Pool.warmup: dtype must be a dtype, got "
                              f"{type(dtype).__name__} {dtype!r}") from e
    if not isinstance(shapes_or_nbytes, Iterable):
        raise MemoryTypeError(f"cuflow.memory.Pool.warmup: shapes_or_nbytes must be a sequence "
                              f"of entries, each {rule}, got {type(shapes_or_nbytes).__name__} "
                              f"{shapes_or_nbytes!r}")
    out = []
    for i, s in enumerate(shapes_or_nbytes):
        if is_integer(s):
            shp = None if dtype is None else (s,)
        elif isinstance(s, str | bytes) or not isinstance(s, Iterable):
            raise MemoryTypeError(f"cuflow.memory.Pool.warmup: each entry must be {rule}, got "
                                  f"entry {i}: {type(s).__name__} {s!r}")
        else:
            try:
                shp = tuple(s)
            except TypeError:  # (a 0-d array)
                shp = None
            if shp is None or not all(is_integer(d) for d in shp):
                raise MemoryTypeError(f"cuflow.memory.Pool.warmup: each entry must be {rule}, "
                                      f"got entry {i}: {s!r}")
        if (s < 0) if shp is None else any(d < 0 for d in shp):
            raise MemoryValueError(f"cuflow.memory.Pool.warmup: each entry must be {rule}, got "
                                   f"entry {i}: {s!r}")
        # Python ints: a product past int64 is a size no allocation gets, not a wrapped one
        out.append(int(s) if shp is None else math.prod(int(d) for d in shp) * dt.itemsize)
    return out
