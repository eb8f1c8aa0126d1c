"""``darray``: cuflow's thin subclass of the backend's ndarray.

On the CuPy backend ``darray`` subclasses ``cupy.ndarray``, so CuPy functions,
RawKernel arguments and third-party CuPy code accept it unchanged; on the NumPy
backend it subclasses ``numpy.ndarray``.  The class adds no per-instance state
(``__slots__ = ()``), so turning a base array CuPy hands back into a darray is
an O(1) ``__class__`` switch, not a copy.

The methods that produce new arrays take Dolphin's ``dst=`` (``astype``,
``copy``, ``flatten`` and the reductions) and call the namespace function of the
same name, the one place their ``dst=`` contract is checked; everything else
is inherited.  With several devices, ``copy``, ``dot`` and item assignment also
refuse another device's array, as the ops do (:class:`~cuflow.DeviceError`).
"""

from __future__ import annotations

import functools
import sys
import types
from typing import Any

import numpy

from ._docs import complete, with_common_parameters
from ._engine import POW_OPERATOR, cast_op, ew_op
from ._expr import pow_operator
from ._fastpath import FILL, GETITEM, INPLACE, OPERATOR, REFLECTED, FastCall
from .._checks import is_integer
from .._errors import ArgumentError, ArgumentTypeError, DLPackCopyError

__all__ = ["make_darray_class", "REDUCTION_METHODS"]

#: the reductions that are also darray methods (with ``dst=`` and ``stream=``)
REDUCTION_METHODS = ("sum", "mean", "min", "max", "argmin", "argmax", "prod", "std", "var",
                     "any", "all")


def _no_copy_export(x: Any, dl_device: Any, copy: Any) -> None:
    """Raise the standard's BufferError for a DLPack export to another device without a copy."""
    if dl_device is not None and not (isinstance(dl_device, tuple | list) and len(dl_device) == 2
                                      and all(map(is_integer, dl_device))):
        raise ArgumentTypeError(f"cuflow.darray.__dlpack__: dl_device must be a (device type, "
                                f"device id) pair of ints, as __dlpack_device__ gives, got "
                                f"{dl_device!r}")
    if copy is False and dl_device is not None and \
            tuple(dl_device) != tuple(x.__dlpack_device__()):
        raise DLPackCopyError(
            f"cuflow.darray.__dlpack__: copy=False, but dl_device={tuple(dl_device)} is not "
            f"the array's device {tuple(x.__dlpack_device__())}: the export needs a copy "
            f"(copy=None or copy=True)")


def _given(**kw: Any) -> dict[str, Any]:
    """The keyword arguments that were given (not None), for the base's ``__dlpack__``."""
    return {k: v for k, v in kw.items() if v is not None}


def _ns() -> Any:
    """The cuflow namespace, which darray's producing methods call (array API dispatch).

    The namespace sits above this module, so it is reached the way any array
    API consumer reaches it, through ``__array_namespace__``, not by an import.
    """
    return sys.modules["cuflow"]

# Methods of the base class whose results CuPy/NumPy return as the base type
# and that cuflow re-classes to darray (O(1)).  Reductions and the Dolphin
# methods with dst= are defined explicitly below.
_RECLASS_METHODS = (
    "__matmul__", "__rmatmul__", "dot", "take", "repeat", "cumsum", "cumprod",
    "nonzero", "argsort", "searchsorted", "compress", "choose", "ptp", "trace",
    "conj", "conjugate", "round", "__copy__", "__deepcopy__",
)


