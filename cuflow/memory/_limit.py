"""Memory limits: the limiting adaptor, ``set_limit`` and ``CUFLOW_MEMORY_LIMIT``.

:class:`LimitingAdaptor` (RMM's ``LimitingResourceAdaptor``) is a segment
source over another that refuses segments beyond a number of bytes held; the
pool stacks one over its backend while it has a limit, and none otherwise, so
an unlimited pool pays nothing for limits.

A limit is ``None`` (no limit), bytes (an ``int``, or a string such as
``"8GiB"``, ``"512MB"``, ``"8e9"``; 0 bytes in any form, ``0``, ``"0"``,
``"0B"``, is no limit) or a fraction of the device's memory (a ``float`` in
(0, 1], or a string such as ``"0.8"`` or ``"80%"``; one that comes to 0 bytes
is refused).  A miss that
the limit refuses returns the pool's free segments and tries again (see
``_pool``), so the limit bounds reserved bytes, not only bytes in use.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from .._errors import OutOfMemoryError
from ._backends import Backend
from ._exceptions import MemoryTypeError, MemoryValueError

__all__ = ["LimitExceeded", "LimitingAdaptor", "check_limit_text", "limit_bytes", "limit_of",
           "parse_limit_env"]

_UNITS = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "kb": 10**3,
          "mb": 10**6, "gb": 10**9, "tb": 10**12, "b": 1}
_FORMS = "bytes (an int, or '8GiB', '512MB', '8e9') or a fraction of device memory (0.8, '80%')"


class LimitExceeded(OutOfMemoryError):
    """A segment the limit refuses: an out-of-memory error, which a pool over the adaptor
    first answers by giving its free segments back, then reports as its own
    ``cuflow.OutOfMemoryError``."""


class LimitingAdaptor(Backend):
    """A segment source over ``upstream`` that holds at most ``limit`` bytes.

    It counts and refuses segments (``alloc``, ``free`` and their private forms); everything
    else (streams and events, release policy, granularity, device statistics, ``trim``, and
    any other attribute) is the upstream backend's, so a pool over it orders streams as it
    would over ``upstream``.  A pool given one as its backend takes it as its limit:
    ``pool.limit`` is the adaptor's, and ``pool.limit = None`` removes it.

    Parameters
    ----------
    upstream : Backend
        Where segments come from.
    limit : int
        Most bytes held at once (segments taken and not given back).
    held : int, optional
        Bytes already held from ``upstream`` (a limit set on a pool in use).
    """

    def __init__(self, upstream: Backend, limit: int, held: int = 0) -> None:
        if not isinstance(upstream, Backend):
            raise MemoryTypeError(f"cuflow.memory.LimitingAdaptor: upstream must be a "
                                  f"cuflow.memory.Backend, got {type(upstream).__name__} "
                                  f"{upstream!r}")
        if isinstance(held, bool) or not isinstance(held, numbers.Integral):
            raise MemoryTypeError(f"cuflow.memory.LimitingAdaptor: held must be an int number "
                                  f"of bytes (those already held from upstream), got "
                                  f"{type(held).__name__} {held!r}")
        if held < 0:
            raise MemoryValueError(f"cuflow.memory.LimitingAdaptor: held must be at least 0 "
                                   f"bytes, got {held}")
        self.upstream = upstream
        self.limit = limit
        self.held = int(held)
        self.name = upstream.name

    @property
    def limit(self) -> int:
        """Most bytes of segments held at once (the upstream keeps what it holds beyond its
        segments within it too: :meth:`Backend.limit_memory`)."""
        return self._limit

    @limit.setter
    def limit(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise MemoryTypeError(f"cuflow.memory.LimitingAdaptor: limit must be an int number "
                                  f"of bytes, got {type(value).__name__} {value!r} (a pool's "
                                  "limit= and set_limit also take fractions and strings)")
        if value < 1:
            raise MemoryValueError(f"cuflow.memory.LimitingAdaptor: limit must be at least 1 "
                                   f"byte, got {value} (a pool without a limit has no adaptor)")
        value = int(value)
        self._limit = value
        self.upstream.limit_memory(value)

    def _take(self, nbytes: int) -> None:
        if self.held + nbytes > self.limit:
            raise LimitExceeded(f"{nbytes} bytes more would hold {self.held + nbytes}, over the "
                                f"limit of {self.limit}")

    def alloc(self, nbytes: int, stream: int) -> int:
        """The upstream's :meth:`~Backend.alloc`, refused where it would hold more than
        :attr:`limit` bytes.

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
        LimitExceeded
            A :class:`cuflow.OutOfMemoryError`: the segment would take the bytes held past
            :attr:`limit` (the upstream is not asked).
        MemoryError
            The upstream's refusal.

        Notes
        -----
        Stream semantics: the upstream's.
        """
        self._take(nbytes)
        ptr = self.upstream.alloc(nbytes, stream)
        self.held += nbytes
        return ptr

    def free(self, ptr: int, nbytes: int, stream: int) -> None:
        """The upstream's :meth:`~Backend.free`; the bytes held drop by ``nbytes``.

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
        Stream semantics: the upstream's.
        """
        self.upstream.free(ptr, nbytes, stream)
        self.held -= nbytes

    def alloc_private(self, nbytes: int) -> int:
        """The upstream's :meth:`~Backend.alloc_private`, refused as :meth:`alloc` is.

        Parameters
        ----------
        nbytes : int
            The segment's bytes.

        Returns
        -------
        int
            The segment's address.

        Raises
        ------
        LimitExceeded
            A :class:`cuflow.OutOfMemoryError`: the segment would take the bytes held past
            :attr:`limit`.
        MemoryError
            The upstream's refusal.
        """
        self._take(nbytes)
        ptr = self.upstream.alloc_private(nbytes)
        self.held += nbytes
        return ptr

    def free_private(self, ptr: int, nbytes: int) -> None:
        """The upstream's :meth:`~Backend.free_private`; the bytes held drop by ``nbytes``.

        Parameters
        ----------
        ptr : int
            The segment's address, from :meth:`alloc_private` and not given back yet.
        nbytes : int
            Its bytes, as asked of :meth:`alloc_private`.
        """
        self.upstream.free_private(ptr, nbytes)
        self.held -= nbytes

    def __getattr__(self, name: str) -> Any:
        # only names this class and Backend do not define; Backend's defaults are forwarded
        # below.  (Before __init__, as copy and pickle make one, there is no upstream: the
        # lookup then fails as an ordinary missing attribute.)
        up = self.__dict__.get("upstream")
        return object.__getattribute__(self, name) if up is None else getattr(up, name)


def _forward(name: str) -> property:
    """The upstream backend's ``name`` (a method comes bound to the upstream)."""
    return property(lambda self: getattr(self.upstream, name),
                    doc=f"The upstream backend's ``{name}``.")


