"""The runtime: the one object that says what cuflow runs on.

:func:`runtime` returns the active :class:`Runtime`: the array module (CuPy,
the product, or NumPy, the CPU fallback and test oracle), its array types, the
device count, the current device and stream, the elementwise launcher and the
CUDA error types.  Every module asks for it at the moment it needs it; no
module writes into another.  Subsystems that keep per-backend state (the
memory pool, instrumentation) subscribe with :func:`on_select` and are told
when a runtime becomes active.

Nothing here runs at ``import cuflow``: the backend is chosen on first need
(the first array, stream or ``darray`` access), so importing cuflow never
imports CuPy or creates a CUDA context.  ``CUFLOW_BACKEND=cupy|numpy`` forces
the choice; otherwise CuPy is used when it imports and sees a GPU, and NumPy is
used with a one-line warning.

Devices: :class:`Device` makes a device current for a block (``with
cuflow.Device(1):``), on CuPy through ``cupy.cuda.Device``.  With
``CUFLOW_NUMPY_DEVICES=N`` the NumPy backend emulates ``N`` devices, so the
device bookkeeping runs without a GPU: every darray is made on the current
device and knows it (one darray subclass per emulated device), and an op that
mixes devices raises :class:`~cuflow.DeviceError` exactly as on the GPU.
"""

from __future__ import annotations

import ctypes
import os
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy

from .._env import env_switch
from .._errors import ArgumentError, ArgumentTypeError, BackendError, DeviceError
from ._cupy_ufuncs import make_complex_special, make_divmod, make_floor_divide, make_remainder
from ._darray import make_darray_class
from ._fastpath import FastPath, make_fast_path

__all__ = ["Runtime", "Device", "runtime", "active", "get_backend", "set_backend", "on_select",
           "probe_cupy", "emulated_devices", "arrays_in"]

_VALID = ("cupy", "numpy")

#: every NumPy ufunc with a plain (non-generalized) signature: cuflow's elementwise API
UFUNC_NAMES = tuple(sorted(
    n for n in dir(numpy)
    if isinstance(getattr(numpy, n), numpy.ufunc) and getattr(numpy, n).signature is None))


@dataclass(frozen=True, eq=False)
class Runtime:
    """The active backend and everything cuflow asks of it.

    Attributes
    ----------
    name : {"cupy", "numpy"}
    xp : module
        ``cupy`` or ``numpy``.
    ndarray : type
        The backend's base array type (``cupy.ndarray`` or ``numpy.ndarray``).
    darray : type
        cuflow's subclass of ``ndarray``.
    device_count : int
        Number of visible CUDA devices (0 on the NumPy backend).
    reason : str
        Why this backend was chosen.
    cuda_errors, oom_errors, compile_errors : tuple of type
        The backend's CUDA, out-of-memory and kernel-compile exception types.
    unowned : type or None
        CuPy's ``UnownedMemory`` (memory cuflow's pool did not hand out).
    fast : FastPath or None
        The elementwise launcher (CuPy backend, unless ``CUFLOW_FAST=0``).
    ufuncs : dict
        The backend's ufunc for each name of :data:`UFUNC_NAMES` it has.
    stream_ptr_fn : capsule or None
        CuPy's C function that returns the current stream's handle.
    current_device : callable
        The current device's ordinal (0 on the NumPy backend unless it emulates devices).
    is_gpu : bool
        True on the CuPy backend.
    set_device : callable
        Make the device of this ordinal current (for this thread); :class:`Device` calls it.
    multi : bool
        More than one device: ops check that their arrays are on the current device.
    device_classes : tuple of type
        The NumPy backend's darray class of each emulated device (empty otherwise).
    """

    name: str
    xp: ModuleType
    ndarray: type
    darray: type
    device_count: int
    reason: str
    cuda_errors: tuple = ()
    oom_errors: tuple = ()
    compile_errors: tuple = ()
    unowned: Any = None
    fast: FastPath | None = None
    ufuncs: dict = field(default_factory=dict)
    stream_ptr_fn: Any = None
    current_device: Callable[[], int] = field(default=lambda: 0)
    is_gpu: bool = False
    set_device: Callable[[int], None] = field(default=lambda i: None)
    multi: bool = False
    device_classes: tuple = ()

    def data_ptr(self, x: Any) -> int:
        """Address of ``x``'s first element."""
        return x.data.ptr if self.name == "cupy" else x.__array_interface__["data"][0]

    def wrap(self, r: Any) -> Any:
        """A result of the backend as darray(s): O(1), no copy (tuples, named tuples and
        lists too)."""
        t = type(r)
        if t is self.ndarray:
            if self.name == "cupy":
                r.__class__ = self.darray  # same layout, no new object
                return r
            return r.view(self._host_class())
        if t is tuple or t is list:
            return t(self.wrap(x) for x in r)
        if isinstance(r, tuple) and hasattr(t, "_make"):  # a named tuple (unique_counts, svd)
            return t._make(self.wrap(x) for x in r)
        if self.name == "numpy" and isinstance(r, numpy.generic):
            # CuPy returns 0-d arrays, never scalars
            return numpy.asarray(r).view(self._host_class())
        return r

    def as_darray(self, x: Any) -> Any:
        """``x`` (an array of the backend) as a darray, without copying or mutating ``x``."""
        if isinstance(x, self.darray):
            return x
        return x.view(self.darray if self.is_gpu else self._host_class())

    def _host_class(self) -> type:
        """The NumPy backend's darray class of the current (emulated) device."""
        return self.device_classes[self.current_device()] if self.device_classes else self.darray

    # -- devices ------------------------------------------------------------
    def device_of(self, x: Any) -> int | None:
        """The device ordinal of array ``x``; None for host data (usable on every device)."""
        if self.is_gpu:
            return x.data.device_id if isinstance(x, self.ndarray) else None
        return getattr(x, "_cf_device", None)

    def check_devices(self, name: str, *arrays: Any) -> None:
        """Raise :class:`~cuflow.DeviceError` unless every array of ``arrays`` is on the current device.

        Scalars, host arrays and None pass.  Cheap enough for every op: a no-op
        with one device.
        """
        if not self.multi:
            return
        dev = self.current_device()
        for x in arrays:
            if isinstance(x, self.ndarray):
                d = self.device_of(x)
                if d is not None and d != dev:
                    raise DeviceError(
                        f"cuflow.{name}: an input is on device {d} but the op runs on the "
                        f"current device {dev}; copy it with x.to_device({dev}) or run the op "
                        f"under `with cuflow.Device({d}):`")