def make_darray_class(base: type, backend: str, fast: Any = None,
                      ufuncs: dict[str, Any] | None = None) -> type:
    """Build the ``darray`` class for ``base`` (``cupy.ndarray`` or ``numpy.ndarray``).

    ``fast`` is the runtime's elementwise fast path, which the Python operators
    (``a + b`` & co.) take when it applies; ``ufuncs`` the ``remainder``,
    ``floor_divide`` and ``divmod`` behind ``%``, ``//`` and ``divmod()`` where the
    backend's own differ from NumPy's.
    """
    base_astype, base_copy = base.astype, base.copy
    # With several devices, ``copy``, ``dot`` and ``__setitem__`` refuse another device's
    # array as the ops do: the base class's own would compute on it (CuPy by peer access,
    # NumPy's emulated devices into an array of that device).  The CuPy runtime counts its
    # devices before it makes this class (``fast.multi``); the NumPy backend counts its
    # emulated ones only after, so there the check (a no-op with one device) runs each call.
    check = backend == "numpy" or fast is None or fast.multi
    ns: dict[str, Any] = {"__slots__": (), "__module__": "cuflow", "__qualname__": "darray"}
    ns["__doc__"] = (
        f"cuflow's array: a subclass of ``{base.__module__}.{base.__name__}`` "
        "whose producing methods accept ``dst=`` and ``stream=``.")

    # Overrides keep the base class's positional signature exactly: CuPy's own
    # Cython code calls these methods on darrays (cpdef dispatch), positionally.
    def astype(self, dtype, order="K", casting=None, subok=None, copy=True, *, dst=None,
               out=None, stream=None):
        """Cast to ``dtype``; with ``dst`` (Dolphin: ``astype(dtype, dst)``) written there.

        The parameters and result are those of :func:`cuflow.astype`, with this array as
        ``a``; ``dst`` may also come where ``order`` is, Dolphin's spelling, and NumPy's
        ``subok`` is taken and has no effect (the result is a darray).

        Parameters
        ----------
        dtype : dtype
            The result's dtype.
        casting : {"no", "equiv", "safe", "same_kind", "unsafe"}, optional
            Which casts are allowed (NumPy's rule); every one when omitted.
        subok : bool, optional
            NumPy's; no effect.
        copy : bool, default True
            False returns this array itself where its dtype and layout already fit.

        Returns
        -------
        darray
            ``dst`` when given; this array with ``copy=False`` where it fits; else a new
            array.

        See Also
        --------
        cuflow.astype

        Notes
        -----
        Stream semantics: queued on ``stream`` (default: the current stream).
        """
        if isinstance(order, base):  # Dolphin's positional dst
            order, dst = "K", order
        if dst is None and out is None and stream is None and casting is None:
            try:
                if fast is not None and copy and order in ("K", "C", "A"):
                    r = fast.ew(cast_op(dtype), (self,), None)
                    if r is not None:
                        return r
                r = base_astype(self, dtype, order=order, copy=copy)
                if r.dtype.kind in "biufc":  # (NumPy casts to text and objects too)
                    return _wrap(r)
            except Exception:  # (the namespace's checks below say what is wrong, as cuflow's)
                pass
        return _ns().astype(self, dtype, dst, out=out, order=order,
                           casting="unsafe" if casting is None else casting, copy=copy,
                           stream=stream)

    def copy(self, order="C", *, dst=None, out=None, stream=None):
        """Copy; with ``dst`` (Dolphin: ``copy(dst)``) the copy goes there and ``dst`` is returned.

        The parameters and result are those of :func:`cuflow.copy`, with this array as
        ``a``; ``dst`` may also come where ``order`` is, Dolphin's spelling.

        See Also
        --------
        cuflow.copy

        Notes
        -----
        Stream semantics: queued on ``stream`` (default: the current stream).
        """
        if check:
            _check_devices("darray.copy", self)
        if isinstance(order, base):
            order, dst = "C", order
        if dst is None and out is None and stream is None:
            try:
                if fast is not None and order in ("K", "C", "A"):
                    r = fast.ew(_COPY, (self,), None)
                    if r is not None:
                        return r
                return _wrap(base_copy(self, order))
            except Exception:  # (the namespace's checks below say what is wrong, as cuflow's)
                pass
        return _ns().copy(self, dst, out=out, order=order, stream=stream)

    def flatten(self, order="C", *, dst=None, out=None, stream=None):
        """1-D copy; with ``dst`` (Dolphin: ``flatten(dst)``) written there and ``dst`` returned.

        The parameters and result are those of :func:`cuflow.flatten`, with this array as
        ``a``; ``dst`` may also come where ``order`` is, Dolphin's spelling.

        See Also
        --------
        cuflow.flatten

        Notes
        -----
        Stream semantics: queued on ``stream`` (default: the current stream).
        """
        if isinstance(order, base):
            order, dst = "C", order
        return _ns().flatten(self, dst, out=out, order=order, stream=stream)

    def to_numpy(self, *, stream=None):
        """Copy to a new ``numpy.ndarray`` (alias of ``get()``).

        Parameters
        ----------
        stream : cuflow.Stream, optional
            The stream the copy is queued on; the current stream when omitted.

        Returns
        -------
        numpy.ndarray
            The data, on the host.

        Notes
        -----
        Stream semantics: the copy follows the work queued on ``stream``, and the host waits
        for it before returning.
        """
        return _ns().asnumpy(self, stream=stream)

    def __array_namespace__(self, /, *, api_version=None):
        """The cuflow namespace (array API)."""
        ns_mod = _ns()
        if api_version is not None and api_version not in ns_mod.__array_api_versions__:
            raise ArgumentError(f"cuflow implements array API versions "
                             f"{ns_mod.__array_api_versions__}, not {api_version!r}")
        return ns_mod

    def __index__(self):
        """A 0-d integer array as a Python int (array API; synchronizes on the GPU)."""
        if self.ndim != 0 or self.dtype.kind not in "iu":
            raise ArgumentTypeError(f"only 0-d integer arrays can be used as an index, got shape "
                            f"{self.shape} of dtype {self.dtype}")
        return int(self.item())

    def to_device(self, device, /, *, stream=None):
        """This array on ``device`` (array API): itself when already there, else a copy.

        Between GPUs the copy is a peer copy where the hardware allows it (peer access is
        enabled on first use), else the driver stages it through the host.

        Parameters
        ----------
        device : int, cuflow.Device or cupy.cuda.Device
            The destination (``"cpu"`` on the NumPy backend, which returns the array
            itself).
        stream : cuflow.Stream, optional
            The stream of the copy, on the destination device; its current stream when
            omitted.

        Returns
        -------
        darray
            This array when it is on ``device`` already, else a new array there.

        Notes
        -----
        Stream semantics: the copy is queued on ``stream`` or the destination
        device's current stream, after the work queued so far on the source
        device's current stream; the source device's current stream then waits
        for the copy, so the source's memory is not reused before it is read.
        """
        # (checked on every backend, before an early return; None stays None)
        given = _ns().core.as_cupy_stream(stream, "darray.to_device") if stream is not None \
            else None
        if backend == "numpy":
            return _host_to_device(self, device)
        cupy = sys.modules["cupy"]
        dev = _ns().Device(device).id
        src_dev = self.data.device_id
        if dev == src_dev:
            return self
        _enable_peer(cupy, src_dev, dev)
        with cupy.cuda.Device(src_dev):
            src = self if self.flags.c_contiguous else base.copy(self)
            ready = cupy.cuda.Event(disable_timing=True)
            ready.record()  # the work queued so far on the source device's current stream
        with cupy.cuda.Device(dev):
            s = cupy.cuda.get_current_stream() if given is None else given
            with s:
                s.wait_event(ready)
                r = cls(src.shape, src.dtype)
                # an explicit peer copy: cudaMemcpyAsync (CuPy's copy_from_device_async)
                # refuses memory of the driver's stream-ordered pools of another device
                # (bench/peer_copy.py), cudaMemcpyPeerAsync copies it
                cupy.cuda.runtime.memcpyPeerAsync(r.data.ptr, dev, src.data.ptr, src_dev,
                                                  src.nbytes, s.ptr)
                done = cupy.cuda.Event(disable_timing=True)
                done.record(s)
        with cupy.cuda.Device(src_dev):
            cupy.cuda.get_current_stream().wait_event(done)
        return r

    ns.update(astype=astype, copy=copy, flatten=flatten, to_numpy=to_numpy,
              __array_namespace__=__array_namespace__, __index__=__index__,
              to_device=to_device)
    for rname in REDUCTION_METHODS:
        ns[rname] = _reduction_method(rname)

    if backend == "cupy":
        base_getitem = base.__getitem__

        def __getitem__(self, key):
            r = base_getitem(self, key)
            if type(r) is base:  # advanced indexing hands back the base type
                r.__class__ = cls
            return r

        base_dlpack = base.__dlpack__

        def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
            """DLPack export (array API): CuPy's, and with ``copy=True`` on the array's own
            device a copy's (CuPy copies only to the host); ``copy=False`` to another device
            raises :class:`~cuflow.DLPackCopyError` (a ``BufferError``).

            Notes
            -----
            Stream semantics: the consumer's ``stream`` is ordered after the work queued
            so far on the current stream, the copy included.
            """
            _no_copy_export(self, dl_device, copy)
            kw = _given(stream=stream, max_version=max_version, dl_device=dl_device)
            if copy and (dl_device is None or tuple(dl_device) == self.__dlpack_device__()):
                return base_dlpack(base.copy(self), **kw)
            return base_dlpack(self, **kw) if copy is None else base_dlpack(self, copy=copy, **kw)

        ns.update(__getitem__=__getitem__, __dlpack__=__dlpack__)
        if fast is not None:
            ns.update(_fast_operators(base, fast))
            ns["__hash__"] = base.__hash__  # defining __eq__ would otherwise unset it
        if ufuncs is not None:
            ns.update(_division_operators(ufuncs, lambda r: _wrap(r)))
    else:
        base_getitem = base.__getitem__

        def __getitem__(self, key):
            r = base_getitem(self, key)
            if isinstance(r, numpy.generic):  # CuPy returns 0-d arrays, so do we
                r = numpy.asarray(r).view(type(self))  # an emulated device's class stays
            return r

        base_dlpack = base.__dlpack__

        def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
            """DLPack export (array API): NumPy's; ``copy=False`` to another device raises
            :class:`~cuflow.DLPackCopyError` (a ``BufferError``)."""
            _no_copy_export(self, dl_device, copy)
            if stream is not None:  # (the standard's rule for host memory)
                raise ArgumentError(f"cuflow.darray.__dlpack__: stream must be None for an "
                                    f"array in host memory, got {stream!r}")
            return base_dlpack(self, **_given(max_version=max_version, dl_device=dl_device,
                                              copy=copy))

        # NumPy prints an array of a subclass through its __getitem__, whose 0-d arrays it
        # formats as Python floats (float16 0.1 as 0.09997559): print the base class's view
        def __repr__(self):
            name = type(self).__name__  # (in place of NumPy's "array", lines re-indented)
            first, *rest = numpy.array_repr(self.view(numpy.ndarray)).split("\n")
            pad = " " * (len(name) - len("array"))
            return "\n".join([name + first[5:], *(pad + line if line else line for line in rest)])

        def __str__(self):
            return numpy.array_str(self.view(numpy.ndarray))

        ns.update(__getitem__=__getitem__, __dlpack__=__dlpack__, __repr__=__repr__,
                  __str__=__str__)

    def get(self, stream=None, order="C", out=None, blocking=True):
        """CuPy's ``get``: a ``numpy.ndarray`` copy (:func:`cuflow.asnumpy`), into ``out`` if
        given (a ``numpy.ndarray`` of the array's shape and dtype).

        Parameters
        ----------
        out : numpy.ndarray, optional
            A host array of this array's shape and dtype to copy into (pinned for
            ``blocking=False``).
        blocking : bool, default True
            Wait for the copy; False returns once it is queued (``out`` must be pinned
            memory).

        Returns
        -------
        numpy.ndarray
            ``out`` when given, else a new host array.

        Notes
        -----
        Stream semantics: the copy is queued on ``stream`` or the current stream; it waits
        for it unless ``blocking=False`` with pinned ``out``.
        """
        return _ns().asnumpy(self, stream=stream, order=order, out=out, blocking=blocking)

    ns["get"] = get
    # the parameters common to the namespace's functions (dst, out, order, stream ...) from
    # their one table
    complete(ns, ("astype", "copy", "flatten", "get", "to_device"), with_common_parameters)
    if check:
        ns["dot"] = _reclass_method(base.dot, "dot", checked=True)
        base_setitem = base.__setitem__

        def __setitem__(self, key, value):
            """``self[key] = value`` (the base class's), its arrays on the current device."""
            _check_devices("darray.__setitem__", self, value,
                           *(key if type(key) is tuple else (key,)))
            base_setitem(self, key, value)

        ns["__setitem__"] = __setitem__

    for mname in _RECLASS_METHODS:
        if hasattr(base, mname) and mname not in ns:
            ns[mname] = _reclass_method(getattr(base, mname), mname)

    cls = type("darray", (base,), ns)
    if backend == "cupy" and FastCall is not None and \
            isinstance(base.__getitem__, types.WrapperDescriptorType):
        # the same from C, where the base's subscript is a C slot (it cannot call back)
        cls.__getitem__ = functools.update_wrapper(
            FastCall((base, cls), __getitem__, 2, None, GETITEM), __getitem__)

    if backend == "cupy":
        def _wrap(r):
            t = type(r)
            if t is base:
                r.__class__ = cls
                return r
            if t is tuple or t is list:
                return t(_wrap(x) for x in r)
            return r
    else:
        def _wrap(r):
            t = type(r)
            if t is base:
                return r.view(cls)
            if isinstance(r, numpy.generic):
                return numpy.asarray(r).view(cls)
            if t is tuple or t is list:
                return t(_wrap(x) for x in r)
            return r
    cls._cf_wrap = staticmethod(_wrap)
    return cls