# every default of Backend the adaptor does not implement itself: a class attribute there
# would hide the upstream's from __getattr__
for _name in ("cheap_release", "segment_granularity", "segment_granularity_min", "device_id",
              "device_allocs", "device_frees", "current_stream", "record", "done", "wait",
              "stream_idle",
              "synchronize", "device_reserved", "reset_device_peak", "trim",
              "places_segments", "attach", "stream_gone", "limit_memory", "total_memory",
              "on_device"):
    setattr(LimitingAdaptor, _name, _forward(_name))
del _name


def limit_bytes(size: int | None, fraction: float | None, backend: Backend | None,
                where: str = "cuflow.memory.set_limit") -> int | None:
    """The limit ``size`` bytes, or ``fraction`` of the device memory of ``backend``; None
    for no limit, which 0 bytes is too (as in CuPy's ``MemoryPool.set_limit(size=0)``: a
    cap of 0 would refuse every segment).  The one place of that rule: the pool's limit,
    ``CUFLOW_MEMORY_LIMIT`` and ``cuflow.dask.CuflowPool`` all come here.  ``where`` begins
    the messages: the function (or the variable) that was given the limit."""
    if size is not None and fraction is not None:
        raise MemoryValueError(f"{where}: give size or fraction, not both")
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real):
            raise MemoryTypeError(f"{where}: fraction must be a real number in (0, 1], got "
                                  f"{type(fraction).__name__} {fraction!r}")
        if not 0 < fraction <= 1:  # NaN fails this too
            raise MemoryValueError(f"{where}: fraction must be in (0, 1], got {fraction}")
        total = device_total(backend)
        n = int(fraction * total)
        if n == 0:  # (0 bytes would read as no limit)
            raise MemoryValueError(
                f"{where}: a fraction limit must come to at least 1 byte of the device's "
                f"{total} bytes, got fraction {fraction!r}, which comes to 0 bytes (for no "
                f"limit, give 0 bytes)")
        return n
    if size is None:
        return None
    if isinstance(size, bool) or not isinstance(size, numbers.Integral):
        raise MemoryTypeError(f"{where}: size must be an int number of bytes, got "
                              f"{type(size).__name__} {size!r}")
    if size < 0:
        raise MemoryValueError(f"{where}: size must be >= 0 bytes, got {size}")
    return int(size) or None


