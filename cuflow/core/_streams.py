"""CUDA streams and events, as objects and context managers.

``Stream`` and ``Event`` exist on both backends.  On the CuPy backend they wrap
``cupy.cuda.Stream`` / ``cupy.cuda.Event``; on the NumPy backend work is
synchronous, so they are no-ops that keep code running unchanged (events still
record host time, so ``elapsed_time`` is meaningful for CPU timings).

Context managers are for users.  cuflow's own functions take ``stream=`` and
resolve it with :func:`as_cupy_stream`.
"""

from __future__ import annotations

import contextlib
import reprlib
import sys
import threading
import time
import weakref
from typing import Any

import numpy

from ._runtime import Device, get_backend
from .._checks import as_flag, is_integer
from .._errors import ArgumentError, ArgumentTypeError, CudaError, DeviceError

__all__ = ["Stream", "Event", "current_stream", "synchronize", "streams", "as_cupy_stream",
           "as_stream", "use_stream"]


class _NullStream:
    """``Stream.null``: CUDA's legacy default (null) stream (CuPy's ``Stream.null``)."""

    def __get__(self, obj: Any, cls: type) -> Stream:
        b = get_backend()
        if b.is_gpu:
            return cls(_wrap=b.xp.cuda.Stream.null)
        if _host.null is None:
            _host.null = cls(_wrap=_NULL)
        return _host.null


class Stream:
    """A CUDA stream.

    Parameters
    ----------
    non_blocking : bool, default True
        Do not synchronize with the legacy default stream.
    priority : int, optional
        Stream priority (lower is higher priority, as in CUDA; the device
        clamps it to its range, ``cupy.cuda.runtime.deviceGetStreamPriorityRange``).

    Notes
    -----
    ``with stream:`` makes it the current stream of cuflow *and* CuPy for the
    block, so ops without ``stream=`` (and plain CuPy calls) run on it.
    ``Stream()`` creates the CUDA stream immediately, on the current device;
    it belongs to that device (:attr:`device`), and ``with stream:`` or
    ``stream=`` under another current device raises :class:`~cuflow.DeviceError`.
    Use :func:`streams` to get several distinct streams (``[Stream()] * n`` is
    one stream n times).
    """

    __slots__ = ("_cp", "_dev", "__weakref__")

    #: CUDA's legacy default (null) stream, as CuPy's ``Stream.null``
    null = _NullStream()

    def __init__(self, non_blocking: bool = True, priority: int | None = None, *,
                 _wrap: Any = None) -> None:
        b = get_backend()
        if _wrap is None:
            non_blocking = as_flag("Stream", "non_blocking", non_blocking)
            _check_priority("Stream", priority)
        self._dev: int | None = b.current_device()
        if _wrap is _NULL:
            self._cp, self._dev = None, None
        elif _wrap is not None:
            self._cp = _wrap
            dev = getattr(_wrap, "device_id", -1)
            # CuPy's null stream and external streams say -1: the current device's, any device
            self._dev = dev if dev >= 0 else None
        elif b.is_gpu:
            kw = {} if priority is None else {"priority": int(priority)}
            self._cp = b.xp.cuda.Stream(non_blocking=bool(non_blocking), **kw)
        else:
            self._cp = None

    # -- identity -----------------------------------------------------------
    @property
    def ptr(self) -> int:
        """The ``cudaStream_t`` as an int (0 on the NumPy backend)."""
        return 0 if self._cp is None else int(self._cp.ptr)

    @property
    def cupy(self):
        """The underlying ``cupy.cuda.Stream`` (None on the NumPy backend)."""
        return self._cp

    @property
    def device(self) -> int:
        """The ordinal of the device this stream belongs to (the null stream: the current device)."""
        return get_backend().current_device() if self._dev is None else self._dev

    def __cuda_stream__(self) -> tuple[int, int]:
        """The CUDA stream protocol (cuda.core, PyTorch, Numba)."""
        return (0, self.ptr)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Stream):
            return self.ptr == other.ptr and self._cp is not None or self is other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(("cuflow.Stream", self.ptr if self._cp is not None else id(self)))

    def __repr__(self) -> str:
        return f"<cuflow.Stream ptr=0x{self.ptr:x}>"

    # -- context manager ----------------------------------------------------
    def __enter__(self) -> Stream:
        """Make this stream current in the block (CuPy's rule: the exit restores the one
        current at the entry)."""
        _check_device("Stream", self._dev)
        if self._cp is not None:
            self._cp.__enter__()
        else:  # CuPy's rule: the block's exit makes current what was current at its entry
            _host.prev.setdefault(id(self), []).append(_host.current)
            _host.current = self
        return self

    def __exit__(self, *exc: object) -> None:
        """Make current again the stream that was current when the block began."""
        if self._cp is not None:
            self._cp.__exit__(*exc)
        else:
            stack = _host.prev.get(id(self))
            if not stack:
                raise ArgumentError("cuflow.Stream: __exit__ of a stream that was not entered "
                                    "(use it as `with stream:`)")
            _host.current = stack.pop()
            if not stack:
                del _host.prev[id(self)]

    # -- operations ---------------------------------------------------------
    def synchronize(self) -> None:
        """Block the host until all work queued on this stream is done."""
        if self._cp is not None:
            self._cp.synchronize()

    def query(self) -> bool:
        """True when all work queued on this stream is done (never blocks).

        Returns
        -------
        bool
        """
        return True if self._cp is None else bool(self._cp.done)

    @property
    def done(self) -> bool:
        """:meth:`query` as CuPy's property: True when all work queued here is done."""
        return self.query()

    def record(self, event: Event | None = None) -> Event:
        """Record ``event`` on this stream: it completes when the work queued so far does.

        Parameters
        ----------
        event : Event, optional
            The event; a new one of this stream's device when omitted.

        Returns
        -------
        Event
            The event recorded.

        Notes
        -----
        Stream semantics: asynchronous; one event record queued on this stream.
        """
        if event is None:
            b = get_backend()
            if b.multi and self._dev is not None and self._dev != b.current_device():
                with Device(self._dev):
                    event = Event()
            else:
                event = Event()
        elif not isinstance(event, Event):
            raise ArgumentTypeError(f"cuflow.Stream.record: event must be a cuflow.Event or "
                                    f"None, got {type(event).__name__}")
        event.record(self)
        return event

    def wait(self, event: Event) -> None:
        """Make future work on this stream wait for ``event`` (no host synchronization).

        Parameters
        ----------
        event : Event
            A recorded event, of any stream of the same device.

        Notes
        -----
        Stream semantics: asynchronous; the wait is queued on this stream.
        """
        if not isinstance(event, Event):
            raise ArgumentTypeError(f"cuflow.Stream.wait: event must be a cuflow.Event, got "
                                    f"{type(event).__name__}")
        if self._cp is not None and event._cp is not None:
            self._cp.wait_event(event._cp)

    def wait_stream(self, other: Stream) -> None:
        """Make future work on this stream wait for the work queued so far on ``other``.

        Parameters
        ----------
        other : Stream
            The stream waited for.

        Notes
        -----
        Stream semantics: asynchronous; an event recorded on ``other`` and a wait for it on
        this stream, no host synchronization.
        """
        self.wait(as_stream(other, "Stream.wait_stream").record())