# Python operators that take the engine's kernels (CuPy backend): op name, reflected
_EW_OPS = {"__add__": ("add", False), "__sub__": ("subtract", False),
           "__mul__": ("multiply", False), "__truediv__": ("divide", False),
           "__radd__": ("add", True), "__rsub__": ("subtract", True),
           "__rmul__": ("multiply", True), "__rtruediv__": ("divide", True),
           "__pow__": ("power", False), "__rpow__": ("power", True),
           "__lt__": ("less", False), "__le__": ("less_equal", False),
           "__gt__": ("greater", False), "__ge__": ("greater_equal", False),
           "__eq__": ("equal", False), "__ne__": ("not_equal", False)}
_EW_INPLACE = {"__iadd__": "add", "__isub__": "subtract", "__imul__": "multiply",
               "__itruediv__": "divide"}
_EW_UNARY = {"__neg__": "negative", "__abs__": "absolute"}
_COPY = ew_op("copy")


def _fast_operators(base, fast):
    """``a + b`` & co. and ``fill`` enter the engine's launch from C where it applies
    (``FastCall``, no Python frame: bench op zoo ``x * 2``, ``-x``, ``x == y``,
    ``o.fill(0)``), else CuPy's.  Without the extension fast's methods never launch, and
    the darray keeps CuPy's."""
    if FastCall is None:
        return {}
    ops = {}
    for mname, (op, reflected) in _EW_OPS.items():
        ops[mname] = _operator(fast, mname, op, base, 2, REFLECTED if reflected else OPERATOR)
    for mname, op in _EW_INPLACE.items():
        ops[mname] = _operator(fast, mname, op, base, 2, INPLACE)
    for mname, op in _EW_UNARY.items():
        ops[mname] = _operator(fast, mname, op, base, 1, OPERATOR)
    base_fill = base.fill

    def fill(self, value):
        """Fill the array with a scalar value (NumPy's ``fill``).

        A C-contiguous array takes one driver memset (bench op zoo ``o.fill(0)``) for zero
        (``0``, ``False``, ``+0.0``) in any dtype, a bool or an in-range int in the bool,
        8-, 16- and 32-bit integer dtypes, and a bool, an int up to 2**24 in magnitude or a
        float in float32; every other value and layout takes CuPy's ``fill``.

        Notes
        -----
        Stream semantics: asynchronous; queued on the current stream.
        """
        base_fill(self, value)

    ops["fill"] = functools.update_wrapper(FastCall(None, fill, 2, fast, FILL), fill)
    return ops


