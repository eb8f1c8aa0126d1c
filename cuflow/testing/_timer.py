"""Timing GPU work correctly.

* host time per call: a loop of many calls, one synchronize at the end (so the
  queue never runs dry unnoticed), after a warm-up, with the garbage collector
  off (as ``timeit``); the median of several loops.
* device time: CUDA events around the region, after a warm-up, median of runs.
  A one-thread kernel (``cf_hold``, ``cuflow/raw_kernels/timing.cu``) holds the
  stream before the start event until the host has launched the timed calls, so
  they run back to back and the events time the GPU alone, however slowly the
  host launched them (nvbench's blocking kernel).  A call that waits for the GPU
  itself cannot be held: the hold times out, and the rest of the measurement
  queues one untimed call before the start event instead.
* copy bandwidth: a large device-to-device copy, counting bytes read plus bytes
  written (the convention of the reference figures).

On the NumPy backend the same functions time the CPU (events record host time).  Device
time measurements run one at a time per device (on the NumPy backend, the host).
"""

from __future__ import annotations

import gc
import math
import numbers
import reprlib
import statistics
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy

from .._checks import is_integer
from .._errors import ArgumentError, ArgumentTypeError
from ..core import Event, as_cupy_stream, copy, empty, ones, runtime
from ..raw_kernels import _launch

__all__ = ["Timing", "host_time_us", "device_time_us", "copy_bandwidth_tbps"]


@dataclass(frozen=True)
class Timing:
    """Per-call times in microseconds over repeated loops.

    Returned by :func:`host_time_us` and :func:`device_time_us`, which make it with
    :meth:`of`: the summary fields are then the median, least and greatest of the samples.

    Parameters
    ----------
    median_us : float
        The median per-call time.
    min_us : float
        The least per-call time.
    max_us : float
        The greatest per-call time.
    samples_us : tuple of float
        The per-call times summarized, one per timed loop, in the order they were taken.
    """

    median_us: float
    min_us: float
    max_us: float
    samples_us: tuple[float, ...]

    @classmethod
    def of(cls, samples: Iterable[float]) -> Timing:
        """The median, min and max of ``samples``.

        Parameters
        ----------
        samples : iterable of float
            Per-call microseconds, at least one: each a finite real number >= 0 (a NaN
            would make the median and the extremes NaN).

        Returns
        -------
        Timing
            The summary, with ``samples`` kept as ``samples_us``.

        Raises
        ------
        cuflow.ArgumentTypeError
            ``samples`` is text or not iterable, or holds something other than a real
            number (a bool is not one).
        cuflow.ArgumentError
            ``samples`` is empty, or holds a NaN, an infinity or a negative time.
        """
        rule = "samples must hold per-call microseconds, finite real numbers >= 0"
        if isinstance(samples, str | bytes):
            raise ArgumentTypeError(f"cuflow.testing.Timing.of: {rule}, got "
                                    f"{type(samples).__name__} {reprlib.repr(samples)}")
        try:
            vals = tuple(samples)
        except TypeError:
            raise ArgumentTypeError(f"cuflow.testing.Timing.of: {rule}, got "
                                    f"{type(samples).__name__} {reprlib.repr(samples)}") from None
        if not vals:
            raise ArgumentError(f"cuflow.testing.Timing.of: samples must hold at least one "
                                f"time, got {reprlib.repr(samples)}")
        for v in vals:
            if not isinstance(v, numbers.Real) or isinstance(v, bool | numpy.bool_):
                raise ArgumentTypeError(f"cuflow.testing.Timing.of: {rule}, got "
                                        f"{type(v).__name__} {v!r} in {reprlib.repr(samples)}")
            if not (math.isfinite(v) and v >= 0):
                raise ArgumentError(f"cuflow.testing.Timing.of: {rule}, got {v!r} in "
                                    f"{reprlib.repr(samples)}")
        return cls(statistics.median(vals), min(vals), max(vals), vals)


