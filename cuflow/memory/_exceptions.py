"""Errors the memory package raises on purpose (all :class:`cuflow.CuflowError`).

Running out of memory is :class:`cuflow.OutOfMemoryError`.
"""

from __future__ import annotations

from .._errors import CuflowError

__all__ = ["DoubleFreeError", "MemoryValueError"]


class MemoryValueError(CuflowError, ValueError):
    """A negative allocation size, or a bad limit or pool setting (``set_limit``,
    ``CUFLOW_MEMORY_LIMIT``, ``CUFLOW_POOL_BACKEND``)."""


class DoubleFreeError(CuflowError, RuntimeError):
    """A block given back twice, or to a pool that did not lend it."""