class Device:
    """A device, and the context that makes it current: ``with cuflow.Device(1): ...``.

    Parameters
    ----------
    device : int, Device, cupy.cuda.Device or None
        The ordinal (an object with ``.id`` is read for it); None: the current device.

    Notes
    -----
    Arrays, streams, events, Bufferizers and Pipelines belong to the device
    that was current when they were made; ops run on the current device and
    refuse arrays of another one (:class:`~cuflow.DeviceError`), except the
    explicit copy ``x.to_device(i)``.  The block restores the previous device
    on exit, also when it raises.  On CuPy the block is ``cupy.cuda.Device(i)``'s
    (so CuPy code inside it runs there too); the NumPy backend keeps the
    current device per thread.
    """

    __slots__ = ("id", "_prev")

    def __init__(self, device: Any = None) -> None:
        rt = runtime()
        i = rt.current_device() if device is None else getattr(device, "id", device)
        if isinstance(i, bool) or not isinstance(i, int | numpy.integer):
            raise ArgumentError(f"cuflow.Device: device must be an int ordinal (or an object "
                                f"with .id), got {device!r}")
        n = max(rt.device_count, 1)
        if not 0 <= i < n:
            hint = ("" if rt.is_gpu else
                    "; the NumPy backend emulates devices with CUFLOW_NUMPY_DEVICES=N")
            raise ArgumentError(f"cuflow.Device: device must be in [0, {n}) on the {rt.name} "
                                f"backend ({n} device(s)), got {i}{hint}")
        self.id = int(i)
        self._prev: dict[int, list[int]] = {}  # thread -> devices to restore (a shared
        # Device object may be entered by several threads at once)

    def __enter__(self) -> Device:
        """Make this device current in the block (per thread)."""
        rt = runtime()
        prev = rt.current_device()
        self._prev.setdefault(threading.get_ident(), []).append(prev)
        if prev != self.id:
            rt.set_device(self.id)
        return self

    def __exit__(self, *exc: object) -> None:
        """Make current again the device that was current when this thread's block began."""
        me = threading.get_ident()
        held = self._prev[me]
        prev = held.pop()
        if not held:
            del self._prev[me]
        if prev != self.id:
            runtime().set_device(prev)

    def synchronize(self) -> None:
        """Block the host until all work queued on this device is done."""
        rt = runtime()
        if rt.is_gpu:
            rt.xp.cuda.Device(self.id).synchronize()

    def use(self) -> None:
        """Make this device current for the calling thread, until another is made current
        (CuPy's ``Device.use``; ``with`` restores the previous one on exit)."""
        runtime().set_device(self.id)

    def _gpu(self, what: str) -> Any:
        rt = runtime()
        if not rt.is_gpu:
            raise BackendError(f"cuflow.Device.{what} describes a GPU, and the {rt.name} "
                               "backend runs on the host")
        return rt.xp.cuda.Device(self.id)

    @property
    def compute_capability(self) -> str:
        """The compute capability as CuPy gives it (``"90"`` for 9.0); a GPU's only
        (:class:`~cuflow.BackendError` on the NumPy backend)."""
        return self._gpu("compute_capability").compute_capability

    @property
    def mem_info(self) -> tuple[int, int]:
        """``(free, total)`` bytes of device memory (``cudaMemGetInfo``); a GPU's only
        (:class:`~cuflow.BackendError` on the NumPy backend)."""
        d = self._gpu("mem_info")
        with d:
            return runtime().xp.cuda.runtime.memGetInfo()

    @property
    def count(self) -> int:
        """How many devices there are (emulated ones on the NumPy backend)."""
        return max(runtime().device_count, 1)

    def __index__(self) -> int:
        return self.id

    __int__ = __index__

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Device):
            return self.id == other.id
        if isinstance(other, int) and not isinstance(other, bool):
            return self.id == other
        oid = getattr(other, "id", None)
        return NotImplemented if oid is None else self.id == oid

    def __hash__(self) -> int:
        return hash(("cuflow.Device", self.id))

    def __repr__(self) -> str:
        return f"<cuflow.Device {self.id}>"


