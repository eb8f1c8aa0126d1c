"""``cuflow.backend_info()``: what cuflow runs on, for bug reports and ``python -m cuflow info``."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
from typing import Any

import numpy

from .core._runtime import runtime
from .memory import _pool
from .memory._env import POOL_BACKEND

__all__ = ["backend_info"]


def backend_info() -> dict[str, Any]:
    """Describe the active backend and device.

    Returns
    -------
    dict
        ``backend`` and ``reason`` (why that backend), ``cuflow``, ``python`` and
        ``numpy`` (versions), ``pool_hot_path`` (``compiled`` when the memory pool's C
        hot path was built, else ``python``), ``pool_backend`` (where the pool's segments
        come from: ``driver``, ``vmm`` or ``cudamalloc``), ``elementwise_launch`` (on the CuPy
        backend ``compiled`` when the elementwise engine launches from C, ``backend``
        when the extension was not built and CuPy's ufuncs run, ``off`` with
        ``CUFLOW_FAST=0``; on the NumPy backend, which
        launches nothing, whether the compiled launcher was built), ``kernel_compiler``
        (NVRTC through cuda-bindings, or what to install), ``array_api_compat`` (its
        version: the array API functions the backend lacks or spells otherwise come from
        it; or what is missing without it), and on the CuPy
        backend ``cupy``, ``device``, ``device_name``, ``compute_capability``,
        ``device_count``, ``multiprocessors``, ``total_memory_bytes``,
        ``driver_version``, ``runtime_version``.  Querying device properties does not
        create a CUDA context.

    Examples
    --------
    >>> info = backend_info()
    >>> info["backend"] in ("cupy", "numpy")
    True
    """
    rt = runtime()
    built = importlib.util.find_spec("cuflow.core._ewlaunch") is not None
    info: dict[str, Any] = {
        "backend": rt.name, "reason": rt.reason, "cuflow": _version(),
        "python": platform.python_version(), "numpy": numpy.__version__,
        "pool_hot_path": "python" if _pool.HotAlloc is None else "compiled",
        "pool_backend": POOL_BACKEND,
        "elementwise_launch": ("unused on the NumPy backend (compiled launcher "
                               f"{'built' if built else 'not built'})"),
        "kernel_compiler": _kernel_compiler(rt.is_gpu),
        "array_api_compat": _array_api_compat(),
    }
    if rt.is_gpu:
        cuda_rt = rt.xp.cuda.runtime
        dev = cuda_rt.getDevice()
        props = cuda_rt.getDeviceProperties(dev)
        name = props["name"]
        fast = rt.fast
        info.update(
            elementwise_launch=("off" if fast is None
                                else "backend" if fast.compiled is None else "compiled"),
            cupy=rt.xp.__version__,
            device=dev,
            device_name=name.decode() if isinstance(name, bytes) else str(name),
            compute_capability=f"{props['major']}.{props['minor']}",
            device_count=rt.device_count,
            total_memory_bytes=int(props["totalGlobalMem"]),
            multiprocessors=int(props["multiProcessorCount"]),
            driver_version=_fmt_cuda_version(cuda_rt.driverGetVersion()),
            runtime_version=_fmt_cuda_version(cuda_rt.runtimeGetVersion()),
        )
    return info


def _kernel_compiler(gpu: bool) -> str:
    """What compiles the engine's generated kernels: NVRTC through cuda-bindings."""
    if not gpu:
        return "none (the NumPy backend runs fused functions unfused)"
    try:
        version = importlib.metadata.version("cuda-bindings")
    except importlib.metadata.PackageNotFoundError:
        return ("missing: cuflow.fuse and the engine's single ops need cuda-bindings "
                "(pip install \"cuflow[cuda13]\" or \"cuflow[cuda12]\")")
    return f"NVRTC through cuda-bindings {version}"


def _array_api_compat() -> str:
    """array-api-compat's version, or what is missing without it (a required dependency:
    ``cuflow.linalg``'s extension functions, ``unstack``, ``vecdot`` and the standard's
    spellings of ``meshgrid`` and ``count_nonzero`` come from it; cuflow._forward)."""
    try:
        return importlib.metadata.version("array-api-compat")
    except importlib.metadata.PackageNotFoundError:
        return ("missing: the array API functions the backend lacks (linalg.vecdot, "
                "linalg.trace, unstack, ...) are missing too (pip install array-api-compat)")


def _version() -> str:
    """The installed distribution's version (the source tree's when not installed)."""
    try:
        return importlib.metadata.version("cuflow")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _fmt_cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"