def _counts(name: str, **counts: int) -> None:
    """Loop counts are ints (not bools), ``number`` and ``repeat`` at least 1, ``warmup``
    at least 0."""
    for what, n in counts.items():
        least = 0 if what == "warmup" else 1
        if not is_integer(n):
            raise ArgumentTypeError(f"cuflow.testing.{name}: {what} must be an int >= {least}, "
                                    f"got {type(n).__name__} {n!r}")
        if n < least:
            raise ArgumentError(f"cuflow.testing.{name}: {what} must be an int >= {least}, got "
                                f"{n!r}")


def _callable(name: str, fn: object) -> None:
    if not callable(fn):
        raise ArgumentTypeError(f"cuflow.testing.{name}: fn must be a callable taking no "
                                f"arguments, got {type(fn).__name__} {fn!r}")


def _sync():
    """Wait for all work on the current device (nothing to wait for on the NumPy backend)."""
    rt = runtime()
    if rt.is_gpu:
        rt.xp.cuda.Device().synchronize()


def host_time_us(fn: Callable[[], object], *, number: int = 2000, repeat: int = 7,
                 warmup: int = 200) -> Timing:
    """Host microseconds per call of ``fn`` (synchronizes before and after each loop).

    Parameters
    ----------
    fn : callable
        Called with no arguments.
    number : int, default 2000
        Calls per timed loop.
    repeat : int, default 7
        Timed loops; the result is their median, min and max per call.
    warmup : int, default 200
        Untimed calls first (compiles, pool misses).

    Returns
    -------
    Timing
        Per-call microseconds: the wall time of each loop, its GPU work included, over
        ``number``.

    Notes
    -----
    Stream semantics: the device is synchronized before and after each loop, so a loop's
    time includes the GPU work it queued that outlasts the host's launches.
    """
    _callable("host_time_us", fn)
    _counts("host_time_us", number=number, repeat=repeat, warmup=warmup)
    for _ in range(warmup):
        fn()
    _sync()
    samples = []
    # As timeit does: the garbage collector is off while the clock runs, so a
    # collection triggered by other code's garbage is not charged to ``fn``.
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            _sync()
            samples.append((time.perf_counter() - t0) / number * 1e6)
    finally:
        if gc_was_on:
            gc.enable()
    return Timing.of(samples)


#: GPU time after which a hold gives up: the host waited for the GPU inside the timed calls
_HOLD_TIMEOUT_NS = 50_000_000
_HOLD_ARGS = struct.Struct("QQ")  # HoldParams: the flag's address, the timeout in ns


#: per device (None: the NumPy backend's host), the lock a device_time_us measurement holds:
#: the hold's flag is one per device, and two threads holding and releasing it at once would
#: release each other's hold (and their calls would share the GPU, each timing the other's).
#: Reentrant: a fn that times something itself shares its caller's flag.
_MEASURING: dict[Any, threading.RLock] = {}


class _Hold:
    """``cf_hold`` on the current stream, released by the host through pinned memory."""

    _flags: dict[int, tuple[Any, numpy.ndarray]] = {}  # per device: (memory, [released, timed out])

    def __init__(self, rt) -> None:
        dev = rt.xp.cuda.runtime.getDevice()
        if dev not in self._flags:
            mem = rt.xp.cuda.alloc_pinned_memory(8)
            self._flags[dev] = (mem, numpy.frombuffer(mem, numpy.int32, 2))
        self._mem, self.flag = self._flags[dev]

    def hold(self) -> None:
        self.flag[:] = 0
        _launch.launch("timing", "cf_hold", "int32", (1, 1, 1), (1, 1, 1),
                       as_cupy_stream(None).ptr, _HOLD_ARGS, (self._mem.ptr, _HOLD_TIMEOUT_NS))

    def release(self) -> None:
        self.flag[0] = 1

    @property
    def timed_out(self) -> bool:  # (read after the stream's work is done)
        return bool(self.flag[1])


