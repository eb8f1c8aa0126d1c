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
from .._errors import OutOfMemoryError
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
    #: so a replay keeps no segment of its own, only an arena
    #: (:class:`~cuflow.memory.ExpandableBackend`)
    places_segments = False
    device_id = -1
    #: allocations that took new memory from the device, and releases that gave it back
    device_allocs = 0
    device_frees = 0

    @abc.abstractmethod
    def alloc(self, nbytes: int, stream: int) -> int:
        """A new segment of ``nbytes`` usable on ``stream``; MemoryError when out of memory.

        Parameters
        ----------
        nbytes : int
            The segment's bytes (the pool's segment size for the request it serves).
        stream : int
            The handle of the stream whose work first uses the segment (0: the legacy
            default stream).

        Returns
        -------
        int
            The segment's address.

        Raises
        ------
        MemoryError
            The source has no memory for it (the pool then retries, and raises its own
            :class:`cuflow.OutOfMemoryError` when that fails too).  cuflow's backends
            raise :class:`cuflow.OutOfMemoryError`, a ``MemoryError``.

        Notes
        -----
        Stream semantics: the segment is usable by work queued on ``stream`` after the call;
        a stream-ordered source queues the allocation there, and work on another stream
        must be ordered after it first.
        """

    @abc.abstractmethod
    def free(self, ptr: int, nbytes: int, stream: int) -> None:
        """Return a segment from :meth:`alloc`, ordered after the work queued on ``stream``.

        Parameters
        ----------
        ptr : int
            The segment's address, from :meth:`alloc` and not given back yet.
        nbytes : int
            Its bytes, as asked of :meth:`alloc`.
        stream : int
            The handle of the stream whose queued work the release follows.

        Notes
        -----
        Stream semantics: the source reuses the memory only after the work queued on
        ``stream`` so far (the pool has made ``stream`` wait for the other streams that used
        the segment); a source whose release is synchronous (``cudaFree``) waits for the
        device instead.
        """

    def attach(self, state: Any) -> None:
        """Called by the pool built over this backend with its counters (``requested``,
        ``peak_requested``), which the backend may read when it places a segment.

        The default ignores them.

        Parameters
        ----------
        state : object
            The pool's counters: an object with ``requested`` and ``peak_requested``
            attributes (bytes), which the pool keeps up to date.
        """

    def stream_gone(self, stream: int) -> None:
        """``stream`` was destroyed: its handle may come back as a new stream's.

        The default does nothing (a backend that keeps no state per stream).

        Parameters
        ----------
        stream : int
            The handle of the destroyed stream.
        """

    def limit_memory(self, limit: int | None) -> None:
        """The pool's limit (bytes; ``None``: none) changed: a backend that keeps memory
        beyond the pool's segments keeps it within the limit.

        The default does nothing (a backend that keeps no memory beyond the segments).

        Parameters
        ----------
        limit : int or None
            The new limit in bytes, or ``None`` for none.
        """

    def total_memory(self) -> int:
        """Bytes of memory the backend draws from (a fraction limit's whole)."""
        from cupy_backends.cuda.api import runtime  # noqa: PLC0415  (optional dependency)

        return int(runtime.memGetInfo()[1])

    def alloc_private(self, nbytes: int) -> int:
        """A segment for a graph-private pool: not stream-ordered, so never captured into a
        graph.

        The default is :meth:`alloc` on stream 0, for a source whose :meth:`alloc` is not
        stream-ordered; the CUDA backends override it with ``cudaMalloc``.

        Parameters
        ----------
        nbytes : int
            The segment's bytes.

        Returns
        -------
        int
            The segment's address; give it back with :meth:`free_private`.

        Raises
        ------
        MemoryError
            The source has no memory for it.
        """
        return self.alloc(nbytes, 0)

    def free_private(self, ptr: int, nbytes: int) -> None:
        """Return a segment from :meth:`alloc_private`.

        The default is :meth:`free` on stream 0; the CUDA backends override it with
        ``cudaFree``.

        Parameters
        ----------
        ptr : int
            The segment's address, from :meth:`alloc_private` and not given back yet.
        nbytes : int
            Its bytes, as asked of :meth:`alloc_private`.
        """
        self.free(ptr, nbytes, 0)

    def current_stream(self) -> int:
        """The handle of the stream current now (0: the legacy default stream)."""
        return 0

    def record(self, stream: int) -> Any:
        """An event recorded on ``stream`` now (``None`` when work is synchronous).

        The default returns ``None``.

        Parameters
        ----------
        stream : int
            The handle of the stream to record on.

        Returns
        -------
        object or None
            The event, for :meth:`done` and :meth:`wait`; ``None`` when work is
            synchronous.

        Notes
        -----
        Stream semantics: the event is queued on ``stream`` after the work queued there so
        far, and completes with it; the host does not wait.  The CUDA backends make a new
        event (timing disabled), which :meth:`done` destroys once it reports it complete.
        """
        return None

    def done(self, event: Any) -> bool:
        """Whether the work before ``event`` (from :meth:`record`) is done.

        The default returns True.

        Parameters
        ----------
        event : object
            An event from :meth:`record`.  In the CUDA backends, once this returns True the
            event is destroyed: it is not to be passed again.

        Returns
        -------
        bool
            True when that work is done; the host does not wait for it.

        Raises
        ------
        cupy_backends.cuda.api.runtime.CUDARuntimeError
            In the CUDA backends: the event's query reports a CUDA error.
        """
        return True

    def stream_idle(self, stream: int) -> bool:
        """Whether the work queued on ``stream`` so far is known to be done without an
        event (False: ask with :meth:`record` and :meth:`done`).

        The default returns False.

        Parameters
        ----------
        stream : int
            The handle of the stream to ask about.

        Returns
        -------
        bool
            True when the work queued on ``stream`` is done (the CUDA backends ask
            ``cudaStreamQuery``); the host does not wait for it.

        Raises
        ------
        cupy_backends.cuda.api.runtime.CUDARuntimeError
            In the CUDA backends: the stream's query reports a CUDA error.
        """
        return False

    def wait(self, stream: int, event: Any) -> None:
        """Order ``stream`` after ``event`` without blocking the host.

        The default does nothing (work is synchronous).

        Parameters
        ----------
        stream : int
            The handle of the stream that waits.
        event : object
            An event from :meth:`record`.

        Notes
        -----
        Stream semantics: a wait is queued on ``stream`` (``cudaStreamWaitEvent`` in the
        CUDA backends): work queued there afterwards runs after the work before ``event``.
        """

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
    """Host memory (anonymous mappings); streams are plain integers and always in order.

    Parameters
    ----------
    capacity : int or None, optional
        Most bytes of segments held at once (:meth:`alloc` raises
        :class:`cuflow.OutOfMemoryError` beyond), and the whole that a fraction limit is
        of; ``None`` (the default): no bound, and a fraction limit raises
        :class:`~cuflow.memory.MemoryValueError`.

    Raises
    ------
    MemoryTypeError
        ``capacity`` is neither ``None`` nor an integer (a bool neither).
    MemoryValueError
        ``capacity`` is negative.
    """

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
        """A new segment of ``nbytes``: an anonymous mapping, whose zeroed pages the kernel
        commits as they are first written.

        Parameters
        ----------
        nbytes : int
            The segment's bytes (a mapping of at least one byte).
        stream : int
            Not used: host work is synchronous.

        Returns
        -------
        int
            The segment's address.

        Raises
        ------
        cuflow.OutOfMemoryError
            More than ``capacity`` bytes would be held, or the host cannot map the bytes.
        """
        if self.capacity is not None and self.in_use + nbytes > self.capacity:
            raise OutOfMemoryError(f"cuflow.memory.HostBackend: {nbytes} bytes requested, "
                                   f"{self.capacity - self.in_use} of its capacity "
                                   f"{self.capacity} left")
        # an anonymous mapping: the kernel commits its zeroed pages as they are first written,
        # so a segment costs resident memory only for the blocks used (a ctypes buffer is
        # zeroed whole: tests/memory/test_hotpath.py's replays would hold gigabytes resident)
        try:
            buf = mmap.mmap(-1, max(nbytes, 1))
        except (OSError, OverflowError) as e:  # the host cannot map that much: out of memory
            raise OutOfMemoryError(f"cuflow.memory.HostBackend: {nbytes} bytes requested, "
                                   f"which the host cannot map: {e}") from e
        view = ctypes.c_char.from_buffer(buf)
        ptr = ctypes.addressof(view)
        self.buffers[ptr] = (view, buf)
        self._took(nbytes)
        return ptr

    def free(self, ptr: int, nbytes: int, stream: int) -> None:
        """Return a segment from :meth:`alloc`: its mapping is closed at once.

        Parameters
        ----------
        ptr : int
            The segment's address, from :meth:`alloc` and not given back yet.
        nbytes : int
            Its bytes, as asked of :meth:`alloc`.
        stream : int
            Not used: host work is synchronous.

        Raises
        ------
        DoubleFreeError
            ``ptr`` is not a segment of this backend that is still held.
        """
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
                raise OutOfMemoryError(f"cuflow.memory.{type(self).__name__}: {e}") from e
            raise
        self.device_allocs += 1
        return ptr

    def free_private(self, ptr: int, nbytes: int) -> None:
        self._rt.free(ptr)
        self.device_frees += 1