_lock = threading.Lock()
_current: Runtime | None = None
_hooks: list[Callable[[Runtime], None]] = []


def runtime() -> Runtime:
    """Return the active runtime, choosing the backend on the first call."""
    rt = _current
    if rt is None:
        with _lock:
            rt = _current if _current is not None else _activate(_select())
    return rt


get_backend = runtime  # the public name (``cuflow.get_backend``)


def active() -> Runtime | None:
    """The active runtime, or None before the first use chooses one (chooses nothing)."""
    return _current


def on_select(hook: Callable[[Runtime], None]) -> None:
    """Call ``hook(rt)`` whenever a runtime becomes active (now too, if one is)."""
    _hooks.append(hook)
    if _current is not None:
        hook(_current)


def probe_cupy() -> tuple[ModuleType | None, int, str]:
    """Import CuPy and count devices without creating a context."""
    try:
        import cupy  # noqa: PLC0415  (optional dependency)
    except ModuleNotFoundError as exc:
        if exc.name != "cupy":
            return None, 0, f"CuPy is installed but does not import ({exc})"
        return None, 0, 'no CuPy installed (pip install "cuflow[cuda12]" or "cuflow[cuda13]")'
    except Exception as exc:  # a broken install
        return None, 0, f"CuPy is installed but does not import ({type(exc).__name__}: {exc})"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver, insufficient driver, no device
        return cupy, 0, _no_gpu_cause(exc, cupy)
    if n < 1:
        return cupy, 0, "no GPU found"
    return cupy, n, f"CuPy {cupy.__version__} with {n} GPU(s)"


def _no_gpu_cause(exc: Exception, cupy: ModuleType) -> str:
    """What ``getDeviceCount``'s failure means, in the user's terms.

    CUDA's runtime reports a machine without the NVIDIA driver as "driver version is
    insufficient" (35), so the driver library is asked for itself before blaming it.
    """
    status = getattr(exc, "status", None)
    if status == 100:  # cudaErrorNoDevice
        return "no GPU found"
    if status == 35:  # cudaErrorInsufficientDriver
        try:
            libcuda = ctypes.CDLL("libcuda.so.1")
        except OSError:
            return "no GPU found (no NVIDIA driver is installed)"
        version = ctypes.c_int(0)
        if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0 or version.value == 0:
            return "no GPU found (the NVIDIA driver does not start)"
        have = f"{version.value // 1000}.{version.value % 1000 // 10}"
        need = cupy.cuda.runtime.runtimeGetVersion()
        return (f"the NVIDIA driver is too old: it supports CUDA {have}, this CuPy needs "
                f"{need // 1000}.{need % 1000 // 10} (update the driver, or install the "
                f"CuPy for CUDA {have.split('.')[0]})")
    return f"CuPy sees no usable GPU ({exc})"


