"""Where the pool's segments come from.

A backend hands out and takes back *segments* (large address ranges) and
orders streams with events; the pool's logic (classes, splitting, coalescing,
statistics, warm-up, limits, out-of-memory retries) never touches CUDA
directly, so CPU-only CI tests it against :class:`HostBackend`.

* :class:`DriverPoolBackend` (default on the GPU): segments from a private
  CUDA stream-ordered memory pool (``cudaMallocFromPoolAsync``) with the
  release threshold raised to the maximum, so memory returned to it stays
  reserved and is reused by the driver for any size without ``cudaMalloc``.
  Releasing a segment is a cheap, stream-ordered ``cudaFreeAsync``.
* :class:`CudaMallocBackend`: ``cudaMalloc`` / ``cudaFree`` segments (releasing
  synchronizes the device, so the pool releases only under memory pressure).
* :class:`HostBackend`: host memory, synchronous "streams"; for tests.
* :class:`~cuflow.memory.ExpandableBackend` (``_expandable``): segments placed by cuflow in
  one reserved address range whose pages are mapped while needed:
  :class:`~cuflow.memory.VirtualMemoryBackend` (``CUFLOW_POOL_BACKEND=vmm``) and
  :class:`~cuflow.memory.HostExpandableBackend` (for tests).
"""

from __future__ import annotations

import abc
import contextlib
import ctypes
import mmap
from typing import Any

from .._checks import is_integer
from ._exceptions import DoubleFreeError, MemoryTypeError, MemoryValueError

__all__ = ["Backend", "CudaMallocBackend", "DriverPoolBackend", "HostBackend"]


class Backend(abc.ABC):
    """Interface of a segment source (see the module docstring)."""

    name = "abstract"
    #: releasing an unused segment is cheap and lets the source reuse it for any size
    cheap_release = False
    #: segments for large requests are rounded up to a multiple of this, so that the
    #: pool, which can split the remainder, owns it rather than the source
    segment_granularity = 1
    #: when set, a small pool rounds large segments to less: the power of two at or below a
    #: quarter of what it reserves, from this up to ``segment_granularity``
    segment_granularity_min = 0
    #: freed segments' memory stays mapped and the backend places each new segment itself,
    #: so a warm-up keeps no segment (:class:`~cuflow.memory.ExpandableBackend`)
    places_segments = False
    device_id = -1
    #: allocations that took new memory from the device, and releases that gave it back
    device_allocs = 0
    device_frees = 0

    @abc.abstractmethod
    def alloc(self, nbytes: int, stream: int) -> int:
        """A new segment of ``nbytes`` usable on ``stream``; MemoryError when out of memory."""

    @abc.abstractmethod
    def free(self, ptr: int, nbytes: int, stream: int) -> None:
        """Return a segment from :meth:`alloc`, ordered after the work queued on ``stream``."""

    def attach(self, state: Any) -> None:
        """Called by the pool built over this backend with its counters (``requested``,
        ``peak_requested``), which the backend may read when it places a segment."""

    def stream_gone(self, stream: int) -> None:
        """``stream`` was destroyed: its handle may come back as a new stream's."""

    def limit_memory(self, limit: int | None) -> None:
        """The pool's limit (bytes; ``None``: none) changed: a backend that keeps memory
        beyond the pool's segments keeps it within the limit."""

    def total_memory(self) -> int:
        """Bytes of memory the backend draws from (a fraction limit's whole)."""
        from cupy_backends.cuda.api import runtime  # noqa: PLC0415  (optional dependency)

        return int(runtime.memGetInfo()[1])

    def alloc_private(self, nbytes: int) -> int:
        """A segment for a graph-private pool: not stream-ordered, so never captured into a
        graph."""
        return self.alloc(nbytes, 0)

    def free_private(self, ptr: int, nbytes: int) -> None:
        """Return a segment from :meth:`alloc_private`."""
        self.free(ptr, nbytes, 0)

    def current_stream(self) -> int:
        """The handle of the stream current now (0: the legacy default stream)."""
        return 0

    def record(self, stream: int) -> Any:
        """An event recorded on ``stream`` now (``None`` when work is synchronous)."""
        return None

    def done(self, event: Any) -> bool:
        """Whether the work before ``event`` (from :meth:`record`) is done."""
        return True

    def stream_idle(self, stream: int) -> bool:
        """Whether the work queued on ``stream`` so far is known to be done without an
        event (False: ask with :meth:`record` and :meth:`done`)."""
        return False

    def wait(self, stream: int, event: Any) -> None:
        """Order ``stream`` after ``event`` without blocking the host."""

    def synchronize(self) -> None:
        """Wait for all work on the device."""

    def device_reserved(self) -> tuple[int, int] | None:
        """(current, peak) bytes the device allocator holds for this backend, if it can tell."""
        return None

    def reset_device_peak(self) -> None:
        """Set the peak of :meth:`device_reserved` to its current value, where it keeps one."""

    def trim(self) -> None:
        """Give memory the backend holds beyond the pool's segments back to the device."""

    def on_device(self) -> contextlib.AbstractContextManager[Any]:
        """A block with the backend's device current: its streams and events belong to it,
        so work the pool starts outside an allocation (``empty_cache``, a new limit) runs
        there, whichever device the caller has current."""
        return contextlib.nullcontext()