def _operator(fast, mname, op, base, nin, kind):
    """The operator ``mname``: the engine's launch of ``op`` from C, else CuPy's operator
    (after the device check, with several devices: CuPy would read another device's array
    through peer access)."""
    base_fn = getattr(base, mname)
    if mname == "__pow__":
        base_fn = _numpy_pow(base_fn)
    if fast.multi:
        def fn(self, *args):
            _check_devices(mname, self, *args)
            return base_fn(self, *args)
    else:
        fn = base_fn
    return FastCall(POW_OPERATOR if mname == "__pow__" else ew_op(op), fn, nin, fast, kind)


def _numpy_pow(base_pow):
    """``x ** y`` with NumPy's scalar shortcut: ``x ** 2`` squares, so a bool array gives
    int8 (``power(x, 2)`` gives int64)."""
    def pow_(self, o):
        if pow_operator(self, o)[0] == "square":  # (the tracer's rule: _expr.pow_operator)
            return _ns().square(self)
        return base_pow(self, o)
    return pow_


def _check_devices(name, *arrays):
    _ns().get_backend().check_devices(name, *arrays)


_PEERS: set = set()


def _enable_peer(cupy, src_dev, dev):
    """Let ``dev`` read ``src_dev``'s memory directly, where the hardware allows it (once a pair)."""
    if (src_dev, dev) in _PEERS:
        return
    rt = cupy.cuda.runtime
    if rt.deviceCanAccessPeer(dev, src_dev):
        with cupy.cuda.Device(dev):
            try:
                rt.deviceEnablePeerAccess(src_dev)
            except rt.CUDARuntimeError as e:  # enabled already, by CuPy or another library
                if "PeerAccessAlreadyEnabled" not in str(e):
                    raise
    _PEERS.add((src_dev, dev))