def limit_of(limit: Any, backend: Backend) -> int | None:
    """``set_limit``'s argument in bytes (see the module docstring for its forms)."""
    if limit is None:
        return None
    if isinstance(limit, bool):
        raise MemoryTypeError(f"cuflow.memory.set_limit: limit must be {_FORMS} or None, "
                              f"got the bool {limit!r}")
    if isinstance(limit, numbers.Integral):
        return limit_bytes(int(limit), None, backend)
    if isinstance(limit, numbers.Real):
        x = float(limit)
        if math.isnan(x) or not 0 < x <= 1:
            raise MemoryValueError(
                f"cuflow.memory.set_limit: a float limit is a fraction of device memory in "
                f"(0, 1], got {limit!r}; give bytes as an int or a string such as '1.5GB'")
        return limit_bytes(None, x, backend)
    if isinstance(limit, str):
        return _parse(limit, "cuflow.memory.set_limit: limit", backend,
                      "cuflow.memory.set_limit")
    raise MemoryTypeError(f"cuflow.memory.set_limit: limit must be {_FORMS} or None, got "
                          f"{type(limit).__name__} {limit!r}")


def device_total(backend: Backend) -> int:
    """Bytes of memory ``backend`` draws from (a host backend: its capacity; an adaptor
    forwards its upstream's)."""
    return backend.total_memory()


def _split(text: str, what: str) -> tuple[str, float]:
    """``text`` as (kind, value): ``("bytes", n)``, ``("fraction", x)`` or ``("none", 0)``."""
    low = text.strip().lower()
    if not low:
        return "none", 0.0
    if not low.isascii():  # (float() would take other scripts' digits, '١٠٠' for 100)
        raise MemoryValueError(f"{what}={text!r}: expected {_FORMS}, in ASCII digits")
    try:
        if low.endswith("%"):
            x = float(low[:-1]) / 100
            kind = "fraction"
        else:
            for u, mult in _UNITS.items():
                if low.endswith(u):
                    x, kind = float(low[: -len(u)]) * mult, "bytes"
                    break
            else:
                x = float(low)
                # a plain 0 is 0 bytes (no limit, as the int 0 is), not a fraction of 0
                kind = "fraction" if 0 < x <= 1 else "bytes"
    except ValueError:
        raise MemoryValueError(f"{what}={text!r}: expected {_FORMS}") from None
    if math.isnan(x) or math.isinf(x) or x < 0 or (kind == "fraction" and x == 0):
        raise MemoryValueError(f"{what}={text!r}: expected {_FORMS}, a finite positive amount")
    if kind == "fraction" and x > 1:
        raise MemoryValueError(f"{what}={text!r}: a fraction of device memory must be in (0, 1]")
    if kind == "bytes" and x != int(x):  # "1.5" is neither a fraction nor whole bytes
        raise MemoryValueError(f"{what}={text!r}: bytes must be a whole number ({x!r} is not), "
                               "and a fraction of device memory is in (0, 1]")
    return kind, x


def _parse(text: str, what: str, backend: Backend, where: str) -> int | None:
    """``text`` in bytes (None for no limit); ``what`` and ``where`` name it in messages."""
    kind, x = _split(text, what)
    if kind == "none":
        return None
    if kind == "fraction":
        return limit_bytes(None, x, backend, where)
    return limit_bytes(int(x), None, backend, where)


def check_limit_text(text: str, what: str = "CUFLOW_MEMORY_LIMIT") -> tuple[str, float]:
    """``text`` read as ``set_limit`` reads a string, checked without a device:
    ``("bytes", n)``, ``("fraction", x)`` or ``("none", 0)``; :class:`MemoryValueError`
    if it is no limit."""
    return _split(text, what)


def parse_limit_env(value: str, backend: Backend) -> int | None:
    """``CUFLOW_MEMORY_LIMIT``: bytes (``8e9``, ``8GiB``, ``512MB``) or a fraction of device
    memory (``0.8``, ``80%``); None for no limit (empty, or 0 bytes)."""
    return _parse(value, "CUFLOW_MEMORY_LIMIT", backend, f"CUFLOW_MEMORY_LIMIT={value!r}")
