"""The output contract: one check of ``dst=`` for every op family.

Every op that takes ``dst=`` (ufuncs, reductions, transforms, image operators,
the Bufferizer, fused ops) calls :func:`prepare_out` before it launches, and
raises nothing of its own about ``dst``.  The compiled fast path
(``_ewlaunch.c``) takes only the cases this contract accepts unchanged, and
hands every other case back to it, so both paths give the same result or the
same error.

The rules:

* ``dst`` is an array of the active backend (a darray, or a plain CuPy / NumPy
  array of that backend), on the current device;
* the result shape equals ``dst.shape``: outputs are never broadcast;
* the result dtype casts to ``dst.dtype`` under ``casting`` (NumPy's
  ``same_kind`` unless the op says otherwise; ``"no"`` for kernels that write
  ``dst`` directly);
* ``dst`` is C-contiguous where the op's kernel writes it linearly;
* an input that shares memory with ``dst`` is fine when it is ``dst`` itself (or
  has exactly its layout) for elementwise ops; any other overlap is resolved by
  reading a private copy of that input first (the one case where ``dst=``
  allocates), or refused for kernels that cannot take a copy.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import numpy

from .._checks import as_index, is_integer
from .._errors import (ArgumentError, ArgumentOverflowError, ArgumentTypeError, AxisError,
                       DstDtypeError, DstError, DstShapeError, DstTypeError)
from ._runtime import runtime

__all__ = ["prepare_out", "resolve_out", "check_casting", "check_cast", "check_out_pair",
           "check_outs_apart", "check_order", "positional_pair", "bad_input", "check_dtype",
           "check_in_range", "check_int_fits_64_bits", "check_host_out", "translate_type_error",
           "reduced_shape", "broadcast_shape", "may_share", "span"]

Overlap = Literal["elementwise", "copy", "refuse"]


def resolve_out(dst: Any, out: Any, name: str) -> Any:
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


def prepare_out(name: str, dst: Any, shape: Sequence[int], dtype: Any = None, *,
                inputs: Sequence[Any] = (), casting: str = "same_kind",
                overlap: Overlap = "copy", contiguous: bool = False,
                ufunc: bool = False) -> tuple:
    """Check ``dst`` against the result of op ``name``; return the inputs to read.

    Parameters
    ----------
    name : str
        The op, as the user calls it (``"add"``, ``"image.normalize"``).
    dst : array
        The output the caller gave.
    shape : tuple of int
        The result shape; ``dst.shape`` must equal it.
    dtype : dtype, optional
        The result dtype; it must cast to ``dst.dtype`` under ``casting``.  With
        ``ufunc=True``, the ``dtype=`` the ufunc computes in (None: NumPy's type
        resolution of ``inputs``).
    inputs : sequence
        The arrays the op reads (scalars and None pass through unchanged).
    casting : str
        NumPy's casting rule for writing the result into ``dst``.
    overlap : {"elementwise", "copy", "refuse"}
        What an input that shares memory with ``dst`` gets: ``"elementwise"``
        keeps an input with exactly ``dst``'s layout (in place) and copies any
        other; ``"copy"`` copies every overlapping input; ``"refuse"`` raises.
    contiguous : bool
        ``dst`` must be C-contiguous.
    ufunc : bool
        The op is the NumPy ufunc ``name``: the dtype rule is NumPy's, for
        ``inputs`` computed into ``dst`` under ``casting`` (checked on host
        stand-ins, so a mixed-dtype or scalar op gets exactly NumPy's answer).

    Returns
    -------
    tuple
        ``inputs``, with private copies of the ones that overlap ``dst``.

    Raises
    ------
    DstTypeError, DstShapeError, DstDtypeError, DstError
        ``DstError``: ``dst`` is read-only, on another device, not C-contiguous where
        ``contiguous``, or overlaps an input where ``overlap="refuse"``.
    """
    rt = runtime()
    nd = rt.ndarray
    if not isinstance(dst, nd):
        raise DstTypeError(
            f"cuflow.{name}: dst must be an array of the active {rt.name} backend "
            f"({nd.__module__}.{nd.__name__} or cuflow.darray), got "
            f"{type(dst).__module__}.{type(dst).__name__}")
    if not getattr(dst.flags, "writeable", True):  # (NumPy's flag: CuPy arrays have none)
        raise DstError(f"cuflow.{name}: dst must be writable, got a read-only array "
                       "(flags.writeable is False); pass a writable output or none")
    if not rt.is_gpu and dst.dtype.kind not in "biufc":  # (a CuPy array holds numbers only)
        raise DstDtypeError(f"cuflow.{name}: dst.dtype must be bool, an integer, real or "
                            f"complex dtype, got {dst.dtype}")
    shape = tuple(shape)
    if dst.shape != shape:
        raise DstShapeError(
            f"cuflow.{name}: dst.shape must equal the result shape {shape} "
            f"(an output is never broadcast), got dst.shape={tuple(dst.shape)}")
    if ufunc:
        if casting != "same_kind" or dtype is not None or any(
                isinstance(x, nd) and x.dtype != dst.dtype for x in inputs):
            check_casting(name, inputs, dst, casting, dtype)
    elif dtype is not None and dst.dtype != dtype and not numpy.can_cast(dtype, dst.dtype,
                                                                           casting):
        if casting == "no":
            raise DstDtypeError(
                f"cuflow.{name}: dst.dtype must be {numpy.dtype(dtype)} (the op writes that "
                f"dtype, with no cast), got {dst.dtype}")
        raise DstDtypeError(
            f"cuflow.{name}: cannot write a {numpy.dtype(dtype)} result into dst of dtype "
            f"{dst.dtype} under casting={casting!r}; use a dst of dtype {numpy.dtype(dtype)} "
            "or a more permissive casting= ('no' < 'equiv' < 'safe' < 'same_kind' < 'unsafe')")
    if contiguous and not dst.flags.c_contiguous:
        raise DstError(f"cuflow.{name}: dst must be C-contiguous (strides {dst.strides} for "
                       f"shape {dst.shape})")
    if rt.multi:
        dev = rt.current_device()
        ddev = rt.device_of(dst)
        if ddev is not None and ddev != dev:
            raise DstError(
                f"cuflow.{name}: dst is on device {ddev} but the current device "
                f"is {dev}; use the same device for inputs and dst")
        rt.check_devices(name, *inputs)
    if not inputs:
        return ()
    return tuple(_resolve_overlap(rt, name, x, dst, overlap) for x in inputs)


def _resolve_overlap(rt: Any, name: str, x: Any, dst: Any, overlap: Overlap) -> Any:
    if x is dst:
        if overlap == "refuse":
            _refuse(name)
        return x if overlap == "elementwise" else x.copy()
    if not isinstance(x, rt.ndarray) or not may_share(x, dst, rt):
        return x
    if overlap == "elementwise" and (rt.data_ptr(x) == rt.data_ptr(dst)
                                     and x.strides == dst.strides and x.shape == dst.shape):
        return x  # same elements in the same places: in place is safe
    if overlap == "refuse":
        _refuse(name)
    return x.copy()


def _refuse(name: str):
    raise DstError(f"cuflow.{name}: dst overlaps an input; the kernel reads inputs while "
                   "writing dst, so use a separate output array")


def parse_dtype(value: Any) -> numpy.dtype | None:
    """``numpy.dtype(value)``, or None where it names no dtype: the one place that knows how
    NumPy's parse fails (a TypeError; a SyntaxError for ``"f4,,"``, which it reads as Python;
    a ValueError for ``"\x13,"`` or ``(None, object())``)."""
    try:
        return numpy.dtype(value)
    except (TypeError, ValueError, SyntaxError):
        return None


def as_dtype(name: str, dtype: Any) -> numpy.dtype:
    """``dtype`` as a NumPy dtype.  An array is refused, not read (``numpy.dtype`` would take
    its ``.dtype``), and so is anything else that names no dtype."""
    if isinstance(dtype, numpy.dtype):
        return dtype
    if isinstance(dtype, numpy.ndarray | runtime().ndarray):
        got = f"an array of shape {dtype.shape}"
    else:
        dt = parse_dtype(dtype)
        if dt is not None:
            return dt
        got = repr(dtype)
    raise ArgumentTypeError(f"cuflow.{name}: dtype must name a dtype, got {got}")


def check_in_range(name: str, values: Iterable[tuple[str, Any]], dtype: Any,
                   rounding: Callable[[float], int] = math.trunc) -> None:
    """Numbers a real ``dtype`` can hold: for an integer dtype, once ``rounding`` makes them
    whole (toward zero as a cast does, down as an integer ``linspace`` does); for a float
    dtype, the finite ones within its largest value.  ``values`` are ``(what, number)``
    pairs, ``what`` naming the number in the error.  A fill value, a range's ends and a
    Python float given to ``asarray`` are refused by this one rule rather than wrapped."""
    dt = numpy.dtype(dtype)
    for what, v in values:
        if dt.kind == "f":
            if math.isfinite(v) and abs(float(v)) > float(numpy.finfo(dt).max):
                raise ArgumentOverflowError(f"cuflow.{name}: {what} {v!r} is out of the range "
                                            f"of {dt} (its largest value is "
                                            f"{numpy.finfo(dt).max})")
        elif dt.kind in "iu":
            info = numpy.iinfo(dt)
            whole = int(v) if is_integer(v) else rounding(float(v))
            if not info.min <= whole <= info.max:
                raise ArgumentOverflowError(f"cuflow.{name}: {what} {v!r} is out of the range "
                                            f"of {dt}, [{info.min}, {info.max}]")


def check_int_fits_64_bits(name: str, what: str, v: Any) -> None:
    """A Python int with no dtype to hold it must fit int64 or uint64, the largest integer
    dtypes (NumPy would make an object array of it, which cuflow does not compute with)."""
    if isinstance(v, int) and not isinstance(v, bool) and not -2**63 <= v < 2**64:
        raise ArgumentOverflowError(f"cuflow.{name}: {what} {v!r} is past int64 and uint64, "
                                    "the largest integer dtypes; give a float dtype")


def check_dtype(name: str, dtype: Any) -> numpy.dtype | None:
    """``dtype`` (None: the default) as a NumPy dtype of numbers: bool, integers, reals or
    complex, the array API's."""
    if dtype is None:
        return None
    dt = as_dtype(name, dtype)
    if dt.kind not in "biufc":
        raise ArgumentTypeError(f"cuflow.{name}: dtype must be bool, an integer, real or "
                                f"complex dtype, got {dt}")
    return dt


