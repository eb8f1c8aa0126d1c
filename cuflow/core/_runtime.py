"""Backend selection: CuPy (the product) or NumPy (CPU fallback and test oracle).

Nothing here runs at ``import cuflow``: the backend is chosen on first need
(the first array, stream or ``darray`` access), so importing cuflow never
imports CuPy or creates a CUDA context.  ``CUFLOW_BACKEND=cupy|numpy`` forces
the choice; otherwise CuPy is used when it imports and sees a GPU, and NumPy is
used with a one-line warning.
"""

from __future__ import annotations

import os
import threading
import warnings
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy

from .._errors import BackendError

__all__ = ["Backend", "get_backend", "backend_info", "set_backend"]

_VALID = ("cupy", "numpy")


@dataclass(frozen=True)
class Backend:
    """The active array backend.

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
    """

    name: str
    xp: ModuleType
    ndarray: type
    darray: type
    device_count: int
    reason: str
    cuda_errors: tuple = field(default=())
    oom_errors: tuple = field(default=())

    @property
    def is_gpu(self) -> bool:
        return self.name == "cupy"


_lock = threading.Lock()
_backend: Backend | None = None


def _probe_cupy() -> tuple[ModuleType | None, int, str]:
    """Import CuPy and count devices without creating a context."""
    try:
        import cupy  # noqa: PLC0415
    except Exception as exc:  # ImportError, or a broken install
        return None, 0, f"CuPy is not importable ({type(exc).__name__}: {exc})"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver, insufficient driver, no device
        return cupy, 0, f"CuPy sees no usable GPU ({exc})"
    if n < 1:
        return cupy, 0, "CuPy sees no GPU"
    return cupy, n, f"CuPy {cupy.__version__} with {n} GPU(s)"


def _make(name: str, cupy: ModuleType | None, n: int, reason: str) -> Backend:
    from ._darray import make_darray_class  # noqa: PLC0415

    if name == "cupy":
        assert cupy is not None
        from cupy_backends.cuda.api import driver, runtime  # noqa: PLC0415

        cuda_errors = (runtime.CUDARuntimeError, driver.CUDADriverError)
        oom = (cupy.cuda.memory.OutOfMemoryError,)
        return Backend("cupy", cupy, cupy.ndarray, make_darray_class(cupy.ndarray, "cupy"),
                       n, reason, cuda_errors, oom)
    return Backend("numpy", numpy, numpy.ndarray, make_darray_class(numpy.ndarray, "numpy"),
                   0, reason, (), ())


def _select() -> Backend:
    forced = os.environ.get("CUFLOW_BACKEND", "").strip().lower()
    if forced and forced not in _VALID:
        raise BackendError(
            f"CUFLOW_BACKEND must be one of {_VALID}, got {forced!r}")
    if forced == "numpy":
        return _make("numpy", None, 0, "forced by CUFLOW_BACKEND=numpy")
    cupy, n, why = _probe_cupy()
    if n > 0:
        return _make("cupy", cupy, n, why if not forced else f"forced by CUFLOW_BACKEND=cupy; {why}")
    if forced == "cupy":
        raise BackendError(f"CUFLOW_BACKEND=cupy but {why}")
    warnings.warn(f"cuflow: using the NumPy backend (slow, CPU only): {why}",
                  RuntimeWarning, stacklevel=3)
    return _make("numpy", None, 0, why)


def get_backend() -> Backend:
    """Return the active backend, choosing it on first call."""
    b = _backend
    if b is None:
        with _lock:
            b = _backend if _backend is not None else _install(_select())
    return b


def _install(b: Backend) -> Backend:
    global _backend
    _backend = b
    from . import _ops  # noqa: PLC0415

    _ops._bind(b)
    if b.is_gpu:
        from .. import memory  # noqa: PLC0415

        memory._install(b)
    from .. import _instrument  # noqa: PLC0415

    _instrument.on_backend_bound()
    return b


def set_backend(name: str) -> Backend:
    """Switch backend (tests and notebooks only; arrays of the old backend stay as they are)."""
    name = name.strip().lower()
    if name not in _VALID:
        raise BackendError(f"backend must be one of {_VALID}, got {name!r}")
    with _lock:
        if name == "numpy":
            return _install(_make("numpy", None, 0, "set_backend('numpy')"))
        cupy, n, why = _probe_cupy()
        if n < 1:
            raise BackendError(f"cannot use the CuPy backend: {why}")
        return _install(_make("cupy", cupy, n, why))


def backend_info() -> dict[str, Any]:
    """Describe the active backend and device.

    Returns
    -------
    dict
        ``backend``, ``reason``, ``numpy``, ``pool_hot_path`` (``compiled`` when the
        memory pool's C hot path was built, else ``python``), and on the CuPy backend
        ``elementwise_launch`` (``compiled`` when the elementwise fast path launches from C,
        ``python`` when from Python, ``off`` with ``CUFLOW_FAST=0``), ``cupy``,
        ``device``, ``device_name``, ``compute_capability``, ``device_count``,
        ``total_memory_bytes``, ``driver_version``, ``runtime_version``.
        Querying device properties does not create a CUDA context.
    """
    from . import _fastpath as _elementwise  # noqa: PLC0415
    from ..memory import _pool  # noqa: PLC0415

    b = get_backend()
    info: dict[str, Any] = {"backend": b.name, "reason": b.reason, "numpy": numpy.__version__,
                            "pool_hot_path": "python" if _pool.HotAlloc is None else "compiled"}
    if b.name == "cupy":
        cp = b.xp
        rt = cp.cuda.runtime
        dev = cp.cuda.runtime.getDevice()
        props = rt.getDeviceProperties(dev)
        name = props["name"]
        info.update(
            elementwise_launch=("off" if not _elementwise.enabled
                                else "python" if _elementwise._L is None else "compiled"),
            cupy=cp.__version__,
            device=dev,
            device_name=name.decode() if isinstance(name, bytes) else str(name),
            compute_capability=f"{props['major']}.{props['minor']}",
            device_count=b.device_count,
            total_memory_bytes=int(props["totalGlobalMem"]),
            multiprocessors=int(props["multiProcessorCount"]),
            driver_version=_fmt_cuda_version(rt.driverGetVersion()),
            runtime_version=_fmt_cuda_version(rt.runtimeGetVersion()),
        )
    return info


def _fmt_cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"
