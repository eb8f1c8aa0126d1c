"""Argument rules that every package shares."""

from __future__ import annotations

from typing import Any

import numpy

__all__ = ["is_integer"]


def is_integer(v: Any) -> bool:
    """Whether ``v`` is an integer (Python's or NumPy's) and not a bool: a size, count or
    axis of ``True`` is a mistake, not 1."""
    return isinstance(v, int | numpy.integer) and not isinstance(v, bool | numpy.bool_)
