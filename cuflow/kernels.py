"""cuflow's CUDA kernels: the registry and ahead-of-time compilation.

Kernels compile lazily on first use (and CuPy caches the binaries on disk, so
that cost is paid once per machine).  Call :func:`warmup` at start-up to pay it
before the first frame instead of during it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy

from ._errors import ArgumentTypeError
from .core._contract import as_dtype
from .core._runtime import get_backend
from .raw_kernels import REGISTRY, KernelLookupError, KernelSpec, get_function

__all__ = ["REGISTRY", "KernelLookupError", "KernelSpec", "warmup"]


def warmup(kernels: str | Iterable[str] | None = None, dtypes: Any = None) -> int:
    """Compile and load registry kernels for the current device now.

    Parameters
    ----------
    kernels : str or iterable of str, optional
        Registry names (default: all of :data:`REGISTRY`).
    dtypes : dtype-like or iterable of dtype-like, optional
        Only these instantiations (default: every dtype each kernel supports);
        a single string or dtype is one dtype.  Each kernel named in ``kernels``
        must have an instantiation for each of them; without ``kernels``, each
        kernel warms those it has, and each dtype must be some kernel's.

    Returns
    -------
    int
        Number of (kernel, dtype) modules loaded; 0 on the NumPy backend, which
        runs the NumPy reference implementations and compiles nothing.

    Raises
    ------
    KernelLookupError
        An unknown kernel name, or a dtype a kernel has no instantiation for (a
        ``KeyError``), on every backend.
    cuflow.ArgumentTypeError
        A kernel name that is not a str, or a dtype that names no dtype.
    cuflow.KernelCompileError
        NVRTC rejected a kernel (the log is in the message).
    """
    names = _names(kernels)
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        raise KernelLookupError(f"cuflow.kernels.warmup: no registered kernel named "
                                f"{', '.join(map(repr, unknown))}; the registry has "
                                f"{', '.join(REGISTRY)}")
    want = None if dtypes is None else _dtype_names(dtypes)
    # the kernels named must each have every dtype asked for; without names, every dtype
    # asked for must have some kernel, and each kernel warms those of them it has
    if kernels is None:
        checks = [("no registered kernel has an", "they have",
                   sorted({d for spec in REGISTRY.values() for d in spec.dtypes()}))]
    else:
        checks = [(f"kernel {name!r} has no", "it has", REGISTRY[name].dtypes())
                  for name in names]
    for who, they, have in checks:
        missing = [d for d in want or () if d not in have]
        if missing:
            raise KernelLookupError(f"cuflow.kernels.warmup: {who} instantiation for "
                                    f"{', '.join(missing)}; {they} {', '.join(have)}")
    if not get_backend().is_gpu:
        return 0
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


def _names(kernels: Any) -> list[str]:
    """``kernels=`` as a list of names: one str is one name, not its characters."""
    if kernels is None:
        return list(REGISTRY)
    if isinstance(kernels, str):
        return [kernels]
    rule = "kernels must be a registry name (a str), an iterable of them or None"
    try:
        names = list(kernels)
    except TypeError:
        raise ArgumentTypeError(f"cuflow.kernels.warmup: {rule}, got "
                                f"{type(kernels).__name__} {kernels!r}") from None
    bad = [n for n in names if not isinstance(n, str)]
    if isinstance(kernels, bytes) or bad:
        raise ArgumentTypeError(f"cuflow.kernels.warmup: {rule}, got {kernels!r}")
    return names


def _dtype_names(dtypes: Any) -> list[str]:
    """``dtypes=`` as dtype names: one string or dtype is one dtype (a string is not read as
    its characters, nor a dtype, which is not iterable, as a list)."""
    one = isinstance(dtypes, str | numpy.dtype | type)
    if not one:
        try:
            dtypes = list(dtypes)
        except TypeError:
            one = True
    out = []
    for d in [dtypes] if one else dtypes:
        if d is None:  # (numpy.dtype(None) is float64: a None in the list is a mistake)
            raise ArgumentTypeError("cuflow.kernels.warmup: dtypes must name dtypes, got None")
        out.append(as_dtype("kernels.warmup", d).name)
    return list(dict.fromkeys(out))