class DriverPoolBackend(_CudaEvents):
    """Segments from a private CUDA stream-ordered pool (``cudaMallocFromPoolAsync``).

    The pool's release threshold is the maximum, so memory given back stays reserved for it
    (until :meth:`trim`) and serves later segments of any size.

    Parameters
    ----------
    device_id : int
        The device whose memory the private pool holds; not checked here (the runtime
        refuses to create a pool on a device that does not exist).

    Raises
    ------
    ImportError
        CuPy is not installed.
    cupy_backends.cuda.api.runtime.CUDARuntimeError
        The runtime refuses to create the pool.
    """

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
        """A new segment of ``nbytes`` from the private pool, queued on ``stream``.

        Parameters
        ----------
        nbytes : int
            The segment's bytes.
        stream : int
            The handle of the stream whose work first uses the segment.

        Returns
        -------
        int
            The segment's address.

        Raises
        ------
        cuflow.OutOfMemoryError
            The device is out of memory (``cudaErrorMemoryAllocation``); the private pool is
            first trimmed back to the reserve it held before the request.
        cupy_backends.cuda.api.runtime.CUDARuntimeError
            Another error of ``cudaMallocFromPoolAsync``.

        Notes
        -----
        Stream semantics: the allocation is queued on ``stream``
        (``cudaMallocFromPoolAsync``): the memory is usable by work queued there after the
        call, and by another stream once it is ordered after that point.
        """
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
                raise OutOfMemoryError(f"cuflow.memory.{type(self).__name__}: {e}") from e
            raise
        # a device allocation only when the driver had to grow the pool's reserve
        cur = int(rt.memPoolGetAttribute(self.handle, rt.cudaMemPoolAttrReservedMemCurrent))
        if cur > self._reserved:
            self.device_allocs += 1
        self._reserved = cur
        return ptr

    def free(self, ptr: int, nbytes: int, stream: int) -> None:
        """Return a segment from :meth:`alloc` to the private pool (``cudaFreeAsync``).

        Parameters
        ----------
        ptr : int
            The segment's address, from :meth:`alloc` and not given back yet.
        nbytes : int
            Its bytes (not used: the driver knows them).
        stream : int
            The handle of the stream whose queued work the release follows.

        Notes
        -----
        Stream semantics: the release is queued on ``stream`` and takes effect after the
        work queued there so far; the host does not wait.  The memory stays in the private
        pool's reserve.
        """
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
    """``cudaMalloc`` segments; releasing one (``cudaFree``) synchronizes the device.

    Parameters
    ----------
    device_id : int
        The device the backend serves: its work outside an allocation runs with this device
        current (:meth:`on_device`).  ``cudaMalloc`` allocates on the device current at the
        call, so the pool's allocations are to run with this one current, as cuflow's
        allocator hook runs them.  Not checked here.

    Raises
    ------
    ImportError
        CuPy is not installed.
    """

    name = "cudamalloc"
    cheap_release = False

    def alloc(self, nbytes: int, stream: int) -> int:
        """A new segment of ``nbytes`` from ``cudaMalloc``, on the current device.

        Parameters
        ----------
        nbytes : int
            The segment's bytes.
        stream : int
            Not used: ``cudaMalloc`` is not stream-ordered, and the segment is usable by
            any stream at once.

        Returns
        -------
        int
            The segment's address.

        Raises
        ------
        cuflow.OutOfMemoryError
            The device is out of memory (``cudaErrorMemoryAllocation``).
        cupy_backends.cuda.api.runtime.CUDARuntimeError
            Another error of ``cudaMalloc``.
        """
        rt = self._rt
        try:
            ptr = rt.malloc(nbytes)
        except rt.CUDARuntimeError as e:
            if e.status == 2:
                raise OutOfMemoryError(f"cuflow.memory.{type(self).__name__}: {e}") from e
            raise
        self._took(nbytes)
        return ptr

    def free(self, ptr: int, nbytes: int, stream: int) -> None:
        """Return a segment from :meth:`alloc` to the device (``cudaFree``).

        Parameters
        ----------
        ptr : int
            The segment's address, from :meth:`alloc` and not given back yet.
        nbytes : int
            Its bytes, as asked of :meth:`alloc`.
        stream : int
            Not used: the release is not stream-ordered.

        Notes
        -----
        Stream semantics: nothing is queued; ``cudaFree`` synchronizes the device, so the
        work of every stream, ``stream``'s included, is done before the memory goes back.
        """
        self._rt.free(ptr)
        self._gave(nbytes)

