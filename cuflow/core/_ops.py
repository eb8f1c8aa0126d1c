"""Array operations with ``dst=`` and ``stream=``, bound to the active backend.

The public functions are defined at import (so ``import cuflow`` needs no
backend); :func:`_bind` fills in the backend's callables when the backend is
chosen.  Hot paths (binary ufuncs with ``dst=``, full reductions) are written
to add as little Python as possible on top of the CuPy call they make.

Stream semantics (all ops): the work is queued on ``stream=`` when given (the
result then remembers that stream, so DLPack consumers are ordered after it),
otherwise on the current stream.  Nothing here synchronizes the host, except
:func:`asnumpy` / ``to_numpy`` which must wait for the data.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import numpy

from . import _contract as _dst, _fastpath as _elementwise
from ._contract import broadcast_shape, check_casting, may_share, prepare_out, resolve_out
from ._contract import reduced_shape
from ._runtime import on_select, runtime, UFUNC_NAMES
from .._errors import CudaError, DstDtypeError, DstError, DstTypeError, OutOfMemoryError
from ._streams import as_cupy_stream, as_stream

# Bound by _bind(): the backend, its module, base array type and darray type.
_B: Any = None
_xp: Any = numpy
_nd: Any = numpy.ndarray
_D: Any = None
_GPU = False
_UNOWNED: Any = None
_MULTI = False
_FAST = False  # cuflow's own elementwise kernels (CuPy backend)
_ew_binary = None
_ew_unary = None

REDUCTION_NAMES = ("sum", "mean", "min", "max", "argmin", "argmax", "prod", "std", "var",
                   "any", "all")
_UF: dict[str, Any] = {}


# --------------------------------------------------------------------------- wrap
def _wrap_cupy(r):
    t = type(r)
    if t is _nd:
        r.__class__ = _D  # O(1): same layout, no new object
        return r
    if t is tuple or t is list:
        return t(_wrap_cupy(x) for x in r)
    return r


def _wrap_numpy(r):
    t = type(r)
    if t is numpy.ndarray:
        return r.view(_D)
    if isinstance(r, numpy.generic):  # CuPy returns 0-d arrays, never scalars
        return numpy.asarray(r).view(_D)
    if t is tuple or t is list:
        return t(_wrap_numpy(x) for x in r)
    return r


wrap = _wrap_numpy


def as_darray(x):
    """``x`` (an array of the backend) as a darray without copying and without mutating ``x``."""
    if isinstance(x, _D):
        return x
    return x.view(_D)


# ------------------------------------------------------------------------ streams
def _use(stream):
    s = as_cupy_stream(stream)
    return contextlib.nullcontext() if s is None else s


def _tag(r, stream):
    """Remember the stream a result was written on (orders DLPack consumers after it)."""
    if _GPU:
        s = as_stream(stream)
        for x in (r if type(r) is tuple else (r,)):
            with contextlib.suppress(AttributeError, TypeError):
                x._cf_stream = s
    return r


def _order_consumer_after(s, consumer):
    """Make the DLPack consumer stream wait for the work queued so far on cuflow stream ``s``."""
    ev = s.record()
    ptr = 0 if consumer is None else int(consumer)
    _xp.cuda.runtime.streamWaitEvent(ptr, ev.ptr, 0)


def _run(stream, fn, *args, **kwargs):
    with _use(stream):
        r = fn(*args, **kwargs)
    return _tag(r, stream)


# ------------------------------------------------------------------------- errors
def _reraise(name, e, dst=None):
    """Re-raise a backend exception as the matching cuflow error (original as __cause__)."""
    if isinstance(e, _B.oom_errors):
        raise OutOfMemoryError(f"cuflow.{name}: out of device memory: {e}") from e
    if isinstance(e, _B.cuda_errors):
        raise CudaError(f"cuflow.{name}: CUDA call failed: {e}") from e
    msg = str(e)
    if isinstance(e, TypeError):
        if dst is not None and "cast" in msg.lower():
            raise DstDtypeError(
                f"cuflow.{name}: the result cannot be written into dst of dtype {dst.dtype}: "
                f"{msg}; use a dst of the result dtype or casting='unsafe'") from e
        if "Unsupported type" in msg or "Argument" in msg and "ndarray" in msg:
            raise DstTypeError(
                f"cuflow.{name}: inputs must be arrays of the active {_B.name} backend or "
                f"scalars (convert host data with cuflow.asarray first): {msg}") from e
    raise e


def _bad_input(name, x):
    raise DstTypeError(
        f"cuflow.{name}: inputs must be arrays of the active {_B.name} backend or scalars, "
        f"got {type(x).__module__}.{type(x).__name__} (convert with cuflow.asarray first)")


# ------------------------------------------------------------------------ ufuncs
def _shape(x):
    return x.shape if isinstance(x, _nd) else ()


def _prep_ufunc(name, ins, dst, casting, dtype):
    """The output contract for an elementwise op; return the inputs to read."""
    if not isinstance(dst, _nd):
        prepare_out(name, dst, ())  # raises DstTypeError
    shape = dst.shape
    if any(isinstance(x, _nd) and x.shape != shape for x in ins) or (
            shape != () and not any(isinstance(x, _nd) for x in ins)):
        shape = broadcast_shape(name, *(_shape(x) for x in ins))
    return prepare_out(name, dst, shape, dtype, inputs=ins, casting=casting,
                       overlap="elementwise", ufunc=True)


def _ufunc_doc(name, nin, nout):
    args = "src" if nin == 1 else "src, other"
    return (
        f"Elementwise ``{name}`` (NumPy ufunc semantics), with an optional output.\n\n"
        f"Parameters\n----------\n{args} : darray or scalar\n"
        "dst : darray, optional\n    Output; the result shape must equal ``dst.shape`` and the "
        "result dtype must cast to ``dst.dtype`` under ``casting``. Nothing is allocated and "
        "``dst`` is returned.\nout : darray, optional\n    NumPy/CuPy spelling of ``dst``.\n"
        "stream : Stream, optional\n    Stream to run on (default: the current stream).\n"
        "casting : str, default 'same_kind'\ndtype : dtype, optional\n    Computation dtype.\n\n"
        "Returns\n-------\ndarray\n    ``dst`` when given, else a new darray.\n\n"
        "Notes\n-----\nStream semantics: asynchronous; queued on ``stream`` or the current stream.")


def _make_binary(name):
    fk = _elementwise.KERNELS.get(name)

    def f(src, other, dst=None, *, out=None, stream=None, casting="same_kind", dtype=None):
        if _FAST and fk is not None and out is None and dtype is None and stream is None:
            r = _ew_binary(fk, src, other, dst)  # None unless two CuPy arrays (and more)
            if r is not None:
                return r
        if _B is None:
            _ensure()
        if out is not None:
            dst = resolve_out(dst, out, name)
        if stream is not None:
            return _run(stream, f, src, other, dst, casting=casting, dtype=dtype)
        uf = _UF.get(name) or _missing(name)
        try:
            if dst is None:
                if dtype is None and casting == "same_kind":
                    r = uf(src, other)
                else:
                    r = uf(src, other, casting=casting, dtype=dtype)
                return r if type(r) is _D else wrap(r)
            src, other = _prep_ufunc(name, (src, other), dst, casting, dtype)
            if dtype is None and casting == "same_kind":
                if _GPU:
                    uf(src, other, dst)  # positional out: CuPy parses no kwargs dict
                else:
                    uf(src, other, out=dst)
            else:
                uf(src, other, out=dst, casting=casting, dtype=dtype)
            return dst
        except Exception as e:
            _reraise(name, e, dst)

    return f


def _make_unary(name):
    fk = _elementwise.KERNELS.get(name)

    def f(src, dst=None, *, out=None, stream=None, casting="same_kind", dtype=None):
        if _FAST and fk is not None and out is None and dtype is None and stream is None:
            r = _ew_unary(fk, src, dst)
            if r is not None:
                return r
        if _B is None:
            _ensure()
        if out is not None:
            dst = resolve_out(dst, out, name)
        if stream is not None:
            return _run(stream, f, src, dst, casting=casting, dtype=dtype)
        uf = _UF.get(name) or _missing(name)
        try:
            if dst is None:
                if dtype is None and casting == "same_kind":
                    r = uf(src)
                else:
                    r = uf(src, casting=casting, dtype=dtype)
                return r if type(r) is _D else wrap(r)
            src, = _prep_ufunc(name, (src,), dst, casting, dtype)
            if dtype is None and casting == "same_kind":
                uf(src, out=dst)
            else:
                uf(src, out=dst, casting=casting, dtype=dtype)
            return dst
        except Exception as e:
            _reraise(name, e, dst)

    return f


def _make_multi_out(name, nin):
    """Ufuncs with two outputs (modf, frexp, divmod): ``dst`` is a pair."""

    def f(*args, dst=None, out=None, stream=None, casting="same_kind", dtype=None):
        if _B is None:
            _ensure()
        if len(args) == nin + 2 and dst is None and out is None:
            args, dst = args[:nin], args[nin:]
        if len(args) != nin:
            raise TypeError(f"cuflow.{name} takes {nin} input(s), got {len(args)}")
        dst = resolve_out(dst, out, name)
        if stream is not None:
            return _run(stream, f, *args, dst=dst, casting=casting, dtype=dtype)
        uf = _UF.get(name) or _missing(name)
        try:
            if dst is None:
                return wrap(uf(*args, casting=casting, dtype=dtype))
            if not (isinstance(dst, tuple | list) and len(dst) == 2):
                raise DstError(f"cuflow.{name}: dst must be a pair of arrays, got {dst!r}")
            shape = numpy.broadcast_shapes(*(_shape(a) for a in args))
            ins = list(args)
            for d in dst:
                ins = list(prepare_out(name, d, shape, None, casting=casting, inputs=ins,
                                       overlap="elementwise"))
            uf(*ins, out=tuple(dst), casting=casting, dtype=dtype)
            return tuple(dst)
        except Exception as e:
            _reraise(name, e)

    return f


def _ensure():
    """Choose and bind the backend on first use (a no-op afterwards)."""
    runtime()


def _missing(name):
    if _B is None:
        _ensure()
        if name in _UF:
            return _UF[name]
    raise AttributeError(f"cuflow.{name} is not available on the {_B.name} backend")


def _make_ufunc(name):
    uf = getattr(numpy, name)
    if uf.nout == 1 and uf.nin == 2:
        f = _make_binary(name)
    elif uf.nout == 1 and uf.nin == 1:
        f = _make_unary(name)
    else:
        f = _make_multi_out(name, uf.nin)
    f.__name__ = f.__qualname__ = name
    f.__module__ = "cuflow"
    f.__doc__ = _ufunc_doc(name, uf.nin, uf.nout)
    f.nin, f.nout, f.nargs = uf.nin, uf.nout, uf.nargs
    return f


UFUNCS = {n: _make_ufunc(n) for n in UFUNC_NAMES}
_UFUNC_METHODS = ("reduce", "accumulate", "outer", "reduceat", "at")


def _bind_ufunc_methods():
    for name, f in UFUNCS.items():
        uf = _UF.get(name)
        for m in _UFUNC_METHODS:
            meth = getattr(uf, m, None) if uf is not None else None
            if meth is None:
                if hasattr(f, m):
                    delattr(f, m)
                continue
            setattr(f, m, _wrapped(meth))
        if uf is not None:
            f.types = getattr(uf, "types", None)
            f.identity = getattr(uf, "identity", None)


def _wrapped(fn):
    @functools.wraps(fn)
    def w(*args, **kwargs):
        return wrap(fn(*args, **kwargs))

    return w


# -------------------------------------------------------------------- reductions
_RES_DTYPE: dict = {}


def _reduction_dtype(name, dtype, kwdtype):
    """Result dtype of reduction ``name`` on ``dtype`` (NumPy as the oracle, cached)."""
    key = (name, dtype, kwdtype)
    r = _RES_DTYPE.get(key)
    if r is None:
        probe = numpy.ones((2,), dtype=dtype)
        kw = {} if kwdtype is None else {"dtype": kwdtype}
        with numpy.errstate(all="ignore"):
            r = numpy.asarray(getattr(probe, name)(**kw)).dtype
        if name in ("argmin", "argmax"):
            r = numpy.dtype(numpy.int64)
        _RES_DTYPE[key] = r
    return r


_SUM_LIKE = ("sum", "prod", "mean")
_STD_LIKE = ("std", "var")


def _reduce(name, a, axis, dtype, dst, keepdims, ddof, stream):
    if _B is None:
        _ensure()
    if stream is not None:
        return _run(stream, _reduce, name, a, axis, dtype, dst, keepdims, ddof, None)
    if not isinstance(a, _nd):
        _bad_input(name, a)
    base = _BASE_RED[name]
    kw = {}
    if axis is not None:
        kw["axis"] = axis
    if keepdims:
        kw["keepdims"] = True
    if dtype is not None:
        kw["dtype"] = dtype
    if ddof:
        kw["ddof"] = ddof
    try:
        if dst is None:
            return wrap(base(a, **kw))
        shape = reduced_shape(name, a.shape, axis, keepdims)
        rdt = _reduction_dtype(name, a.dtype, dtype)
        prepare_out(name, dst, shape, rdt, casting="same_kind")
        if _may_share(a, dst):
            a = a.copy()  # never reduce into memory that is still being read
        if _GPU and name == "min":
            # Observed on CuPy 14.2: ndarray.min(out=) raises inside the CUB dtype check
            # (out is taken for dtype) and minimum.reduce is not implemented, so min
            # reduces into a temporary of the output's size and copies it into dst.
            _xp.copyto(dst, base(a, **kw))
        else:
            base(a, out=dst, **kw)
        return dst
    except Exception as e:
        _reraise(name, e, dst)


def _make_reduction(name):
    if name in _SUM_LIKE:
        def f(a, axis=None, dtype=None, dst=None, keepdims=False, *, out=None, stream=None):
            if _B is None:
                _ensure()
            if (axis is None and dtype is None and dst is None and out is None and stream is None
                    and not keepdims and isinstance(a, _nd)):
                try:
                    return wrap(_BASE_RED[name](a))  # hot path: a.sum()
                except Exception as e:
                    _reraise(name, e)
            return _reduce(name, a, axis, dtype, resolve_out(dst, out, name), keepdims, 0, stream)
    elif name in _STD_LIKE:
        def f(a, axis=None, dtype=None, dst=None, ddof=0, keepdims=False, *, out=None,
              stream=None):
            if _B is None:
                _ensure()
            return _reduce(name, a, axis, dtype, resolve_out(dst, out, name), keepdims, ddof,
                           stream)
    else:
        def f(a, axis=None, dst=None, keepdims=False, *, out=None, stream=None):
            if _B is None:
                _ensure()
            if (axis is None and dst is None and out is None and stream is None
                    and not keepdims and isinstance(a, _nd)):
                try:
                    return wrap(_BASE_RED[name](a))
                except Exception as e:
                    _reraise(name, e)
            return _reduce(name, a, axis, None, resolve_out(dst, out, name), keepdims, 0, stream)

    has_dtype = name in _SUM_LIKE + _STD_LIKE
    f.__name__ = f.__qualname__ = name
    f.__module__ = "cuflow"
    f.__doc__ = (
        f"``{name}`` reduction (NumPy semantics; a full reduction returns a 0-d darray, as CuPy).\n\n"
        "Parameters\n----------\na : darray\naxis : int or tuple of int, optional\n"
        + ("dtype : dtype, optional\n" if has_dtype else "")
        + "dst : darray, optional\n    Output of exactly the reduced shape; nothing is allocated "
        "and ``dst`` is returned.\n"
        + ("ddof : int\n" if name in _STD_LIKE else "")
        + "keepdims : bool\nout : darray, optional\n    Spelling of ``dst``.\n"
        "stream : Stream, optional\n\nNotes\n-----\nStream semantics: asynchronous; queued on "
        "``stream`` or the current stream. Reading the value on the host (``float(x)``, "
        "``to_numpy``) synchronizes.")
    return f


_may_share = may_share


_BASE_RED: dict[str, Any] = {}
REDUCTIONS = {n: _make_reduction(n) for n in REDUCTION_NAMES}


# -------------------------------------------------------------------- transforms
def _copy_into(name, dst, src, casting, dtype=None):
    """Validated ``copyto(dst, src)`` where ``src`` has exactly the result shape."""
    prepare_out(name, dst, src.shape, src.dtype if dtype is None else dtype, casting=casting)
    if src is not dst and _may_share(src, dst):
        if src.shape == dst.shape and src.strides == dst.strides and _ptr(src) == _ptr(dst):
            if dst.dtype == src.dtype:
                return dst
        src = src.copy()
    _xp.copyto(dst, src, casting="unsafe" if dtype is not None else casting)
    return dst


def _ptr(x):
    return x.data.ptr if _GPU else x.__array_interface__["data"][0]


def copy(a, dst=None, *, out=None, order="K", casting="same_kind", stream=None):
    """Copy ``a``; with ``dst`` the copy is written there (no allocation) and ``dst`` returned.

    ``a`` may be a host ``numpy.ndarray`` when ``dst`` is a device array of the
    same shape and dtype (a host-to-device upload).

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    An upload is asynchronous only from pinned host memory
    (:func:`cuflow.memory.empty_pinned`); from pageable memory the host waits.
    """
    if _B is None:
        _ensure()
    dst = resolve_out(dst, out, "copy")
    if _GPU and type(a) is numpy.ndarray and dst is not None:
        return _upload(a, dst, stream)
    if stream is not None:
        return _run(stream, copy, a, dst, order=order, casting=casting)
    try:
        if dst is None:
            return wrap(_nd.copy(a, order=order))
        return _copy_into("copy", dst, a, casting)
    except Exception as e:
        _reraise("copy", e, dst)


def _upload(a, dst, stream):
    """Host ``a`` -> device ``dst`` (same shape and dtype; ``dst`` C-contiguous)."""
    prepare_out("copy", dst, a.shape, a.dtype, casting="no")
    if not dst.flags.c_contiguous:
        raise DstError("cuflow.copy: a host-to-device copy needs a C-contiguous dst, got "
                       f"strides {dst.strides} for shape {dst.shape}")
    try:
        dst.set(numpy.ascontiguousarray(a), stream=as_cupy_stream(stream))
    except Exception as e:
        _reraise("copy", e, dst)
    return _tag(dst, stream)


def astype(a, dtype, dst=None, *, out=None, order="K", casting="unsafe", copy=True,
           stream=None):
    """Cast ``a`` to ``dtype``; with ``dst`` (of that dtype) the result is written there.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    if _B is None:
        _ensure()
    dst = resolve_out(dst, out, "astype")
    if stream is not None:
        return _run(stream, astype, a, dtype, dst, order=order, casting=casting, copy=copy)
    dt = numpy.dtype(dtype)
    try:
        if not numpy.can_cast(a.dtype, dt, casting):
            raise DstDtypeError(f"cuflow.astype: cannot cast {a.dtype} to {dt} under "
                                f"casting={casting!r}")
        if dst is None:
            return wrap(_nd.astype(a, dt, order=order, copy=copy))
        if isinstance(dst, _nd) and dst.dtype != dt:
            raise DstDtypeError(f"cuflow.astype: dst.dtype must be the target dtype {dt}, "
                                f"got {dst.dtype}")
        return _copy_into("astype", dst, a, casting, dtype=dt)
    except Exception as e:
        _reraise("astype", e, dst)


