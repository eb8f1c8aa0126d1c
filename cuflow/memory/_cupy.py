"""CuPy glue: the public :class:`Pool`, with CuPy's allocator hook and pool methods.

CuPy's ``PythonFunctionAllocator`` builds the memory objects in Cython and
calls the pool's hot path; its free callback queues the pointer in the pool
(see :func:`make_cupy_malloc`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy

from ..core._runtime import runtime
from ..core._streams import as_cupy_stream
from ._backends import Backend
from ._limit import limit_bytes
from ._pool import Pool as _CorePool

__all__ = ["Pool", "make_cupy_malloc"]


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
            self._cupy_malloc = make_cupy_malloc(self)
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
        self.limit = limit_bytes(size, fraction, self.backend)

    def warmup(self, shapes_or_nbytes: Iterable[Any], dtype: Any = None,  # type: ignore[override]
               stream: Any = None) -> None:
        """Prepare the cache so allocations of these sizes never reach the device allocator.

        ``shapes_or_nbytes``: byte counts, or shapes (with ``dtype``, default
        float32).  All are allocated at once, then freed, on ``stream``.
        """
        super().warmup(sizes_of(shapes_or_nbytes, dtype), stream_ptr(stream))

    def reserve(self, nbytes: int, stream: Any = None) -> None:  # type: ignore[override]
        """Hold at least ``nbytes`` of free cache (one segment) for the coming allocations."""
        super().reserve(nbytes, stream_ptr(stream))

    def get_limit(self) -> int:
        return self.limit or 0


def stream_ptr(stream: Any) -> int | None:
    """The handle of ``stream`` (any stream object cuflow accepts); ints and ``None`` as given."""
    if stream is None or isinstance(stream, int):
        return stream
    s = as_cupy_stream(stream)
    return None if s is None else s.ptr


def make_cupy_malloc(pool: Pool) -> Callable[[int], Any]:
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
    import cupy  # noqa: PLC0415  (optional dependency)
    from cupy.cuda.memory import PythonFunctionAllocator  # noqa: PLC0415  (optional dependency)

    get_stream = cupy.cuda.get_current_stream

    def new_stream(ptr: int) -> None:  # the pool's slow path meets a stream for the first time
        so = get_stream()
        if so.ptr == ptr and ptr > 2:  # not the legacy / per-thread default stream
            pool.watch_stream(so, ptr)

    pool._on_new_stream = new_stream
    return PythonFunctionAllocator(pool._make_alloc(get_stream, runtime().stream_ptr_fn),
                                   pool._freed.__setitem__).malloc


def sizes_of(shapes_or_nbytes: Iterable[Any], dtype: Any) -> list[int]:
    """Byte counts of :meth:`Pool.warmup`'s ``shapes_or_nbytes`` (shapes in ``dtype``)."""
    out = []
    for s in shapes_or_nbytes:
        if isinstance(s, int | numpy.integer) and dtype is None:
            out.append(int(s))
        else:
            dt = numpy.dtype(numpy.float32 if dtype is None else dtype)
            shp = (s,) if isinstance(s, int | numpy.integer) else tuple(s)
            out.append(int(numpy.prod(shp, dtype=numpy.int64)) * dt.itemsize)
    return out
