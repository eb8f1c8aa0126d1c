"""Sorting: ``sort`` and ``argsort`` with the array API's ``descending`` and ``stable``.

Stream semantics: asynchronous; queued on ``stream`` or the current stream.
"""

from __future__ import annotations

import functools
from typing import Any

from .._checks import as_flag
from .._errors import AxisError
from ._docs import complete, with_common_parameters
from ._contract import bad_input, check_ints, one_element_axis
from ._dispatch import call, run_on
from ._interop import copy_into
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


def argsort(a: Any, axis: int | None = -1, kind: str | None = None, order: str | None = None, *,
            descending: bool = False, stable: bool = True, dst: Any = None,
            stream: Any = None) -> Any:
    """Indices that sort ``a`` along ``axis`` (array API ``argsort``).

    ``descending=True`` keeps equal elements in their original order when
    ``stable`` (the array API's rule), as NumPy's own flip would not.

    Parameters
    ----------
    axis : int or None, default -1
        The axis sorted along; None sorts the flattened array.
    kind : str, optional
        NumPy's sorting algorithm name; the backend picks its own.
    order : None
        NumPy's field order for structured arrays, which cuflow does not have.
    descending : bool, default False
        Sort from the largest down (array API).
    stable : bool, default True
        Keep equal elements in their original order (array API).

    Returns
    -------
    darray
        ``dst`` when given (the sort runs into a new array, then copies there), else new
        indices of ``a``'s shape (int64).

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    if stream is not None:
        return run_on(stream, "argsort", argsort, a, axis, kind, order, descending=descending,
                      stable=stable, dst=dst)
    axis = check_ints("argsort", axis)
    descending = as_flag("argsort", "descending", descending)
    xp = runtime().xp
    # (stable=None: NumPy's default, no stability asked for)
    kw = _options(kind, order, stable is not None and as_flag("argsort", "stable", stable))
    a, axis = one_element_axis("argsort", a, axis, "sorted")
    if not descending:
        r = call("argsort", xp.argsort, a, axis=axis, **kw)
    else:
        r = call("argsort", _argsort_descending, xp, a, axis, kw)
    return r if dst is None else copy_into("argsort", dst, r, "same_kind")


def _array(name: str, a: Any) -> Any:
    """``a`` as an array to flip: host data as NumPy reads it on the NumPy backend, refused on
    the GPU (as the ascending sort refuses it)."""
    rt = runtime()
    if isinstance(a, rt.ndarray):
        return a
    return bad_input(name, a, scalars=False) if rt.is_gpu else rt.xp.asarray(a)


def _argsort_descending(xp, a, axis, kw):
    a = _array("argsort", a)
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


def sort(a: Any, axis: int | None = -1, kind: str | None = None, order: str | None = None, *,
         descending: bool = False, stable: bool = True, dst: Any = None,
         stream: Any = None) -> Any:
    """``a`` sorted along ``axis`` (array API ``sort``).

    Returns
    -------
    darray
        ``dst`` when given (the sort runs into a new array, then copies there), else a new
        sorted array.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    if stream is not None:
        return run_on(stream, "sort", sort, a, axis, kind, order, descending=descending,
                      stable=stable, dst=dst)
    axis = check_ints("sort", axis)
    descending = as_flag("sort", "descending", descending)
    xp = runtime().xp
    # (stable=None: NumPy's default, no stability asked for)
    kw = _options(kind, order, stable is not None and as_flag("sort", "stable", stable))
    if not descending:
        r = call("sort", xp.sort, a, axis=axis, **kw)
    else:
        r = call("sort", _sort_descending, xp, a, axis, kw)
    return r if dst is None else copy_into("sort", dst, r, "same_kind")


def _sort_descending(xp, a, axis, kw):
    # the ascending sort of the reversed array, read backwards: equal values (0.0 and -0.0)
    # keep their original order, as a stable sort must
    a = _array("sort", a)
    if axis is None:
        a, axis = a.ravel(), 0
    return xp.ascontiguousarray(xp.flip(xp.sort(xp.flip(a, axis=axis), axis=axis, **kw),
                                         axis=axis))


complete(globals(), ["argsort"], with_common_parameters)
complete(globals(), ["sort"], functools.partial(with_common_parameters, like=argsort))
