"""The ``dst=`` contract, checked before any launch.

* ``dst`` must be an array of the active backend (a darray, or a plain CuPy /
  NumPy array of that backend), on the current device;
* the result shape must equal ``dst.shape``: outputs are never broadcast;
* the result dtype must cast to ``dst.dtype`` under ``casting``
  (NumPy's ``same_kind`` unless the op says otherwise);
* an input that shares memory with ``dst`` is fine when it is ``dst`` itself
  (or has exactly its layout) for elementwise ops; any other overlap is
  resolved by reading a private copy of that input first.  That copy is the
  one case where ``dst=`` allocates.
"""

from __future__ import annotations

import numpy

from .._errors import DstDtypeError, DstError, DstShapeError, DstTypeError

__all__ = ["resolve_out", "check_dst", "reduced_shape", "fix_overlap", "span"]


def resolve_out(dst, out, name):
    """Merge ``dst=`` and its NumPy spelling ``out=`` (giving both is an error)."""
    if out is None:
        return dst
    if dst is not None:
        raise DstError(
            f"cuflow.{name}: got both dst= and out=; out= is the NumPy/CuPy spelling "
            "of dst=, pass only one")
    if type(out) is tuple and len(out) == 1:
        out = out[0]
    return out


def bad_dst_type(name, dst, nd, backend):
    raise DstTypeError(
        f"cuflow.{name}: dst must be an array of the active {backend} backend "
        f"({nd.__module__}.{nd.__name__} or cuflow.darray), got "
        f"{type(dst).__module__}.{type(dst).__name__}")


def bad_shape(name, shape, dst):
    raise DstShapeError(
        f"cuflow.{name}: dst.shape must equal the result shape {tuple(shape)} "
        f"(an output is never broadcast), got dst.shape={tuple(dst.shape)}")


def check_dtype(name, dtype, dst, casting):
    """Raise unless a result of ``dtype`` may be written into ``dst`` under ``casting``."""
    if dst.dtype != dtype and not numpy.can_cast(dtype, dst.dtype, casting):
        raise DstDtypeError(
            f"cuflow.{name}: cannot write a {numpy.dtype(dtype)} result into dst of dtype "
            f"{dst.dtype} under casting={casting!r}; use a dst of dtype {numpy.dtype(dtype)} "
            "or a more permissive casting= ('no' < 'equiv' < 'safe' < 'same_kind' < 'unsafe')")


def check_dst(name, dst, shape, dtype, casting, nd, backend):
    """Full dst check for the non-hot paths (reductions, transforms)."""
    if not isinstance(dst, nd):
        bad_dst_type(name, dst, nd, backend)
    if dst.shape != tuple(shape):
        bad_shape(name, shape, dst)
    if dtype is not None:
        check_dtype(name, dtype, dst, casting)


def reduced_shape(name, shape, axis, keepdims):
    """Shape of a reduction of ``shape`` over ``axis``."""
    nd = len(shape)
    if axis is None:
        axes = set(range(nd))
    else:
        ax = axis if isinstance(axis, tuple) else (axis,)
        axes = set()
        for a in ax:
            a = int(a)
            if not -nd <= a < nd:
                raise numpy.exceptions.AxisError(
                    f"cuflow.{name}: axis {a} is out of bounds for an array of dimension {nd}")
            axes.add(a % nd)
    if keepdims:
        return tuple(1 if i in axes else n for i, n in enumerate(shape))
    return tuple(n for i, n in enumerate(shape) if i not in axes)


def broadcast_result(name, dst, *shapes):
    """Raise unless the broadcast of ``shapes`` is exactly ``dst.shape``."""
    try:
        shape = numpy.broadcast_shapes(*shapes)
    except ValueError as e:
        raise DstShapeError(f"cuflow.{name}: inputs do not broadcast together: "
                            f"{', '.join(str(tuple(s)) for s in shapes)}") from e
    if shape != dst.shape:
        bad_shape(name, shape, dst)


def span(a, ptr):
    """Byte range ``[lo, hi)`` that ``a`` (data pointer ``ptr``) can touch."""
    lo = hi = ptr
    for n, s in zip(a.shape, a.strides):
        if n == 0:
            return ptr, ptr
        if s > 0:
            hi += s * (n - 1)
        else:
            lo += s * (n - 1)
    return lo, hi + a.itemsize


def fix_overlap(x, dst, xptr, dptr, elementwise):
    """Return ``x``, or a private copy when it overlaps ``dst`` in a way that could be read wrongly."""
    if elementwise and xptr == dptr and x.strides == dst.strides and x.shape == dst.shape:
        return x  # same elements in the same places: in place is safe
    xlo, xhi = span(x, xptr)
    dlo, dhi = span(dst, dptr)
    if xhi <= dlo or dhi <= xlo:
        return x
    return x.copy()
