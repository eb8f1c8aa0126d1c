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

from .._errors import BackendError
from ._cupy_ufuncs import make_remainder
from ._darray import make_darray_class
from ._fastpath import FastPath, make_fast_path

__all__ = ["Runtime", "runtime", "active", "get_backend", "set_backend", "on_select",
           "probe_cupy"]

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
    cuda_errors, oom_errors : tuple of type
        The backend's CUDA and out-of-memory exception types.
    unowned : type or None
        CuPy's ``UnownedMemory`` (memory cuflow's pool did not hand out).
    fast : FastPath or None
        The elementwise launcher (CuPy backend, unless ``CUFLOW_FAST=0``).
    ufuncs : dict
        The backend's ufunc for each name of :data:`UFUNC_NAMES` it has.
    stream_ptr_fn : capsule or None
        CuPy's C function that returns the current stream's handle.
    current_device : callable
        The current device's ordinal (0 on the NumPy backend).
    is_gpu : bool
        True on the CuPy backend.
    """

    name: str
    xp: ModuleType
    ndarray: type
    darray: type
    device_count: int
    reason: str
    cuda_errors: tuple = ()
    oom_errors: tuple = ()
    unowned: Any = None
    fast: FastPath | None = None
    ufuncs: dict = field(default_factory=dict)
    stream_ptr_fn: Any = None
    current_device: Callable[[], int] = field(default=lambda: 0)
    is_gpu: bool = False


    def data_ptr(self, x: Any) -> int:
        """Address of ``x``'s first element."""
        return x.data.ptr if self.name == "cupy" else x.__array_interface__["data"][0]

    def wrap(self, r: Any) -> Any:
        """A result of the backend as darray(s): O(1), no copy (tuples and lists too)."""
        t = type(r)
        if t is self.ndarray:
            if self.name == "cupy":
                r.__class__ = self.darray  # same layout, no new object
                return r
            return r.view(self.darray)
        if t is tuple or t is list:
            return t(self.wrap(x) for x in r)
        if self.name == "numpy" and isinstance(r, numpy.generic):
            return numpy.asarray(r).view(self.darray)  # CuPy returns 0-d arrays, never scalars
        return r

    def as_darray(self, x: Any) -> Any:
        """``x`` (an array of the backend) as a darray, without copying or mutating ``x``."""
        return x if isinstance(x, self.darray) else x.view(self.darray)


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


def _make(name: str, cupy: ModuleType | None, n: int, reason: str) -> Runtime:
    if name == "numpy":
        darray = make_darray_class(numpy.ndarray, "numpy", None)
        return Runtime("numpy", numpy, numpy.ndarray, darray, 0, reason,
                       ufuncs=_ufuncs(numpy))
    assert cupy is not None
    from cupy_backends.cuda.api import driver, runtime as cuda_rt  # noqa: PLC0415

    stream_fn = _stream_ptr_fn()
    fast = None
    if os.environ.get("CUFLOW_FAST", "1") != "0":
        fast = make_fast_path(cupy.ndarray, n, stream_fn)
    ufuncs = _ufuncs(cupy)
    ufuncs["remainder"] = ufuncs["mod"] = make_remainder(cupy)
    darray = make_darray_class(cupy.ndarray, "cupy", fast, ufuncs["remainder"])
    if fast is not None:
        fast.bind(darray)
    return Runtime(
        "cupy", cupy, cupy.ndarray, darray, n, reason,
        cuda_errors=(cuda_rt.CUDARuntimeError, driver.CUDADriverError),
        oom_errors=(cupy.cuda.memory.OutOfMemoryError,),
        unowned=cupy.cuda.memory.UnownedMemory, fast=fast,
        ufuncs=ufuncs,
        stream_ptr_fn=stream_fn, current_device=cuda_rt.getDevice, is_gpu=True)


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
    """Switch backend (tests and notebooks only; arrays of the old backend stay as they are)."""
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