def check_casting(name: str, inputs: Sequence[Any], dst: Any, casting: str, dtype: Any) -> None:
    """NumPy's casting rules for a ufunc ``name`` writing into ``dst``, on host stand-ins."""
    nd = runtime().ndarray
    # arrays (and sequences, which NumPy reads as arrays) by 0-d stand-ins of their dtype;
    # Python scalars as they are (NEP 50: weak)
    probe = [x if isinstance(x, bool | int | float | complex | numpy.generic) else
             numpy.ones((), x.dtype if isinstance(x, nd) else numpy.asarray(x).dtype)
             for x in inputs]
    if dtype is not None:
        as_dtype(name, dtype)
    try:
        with numpy.errstate(all="ignore"):
            getattr(numpy, name)(*probe, out=numpy.empty((), dst.dtype), casting=casting,
                                 dtype=dtype)
    except TypeError as e:
        kinds = ", ".join(str(getattr(x, "dtype", type(x).__name__)) for x in inputs)
        raise DstDtypeError(
            f"cuflow.{name}: inputs ({kinds}) cannot be computed into dst of dtype "
            f"{dst.dtype} under casting={casting!r}"
            + (f" with dtype={dtype}" if dtype is not None else "") + f": {e}") from e


def broadcast_shape(name: str, *shapes: Sequence[int]) -> tuple[int, ...]:
    """The broadcast of ``shapes``; an :class:`ArgumentError` when they do not broadcast
    (the inputs' fault, whatever ``dst`` is)."""
    try:
        return numpy.broadcast_shapes(*shapes)
    except ValueError as e:
        raise ArgumentError(f"cuflow.{name}: inputs do not broadcast together: "
                            f"{', '.join(str(tuple(s)) for s in shapes)}") from e


