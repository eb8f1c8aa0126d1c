"""Sorting: ``sort`` and ``argsort`` with the array API's ``descending`` and ``stable``.

Stream semantics: asynchronous; queued on ``stream`` or the current stream.
"""

from __future__ import annotations

from typing import Any

from .._errors import AxisError
from ._contract import check_ints, one_element_axis
from ._dispatch import call, run_on
from ._runtime import runtime

__all__ = ["sort", "argsort"]


def _options(kind: Any, order: Any, stable: bool) -> dict[str, Any]:
    """NumPy's ``kind`` and ``order`` where given (CuPy takes no ``order``, NumPy no ``kind``
    of None on some versions); a stable sort unless the caller allows otherwise."""
    kw: dict[str, Any] = {}
    if kind is not None or stable:
        kw["kind"] = kind if kind is not None else "stable"
    if order is not None:
        kw["order"] = order
    return kw


def argsort(a, axis=-1, kind=None, order=None, *, descending=False, stable=True, stream=None):
    """Indices that sort ``a`` along ``axis`` (array API ``argsort``).

    ``descending=True`` keeps equal elements in their original order when
    ``stable`` (the array API's rule), as NumPy's own flip would not.
    """
    if stream is not None:
        return run_on(stream, argsort, a, axis, kind, order, descending=descending,
                      stable=stable)
    axis = check_ints("argsort", axis)
    xp = runtime().xp
    kw = _options(kind, order, stable)
    a, axis = one_element_axis("argsort", a, axis, "sorted")
    if not descending:
        return call("argsort", xp.argsort, a, axis=axis, **kw)
    return call("argsort", _argsort_descending, xp, a, axis, kw)


def _argsort_descending(xp, a, axis, kw):
    if axis is None:
        a, axis = a.ravel(), 0
    # the stable ascending sort of the reversed array, read backwards, is the stable
    # descending order; the indices are then mapped back to the unreversed array
    if not -a.ndim <= axis < a.ndim:
        raise AxisError(f"cuflow.argsort: axis must be in [{-a.ndim}, {a.ndim}) for an array "
                        f"of {a.ndim} dimensions, got {axis}")
    ax = axis % a.ndim
    r = xp.flip(xp.argsort(xp.flip(a, axis=ax), axis=ax, **kw), axis=ax)
    return xp.subtract(a.shape[ax] - 1, r)


def sort(a, axis=-1, kind=None, order=None, *, descending=False, stable=True, stream=None):
    """``a`` sorted along ``axis`` (array API ``sort``)."""
    if stream is not None:
        return run_on(stream, sort, a, axis, kind, order, descending=descending, stable=stable)
    axis = check_ints("sort", axis)
    xp = runtime().xp
    r = call("sort", xp.sort, a, axis=axis, **_options(kind, order, stable))
    if descending:
        r = call("sort", xp.ascontiguousarray, xp.flip(r, axis=-1 if axis is None else axis))
    return r
