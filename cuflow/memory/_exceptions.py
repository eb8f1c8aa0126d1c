"""Errors the memory package raises on purpose (all :class:`cuflow.CuflowError`).

Running out of memory is :class:`cuflow.OutOfMemoryError`.
"""

from __future__ import annotations

from .._errors import CuflowError

__all__ = ["DoubleFreeError", "MemoryLimitWarning", "MemoryTypeError", "MemoryValueError"]


class MemoryValueError(CuflowError, ValueError):
    """A negative allocation size, a bad limit, device, stream or pool setting
    (``set_limit``, ``CUFLOW_MEMORY_LIMIT``, ``device=``, ``stream=``), or a call the pool's
    state does not allow (a recording started while one is active or stopped without one,
    ``record_stream`` of a block the pool does not lend)."""


class MemoryTypeError(CuflowError, TypeError):
    """An argument of the wrong type (``set_limit(True)``, ``stats(device="x")``, a stream
    that is not one, ``warmup`` of something that is not callable)."""


class DoubleFreeError(CuflowError, RuntimeError):
    """A block given back twice, or to a pool that did not lend it."""


class MemoryLimitWarning(RuntimeWarning):
    """A limit below what the pool already holds (it applies to new segments), or a pool
    environment variable with a value that is not one of its choices."""
