"""Getting data in and out: ``asarray``, ``array``, ``from_dlpack``, ``asnumpy``, ``copy``, ``astype``.

Device data is shared (zero-copy) where possible; host data is copied to the
device.  ``copy`` and ``astype`` take ``dst=``.

Stream semantics: copies are queued on ``stream`` or the current stream;
``asnumpy`` waits for the data unless ``blocking=False`` with a pinned ``out``.
"""

from __future__ import annotations

from typing import Any

import functools
import operator

import numpy

from .._errors import ArgumentError, ArgumentOverflowError, ArgumentTypeError, CuflowError
from ._docs import complete, with_common_parameters
from ._contract import (as_dtype, bad_input, check_cast, check_dtype, check_host_out,
                        check_in_range, check_int_fits_64_bits, check_order,
                        may_share, prepare_out, resolve_out)
from ._dispatch import reraise, run_on
from ._expr import Expr
from ._runtime import runtime
from ._info import check_device
from ._streams import as_cupy_stream

__all__ = ["asarray", "array", "from_dlpack", "asnumpy", "as_darray", "copy", "astype",
           "copy_into"]


def as_darray(x: Any) -> Any:
    """``x`` (an array of the backend) as a darray without copying and without mutating ``x``.

    Parameters
    ----------
    x : cupy.ndarray or numpy.ndarray
        An array of the active backend.

    Returns
    -------
    darray
        A view of ``x``'s memory.

    Notes
    -----
    Stream semantics: synchronous and immediate; nothing is queued.
    """
    rt = runtime()
    if not isinstance(x, rt.ndarray):
        bad_input("as_darray", x, f"x must be an array of the active {rt.name} backend (a "
                  f"view, never a copy), got {type(x).__module__}.{type(x).__name__}; convert "
                  "other data with cuflow.asarray")
    return rt.as_darray(x)


def copy_into(name, dst, src, casting, dtype=None):
    """Validated ``copyto(dst, src)`` where ``src`` has exactly the result shape."""
    rt = runtime()
    if not isinstance(src, rt.ndarray):
        bad_input(name, src, scalars=False)
    prepare_out(name, dst, src.shape, src.dtype if dtype is None else dtype, casting=casting)
    if src is not dst and may_share(src, dst):
        if src.shape == dst.shape and src.strides == dst.strides and rt.data_ptr(src) == rt.data_ptr(dst):
            if dst.dtype == src.dtype:
                return dst
        src = src.copy()
    rt.xp.copyto(dst, src, casting="unsafe" if dtype is not None else casting)
    return dst


def copy(a: Any, dst: Any = None, *, out: Any = None, order: str = "K", casting: str = "same_kind",
         stream: Any = None) -> Any:
    """Copy ``a``; with ``dst`` the copy is written there (no allocation) and ``dst`` returned.

    ``a`` may be a host ``numpy.ndarray`` when ``dst`` is a device array of the
    same shape and dtype (a host-to-device upload).

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    An upload is asynchronous only from pinned host memory
    (:func:`cuflow.memory.empty_pinned`); from pageable memory the host waits.
    """
    rt = runtime()
    if isinstance(dst, str):  # NumPy's copy(a, order): its second positional argument
        dst, order = None, dst
    dst = resolve_out(dst, out, "copy")
    if type(a) is numpy.ndarray and dst is not None:
        return _upload(a, dst, stream)
    if not isinstance(a, rt.ndarray):
        bad_input("copy", a, scalars=False)
    if stream is not None:
        return run_on(stream, "copy", copy, a, dst, order=order, casting=casting)
    try:
        if dst is None:
            return rt.wrap(rt.ndarray.copy(a, order=order))
        return copy_into("copy", dst, a, casting)
    except Exception as e:
        reraise("copy", e, dst)


def _upload(a, dst, stream):
    """Host ``a`` -> device ``dst`` (same shape and dtype; ``dst`` C-contiguous).  The NumPy
    backend keeps the upload's rules, so code that runs there runs on the GPU."""
    prepare_out("copy", dst, a.shape, a.dtype, casting="no", contiguous=True)
    s = as_cupy_stream(stream, "copy")
    try:
        if not runtime().is_gpu:
            return copy_into("copy", dst, a, "no")
        dst.set(numpy.ascontiguousarray(a), stream=s)
    except Exception as e:
        reraise("copy", e, dst)
    return dst