class Event:
    """A CUDA event.

    Parameters
    ----------
    timing : bool, default True
        Record timestamps so :meth:`elapsed_time` works (slightly slower events);
        :meth:`elapsed_time` of an event made with ``timing=False`` raises
        :class:`~cuflow.ArgumentError` on every backend.
    blocking : bool, default False
        ``synchronize()`` yields the CPU instead of spinning.
    disable_timing, block : bool, optional
        CuPy's names of ``not timing`` and of ``blocking``, for code written for
        ``cupy.cuda.Event``; each with its cuflow name is an error.
    """

    __slots__ = ("_cp", "_t", "_dev", "_timing")

    def __init__(self, timing: bool = True, blocking: bool = False, *,
                 disable_timing: bool | None = None, block: bool | None = None) -> None:
        b = get_backend()
        if disable_timing is not None:
            if timing is not True:
                raise ArgumentError("cuflow.Event: got both timing= and disable_timing= "
                                    "(CuPy's name of not timing); pass one")
            timing = not as_flag("Event", "disable_timing", disable_timing)
        if block is not None:
            if blocking is not False:
                raise ArgumentError("cuflow.Event: got both blocking= and block= (CuPy's "
                                    "name of it); pass one")
            blocking = block
        timing = as_flag("Event", "timing", timing)
        blocking = as_flag("Event", "blocking", blocking)
        self._dev = b.current_device()
        self._t: float | None = None
        self._timing = timing
        self._cp = (b.xp.cuda.Event(block=blocking, disable_timing=not timing)
                    if b.is_gpu else None)

    @property
    def ptr(self) -> int:
        """The ``cudaEvent_t`` as an int (0 on the NumPy backend)."""
        return 0 if self._cp is None else int(self._cp.ptr)

    @property
    def device(self) -> int:
        """The ordinal of the device this event belongs to (current when it was made)."""
        return self._dev

    def record(self, stream: Any = None) -> Event:
        """Record on ``stream``: the event completes when the work queued there so far does.

        Parameters
        ----------
        stream : Stream, optional
            A stream of the event's device; the current stream when omitted.

        Returns
        -------
        Event
            This event.

        Notes
        -----
        Stream semantics: asynchronous; one event record queued on ``stream``.
        """
        b = get_backend()
        if b.multi:
            sdev = stream._dev if isinstance(stream, Stream) else None
            sdev = b.current_device() if sdev is None else sdev
            if sdev != self._dev:
                raise DeviceError(f"cuflow.Event.record: the event belongs to device "
                                  f"{self._dev} but the stream to device {sdev}; make the "
                                  f"event under `with cuflow.Device({sdev}):`")
        s = as_cupy_stream(stream, "Event.record")  # (checks stream on every backend)
        self._t = time.perf_counter()
        if self._cp is not None:
            self._cp.record(s)
        return self

    def synchronize(self) -> None:
        """Block the host until the work before this event is done."""
        if self._cp is not None:
            self._cp.synchronize()

    def query(self) -> bool:
        """True when the work before this event is done (never blocks).

        Returns
        -------
        bool
        """
        return True if self._cp is None else bool(self._cp.done)

    @property
    def done(self) -> bool:
        """:meth:`query` as CuPy's property: True when the work before this event is done."""
        return self.query()

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds from this event to ``end``.

        Both events must be made with ``timing=True``, on the same device, and recorded; the
        host waits until both are complete (they may be on different streams).

        Parameters
        ----------
        end : Event
            The later event.

        Returns
        -------
        float
            The GPU time between the two records, in milliseconds.
        """
        if not isinstance(end, Event):
            raise ArgumentTypeError(f"cuflow.Event.elapsed_time: end must be a cuflow.Event, "
                                    f"got {type(end).__name__}")
        if not (self._timing and end._timing):
            # checked here: the NumPy backend has a timestamp anyway, and CuPy raises a raw
            # CUDARuntimeError for an event made with disable_timing
            untimed = ("the start and end events were" if not (self._timing or end._timing)
                       else "the start event (self) was" if not self._timing
                       else "the end event was")
            raise ArgumentError("cuflow.Event.elapsed_time: elapsed_time needs events made "
                                f"with timing=True; {untimed} made with timing=False")
        if self._t is None or end._t is None:
            raise ArgumentError("cuflow.Event.elapsed_time: both events must be recorded "
                                f"first (start recorded: {self._t is not None}, end recorded: "
                                f"{end._t is not None})")
        if self._dev != end._dev:  # (CUDA times events of one context only)
            raise DeviceError(f"cuflow.Event.elapsed_time: the start event belongs to device "
                              f"{self._dev} and the end event to device {end._dev}; time "
                              f"events of one device")
        if self._cp is None:
            return (end._t - self._t) * 1e3
        b = get_backend()
        from cupy.cuda import get_elapsed_time  # noqa: PLC0415

        try:
            # both: CUDA answers "not ready" while either event is incomplete, and the start
            # event may be on a stream that is behind the end event's
            self._cp.synchronize()
            end._cp.synchronize()
            return float(get_elapsed_time(self._cp, end._cp))
        except b.cuda_errors as e:
            raise CudaError(f"cuflow.Event.elapsed_time: CUDA call failed: {e}") from e


def as_cupy_stream(stream: Any, op: str | None = None):
    """Resolve ``stream=`` to a ``cupy.cuda.Stream`` (None: the current stream).

    Accepts a cuflow ``Stream``, a CuPy stream, or any object with
    ``__cuda_stream__`` (cuda.core) or ``cuda_stream`` (PyTorch).  Returns None
    on the NumPy backend.  ``op`` names the caller in the error for anything else.
    """
    b = get_backend()
    if not b.is_gpu:
        if stream is None or isinstance(stream, Stream):
            return None
        foreign_handle(stream, op)  # (checked on every backend)
        return None
    cuda = b.xp.cuda
    if stream is None:
        return cuda.get_current_stream()
    if isinstance(stream, Stream):
        return stream._cp
    if isinstance(stream, cuda.Stream | cuda.ExternalStream):
        return stream
    return _foreign_stream(b, stream, foreign_handle(stream, op))


def foreign_handle(stream: Any, op: str | None = None) -> int:
    """The handle of a foreign stream: ``__cuda_stream__()``'s (cuda.core), or ``cuda_stream``
    (PyTorch), an int; anything else is refused as :func:`as_cupy_stream` refuses it (a
    stream class rather than a stream, a handle that is no int)."""
    if isinstance(stream, type):  # (a class has the method too, unbound)
        _bad_stream(stream, op)
    try:
        if hasattr(stream, "__cuda_stream__"):
            v = stream.__cuda_stream__()
            handle = v[1] if isinstance(v, tuple) and len(v) == 2 else None
        elif hasattr(stream, "cuda_stream"):  # torch.cuda.Stream
            handle = stream.cuda_stream
        else:
            handle = None
    except Exception:  # (the object's own protocol failed: it is no stream)
        handle = None
    if not is_integer(handle) or handle < 0:
        _bad_stream(stream, op)
    return int(handle)


#: (handle, device) -> (the CuPy stream object of a foreign stream, a weak reference to the
#: foreign object it was made for, or None for a stream that is never destroyed)
_foreign: dict[tuple[int, int], tuple[Any, Any]] = {}


def _foreign_stream(b: Any, obj: Any, handle: int) -> Any:
    """One ``cupy.cuda.ExternalStream`` per foreign stream, for as long as the object that
    named it lives.

    The memory pool watches the CuPy stream object that is current at a stream's first
    allocation and takes that object's death for the stream's: the stream's cached blocks
    then wait for a device synchronize, since CUDA may give a destroyed stream's handle to a
    new stream and no event may be recorded on it.  A new wrapper per call would die after
    every op.  So the wrapper lives as long as the foreign object it was made for; once that
    object is gone, the next object naming the handle gets a new wrapper (the handle may be
    a new stream's by then).  PyTorch never destroys its own streams (it keeps them in a
    pool), so their wrappers live on; an object that cannot be weakly referenced gets a new
    wrapper per call, as its death cannot be seen.
    """
    key = (handle, b.current_device())
    entry = _foreign.get(key)
    if entry is not None:
        if entry[1] is None or entry[1]() is not None:
            return entry[0]
        _forget_foreign(key, entry[1])  # (its object died; a collection is yet to tell)
    wrapper = b.xp.cuda.ExternalStream(handle)
    if handle <= 2 or _never_destroyed(obj):  # (0, 1, 2: CUDA's default streams)
        ref = None
    else:
        try:
            ref = weakref.ref(obj, lambda r, key=key: _forget_foreign(key, r))
        except TypeError:
            return wrapper
    # (another thread may have stored one meanwhile: that one is used by both)
    return _foreign.setdefault(key, (wrapper, ref))[0]


def _forget_foreign(key: tuple[int, int], ref: Any) -> None:
    """The foreign object behind ``_foreign[key]`` died: drop its wrapper (and with it, the
    pool's watch on the stream)."""
    entry = _foreign.get(key)
    if entry is not None and entry[1] is ref:
        _foreign.pop(key, None)


def _never_destroyed(obj: Any) -> bool:
    """Whether ``obj`` is one of PyTorch's own streams (``torch.cuda.ExternalStream`` wraps a
    handle its user may destroy)."""
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    own, external = getattr(cuda, "Stream", None), getattr(cuda, "ExternalStream", None)
    return (isinstance(own, type) and isinstance(obj, own)
            and not (isinstance(external, type) and isinstance(obj, external)))


def _check_priority(owner: str, priority: Any) -> None:
    """A stream priority is None or a C int (CUDA clamps it to the device's range)."""
    if priority is not None and (isinstance(priority, bool | numpy.bool_) or
                                 not isinstance(priority, int | numpy.integer)):
        raise ArgumentTypeError(f"cuflow.{owner}: priority must be an int (lower is higher "
                                f"priority) or None, got {priority!r}")
    if priority is not None and not -2**31 <= int(priority) < 2**31:
        raise ArgumentError(f"cuflow.{owner}: priority must be in [-2**31, 2**31) (CUDA clamps "
                            f"it to the device's range), got {priority!r}")


_short = reprlib.Repr()
_short.maxstring = _short.maxother = 60


def _bad_stream(stream: Any, op: str | None = None):
    who = f"cuflow.{op}: " if op else ""  # (callers without a name prefix their own)
    raise ArgumentTypeError(
        f"{who}stream= must be a cuflow.Stream, a cupy.cuda.Stream, or an object with "
        f"__cuda_stream__ / cuda_stream (a cuda.core or PyTorch stream), or None for the "
        f"current stream; got {type(stream).__name__} {_short.repr(stream)}")


#: CUDA's handles of the legacy default stream: 0, and ``cudaStreamLegacy``
LEGACY_HANDLES = (0, 1)


def is_legacy(stream: Any) -> bool:
    """Whether ``stream`` (anything :func:`as_cupy_stream` takes but None) is CUDA's legacy
    default (null) stream, on which no graph can be captured.  On the NumPy backend the
    answer is the GPU's: its null stream (``current_stream()`` outside any ``with stream:``)
    and a foreign stream of a legacy handle are."""
    if isinstance(stream, Stream) and stream._cp is None:
        return stream._dev is None  # (only the NumPy backend's null stream has no device)
    if get_backend().is_gpu:
        handle = as_cupy_stream(stream).ptr
    elif isinstance(stream, Stream):
        handle = stream.ptr
    else:
        handle = foreign_handle(stream)
    return int(handle) in LEGACY_HANDLES


def as_stream(stream: Any, op: str | None = None) -> Stream:
    """Resolve anything :func:`as_cupy_stream` takes to a cuflow ``Stream``."""
    if isinstance(stream, Stream):
        return stream
    s = as_cupy_stream(stream, op)
    if s is None and stream is None:  # the NumPy backend's current stream
        if _host.current is not None:
            return _host.current
        if _host.null is None:
            _host.null = Stream(_wrap=_NULL)
        return _host.null
    return Stream(_wrap=s)


class _HostStreams(threading.local):
    """The NumPy backend's ``with stream:`` blocks, per thread, as CuPy keeps the GPU's, so
    that ``current_stream()`` is the block's stream there too; outside any block, one null
    stream per thread (of the current device)."""

    def __init__(self) -> None:
        self.current: Stream | None = None  # None: the null stream
        self.prev: dict[int, list[Stream | None]] = {}  # id(stream): current at its entries
        self.null: Stream | None = None


_NULL = object()  # Stream(_wrap=_NULL): the NumPy backend's null stream
_host = _HostStreams()


def current_stream() -> Stream:
    """The current stream (CuPy's current stream on the CuPy backend)."""
    return as_stream(None)


def synchronize() -> None:
    """Block the host until all work on the current device is done."""
    b = get_backend()
    if b.is_gpu:
        b.xp.cuda.Device().synchronize()


#: Most streams one :func:`streams` call makes: a request for millions is a mistake that would
#: otherwise exhaust host memory before CUDA refused it (tests/test_fuzz.py::test_streams).
MAX_STREAMS = 1024


def streams(n: int, non_blocking: bool = True, priority: int | None = None) -> list[Stream]:
    """Return ``n`` distinct new streams (at most :data:`MAX_STREAMS`).

    Parameters
    ----------
    n : int
        How many, in ``[0, MAX_STREAMS]``.
    non_blocking : bool, default True
        Do not synchronize with the legacy default stream.
    priority : int, optional
        Their priority, as :class:`Stream` takes it.

    Returns
    -------
    list of Stream
        ``n`` distinct streams of the current device.

    Raises
    ------
    ArgumentTypeError
        ``n`` is not an int, or ``non_blocking`` or ``priority`` has the wrong type.
    ArgumentError
        ``n`` outside ``[0, MAX_STREAMS]``, or ``priority`` outside a C int's range.
    """
    if isinstance(n, bool) or not isinstance(n, int | numpy.integer):
        raise ArgumentTypeError(f"cuflow.streams: n must be an int >= 0, got {n!r}")
    if not 0 <= n <= MAX_STREAMS:
        raise ArgumentError(f"cuflow.streams: n must be in [0, {MAX_STREAMS}], got {n} (a GPU "
                            "runs at most 128 kernels at once: more streams add no concurrency)")
    non_blocking = as_flag("streams", "non_blocking", non_blocking)
    _check_priority("streams", priority)
    return [Stream(non_blocking=non_blocking, priority=priority) for _ in range(n)]


def use_stream(stream: Any, op: str | None = None) -> Any:
    """A context that makes ``stream`` current for the block (nothing to do when None);
    ``op`` names the caller in the errors of a bad ``stream``."""
    if stream is None:
        return contextlib.nullcontext()
    if isinstance(stream, Stream):
        _check_device("stream=", stream._dev, op)
    s = as_cupy_stream(stream, op)
    return contextlib.nullcontext() if s is None else s


def _check_device(what: str, dev: int | None, op: str | None = None) -> None:
    """A stream of device ``dev`` used where another device is current is an error, not a hang."""
    b = get_backend()
    if b.multi and dev is not None and dev != b.current_device():
        who = f"cuflow.{op}" if op else "cuflow"
        raise DeviceError(f"{who}: {what} belongs to device {dev} but the current device is "
                          f"{b.current_device()}; use it under `with cuflow.Device({dev}):`")