def reduced_shape(name: str, shape: Sequence[int], axis: Any, keepdims: bool) -> tuple[int, ...]:
    """Shape of a reduction of ``shape`` over ``axis``."""
    nd = len(shape)
    if axis is None:
        axes = set(range(nd))
    else:
        axes = set()
        for a in axis if isinstance(axis, tuple) else (axis,):
            a = int(a)
            if not -nd <= a < nd:
                raise AxisError(
                    f"cuflow.{name}: axis {a} is out of bounds for an array of dimension {nd}")
            axes.add(a % nd)
    if keepdims:
        return tuple(1 if i in axes else n for i, n in enumerate(shape))
    return tuple(n for i, n in enumerate(shape) if i not in axes)


def span(a: Any, ptr: int) -> tuple[int, int]:
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


def may_share(x: Any, dst: Any, rt: Any = None) -> bool:
    """True when ``x`` and ``dst`` may touch the same bytes (exact for one-segment spans)."""
    if x is dst:
        return True
    rt = rt or runtime()
    if rt.is_gpu:
        xm, dm = x.data.mem, dst.data.mem
        # distinct pool allocations never overlap; unowned memory (DLPack, views of
        # foreign pointers) may alias anything, so it takes the span test
        if xm is not dm and type(xm) is not rt.unowned and type(dm) is not rt.unowned:
            return False
        xlo, xhi = span(x, x.data.ptr)
        dlo, dhi = span(dst, dst.data.ptr)
        return not (xhi <= dlo or dhi <= xlo)
    return bool(numpy.may_share_memory(x, dst))


