"""Argument rules that every package shares."""

from __future__ import annotations

import operator
from typing import Any

import numpy

from ._errors import ArgumentTypeError

__all__ = ["is_integer", "as_index", "as_flag"]


def is_integer(v: Any) -> bool:
    """Whether ``v`` is an integer (Python's or NumPy's) and not a bool: a size, count or
    axis of ``True`` is a mistake, not 1."""
    return isinstance(v, int | numpy.integer) and not isinstance(v, bool | numpy.bool_)


def as_index(v: Any) -> int | None:
    """``v`` as a Python int where it is an integer, else None.

    An integer is a Python or NumPy integer, a 0-d array of an integer dtype (of any
    backend: ``n = mask.sum()`` is one, as in NumPy and CuPy, which take it as a size), or
    anything else with ``__index__``; not a bool, a float or an array of another shape or
    kind.  A device array is read to the host, as CuPy does (the host waits for its value).
    """
    if isinstance(v, bool | numpy.bool_):
        return None
    if isinstance(v, int):
        return int(v)
    dt = getattr(v, "dtype", None)
    if getattr(v, "ndim", None) == 0 and getattr(dt, "kind", None) in ("i", "u"):
        # (CuPy's ndarray has no __index__, but int() of a 0-d one reads it)
        return int(v)
    if dt is not None or not hasattr(type(v), "__index__"):
        return None  # arrays of floats, bools or more dimensions; floats; text
    try:
        return operator.index(v)
    except TypeError:
        return None


def as_flag(owner: str, name: str, value: Any) -> bool:
    """``value`` as a bool: True, False (or NumPy's), 0 or 1; anything else (``"no"``, which
    is true) is refused naming ``cuflow.<owner>``'s argument ``name``."""
    if isinstance(value, bool | numpy.bool_) or (isinstance(value, int | numpy.integer)
                                                 and value in (0, 1)):
        return bool(value)
    raise ArgumentTypeError(f"cuflow.{owner}: {name} must be True or False, got {value!r}")