def device_time_us(fn: Callable[[], object], *, number: int = 10, repeat: int = 15,
                   warmup: int = 3) -> Timing:
    """Device microseconds per call of ``fn``, from CUDA events around ``number`` calls.

    On the GPU a one-thread kernel holds the current stream until the host has
    launched the ``number`` calls, so they run back to back and the events time
    the GPU alone, however slowly the host launches them (time the host with
    :func:`host_time_us`).  A ``fn`` that waits for the GPU itself (a
    synchronize, a result read on the host) or fills the launch queue cannot be
    held: the hold gives up after 50 ms and that run is taken again, and every
    later run queues one untimed call before the start event instead (the timed
    calls then run back to back unless the host launches them slower than the
    GPU runs them).  The hold and the events are on the current stream: time work
    queued there (work ``fn`` queues on other streams is neither held nor timed).

    ``fn`` is called ``warmup + number * repeat`` times, plus, after a hold gave up, the
    run taken again and one untimed call per later run.  On the NumPy backend the events
    record host time and there is no hold.  Measurements run one at a time per device (on
    the NumPy backend, the host): a call from another thread waits for the running one to
    end, as the hold's flag is the device's and the two would time each other's work.

    Parameters
    ----------
    fn : callable
        Called with no arguments; its GPU work queued on the current stream.
    number : int, default 10
        Calls per timed loop.
    repeat : int, default 15
        Timed loops; the result is their median, min and max per call.
    warmup : int, default 3
        Untimed calls first (compiles, pool misses).

    Returns
    -------
    Timing
        Per-call microseconds of GPU time.

    Notes
    -----
    Stream semantics: the hold, the events and ``fn``'s calls are queued on the current
    stream; each loop waits for its end event.
    """
    _callable("device_time_us", fn)
    _counts("device_time_us", number=number, repeat=repeat, warmup=warmup)
    rt = runtime()
    device = rt.xp.cuda.runtime.getDevice() if rt.is_gpu else None
    # (setdefault: two threads making the device's first lock at once get the same one)
    with _MEASURING.setdefault(device, threading.RLock()):
        for _ in range(warmup):
            fn()
        _sync()
        hold = _Hold(rt) if rt.is_gpu else None
        samples: list[float] = []
        while len(samples) < repeat:
            start, end = Event(), Event()
            if hold is not None:
                hold.hold()
            elif rt.is_gpu:  # (the NumPy backend has no GPU to keep busy)
                fn()  # keeps the GPU busy while the host launches the timed calls
            try:
                start.record()
                for _ in range(number):
                    fn()
                end.record()
            finally:  # (a call that raised leaves no stream held)
                if hold is not None:
                    hold.release()
            # (the end event follows the hold on the stream: once it is done the kernel no
            # longer reads the flag, and the next measurement may take the lock)
            end.synchronize()
            if hold is not None and hold.timed_out:
                hold = None  # (this run waited for the hold: it is taken again without one)
                continue
            samples.append(start.elapsed_time(end) * 1e3 / number)
    return Timing.of(samples)


def copy_bandwidth_tbps(nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in TB/s (bytes read + bytes written).

    Parameters
    ----------
    nbytes : int, default 1 GiB
        The bytes copied: a multiple of 4 of at least 4 MiB, so the copy is not a cache's.

    Returns
    -------
    float
        ``2 * nbytes`` over the median device time of a copy, in TB/s.

    Notes
    -----
    Stream semantics: the copies run on the current stream, timed by
    :func:`device_time_us`, which waits for them.
    """
    rule = "nbytes must be an int multiple of 4 of at least 4 MiB"
    if not is_integer(nbytes):
        raise ArgumentTypeError(f"cuflow.testing.copy_bandwidth_tbps: {rule}, got "
                                f"{type(nbytes).__name__} {nbytes!r}")
    if nbytes < 1 << 22 or nbytes % 4:
        raise ArgumentError(f"cuflow.testing.copy_bandwidth_tbps: {rule}, got {nbytes!r}")
    # ones, not zeros: a large host zeros() is the zero page, which a CPU copy reads faster
    # than memory; on the GPU the values do not change the copy's time
    src = ones(int(nbytes) // 4, dtype="float32")
    dst = empty(src.shape, dtype=src.dtype)
    t = device_time_us(lambda: copy(src, dst), number=5, repeat=9)
    return 2 * nbytes / (t.median_us * 1e-6) / 1e12