def check_cast(name: str, from_dtype: Any, to_dtype: Any, casting: str) -> None:
    """Raise unless ``from_dtype`` casts to ``to_dtype`` under ``casting`` (``astype``)."""
    if not numpy.can_cast(from_dtype, to_dtype, casting):
        raise DstDtypeError(f"cuflow.{name}: cannot cast {numpy.dtype(from_dtype)} to "
                            f"{numpy.dtype(to_dtype)} under casting={casting!r}")


def positional_pair(name: str, dst_pair: tuple, dst: Any, out: Any) -> Any:
    """The outputs of a two-output op, given positionally (NumPy's spelling) or as ``dst=``
    or ``out=``, but once."""
    if not dst_pair:
        return dst
    if dst is not None or out is not None:
        raise DstError(f"cuflow.{name}: give the outputs once, positionally or as dst=, got "
                       f"{len(dst_pair)} positional and a {'dst' if dst is not None else 'out'}= "
                       "too")
    return dst_pair


def check_order(name: str, order: Any, allowed: str = "CFAK") -> None:
    """Refuse a memory order other than NumPy's letters (CuPy's message omits the value)."""
    if not (isinstance(order, str) and len(order) == 1 and order.upper() in allowed):
        raise ArgumentError(f"cuflow.{name}: order must be one of {', '.join(allowed)}, "
                            f"got {order!r}")


def check_out_pair(name: str, dst: Any) -> None:
    """Ops with two outputs (``modf``, ``frexp``, ``divmod``) take ``dst`` as a pair."""
    if not (isinstance(dst, tuple | list) and len(dst) == 2):
        got = (f"an array of shape {dst.shape}" if hasattr(dst, "shape") else
               f"a {type(dst).__name__} of {len(dst)}" if isinstance(dst, tuple | list) else
               type(dst).__name__)
        raise DstError(f"cuflow.{name}: dst must be a pair of arrays, got {got}")
    check_outs_apart(name, dst)


def check_outs_apart(name: str, dsts: Sequence[Any]) -> None:
    """Refuse outputs that share memory: each would overwrite what another holds."""
    rt = runtime()
    arrays = [(i, d) for i, d in enumerate(dsts) if isinstance(d, rt.ndarray)]
    for k, (i, x) in enumerate(arrays):
        for j, y in arrays[k + 1:]:
            if may_share(x, y, rt):
                raise DstError(f"cuflow.{name}: the outputs in dst must not share memory "
                               f"(each would overwrite the other), got dst[{i}] of shape "
                               f"{x.shape} and dst[{j}] of shape {y.shape} over the same bytes")


