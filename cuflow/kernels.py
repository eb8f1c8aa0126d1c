"""cuflow's CUDA kernels: the registry and ahead-of-time compilation.

Kernels compile lazily on first use (and CuPy caches the binaries on disk, so
that cost is paid once per machine).  Call :func:`warmup` at start-up to pay it
before the first frame instead of during it.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy

from .core._runtime import get_backend
from .raw_kernels import REGISTRY, KernelLookupError, KernelSpec, get_function

__all__ = ["REGISTRY", "KernelLookupError", "KernelSpec", "warmup"]


def warmup(kernels: Iterable[str] | None = None, dtypes: Iterable | None = None) -> int:
    """Compile and load registry kernels for the current device now.

    Parameters
    ----------
    kernels : str or iterable of str, optional
        Registry names (default: all of :data:`REGISTRY`).
    dtypes : iterable of dtype-like, optional
        Only these instantiations (default: every dtype each kernel supports).

    Returns
    -------
    int
        Number of (kernel, dtype) modules loaded; 0 on the NumPy backend, which
        runs the NumPy reference implementations and compiles nothing.

    Raises
    ------
    KernelLookupError
        An unknown kernel name (a ``KeyError``), on every backend.
    cuflow.KernelCompileError
        NVRTC rejected a kernel (the log is in the message).
    """
    names = (list(REGISTRY) if kernels is None
             else [kernels] if isinstance(kernels, str) else list(kernels))
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        raise KernelLookupError(f"cuflow.kernels.warmup: no registered kernel named "
                                f"{', '.join(map(repr, unknown))}; the registry has "
                                f"{', '.join(REGISTRY)}")
    if not get_backend().is_gpu:
        return 0
    want = None if dtypes is None else {numpy.dtype(d).name for d in dtypes}
    n = 0
    for name in names:
        spec = REGISTRY[name]
        for dt in spec.dtypes():
            if want is not None and dt not in want:
                continue
            entry = next(e for e, dts in spec.entries if dt in dts)
            get_function(name, entry, dt)
            n += 1
    return n