def _host_to_device(a, device):
    """``to_device`` on the NumPy backend: ``"cpu"``, or an emulated device (a copy)."""
    if isinstance(device, str):
        if device != "cpu":
            raise ArgumentError(f"to_device: the NumPy backend's devices are 'cpu' and emulated "
                                f"ordinals (CUFLOW_NUMPY_DEVICES), got {device!r}")
        return a
    ns = _ns()
    dev = ns.Device(device).id
    rt = ns.get_backend()
    if getattr(a, "_cf_device", 0) == dev:
        return a
    with ns.Device(dev):
        return rt.as_darray(numpy.array(a.view(numpy.ndarray), copy=True))


def _division_operators(ufuncs, wrap):
    """``%``, ``//`` and ``divmod()``, their reflections and ``%=`` / ``//=``, through the
    ``remainder``, ``floor_divide`` and ``divmod`` of ``ufuncs``."""
    ns = {}
    for op, name in (("mod", "remainder"), ("floordiv", "floor_divide")):
        uf = ufuncs[name]

        def forward(self, other, uf=uf):
            return wrap(uf(self, other))

        def reflected(self, other, uf=uf):
            return wrap(uf(other, self))

        def in_place(self, other, uf=uf):
            uf(self, other, out=self)
            return self

        ns.update({f"__{op}__": forward, f"__r{op}__": reflected, f"__i{op}__": in_place})
    dm = ufuncs["divmod"]
    ns["__divmod__"] = lambda self, other: tuple(map(wrap, dm(self, other)))
    ns["__rdivmod__"] = lambda self, other: tuple(map(wrap, dm(other, self)))
    return ns


def _reduction_method(name):
    def method(self, *args, **kwargs):
        return getattr(_ns(), name)(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = (f"``cuflow.{name}(self, ...)``: the reduction, with ``dst=`` and "
                      f"``stream=``.\n\n"
                      f"Its parameters, result and stream semantics are those of\n"
                      f":func:`cuflow.{name}`, with this array as ``a``.\n\n"
                      f"See Also\n--------\ncuflow.{name}\n")
    return method


def _reclass_method(fn, name, checked=False):
    if checked:  # (its arrays on the current device, as the ops check)
        def method(self, *args, **kwargs):
            _check_devices(f"darray.{name}", self, *args, *kwargs.values())
            return type(self)._cf_wrap(fn(self, *args, **kwargs))
    else:
        def method(self, *args, **kwargs):
            return type(self)._cf_wrap(fn(self, *args, **kwargs))

    method.__name__ = name
    method.__doc__ = fn.__doc__
    return method