def check_ints(name: str, value: Any, what: str = "axis", lists: bool = False) -> Any:
    """An axis or shape argument: None, an integer or a tuple of integers (with ``lists``
    also a list, range or 1-d NumPy array of them, as NumPy's ``transpose`` and ``reshape``
    take), returned with its integers as Python ints (a NumPy integer or 0-d integer array
    becomes one, a sequence a tuple), which CuPy takes as NumPy does.  An integer is
    anything with ``__index__`` but a bool or an array of another shape or kind.  A shape's
    sizes are data, read as the creation functions read them (:func:`~cuflow._checks.as_index`:
    a device 0-d integer array too, ``n = mask.sum()``, and the host waits for it); an axis
    on the device is refused rather than read, since it would synchronize.  CuPy would read
    ``False`` as axis 0 (or size 0), ``[]`` as no axis and an array of axes by its length."""
    if value is None or type(value) is int:
        return value
    seq = isinstance(value, tuple) or lists and (
        isinstance(value, list | range) or isinstance(value, numpy.ndarray) and value.ndim == 1)
    out = []
    for v in value if seq else (value,):
        size = as_index(v) if what == "shape" else None
        if size is not None:
            out.append(size)
            continue
        if (isinstance(v, bool | numpy.bool_) or not hasattr(type(v), "__index__")
                or what == "shape" or hasattr(v, "__cuda_array_interface__")
                or isinstance(v, numpy.ndarray) and (v.ndim or v.dtype.kind not in "iu")):
            got = (f"an array of shape {value.shape} and dtype {value.dtype}"
                   if hasattr(value, "shape") and hasattr(value, "dtype") else repr(value))
            raise ArgumentTypeError(
                f"cuflow.{name}: {what} must be an integer or a tuple of integers"
                f"{' (or a list)' if lists else ''}, got {got}")
        out.append(operator.index(v))
    return tuple(out) if seq else out[0]


def one_element_axis(name: str, a: Any, axis: Any, done: str) -> tuple[Any, Any]:
    """``a`` and ``axis`` as NumPy reads them for a 0-d array: one of one element along axis
    0, -1 or None (CuPy refuses an axis of a 0-d array); other arrays pass unchanged.
    ``done`` names what the operation does with the element ("sorted", "accumulated")."""
    if getattr(a, "ndim", None) != 0:
        return a, axis
    axis = check_ints(name, axis)
    if axis not in (None, 0, -1):
        raise AxisError(f"cuflow.{name}: axis {axis} is out of bounds for a 0-d array, "
                        f"{done} as one of one element (axis 0, -1 or None)")
    return a.reshape(1), 0


def check_host_out(name: str, a: Any, out: Any) -> None:
    """CuPy's rule for the host ``out=`` of a device-to-host copy: a NumPy array of ``a``'s
    shape and dtype (``a`` is never cast or broadcast into it)."""
    if not isinstance(out, numpy.ndarray) or isinstance(out, runtime().darray):
        raise DstTypeError(f"cuflow.{name}: out must be a numpy.ndarray (host memory), got "
                           f"{type(out).__module__}.{type(out).__name__}")
    shape, dtype = getattr(a, "shape", None), getattr(a, "dtype", None)
    if shape is not None and out.shape != shape:
        raise DstShapeError(f"cuflow.{name}: out.shape must equal the array's shape {shape}, "
                            f"got {out.shape}")
    if dtype is not None and out.dtype != dtype:
        raise DstDtypeError(f"cuflow.{name}: out.dtype must equal the array's dtype {dtype} "
                            f"(the copy does not cast), got {out.dtype}")
    if not out.flags.writeable:
        raise DstError(f"cuflow.{name}: out must be writable, got a read-only array "
                       "(flags.writeable is False)")


def bad_input(name: str, x: Any, why: str | None = None, *, scalars: bool = True):
    """An input that is not an array of the active backend (nor, where ``scalars``, a
    scalar)."""
    if getattr(type(x), "cuflow_traced", False):  # a traced value of cuflow.fuse
        why = ("it is not elementwise: a fused function fuses elementwise functions, where, "
               "clip and trailing reductions (call it outside the fused function)")
    raise DstTypeError(
        f"cuflow.{name}: " + (why or (
            f"inputs must be arrays of the active {runtime().name} backend"
            f"{' or scalars' if scalars else ''}, got {type(x).__module__}.{type(x).__name__} "
            f"(convert with cuflow.asarray first)")))


def translate_type_error(name: str, e: TypeError, dst: Any) -> None:
    """Raise the output-contract error a backend's TypeError stands for, if it is one."""
    if isinstance(e, DstDtypeError | DstTypeError):
        return
    msg = str(e)
    if dst is not None and "cast" in msg.lower():
        raise DstDtypeError(
            f"cuflow.{name}: the result cannot be written into dst of dtype {dst.dtype}: "
            f"{msg}; use a dst of the result dtype or casting='unsafe'") from e
    if "Unsupported type" in msg or "Argument" in msg and "ndarray" in msg:
        raise DstTypeError(
            f"cuflow.{name}: inputs must be arrays of the active {runtime().name} backend or "
            f"scalars (convert host data with cuflow.asarray first): {msg}") from e