class _Counted(Backend):
    """A backend whose every segment is new device memory: it counts the bytes it holds."""

    in_use = 0
    peak = 0

    def _took(self, nbytes: int) -> None:
        self.in_use += nbytes
        self.peak = max(self.peak, self.in_use)
        self.device_allocs += 1

    def _gave(self, nbytes: int) -> None:
        self.in_use -= nbytes
        self.device_frees += 1

    def device_reserved(self) -> tuple[int, int]:
        return self.in_use, self.peak

    def reset_device_peak(self) -> None:
        self.peak = self.in_use


class HostBackend(_Counted):
    """Host memory (anonymous mappings); streams are plain integers and always in order."""

    name = "host"
    cheap_release = True

    def __init__(self, capacity: int | None = None) -> None:
        if capacity is not None and not is_integer(capacity):
            raise MemoryTypeError(f"cuflow.memory.HostBackend: capacity must be None or an int "
                                  f"number of bytes >= 0, got {type(capacity).__name__} "
                                  f"{capacity!r}")
        if capacity is not None and capacity < 0:
            raise MemoryValueError(f"cuflow.memory.HostBackend: capacity must be None or an "
                                   f"int number of bytes >= 0, got {capacity}")
        self.capacity = None if capacity is None else int(capacity)
        self.buffers: dict[int, Any] = {}

    def total_memory(self) -> int:
        if self.capacity is None:
            raise MemoryValueError("cuflow.memory: a fraction limit needs a backend with a "
                                   "known capacity (HostBackend(capacity=...)), or give the "
                                   "limit in bytes")
        return self.capacity

    def alloc(self, nbytes: int, stream: int) -> int:
        if self.capacity is not None and self.in_use + nbytes > self.capacity:
            raise MemoryError(f"host backend: {nbytes} bytes requested, "
                              f"{self.capacity - self.in_use} of {self.capacity} left")
        # an anonymous mapping: the kernel commits its zeroed pages as they are first written,
        # so a segment costs resident memory only for the blocks used (a ctypes buffer is
        # zeroed whole: tests/memory/test_hotpath.py's replays would hold gigabytes resident)
        try:
            buf = mmap.mmap(-1, max(nbytes, 1))
        except (OSError, OverflowError) as e:  # the host cannot map that much: out of memory
            raise MemoryError(f"host backend: {nbytes} bytes requested: {e}") from e
        view = ctypes.c_char.from_buffer(buf)
        ptr = ctypes.addressof(view)
        self.buffers[ptr] = (view, buf)
        self._took(nbytes)
        return ptr

    def free(self, ptr: int, nbytes: int, stream: int) -> None:
        entry = self.buffers.pop(ptr, None)
        if entry is None:
            raise DoubleFreeError(f"HostBackend.free: {ptr:#x} is no segment this backend "
                                  f"lends (given back twice, or never lent here)")
        view, buf = entry
        del entry, view  # (the mapping cannot close while a ctypes view exports it)
        buf.close()
        self._gave(nbytes)


class _CudaEvents(Backend):
    def __init__(self, device_id: int) -> None:
        import cupy  # noqa: PLC0415  (optional dependency)
        from cupy_backends.cuda.api import runtime  # noqa: PLC0415  (optional dependency)

        self._cupy = cupy
        self._rt = runtime
        self.device_id = device_id
        self._get_stream = cupy.cuda.get_current_stream

    def current_stream(self) -> int:
        return self._get_stream().ptr

    def on_device(self) -> contextlib.AbstractContextManager[Any]:
        return self._cupy.cuda.Device(self.device_id)

    def synchronize(self) -> None:
        self._rt.deviceSynchronize()

    def record(self, stream: int) -> Any:
        rt = self._rt
        ev = rt.eventCreateWithFlags(rt.eventDisableTiming)
        rt.eventRecord(ev, stream)
        return ev

    def done(self, event: Any) -> bool:
        rt = self._rt
        # CuPy's runtime.eventQuery returns cudaEventQuery's status, it does not raise: not
        # ready is 600 (cudaErrorNotReady), and only 0 means the recorded work is done
        status = rt.eventQuery(event)
        if status == 600:
            return False
        if status:
            raise rt.CUDARuntimeError(status)
        rt.eventDestroy(event)
        return True

    def stream_idle(self, stream: int) -> bool:
        # cudaStreamQuery: no event to make, record and destroy for a stream with no work
        # left, and no answer of "not done" from an event the device has not taken yet
        status = self._rt.streamQuery(stream)  # (600: not ready; see done)
        if status == 600:
            return False
        if status:
            raise self._rt.CUDARuntimeError(status)
        return True

    def wait(self, stream: int, event: Any) -> None:
        self._rt.streamWaitEvent(stream, event, 0)

    def alloc_private(self, nbytes: int) -> int:
        rt = self._rt
        try:
            ptr = rt.malloc(nbytes)  # cudaMalloc: allowed while a stream captures (relaxed mode)
        except rt.CUDARuntimeError as e:
            if e.status == 2:  # cudaErrorMemoryAllocation
                raise MemoryError(str(e)) from e
            raise
        self.device_allocs += 1
        return ptr

    def free_private(self, ptr: int, nbytes: int) -> None:
        self._rt.free(ptr)
        self.device_frees += 1