def _stream_ptr_fn() -> Any:
    """CuPy's C function that gives the current stream's handle, as a capsule (or ``None``).

    ``cupy_backends.cuda.stream.get_current_stream_ptr`` is what CuPy's own pool
    asks; its ``intptr_t (void)`` signature is checked before compiled code may
    call it.
    """
    try:
        from cupy_backends.cuda import stream  # noqa: PLC0415  (optional dependency)
    except ImportError:
        return None
    cap = getattr(stream, "__pyx_capi__", {}).get("get_current_stream_ptr")
    return cap if cap is not None and '"intptr_t (void)"' in repr(cap) else None


def _ufuncs(xp: ModuleType) -> dict[str, Any]:
    """Every name of :data:`UFUNC_NAMES` to the backend's ufunc (NumPy's aliases included)."""
    table = {}
    for u in UFUNC_NAMES:
        canonical = getattr(numpy, u).__name__  # acos -> arccos, pow -> power, ...
        f = getattr(xp, canonical, None)
        if f is not None:
            table[u] = f
    return table


def emulated_devices() -> int:
    """``CUFLOW_NUMPY_DEVICES``: how many devices the NumPy backend emulates (0: none)."""
    env = os.environ.get("CUFLOW_NUMPY_DEVICES", "").strip()
    if not env:
        return 0
    try:
        n = int(env)
    except ValueError:
        n = -1
    if n < 1:
        raise BackendError(f"CUFLOW_NUMPY_DEVICES must be a positive int, got {env!r}")
    return n


_host_device = threading.local()


def _host_current() -> int:
    return getattr(_host_device, "id", 0)


def _host_set(i: int) -> None:
    _host_device.id = i


def _make_numpy(reason: str) -> Runtime:
    darray = make_darray_class(numpy.ndarray, "numpy", None)
    n = emulated_devices()
    if n == 0:
        return Runtime("numpy", numpy, numpy.ndarray, darray, 0, reason, ufuncs=_ufuncs(numpy))
    classes = _emulated_classes(darray, n)
    rt = Runtime("numpy", numpy, numpy.ndarray, darray, n,
                 f"{reason}; {n} emulated device(s) (CUFLOW_NUMPY_DEVICES)",
                 ufuncs=_ufuncs(numpy), current_device=_host_current, set_device=_host_set,
                 multi=n > 1, device_classes=classes)
    for c in classes:
        c._cf_wrap = staticmethod(rt.wrap)
    return rt


def _emulated_classes(darray: type, n: int) -> tuple[type, ...]:
    """One darray class per emulated device; NumPy's ufuncs and functions check devices.

    Device 0's class is ``darray`` itself; device k's subclasses it, so every
    isinstance check of the backend holds.  A NumPy ufunc or function (the
    Python operators included) refuses arrays of another device than the
    current one, and its result is an array of the current device.
    """
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        rt = runtime()
        out = kwargs.get("out") or ()
        rt.check_devices(ufunc.__name__, *inputs, *out)
        base = numpy.ndarray
        args = [x.view(base) if isinstance(x, darray) else x for x in inputs]
        if out:
            kwargs["out"] = tuple(o.view(base) if isinstance(o, darray) else o for o in out)
        r = getattr(ufunc, method)(*args, **kwargs)
        if out:
            return out[0] if len(out) == 1 else out
        return rt.wrap(r)

    def __array_function__(self, func, types, args, kwargs):
        if func is not numpy.copyto or isinstance(args[0] if args else kwargs.get("dst"), darray):
            runtime().check_devices(func.__name__, *arrays_in(args), *arrays_in(kwargs.values()))
        return numpy.ndarray.__array_function__(self, func, types, args, kwargs)

    def __reduce__(self):
        return _emulated_array, (self.view(numpy.ndarray), self._cf_device)

    def device(self):
        """The emulated :class:`Device` this array is on (CuPy's ``x.device``)."""
        return Device(self._cf_device)

    darray.device = property(device)
    darray.__array_ufunc__ = __array_ufunc__
    darray.__array_function__ = __array_function__
    darray.__reduce__ = __reduce__
    darray._cf_device = 0
    extra = tuple(type("darray", (darray,), {"__slots__": (), "_cf_device": k,
                                             "__module__": "cuflow", "__qualname__": "darray"})
                  for k in range(1, n))
    return (darray, *extra)