def flatten(a, dst=None, *, out=None, order="C", stream=None):
    """1-D copy of ``a``; with ``dst`` (1-D, ``a.size`` elements) written there.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    if _B is None:
        _ensure()
    dst = resolve_out(dst, out, "flatten")
    if stream is not None:
        return _run(stream, flatten, a, dst, order=order)
    try:
        if dst is None:
            return wrap(_nd.flatten(a, order))
        prepare_out("flatten", dst, (a.size,), a.dtype)
        # A 1-D array reshapes to any shape as a view, so this never allocates.
        _copy_into("flatten", dst.reshape(a.shape, order=order), a, "same_kind")
        return dst
    except Exception as e:
        _reraise("flatten", e, dst)


def ravel(a, order="C", *, dst=None, out=None, stream=None):
    """View of ``a`` as 1-D when possible; with ``dst`` a copy into it (as :func:`flatten`)."""
    if _B is None:
        _ensure()
    dst = resolve_out(dst, out, "ravel")
    if dst is not None or stream is not None:
        return flatten(a, dst, order=order, stream=stream)
    return wrap(_xp.ravel(a, order))


def reshape(a, newshape, order="C", *, dst=None, out=None, stream=None):
    """View of ``a`` with a new shape; with ``dst`` the reshaped data is copied there."""
    if _B is None:
        _ensure()
    dst = resolve_out(dst, out, "reshape")
    v = _wrap_view(_xp.reshape(a, newshape, order=order), a)
    if dst is None:
        return v
    return copy(v, dst, stream=stream)


def transpose(a, axes=None, *, dst=None, out=None, stream=None):
    """Transposed view of ``a``; with ``dst`` the transposed data is copied there (contiguous)."""
    if _B is None:
        _ensure()
    dst = resolve_out(dst, out, "transpose")
    v = _wrap_view(_xp.transpose(a, axes), a)
    if dst is None:
        return v
    return copy(v, dst, stream=stream)


def ascontiguousarray(a, dtype=None, *, dst=None, out=None, stream=None):
    """C-contiguous version of ``a`` (``a`` itself when already so); with ``dst`` copied there."""
    if _B is None:
        _ensure()
    dst = resolve_out(dst, out, "ascontiguousarray")
    if dst is not None:
        return astype(a, dtype or a.dtype, dst, stream=stream) if dtype else copy(a, dst, stream=stream)
    if stream is not None:
        return _run(stream, ascontiguousarray, a, dtype)
    return _wrap_view(_xp.ascontiguousarray(a, dtype=dtype), a)


def _wrap_view(r, *inputs):
    """Wrap a result that may be one of the inputs (never re-class a caller's object)."""
    for x in inputs:
        if r is x:
            return as_darray(r) if isinstance(r, _nd) else r
    return wrap(r)


def _join(name, arrays, axis, dst, dtype, casting, stream, stack):
    if _B is None:
        _ensure()
    if stream is not None:
        return _run(stream, _join, name, arrays, axis, dst, dtype, casting, None, stack)
    fn = _xp.stack if stack else _xp.concatenate
    np_fn = numpy.stack if stack else numpy.concatenate
    try:
        if dst is None:
            return wrap(fn(arrays, axis=axis, dtype=dtype, casting=casting))
        arrays = [a if isinstance(a, _nd) else _bad_input(name, a) for a in arrays]
        if not arrays:
            raise ValueError(f"cuflow.{name}: need at least one array")
        shapes = [a.shape for a in arrays]
        probe = [numpy.lib.stride_tricks.as_strided(numpy.zeros((), a.dtype), s, (0,) * len(s))
                 for a, s in zip(arrays, shapes)]
        res = np_fn(probe, axis=axis, dtype=dtype, casting=casting)  # host-side shape/dtype oracle
        prepare_out(name, dst, res.shape, res.dtype, casting=casting)
        arrays = [a.copy() if _may_share(a, dst) else a for a in arrays]
        fn(arrays, axis=axis, out=dst, dtype=dtype, casting=casting)
        return dst
    except Exception as e:
        _reraise(name, e, dst)


def concatenate(arrays, axis=0, dst=None, *, out=None, dtype=None, casting="same_kind",
                stream=None):
    """Join arrays along an existing axis; with ``dst`` written there.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    return _join("concatenate", arrays, axis, resolve_out(dst, out, "concatenate"), dtype,
                 casting, stream, False)


def stack(arrays, axis=0, dst=None, *, out=None, dtype=None, casting="same_kind", stream=None):
    """Join arrays along a new axis; with ``dst`` written there.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    return _join("stack", arrays, axis, resolve_out(dst, out, "stack"), dtype, casting, stream,
                 True)


def _shape_oracle(name, fn, *arrays, **kw):
    """Result (shape, dtype) of ``fn`` without computing it on full-size data.

    The dtype (and NumPy's own argument checks) come from running ``fn`` on
    one-element-per-axis host stand-ins; the shape from the op's rule.  (Running
    ``fn`` on full-size stand-ins would compute, e.g., a whole matmul on the host.)
    """
    shapes = [a.shape for a in arrays if isinstance(a, _nd)]
    probe = [numpy.ones(tuple(min(d, 1) for d in a.shape), a.dtype) if isinstance(a, _nd)
             else a for a in arrays]
    with numpy.errstate(all="ignore"):
        dt = numpy.asarray(fn(*probe, **kw)).dtype
    if name in ("matmul", "dot"):
        return _contract_shape(name, arrays[0], arrays[1]), dt
    if name in ("cumsum", "cumprod"):
        a = arrays[0]
        return (a.size,) if kw.get("axis") is None else a.shape, dt
    return numpy.broadcast_shapes(*shapes), dt  # elementwise (clip, around)


def _contract_shape(name, a, b):
    """NumPy's result shape of ``matmul(a, b)`` / ``dot(a, b)``, inner sizes checked."""
    sa, sb = tuple(getattr(a, "shape", ())), tuple(getattr(b, "shape", ()))
    if name == "dot" and (not sa or not sb):
        return numpy.broadcast_shapes(sa, sb)
    if not sa or not sb:
        raise ValueError(f"cuflow.{name}: operands must be at least 1-D, got {sa} and {sb}")
    k_a = sa[-1]
    k_b = sb[-2] if len(sb) > 1 else sb[0]
    if k_a != k_b:
        raise ValueError(f"cuflow.{name}: the contracted sizes differ: {sa} and {sb} "
                         f"({k_a} != {k_b})")
    if name == "dot":
        return sa[:-1] + sb[:-2] + sb[-1:] if len(sb) > 1 else sa[:-1]
    batch = numpy.broadcast_shapes(sa[:-2], sb[:-2])
    return batch + (sa[-2:-1] if len(sa) > 1 else ()) + (sb[-1:] if len(sb) > 1 else ())


def _general(name, np_fn, xp_name, arrays, dst, stream, elementwise=False, **kw):
    """dst= for ops whose backend function takes ``out=`` (matmul, dot, clip, cumsum, round)."""
    if _B is None:
        _ensure()
    if stream is not None:
        return _run(stream, _general, name, np_fn, xp_name, arrays, dst, None, elementwise, **kw)
    fn = getattr(_xp, xp_name)
    try:
        if dst is None:
            return wrap(fn(*arrays, **kw))
        for a in arrays:
            if not (isinstance(a, _nd) or numpy.isscalar(a) or a is None):
                _bad_input(name, a)
        shape, dt = _shape_oracle(name, np_fn, *arrays, **kw)
        arrays = prepare_out(name, dst, shape, dt, inputs=arrays,
                             overlap="elementwise" if elementwise else "copy")
        fn(*arrays, out=dst, **kw)
        return dst
    except Exception as e:
        _reraise(name, e, dst)


def matmul(a, b, dst=None, *, out=None, stream=None):
    """Matrix product (NumPy ``matmul`` semantics); with ``dst`` written there.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    return _general("matmul", numpy.matmul, "matmul", (a, b), resolve_out(dst, out, "matmul"),
                    stream)


def dot(a, b, dst=None, *, out=None, stream=None):
    """Dot product (NumPy ``dot`` semantics); with ``dst`` written there.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    return _general("dot", numpy.dot, "dot", (a, b), resolve_out(dst, out, "dot"), stream)


def clip(a, a_min=None, a_max=None, dst=None, *, out=None, stream=None):
    """Clamp to ``[a_min, a_max]``; with ``dst`` written there.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    return _general("clip", numpy.clip, "clip", (a, a_min, a_max), resolve_out(dst, out, "clip"),
                    stream, elementwise=True)


def cumsum(a, axis=None, dtype=None, dst=None, *, out=None, stream=None):
    """Cumulative sum; with ``dst`` written there.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    return _general("cumsum", numpy.cumsum, "cumsum", (a,), resolve_out(dst, out, "cumsum"),
                    stream, axis=axis, dtype=dtype)


def cumprod(a, axis=None, dtype=None, dst=None, *, out=None, stream=None):
    """Cumulative product; with ``dst`` written there.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    return _general("cumprod", numpy.cumprod, "cumprod", (a,), resolve_out(dst, out, "cumprod"),
                    stream, axis=axis, dtype=dtype)


def around(a, decimals=0, dst=None, *, out=None, stream=None):
    """Round to ``decimals``; with ``dst`` written there.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    return _general("around", numpy.around, "around", (a,), resolve_out(dst, out, "around"),
                    stream, elementwise=True, decimals=decimals)


round = around  # noqa: A001  (NumPy's name)


# ---------------------------------------------------------------------- creation
def _creation(name):
    def f(*args, stream=None, **kwargs):
        if _B is None:
            _ensure()
        if stream is not None:
            return _run(stream, f, *args, **kwargs)
        try:
            return wrap(getattr(_xp, name)(*args, **kwargs))
        except Exception as e:
            _reraise(name, e)

    f.__name__ = f.__qualname__ = name
    f.__module__ = "cuflow"
    f.__doc__ = (f"``{name}`` as in NumPy/CuPy, returning a darray.\n\nNotes\n-----\n"
                 "Stream semantics: asynchronous; any initialization is queued on ``stream`` "
                 "or the current stream.")
    return f


CREATION_NAMES = ("zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like",
                  "full_like", "arange", "linspace", "eye", "identity")
CREATION = {n: _creation(n) for n in CREATION_NAMES}


# -------------------------------------------------------------------------- interop
def asarray(obj, dtype=None, order=None, *, copy=None, stream=None):
    """Convert to a darray of the active backend, without a copy where possible.

    Accepts darrays, CuPy and NumPy arrays, PyTorch tensors, objects with
    ``__cuda_array_interface__`` or ``__dlpack__``, scalars and sequences.  Device
    data is shared (zero-copy); host data is copied to the device.

    Notes
    -----
    Stream semantics: a host-to-device copy is queued on ``stream`` or the current
    stream.  DLPack imports order the current stream after the producer's stream.
    """
    if _B is None:
        _ensure()
    if stream is not None:
        return _run(stream, asarray, obj, dtype, order, copy=copy)
    if isinstance(obj, _nd):
        r = obj
        if dtype is not None and numpy.dtype(dtype) != obj.dtype or copy:
            r = _nd.astype(obj, dtype or obj.dtype, order=order or "K", copy=True)
        return as_darray(r)
    try:
        if _GPU:
            r = _to_cupy(obj, dtype, order)
        else:
            r = _to_numpy(obj, dtype, order)
        if copy and r is obj:
            r = r.copy()
        return as_darray(r) if r is obj else wrap(r)
    except Exception as e:
        _reraise("asarray", e)


def array(obj, dtype=None, copy=True, order="K", ndmin=0, *, stream=None):
    """Like :func:`asarray` but copies by default (NumPy's ``array``)."""
    if _B is None:
        _ensure()
    r = asarray(obj, dtype=dtype, copy=copy, stream=stream)
    if ndmin > r.ndim:
        r = r.reshape((1,) * (ndmin - r.ndim) + r.shape)
    return r


def _is_torch(obj):
    return type(obj).__module__.startswith("torch")


def _to_cupy(obj, dtype, order):
    cp = _xp
    if not isinstance(obj, numpy.ndarray) and hasattr(obj, "__dlpack__"):
        dev = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else None
        if dev in (2, 3, 13):  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged: zero-copy
            r = cp.from_dlpack(obj)
            return r if dtype is None else r.astype(dtype, copy=False)
        if _is_torch(obj):
            obj = obj.numpy(force=True) if hasattr(obj, "numpy") else numpy.asarray(obj)
    return cp.asarray(obj, dtype=dtype, order=order)


def _to_numpy(obj, dtype, order):
    if _is_torch(obj) and getattr(obj, "is_cuda", False):
        raise DstTypeError("cuflow.asarray: a CUDA tensor cannot be used on the NumPy backend; "
                           "call .cpu() first or run with a GPU")
    if hasattr(obj, "__cuda_array_interface__") and not isinstance(obj, numpy.ndarray):
        raise DstTypeError("cuflow.asarray: device arrays (__cuda_array_interface__) cannot be "
                           "used on the NumPy backend; copy them to the host first")
    return numpy.asarray(obj, dtype=dtype, order=order)


def from_dlpack(x, *, stream=None):
    """Zero-copy import of a DLPack-capable object (``__dlpack__``) as a darray.

    Notes
    -----
    Stream semantics: the producer is asked to order its work before ``stream``
    (default: the current stream), so the data is ready for work queued there.
    """
    if _B is None:
        _ensure()
    if stream is not None:
        return _run(stream, from_dlpack, x)
    return wrap(_xp.from_dlpack(x))


def asnumpy(a, stream=None, order="C", out=None, blocking=True):
    """Copy to a ``numpy.ndarray`` (waits for the data unless ``blocking=False`` with pinned ``out``)."""
    if _B is None:
        _ensure()
    if isinstance(a, numpy.ndarray) and not isinstance(a, _nd) or not _GPU:
        if out is not None:
            numpy.copyto(out, a)
            return out
        return numpy.array(a, order=order, copy=True, subok=False)
    return _xp.asnumpy(a, stream=as_cupy_stream(stream) if stream is not None else None,
                       order=order, out=out, blocking=blocking)


def _bind(b):
    """Bind this module to backend ``b`` (called once by ``_backend.get_backend``)."""
    global _B, _xp, _nd, _D, _GPU, _UNOWNED, _MULTI, _FAST, wrap
    global _ew_binary, _ew_unary
    _B, _xp, _nd, _D, _GPU = b, b.xp, b.ndarray, b.darray, b.is_gpu
    _FAST = b.fast is not None
    if _FAST:
        _ew_binary, _ew_unary = b.fast.binary, b.fast.unary
    _MULTI = b.device_count > 1
    if _GPU:
        _UNOWNED = b.xp.cuda.memory.UnownedMemory
        wrap = _wrap_cupy
    else:
        _UNOWNED = None
        wrap = _wrap_numpy
    _UF.clear()
    for n in UFUNC_NAMES:
        u = getattr(b.xp, n, None)
        if u is not None:
            _UF[n] = u
    _bind_ufunc_methods()
    _BASE_RED.clear()
    for n in REDUCTION_NAMES:
        _BASE_RED[n] = getattr(b.ndarray, n)


on_select(_bind)
