"""Shape manipulation with ``dst=``: views where possible, copies into ``dst`` when given.

Stream semantics: every copy an op makes (into ``dst``, or where a view is impossible) is
queued on ``stream`` or the current stream; a view launches nothing.
"""

from __future__ import annotations

from typing import Any

import numpy

from .._checks import is_integer
from .._errors import ArgumentError, ArgumentIndexError, ArgumentTypeError, AxisError
from ._docs import complete, with_common_parameters
from ._contract import (bad_input, check_dtype, check_ints, check_order, may_share, prepare_out,
                        resolve_out)
from ._dispatch import call, reraise, wrap_view
from ._interop import astype, copy_into
from ._interop import copy as copy_fn
from ._runtime import runtime
from ._streams import use_stream

__all__ = ["flatten", "ravel", "reshape", "transpose", "ascontiguousarray", "concatenate",
           "stack", "take", "take_along_axis"]


def _memory_order(a, order: str) -> str:
    """``order`` with ``"A"`` read as NumPy reads it, against ``a``: Fortran order when ``a``
    is Fortran-contiguous and not C-contiguous, else C."""
    order = order.upper()
    if order == "A":
        return "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C"
    return order


def flatten(a: Any, dst: Any = None, *, out: Any = None, order: str = "C",
            stream: Any = None) -> Any:
    """1-D copy of ``a``; with ``dst`` (1-D, ``a.size`` elements) written there.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    rt = runtime()
    dst = resolve_out(dst, out, "flatten")
    check_order("flatten", order)
    if not isinstance(a, rt.ndarray):
        bad_input("flatten", a, scalars=False)
    if stream is not None:
        with use_stream(stream, "flatten"):
            return flatten(a, dst, order=order)
    try:
        if dst is None:
            return rt.wrap(rt.ndarray.flatten(a, order))
        prepare_out("flatten", dst, (a.size,), a.dtype)
        order = _memory_order(a, order)
        if order == "K":  # (the order of a's strides: its ravel, a view where it can be one)
            copy_into("flatten", dst, rt.xp.ravel(a, order="K"), "same_kind")
        else:  # a 1-D array reshapes to any shape as a view, so this never allocates
            copy_into("flatten", dst.reshape(a.shape, order=order), a, "same_kind")
        return dst
    except Exception as e:
        reraise("flatten", e, dst)


def _view(name: str, fn, a, *args, **kwargs):
    """``fn(a, ...)``, a view of ``a`` where the backend gives one; its errors as cuflow's
    (a size that does not match, an axis that is not one)."""
    try:
        return wrap_view(fn(a, *args, **kwargs), a)
    except Exception as e:
        reraise(name, e)


def ravel(a: Any, order: str = "C", *, dst: Any = None, out: Any = None, stream: Any = None) -> Any:
    """View of ``a`` as 1-D when possible; with ``dst`` a copy into it (as :func:`flatten`).

    Returns
    -------
    darray
        ``dst`` when given, else a 1-D view of ``a`` where the layout allows, else a new
        array.

    Notes
    -----
    Stream semantics: a view launches nothing; the copy of a layout that cannot be viewed
    as 1-D, or into ``dst``, is queued on ``stream`` or the current stream.
    """
    rt = runtime()
    dst = resolve_out(dst, out, "ravel")
    check_order("ravel", order)
    if dst is not None:
        return flatten(a, dst, order=order, stream=stream)
    if stream is not None:  # (a view still, where it can be one: as without stream=)
        with use_stream(stream, "ravel"):
            return call("ravel", rt.xp.ravel, a, order)
    return call("ravel", rt.xp.ravel, a, order)


def reshape(a: Any, shape: Any = None, order: str = "C", *, copy: bool | None = None,
            newshape: Any = None, dst: Any = None, out: Any = None, stream: Any = None) -> Any:
    """``a`` with a new shape (array API ``reshape``); with ``dst`` the data is copied there.

    A view where the layout allows; ``copy=True`` always copies, ``copy=False``
    raises where a view is impossible.  ``newshape`` is NumPy's older spelling of
    ``shape``.

    Parameters
    ----------
    shape : int or tuple of ints
        The new shape; one entry may be -1, inferred from the size.
    newshape : int or tuple of ints, optional
        NumPy's older name for ``shape``; give one of the two.

    Returns
    -------
    darray
        ``dst`` when given, else a view of ``a`` where the layout allows, else a new array.

    Notes
    -----
    Stream semantics: a view launches nothing; every copy (``copy=True``, a layout that
    cannot be viewed in the new shape, ``dst``) is queued on ``stream`` or the current
    stream.
    """
    rt = runtime()
    if newshape is not None:
        if shape is not None:
            raise ArgumentTypeError("cuflow.reshape: give shape (or NumPy's older newshape), not both")
        shape = newshape
    if shape is None:
        raise ArgumentTypeError("cuflow.reshape: shape is required (an int or a tuple of ints, "
                                "-1 for the one inferred), got none")
    dst = resolve_out(dst, out, "reshape")
    if stream is not None:
        with use_stream(stream, "reshape"):
            return reshape(a, shape, order, copy=copy, dst=dst)
    shape = check_ints("reshape", shape, "shape", lists=True)
    check_order("reshape", order, "CFA")
    if copy is False:
        if not isinstance(a, rt.ndarray):
            raise ArgumentTypeError(f"cuflow.reshape: copy=False reshapes an array in place of "
                                    f"a copy, got {type(a).__name__} (that needs a copy)")
        # assigning a shape never copies, it raises instead; it reads C order, so Fortran
        # order is C order of the transposes
        fortran = _memory_order(a, order) == "F"
        v = a.T.view() if fortran else a.view()
        try:
            v.shape = (shape if isinstance(shape, tuple) else (shape,))[::-1 if fortran else 1]
        except AttributeError as e:
            raise ArgumentError(f"cuflow.reshape: copy=False but {a.shape} -> {shape} in "
                                f"order {order!r} needs a copy with these strides") from e
        except Exception as e:
            reraise("reshape", e)
        v = wrap_view(v.T if fortran else v, a)
    else:
        v = _view("reshape", rt.xp.reshape, a, shape, order=order)
        if copy:
            v = copy_fn(v)
    if dst is None:
        return v
    return copy_into("reshape", dst, v, "same_kind")


def transpose(a: Any, axes: tuple[int, ...] | None = None, *, dst: Any = None, out: Any = None,
              stream: Any = None) -> Any:
    """Transposed view of ``a``; with ``dst`` the transposed data is copied there (contiguous).

    Parameters
    ----------
    axes : tuple of ints, optional
        The permutation of the axes; reversed when omitted.

    Returns
    -------
    darray
        ``dst`` when given, else a view of ``a``.

    Notes
    -----
    Stream semantics: the view launches nothing; the copy into ``dst`` is queued on
    ``stream`` or the current stream.
    """
    rt = runtime()
    dst = resolve_out(dst, out, "transpose")
    if stream is not None:
        with use_stream(stream, "transpose"):
            return transpose(a, axes, dst=dst)
    axes = check_ints("transpose", axes, "axes", lists=True)
    nd = getattr(a, "ndim", None)
    given = (axes,) if isinstance(axes, int) else axes  # (one int: the axis of a 1-D array)
    if given is not None and nd is not None and len(given) != nd:
        # (CuPy reads an empty tuple as no axes given: NumPy's "axes don't match array")
        raise ArgumentError(f"cuflow.transpose: axes must name each of the {nd} axes once, "
                            f"got {axes!r}")
    v = _view("transpose", rt.xp.transpose, a, axes)
    if dst is None:
        return v
    return copy_into("transpose", dst, v, "same_kind")


def ascontiguousarray(a: Any, dtype: Any = None, *, dst: Any = None, out: Any = None,
                      stream: Any = None) -> Any:
    """C-contiguous version of ``a`` (a view of ``a`` when already so); with ``dst`` copied there.

    Returns
    -------
    darray
        ``dst`` when given, else a view of ``a`` where it is C-contiguous (and of
        ``dtype``), else a new array.

    Notes
    -----
    Stream semantics: a copy (``a`` not contiguous, or ``dst``) is queued on ``stream`` or the
    current stream; otherwise nothing is launched.
    """
    rt = runtime()
    dst = resolve_out(dst, out, "ascontiguousarray")
    if stream is not None:
        with use_stream(stream, "ascontiguousarray"):
            return ascontiguousarray(a, dtype, dst=dst)
    if dst is not None:
        if dtype:
            return astype(a, dtype, dst)
        return copy_fn(a, dst)
    return _view("ascontiguousarray", rt.xp.ascontiguousarray, a, dtype=dtype)


def _join(name, arrays, axis, dst, dtype, casting, stream, stack):
    rt = runtime()
    if stream is not None:
        with use_stream(stream, name):
            return _join(name, arrays, axis, dst, dtype, casting, None, stack)
    fn = rt.xp.stack if stack else rt.xp.concatenate
    np_fn = numpy.stack if stack else numpy.concatenate
    axis = check_ints(name, axis)
    dtype = check_dtype(name, dtype)
    if rt.multi:  # CuPy would read another device's array in its copy kernel
        rt.check_devices(name, *(arrays if isinstance(arrays, list | tuple) else (arrays,)))
    try:
        # arrays of the backend only, on every backend: NumPy's concatenate would make an
        # object or text array of a sequence among them, where CuPy's refuses it
        arrays = [a if isinstance(a, rt.ndarray) else bad_input(name, a, scalars=False)
                  for a in arrays]
        if not arrays:
            raise ArgumentError(f"cuflow.{name}: need at least one array")
        if dst is None:
            return rt.wrap(fn(arrays, axis=axis, dtype=dtype, casting=casting))
        shapes = [a.shape for a in arrays]
        probe = [numpy.lib.stride_tricks.as_strided(numpy.zeros((), a.dtype), s, (0,) * len(s))
                 for a, s in zip(arrays, shapes)]
        try:  # the host-side oracle of the result's shape and dtype
            res = np_fn(probe, axis=axis, dtype=dtype, casting=casting)
        except TypeError as e:  # (the inputs' cast, not dst's)
            raise ArgumentTypeError(f"cuflow.{name}: the inputs do not cast to dtype={dtype} "
                                    f"under casting={casting!r}: {e}") from e
        prepare_out(name, dst, res.shape, res.dtype, casting=casting)
        if dtype is not None:  # (NumPy takes out= or dtype=, not both)
            arrays = [a.astype(res.dtype, copy=False) for a in arrays]
        arrays = [a.copy() if may_share(a, dst) else a for a in arrays]
        fn(arrays, axis=axis, out=dst, casting=casting)
        return dst
    except Exception as e:
        reraise(name, e, dst)


def concatenate(arrays: Any, axis: int | None = 0, dst: Any = None, *, out: Any = None,
                dtype: Any = None, casting: str = "same_kind", stream: Any = None) -> Any:
    """Join arrays along an existing axis; with ``dst`` written there.

    Parameters
    ----------
    arrays : sequence of darrays
        Arrays of one shape but along ``axis``.
    axis : int or None, default 0
        The axis joined along; None joins the flattened arrays.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    return _join("concatenate", arrays, axis, resolve_out(dst, out, "concatenate"), dtype,
                 casting, stream, False)