class DriverPoolBackend(_CudaEvents):
    """Segments from a private CUDA stream-ordered pool (``cudaMallocFromPoolAsync``)."""

    name = "driver-pool"
    cheap_release = True
    # The driver's pool reserves whole 32 MiB chunks and packs what is left of them poorly
    # (a later request does not reuse the free rest of an earlier chunk), so large segments
    # are whole multiples of its chunk, and the pool splits the rest.  64 MiB multiples keep
    # the worst footprint (peak reserved over peak requested) of the traces lowest, against
    # exact sizes and 32 MiB multiples: bench/test_bench_memory.py::test_trace.  A pool that
    # reserves little rounds to less (down to 2 MiB, the driver's own granularity), or a model
    # whose peak is a few granules pays for a whole extra one (the recorded traces in
    # bench/traces/, python -m cuflow bench traces).
    segment_granularity = 64 << 20
    segment_granularity_min = 2 << 20

    def __init__(self, device_id: int) -> None:
        super().__init__(device_id)
        rt = self._rt
        props = rt.MemPoolProps(rt.cudaMemAllocationTypePinned, rt.cudaMemHandleTypeNone,
                                rt.cudaMemLocationTypeDevice, device_id)
        self.handle = rt.memPoolCreate(props)
        # keep what is returned to the driver reserved (no trim at synchronize)
        rt.memPoolSetAttribute(self.handle, rt.cudaMemPoolAttrReleaseThreshold, (1 << 64) - 1)
        self._reserved = 0

    def alloc(self, nbytes: int, stream: int) -> int:
        rt = self._rt
        try:
            ptr = rt.mallocFromPoolAsync(nbytes, self.handle, stream)
        except rt.CUDARuntimeError as e:
            if e.status == 2:  # cudaErrorMemoryAllocation
                # A refused request larger than the free memory leaves the driver's pool
                # holding all of it (with the release threshold at its maximum nothing gives
                # it back), which starves every other library and process on the device:
                # back to the reserve held before the request.
                # tests/memory/test_limit.py::test_a_refused_segment_leaves_the_device_free
                rt.memPoolTrimTo(self.handle, self._reserved)
                raise MemoryError(str(e)) from e
            raise
        # a device allocation only when the driver had to grow the pool's reserve
        cur = int(rt.memPoolGetAttribute(self.handle, rt.cudaMemPoolAttrReservedMemCurrent))
        if cur > self._reserved:
            self.device_allocs += 1
        self._reserved = cur
        return ptr

    def free(self, ptr: int, nbytes: int, stream: int) -> None:
        self._rt.freeAsync(ptr, stream)

    def trim(self) -> None:
        """Give the driver pool's unused reserve back to the device (after a synchronize)."""
        rt = self._rt
        rt.deviceSynchronize()
        rt.memPoolTrimTo(self.handle, 0)
        cur = int(rt.memPoolGetAttribute(self.handle, rt.cudaMemPoolAttrReservedMemCurrent))
        if cur < self._reserved:
            self.device_frees += 1
        self._reserved = cur

    def device_reserved(self) -> tuple[int, int]:
        rt = self._rt
        return (int(rt.memPoolGetAttribute(self.handle, rt.cudaMemPoolAttrReservedMemCurrent)),
                int(rt.memPoolGetAttribute(self.handle, rt.cudaMemPoolAttrReservedMemHigh)))

    def reset_device_peak(self) -> None:
        rt = self._rt
        rt.memPoolSetAttribute(self.handle, rt.cudaMemPoolAttrReservedMemHigh, 0)


class CudaMallocBackend(_CudaEvents, _Counted):
    """``cudaMalloc`` segments; releasing one (``cudaFree``) synchronizes the device."""

    name = "cudamalloc"
    cheap_release = False

    def alloc(self, nbytes: int, stream: int) -> int:
        rt = self._rt
        try:
            ptr = rt.malloc(nbytes)
        except rt.CUDARuntimeError as e:
            if e.status == 2:
                raise MemoryError(str(e)) from e
            raise
        self._took(nbytes)
        return ptr

    def free(self, ptr: int, nbytes: int, stream: int) -> None:
        self._rt.free(ptr)
        self._gave(nbytes)

