"""``cuflow.backend_info()``: what cuflow runs on, for bug reports and ``python -m cuflow info``."""

from __future__ import annotations

from typing import Any

import numpy

from .core._runtime import runtime
from .memory import _pool

__all__ = ["backend_info"]


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
        ``multiprocessors``, ``total_memory_bytes``, ``driver_version``,
        ``runtime_version``.  Querying device properties does not create a CUDA context.
    """
    rt = runtime()
    info: dict[str, Any] = {"backend": rt.name, "reason": rt.reason, "numpy": numpy.__version__,
                            "pool_hot_path": "python" if _pool.HotAlloc is None else "compiled"}
    if rt.is_gpu:
        cuda_rt = rt.xp.cuda.runtime
        dev = cuda_rt.getDevice()
        props = cuda_rt.getDeviceProperties(dev)
        name = props["name"]
        fast = rt.fast
        info.update(
            elementwise_launch=("off" if fast is None
                                else "python" if fast.compiled is None else "compiled"),
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


def _fmt_cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"