def arrays_in(values: Any) -> list[Any]:
    """The arrays among ``values``, one level of lists and tuples opened (``concatenate``)."""
    found = []
    for v in values:
        if isinstance(v, list | tuple):
            found.extend(v)
        else:
            found.append(v)
    return found


def _emulated_array(a: numpy.ndarray, device: int) -> Any:
    """Unpickle an emulated device's array (on device 0 where fewer devices are emulated)."""
    rt = runtime()
    cls = rt.device_classes[device] if device < len(rt.device_classes) else rt.darray
    return a.view(cls)


def _make(name: str, cupy: ModuleType | None, n: int, reason: str) -> Runtime:
    if name == "numpy":
        return _make_numpy(reason)
    assert cupy is not None
    from cupy_backends.cuda.api import driver, runtime as cuda_rt  # noqa: PLC0415

    stream_fn = _stream_ptr_fn()
    fast = None
    if env_switch("CUFLOW_FAST", default=True):
        fast = make_fast_path(cupy.ndarray, n, stream_fn)
    ufuncs = _ufuncs(cupy)
    ufuncs["remainder"] = ufuncs["mod"] = make_remainder(cupy)
    ufuncs["floor_divide"] = make_floor_divide(cupy)
    ufuncs["divmod"] = make_divmod(cupy)
    for name, uf in make_complex_special(cupy).items():  # (and NumPy's aliases: acosh)
        ufuncs.update({k: uf for k, f in list(ufuncs.items()) if f is getattr(cupy, name)})
    darray = make_darray_class(cupy.ndarray, "cupy", fast,
                               {k: ufuncs[k] for k in ("remainder", "floor_divide", "divmod")})
    if fast is not None:
        fast.bind(darray)
    return Runtime(
        "cupy", cupy, cupy.ndarray, darray, n, reason,
        cuda_errors=(cuda_rt.CUDARuntimeError, driver.CUDADriverError),
        oom_errors=(cupy.cuda.memory.OutOfMemoryError,),
        compile_errors=(cupy.cuda.compiler.CompileException,),
        unowned=cupy.cuda.memory.UnownedMemory, fast=fast,
        ufuncs=ufuncs,
        stream_ptr_fn=stream_fn, current_device=cuda_rt.getDevice, is_gpu=True,
        set_device=cuda_rt.setDevice, multi=n > 1)


def _select() -> Runtime:
    forced = os.environ.get("CUFLOW_BACKEND", "").strip().lower()
    if forced and forced not in _VALID:
        raise BackendError(f"CUFLOW_BACKEND must be one of {_VALID}, got {forced!r}")
    if forced == "numpy":
        return _make("numpy", None, 0, "forced by CUFLOW_BACKEND=numpy")
    cupy, n, why = probe_cupy()
    if n > 0:
        return _make("cupy", cupy, n, why if not forced else f"forced by CUFLOW_BACKEND=cupy; {why}")
    if forced == "cupy":
        raise BackendError(f"CUFLOW_BACKEND=cupy but {why}")
    # one line, no source line under it: the cause is the news, not where cuflow noticed
    warnings.warn_explicit(f"cuflow: using the NumPy backend (slow, CPU only): {why}",
                           RuntimeWarning, filename="cuflow", lineno=0, module="cuflow")
    return _make("numpy", None, 0, why)


def _activate(rt: Runtime) -> Runtime:
    global _current
    _current = rt
    for hook in _hooks:
        hook(rt)
    return rt


def set_backend(name: str) -> Runtime:
    """Switch backend (tests and notebooks only; arrays of the old backend stay as they are).

    Parameters
    ----------
    name : {"cupy", "numpy"}
        The backend.

    Returns
    -------
    Runtime
        The active runtime (:func:`get_backend`).

    Raises
    ------
    BackendError
        An unknown name, or CuPy without a usable GPU.
    """
    if not isinstance(name, str):
        raise ArgumentTypeError(f"cuflow.set_backend: name must be one of {_VALID}, got "
                                f"{type(name).__name__} {name!r}")
    name = name.strip().lower()
    if name not in _VALID:
        raise BackendError(f"backend must be one of {_VALID}, got {name!r}")
    with _lock:
        if name == "numpy":
            return _activate(_make("numpy", None, 0, "set_backend('numpy')"))
        cupy, n, why = probe_cupy()
        if n < 1:
            raise BackendError(f"cannot use the CuPy backend: {why}")
        return _activate(_make("cupy", cupy, n, why))