def astype(a: Any, dtype: Any, dst: Any = None, *, out: Any = None, order: str = "K",
           casting: str = "unsafe", copy: bool | None = True, device: Any = None,
           stream: Any = None) -> Any:
    """Cast ``a`` to ``dtype``; with ``dst`` (of that dtype) the result is written there.

    Parameters
    ----------
    dtype : dtype
        The result's dtype.
    casting : {"no", "equiv", "safe", "same_kind", "unsafe"}, default "unsafe"
        Which casts are allowed (NumPy's rule; ``astype`` allows every one by default).
    copy : bool, default True
        False returns ``a`` itself where its dtype and layout already fit.

    Returns
    -------
    darray
        ``dst`` when given; ``a`` itself with ``copy=False`` where its dtype and layout fit;
        else a new array.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    if isinstance(a, Expr):  # inside cuflow.fuse
        return a.astype(dtype, casting=casting)
    rt = runtime()
    if device is not None:
        check_device("astype", device)
    dst = resolve_out(dst, out, "astype")
    if stream is not None:
        return run_on(stream, "astype", astype, a, dtype, dst, order=order, casting=casting,
                      copy=copy)
    if not isinstance(a, rt.ndarray):  # (NumPy's TypeError; a host array on the GPU too)
        bad_input("astype", a, scalars=False)
    dt = check_dtype("astype", as_dtype("astype", dtype))
    try:
        check_cast("astype", a.dtype, dt, casting)
        if dst is None:
            return rt.wrap(rt.ndarray.astype(a, dt, order=order, copy=copy))
        prepare_out("astype", dst, a.shape, dt, casting="no")
        return copy_into("astype", dst, a, casting, dtype=dt)
    except Exception as e:
        reraise("astype", e, dst)


def asarray(obj: Any, dtype: Any = None, order: str | None = None, *, device: Any = None,
            copy: bool | None = None, blocking: bool = False, stream: Any = None) -> Any:
    """Convert to a darray of the active backend, without a copy where possible.

    Accepts darrays, CuPy and NumPy arrays, PyTorch tensors, objects with
    ``__cuda_array_interface__`` or ``__dlpack__``, scalars and sequences.  Device
    data is shared (zero-copy); host data is copied to the device.  The NumPy backend
    copies host data as well (a NumPy array that is not a darray, a buffer, a CPU
    tensor), so that writes to either side afterwards mean what they mean on a GPU;
    ``copy=False`` shares it there, and raises on a GPU.  The signature is
    CuPy's (``dtype`` and ``order`` by position, ``copy`` and ``blocking`` by keyword),
    with the array API's ``device=`` and cuflow's ``stream=``.

    Parameters
    ----------
    obj : array_like
        What is converted (see above).
    blocking : bool, default False
        Wait for the host-to-device copy before returning (CuPy's meaning).

    Returns
    -------
    darray
        ``obj`` itself where it is already a darray that fits, else a new darray (or a view).

    Notes
    -----
    Stream semantics: a host-to-device copy is queued on ``stream`` or the current
    stream, and the host may have to keep the source unchanged until it has run;
    with ``blocking=True`` (CuPy's meaning) the host waits for that stream before the
    call returns.  On the NumPy backend the copy is done on return either way.  DLPack
    imports order the current stream after the producer's stream.
    """
    rt = runtime()
    if device is not None:
        check_device("asarray", device)
    if order is not None:
        check_order("asarray", order)
        order = order.upper()
    if stream is not None:
        return run_on(stream, "asarray", asarray, obj, dtype, order, copy=copy, blocking=blocking)
    dtype = check_dtype("asarray", dtype)
    _refuse_complex_to_real(_source_dtype(obj), dtype)
    if isinstance(obj, rt.ndarray):
        if obj.dtype.kind not in "biufc":  # (a NumPy array of text, objects or dates)
            raise ArgumentTypeError(f"cuflow.asarray: obj must be an array of numbers, got "
                                    f"an array of dtype {obj.dtype}, which cuflow does not "
                                    "compute with")
        if copy is None and not rt.is_gpu and not isinstance(obj, rt.darray):
            copy = True  # host data: copied, as the upload to a device copies it
        return rt.as_darray(_conform(obj, obj, dtype, order, copy))
    if copy is False:
        if isinstance(obj, list | tuple | int | float | complex | bool):
            _refuse_copy(obj, "a new array built from Python objects")
        if rt.is_gpu and not hasattr(obj, "__cuda_array_interface__") and not (
                hasattr(obj, "__dlpack_device__") and obj.__dlpack_device__()[0] in (2, 3, 13)):
            _refuse_copy(obj, "a host-to-device copy")
    # arrays cast as astype does (a float out of a smaller float's range becomes inf, on
    # every backend); Python numbers that the dtype cannot hold are refused, like integers
    # out of range (NEP 50)
    python_data = not hasattr(obj, "dtype")
    if dtype is None:
        check_int_fits_64_bits("asarray", "obj", obj)
    elif type(obj) is float and dtype.kind in "iu":  # (lists: _host_array, which reads them)
        _check_float_range(numpy.asarray(obj), dtype)
    try:
        with numpy.errstate(over="raise" if python_data else "ignore",
                            invalid="raise" if python_data else "ignore"):
            if rt.is_gpu:
                r = _to_cupy(obj, dtype, order, copy)
            else:
                r = _to_numpy(obj, dtype, order, copy)
        if r.dtype.kind not in "biufc":
            # NumPy wraps any object as a 0-d object array, and strings as text arrays;
            # neither is an array of numbers (the array API's dtypes)
            raise ArgumentTypeError(
                f"cuflow.asarray: obj must be an array, a number or a (nested) sequence of "
                f"numbers, got {type(obj).__name__} (it converts to dtype {r.dtype}, which "
                "cuflow does not compute with)")
        if copy and r is obj:
            r = r.copy()
        if blocking and rt.is_gpu:
            # the upload (or stacking) queued on the current stream is done before the
            # call returns, so the caller may write into its host data at once
            as_cupy_stream(None).synchronize()
        return rt.as_darray(r) if r is obj else rt.wrap(r)
    except CuflowError:
        raise
    except (FloatingPointError, OverflowError) as e:  # a Python number past the dtype's range
        raise ArgumentOverflowError(f"cuflow.asarray: obj holds a value out of the range of "
                                    f"{dtype}: {e}") from e
    except ValueError as e:  # ragged sequences
        raise ArgumentError(f"cuflow.asarray: obj cannot be converted to an array: {e}") from e
    except (TypeError, SyntaxError) as e:  # an unknown dtype, a value the dtype does not take
        raise ArgumentTypeError(f"cuflow.asarray: obj of type {type(obj).__name__} cannot be "
                                f"converted to dtype {dtype!r}: {e}") from e
    except (BufferError, RuntimeError) as e:  # (a producer's "not implemented" is one too)
        if isinstance(e, rt.cuda_errors):
            reraise("asarray", e)
        # a producer's own refusal (a tensor that requires grad), as from_dlpack reports it
        raise ArgumentError(f"cuflow.asarray: the producer {type(obj).__name__} refused the "
                            f"export: {e}") from e
    except Exception as e:
        reraise("asarray", e)


def _refuse_copy(obj, what, cause=None):
    raise ArgumentError(f"cuflow.asarray: copy=False, but {type(obj).__name__} needs {what}; "
                        "pass copy=None to allow it") from cause


def _source_dtype(obj):
    """The NumPy dtype of ``obj``'s data where ``obj`` names one (another library's dtype by
    its name: ``torch.complex64``, ``array_api_strict.complex128``); None for Python data,
    buffers and producers that name none."""
    dt = getattr(obj, "dtype", None)
    if dt is None and hasattr(obj, "__cuda_array_interface__"):
        dt = obj.__cuda_array_interface__.get("typestr")
    if dt is None or isinstance(dt, numpy.dtype):
        return dt
    for name in (dt, str(dt).rsplit(".", 1)[-1]):
        try:
            return numpy.dtype(name)
        except (TypeError, ValueError):
            pass
    return None


def _refuse_complex_to_real(src_dt, dtype):
    if dtype is not None and src_dt is not None and src_dt.kind == "c" and dtype.kind != "c":
        raise ArgumentTypeError(f"cuflow.asarray: casting {src_dt} to {dtype} would discard the "
                                "imaginary part; take .real (or .imag) first")


def _conform(src, a, dtype, order, copy):
    """``a`` (``src``'s data, an array of the backend) cast to ``dtype`` and laid out in
    ``order``: ``a`` itself unless that or ``copy`` needs new memory, which copy=False
    refuses."""
    _refuse_complex_to_real(a.dtype, dtype)
    cast = dtype is not None and dtype != a.dtype
    relayout = (order == "C" and not a.flags.c_contiguous
                or order == "F" and not a.flags.f_contiguous)
    if not (cast or relayout or copy):
        return a
    if copy is False:
        _refuse_copy(src, f"a cast from {a.dtype} to {dtype}" if cast
                     else f"a copy in order {order!r}")
    with numpy.errstate(over="ignore", invalid="ignore"):  # astype's semantics
        return runtime().ndarray.astype(a, dtype or a.dtype, order=order or "K", copy=True)


def _check_float_range(src, dtype):
    """Python floats (``src``, NumPy's conversion of them) whose truncation toward zero the
    integer ``dtype`` cannot hold, refused: NumPy wraps ``256.0`` to 0 as uint8 without a
    floating-point error."""
    finite = src[numpy.isfinite(src)]
    if finite.size:
        check_in_range("asarray", [("Python float", float(finite.min())),
                                   ("Python float", float(finite.max()))], dtype)


def _host_array(obj, dtype, order, copy):
    """NumPy's conversion of host data.  A source that names no dtype (a buffer, a nest of
    NumPy scalars) shows whether it is complex only once NumPy has read it, so a cast to a
    real dtype reads it first."""
    src_dt = _source_dtype(obj)
    if dtype is None or dtype.kind == "c" or src_dt is not None:
        _refuse_complex_to_real(src_dt, dtype)
        return _numpy_asarray(obj, dtype, order, copy)
    src = _numpy_asarray(obj, None, None, False if copy is False else None)
    _refuse_complex_to_real(src.dtype, dtype)
    if dtype.kind in "iu" and src.dtype.kind == "f" and isinstance(obj, list | tuple):
        # the Python floats only: NumPy reads [2**64 - 1, 1] as float64 too, whose rounding
        # would take the exact int past uint64's range
        floats = _python_floats(obj)
        if floats:
            _check_float_range(numpy.asarray(floats, numpy.float64), dtype)
    # Python numbers (a bare int, or in lists and tuples) convert again with the dtype,
    # which refuses those out of its range; NumPy data casts as astype does
    return _numpy_asarray(obj, dtype, order, copy,
                          data=obj if isinstance(obj, list | tuple | int) else src)


def _python_floats(obj) -> list[float]:
    """The Python floats in a nest of lists and tuples."""
    out: list[float] = []
    stack = [obj]
    while stack:
        for x in stack.pop():
            if isinstance(x, float):
                out.append(x)
            elif isinstance(x, list | tuple):
                stack.append(x)
    return out


def _numpy_asarray(obj, dtype, order, copy, data=None):
    """``numpy.asarray`` of ``data`` (default: ``obj``, the source the user gave)."""
    try:
        return numpy.asarray(obj if data is None else data, dtype=dtype, order=order, copy=copy)
    except ValueError as e:
        if copy is not False:
            raise
        # (NumPy's "Unable to avoid copy", or the source's own refusal of copy=False)
        _refuse_copy(obj, f"a copy to convert{f' to {dtype}' if dtype is not None else ''} "
                     f"({str(e).splitlines()[0]})", e)


def array(obj: Any, dtype: Any = None, copy: bool | None = True, order: str = "K",
          subok: bool | None = False, ndmin: int = 0, *, blocking: bool = False, device: Any = None,
          stream: Any = None) -> Any:
    """Like :func:`asarray` but copies by default (NumPy's and CuPy's ``array``, with their
    positional order: ``subok`` fifth, ``ndmin`` sixth).

    ``subok=True`` is refused, as CuPy refuses it: the result is always a darray.
    ``ndmin`` puts ones in front of the shape up to that many dimensions.  ``blocking``,
    ``device`` and ``stream`` are :func:`asarray`'s.

    Parameters
    ----------
    obj : array_like
        What is converted, as :func:`asarray` takes it.
    copy : bool, default True
        False refuses where a copy is needed (as :func:`asarray`).
    subok : bool, default False
        Must be False (see above).
    ndmin : int, default 0
        The least number of dimensions of the result, from 0 to 64.
    blocking : bool, default False
        As :func:`asarray`'s.

    Returns
    -------
    darray
        A new darray (or ``obj`` with ``copy=False``).

    Notes
    -----
    Stream semantics: as :func:`asarray`.
    """
    if subok:
        raise ArgumentError(f"cuflow.array: subok must be False (as in CuPy, which does not "
                            f"pass array subclasses through; the result is a darray), got "
                            f"{subok!r}")
    if order is not None:
        check_order("array", order)
    if isinstance(ndmin, bool | numpy.bool_) or not hasattr(type(ndmin), "__index__"):
        raise ArgumentTypeError(f"cuflow.array: ndmin must be an integer, got "
                                f"{type(ndmin).__name__} {ndmin!r}")
    ndmin = operator.index(ndmin)
    if not 0 <= ndmin <= 64:
        raise ArgumentError(f"cuflow.array: ndmin must be from 0 to 64 (the most dimensions "
                            f"an array may have), got {ndmin}")
    r = asarray(obj, dtype=dtype, order=order, copy=copy, blocking=blocking, device=device,
                stream=stream)
    if ndmin > r.ndim:
        r = r.reshape((1,) * (ndmin - r.ndim) + r.shape)
    return r


def _is_torch(obj):
    return type(obj).__module__.startswith("torch")


def _to_cupy(obj, dtype, order, copy):
    """``obj`` as a CuPy array: device data shared unless ``copy`` (or a cast) asks for new
    memory, host data uploaded."""
    rt = runtime()
    cp = rt.xp
    if not isinstance(obj, numpy.ndarray) and hasattr(obj, "__dlpack__"):
        dev = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else None
        if dev in (2, 3, 13):  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged: zero-copy
            return _conform(obj, cp.from_dlpack(obj), dtype, order, copy)
        if _is_torch(obj):
            obj = obj.numpy(force=True) if hasattr(obj, "numpy") else numpy.asarray(obj)
        elif not hasattr(obj, "__array__"):  # a host DLPack producer only: NumPy imports it
            obj = numpy.from_dlpack(obj)
    if isinstance(obj, float | complex | numpy.generic) or (
            isinstance(obj, numpy.ndarray) and obj.ndim == 0):
        # CuPy fills a 0-d array from a scalar, and its fill writes -0.0 as +0.0
        # (tests/core/test_interop.py::test_asarray_keeps_the_sign_of_zero); a one-element
        # copy keeps the bits
        return cp.asarray(numpy.asarray(obj, dtype=dtype).reshape(1)).reshape(())
    if not hasattr(obj, "__cuda_array_interface__"):
        # host data: NumPy's conversion, and its errors, as on the NumPy backend; text and
        # objects come back as such for asarray to refuse (CuPy says "Unsupported dtype")
        try:
            obj = _host_array(obj, dtype, order, None)
        except TypeError:
            if not isinstance(obj, list | tuple):
                raise
            # a nest holding device arrays, which refuse NumPy's implicit conversion
            stacked = _stack_device_leaves(obj)
            if stacked is not None:
                _refuse_complex_to_real(stacked.dtype, dtype)
                return cp.asarray(stacked, dtype=dtype, order=order)
            obj = _host_array(_leaves_to_host(obj), dtype, order, None)
        if obj.dtype.kind not in "biufc":
            return obj
        return cp.asarray(obj, dtype=dtype, order=order)  # (an upload: new memory)
    return _conform(obj, cp.asarray(obj), dtype, order, copy)  # (a view, then as asked)


def _nested_leaves(obj, leaves: list) -> tuple[int, ...] | None:
    """The nesting shape of a regular nest of lists and tuples, its leaves appended to
    ``leaves`` in order; None where two branches differ in shape."""
    if not isinstance(obj, list | tuple):
        leaves.append(obj)
        return ()
    if not obj:
        return None
    inner = [_nested_leaves(o, leaves) for o in obj]
    if inner[0] is None or any(s != inner[0] for s in inner[1:]):
        return None
    return (len(obj),) + inner[0]


def _stack_device_leaves(obj):
    """A nest of device arrays of one shape, stacked on the device with NumPy's dtype
    (what ``numpy.asarray`` gives for the same arrays on the host), with no copy to the
    host and no synchronization; None for any other nest."""
    cp = runtime().xp
    leaves: list = []
    nest = _nested_leaves(obj, leaves)
    if nest is None or not all(isinstance(x, cp.ndarray) for x in leaves) or \
            any(x.shape != leaves[0].shape for x in leaves):
        return None
    common = functools.reduce(numpy.promote_types, {x.dtype for x in leaves})
    return cp.stack(leaves).astype(common, copy=False).reshape(nest + leaves[0].shape)


def _leaves_to_host(obj):
    """A nest with its device arrays copied to the host (synchronizing), for NumPy to
    convert as it would the same arrays on the host."""
    if isinstance(obj, list | tuple):
        return [_leaves_to_host(o) for o in obj]
    return obj.get() if hasattr(obj, "__cuda_array_interface__") and hasattr(obj, "get") \
        else obj


def _to_numpy(obj, dtype, order, copy):
    if _is_torch(obj) and getattr(obj, "is_cuda", False):
        bad_input("asarray", obj, "a CUDA tensor cannot be used on the NumPy backend; call "
                  ".cpu() first or run with a GPU")
    if hasattr(obj, "__cuda_array_interface__") and not isinstance(obj, numpy.ndarray):
        bad_input("asarray", obj, "device arrays (__cuda_array_interface__) cannot be used on "
                  "the NumPy backend; copy them to the host first")
    if hasattr(obj, "__dlpack__") and not hasattr(obj, "__array__"):  # a DLPack producer only
        dev = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else 1
        if dev != 1:  # (kDLCPU)
            bad_input("asarray", obj, f"device arrays (DLPack device type {dev}) cannot be "
                      "used on the NumPy backend; copy them to the host first")
        obj = numpy.from_dlpack(obj)
    # host data (a buffer, array.array or CPU tensor) is copied, as the upload to a device
    # copies it, so that the program's later writes to either side mean the same on every
    # backend; copy=False shares it
    return _host_array(obj, dtype, order, True if copy is None else copy)


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None,
                stream: Any = None) -> Any:
    """Zero-copy import of a DLPack-capable object (``__dlpack__``) as a darray.

    Parameters
    ----------
    x : object
        An object with ``__dlpack__`` and ``__dlpack_device__``.

    Returns
    -------
    darray
        The imported array (a view of ``x``'s memory, or its copy with ``copy=True``).

    Notes
    -----
    Stream semantics: the producer is asked to order its work before ``stream``
    (default: the current stream), so the data is ready for work queued there.
    ``copy=True`` returns a copy; ``copy=False`` refuses to copy (the import never does).
    """
    rt = runtime()
    if device is not None:
        check_device("from_dlpack", device)
    if stream is not None:
        return run_on(stream, "from_dlpack", from_dlpack, x, copy=copy)
    if not hasattr(x, "__dlpack__"):
        raise ArgumentTypeError(f"cuflow.from_dlpack: x must have __dlpack__ (an array or "
                                f"tensor of a DLPack library), got {type(x).__name__}; convert "
                                "other data with cuflow.asarray")
    try:
        r = rt.xp.from_dlpack(x)
    except (BufferError, RuntimeError) as e:
        if isinstance(e, rt.cuda_errors):
            reraise("from_dlpack", e)
        raise ArgumentError(f"cuflow.from_dlpack: the producer {type(x).__name__} refused the "
                            f"export: {e}") from e
    except Exception as e:
        reraise("from_dlpack", e)
    return rt.wrap(r.copy() if copy else r)


def asnumpy(a: Any, stream: Any = None, order: str = "C", out: Any = None,
            blocking: bool = True) -> Any:
    """Copy to a ``numpy.ndarray`` (waits for the data unless ``blocking=False`` with pinned ``out``).

    Parameters
    ----------
    a : darray or array_like
        What is copied.
    order : {"C", "F", "A", "K"}, default "C"
        Memory layout of the result.
    out : numpy.ndarray, optional
        A host array of ``a``'s shape and dtype to copy into (pinned for ``blocking=False``).
    blocking : bool, default True
        Wait for the copy; False returns once it is queued (``out`` must be pinned memory).

    Returns
    -------
    numpy.ndarray
        ``out`` when given, else a new host array.

    Notes
    -----
    Stream semantics: the device-to-host copy is queued on ``stream`` or the current
    stream, after the work queued there; with ``blocking=True`` the host waits for it.
    """
    rt = runtime()
    check_order("asnumpy", order, "CFA")  # (CuPy's get takes no "K")
    # checked on every backend, so a stream the GPU refuses is refused on the host too
    s = as_cupy_stream(stream, "asnumpy") if stream is not None else None
    if out is not None:
        check_host_out("asnumpy", a, out)
    if isinstance(a, numpy.ndarray) and not isinstance(a, rt.ndarray) or not rt.is_gpu:
        if out is not None:
            numpy.copyto(out, a)
            return out
        return numpy.array(a, order=order, copy=True, subok=False)
    if isinstance(a, rt.xp.ndarray):  # (CuPy's own get: cupy.asnumpy calls darray.get, ours)
        return rt.xp.ndarray.get(a, stream=s, order=order, out=out, blocking=blocking)
    return rt.xp.asnumpy(a, stream=s, order=order, out=out, blocking=blocking)


complete(globals(), [n for n in __all__ if n != "copy_into"], with_common_parameters)