def stack(arrays: Any, axis: int = 0, dst: Any = None, *, out: Any = None, dtype: Any = None,
          casting: str = "same_kind", stream: Any = None) -> Any:
    """Join arrays along a new axis; with ``dst`` written there.

    Parameters
    ----------
    arrays : sequence of darrays
        Arrays of one shape.
    axis : int, default 0
        The new axis of the result they are stacked along.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    return _join("stack", arrays, axis, resolve_out(dst, out, "stack"), dtype, casting, stream,
                 True)


def take(a: Any, indices: Any, axis: int | None = None, dst: Any = None, *, out: Any = None,
         stream: Any = None) -> Any:
    """Elements of ``a`` at integer ``indices`` along ``axis`` (array API ``take``; of the
    flattened array without ``axis``, as NumPy); with ``dst`` written there.

    Indices are integers, as the array API has them: a Python int, a sequence or NumPy
    array of them, or an integer array of the backend (NumPy's casts of bools and float
    scalars to indices are refused).  Indices on the host are checked against the axis'
    length (``ArgumentIndexError``); indices on the GPU are not, since checking them would
    synchronize: there an index past the end wraps around, CuPy's rule.

    Parameters
    ----------
    indices : int, sequence of ints or integer darray
        The positions taken (see above).
    axis : int, optional
        The axis taken along; the flattened array when omitted.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream (host
    indices are copied to the device on that stream).
    """
    rt = runtime()
    dst = resolve_out(dst, out, "take")
    if stream is not None:
        with use_stream(stream, "take"):
            return take(a, indices, axis, dst)
    if not isinstance(a, rt.ndarray):
        bad_input("take", a, scalars=False)
    nd = max(a.ndim, 1)  # a 0-d array is taken from as a 1-d one (NumPy, CuPy)
    if axis is not None:
        if not is_integer(axis):
            raise ArgumentTypeError(f"cuflow.take: axis must be an integer, got {axis!r}")
        if not -nd <= axis < nd:
            raise AxisError(f"cuflow.take: axis must be in [{-nd}, {nd}) for an array of "
                            f"{a.ndim} dimensions, got {axis}")
    flat = axis is None or a.ndim == 0
    n = a.size if flat else a.shape[axis]
    on_device = isinstance(indices, rt.ndarray) and rt.is_gpu
    if rt.multi:
        rt.check_devices("take", a, *((indices,) if on_device else ()))
    try:
        ind = indices if on_device else numpy.asarray(indices)
    except ValueError as e:  # ragged
        raise ArgumentError(f"cuflow.take: indices must be a rectangular array of integers: "
                            f"{e}") from e
    if not on_device and ind.dtype == object and all(
            type(v) is int for v in ind.flat):  # Python ints past int64: past every axis
        raise ArgumentIndexError(f"cuflow.take: indices must be in [{-n}, {n}), got "
                                 f"{ind.tolist()}")
    if not on_device and ind.size == 0 and not isinstance(indices, numpy.ndarray):
        ind = ind.astype(numpy.intp)  # ([] is float64 to NumPy)
    if ind.dtype.kind not in "iu":
        raise ArgumentTypeError(f"cuflow.take: indices must be integers, got dtype {ind.dtype}")
    if not on_device and ind.size:
        lo, hi = int(ind.min()), int(ind.max())
        if lo < -n or hi >= n:
            raise ArgumentIndexError(f"cuflow.take: indices must be in [{-n}, {n}) along "
                                     f"{'the flattened array' if flat else f'axis {axis}'}, "
                                     f"got values from {lo} to {hi}")
    if not on_device:
        ind = rt.xp.asarray(ind) if ind.ndim else int(ind)
    try:
        if dst is None:
            return rt.wrap(rt.xp.take(a, ind, axis=axis))
        ax = None if flat else axis % a.ndim
        shape = numpy.shape(ind) if flat else a.shape[:ax] + numpy.shape(ind) + a.shape[ax + 1:]
        a, ind = prepare_out("take", dst, shape, a.dtype, inputs=(a, ind), overlap="copy")
        if dst.dtype != a.dtype:  # (the backend's take writes only its own dtype)
            return copy_into("take", dst, rt.xp.take(a, ind, axis=axis), "same_kind")
        rt.xp.take(a, ind, axis=axis, out=dst)
        return dst
    except Exception as e:
        reraise("take", e, dst)


def take_along_axis(a: Any, indices: Any, axis: int | None = -1, dst: Any = None, *,
                    out: Any = None, stream: Any = None) -> Any:
    """Values of ``a`` at ``indices`` along ``axis`` (array API ``take_along_axis``; the last
    axis unless given, where NumPy requires it); with ``dst`` written there.

    Parameters
    ----------
    indices : integer darray
        Positions along ``axis``, of ``a``'s number of dimensions (NumPy's rule).
    axis : int or None
        The axis taken along; None for the flattened array.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    dst = resolve_out(dst, out, "take_along_axis")
    if stream is not None:
        with use_stream(stream, "take_along_axis"):
            return take_along_axis(a, indices, axis, dst)
    axis = check_ints("take_along_axis", axis)
    if not isinstance(a, runtime().ndarray):
        bad_input("take_along_axis", a, scalars=False)
    r = call("take_along_axis", runtime().xp.take_along_axis, a, indices, axis)
    return r if dst is None else copy_into("take_along_axis", dst, r, "same_kind")


complete(globals(), __all__, with_common_parameters)
