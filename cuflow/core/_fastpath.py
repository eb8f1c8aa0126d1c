"""The runtime's fast path: the elementwise engine's launches from C.

``ew(op, args, dst)`` runs any elementwise function of the namespace or a
``cuflow.fuse`` function (an :class:`~cuflow.core._engine.EwOp`) on same-shape
C-contiguous arrays and Python scalars through the kernel the engine generated
for it: one dictionary lookup keyed by the operands' dtypes, alignment and
scalar kinds (and the device, with several), one allocation, one
``cuLaunchKernel``.  It returns ``None`` for anything else (broadcasting,
strided views, host arrays, operands of another device, a partially
overlapping ``dst``, dtypes the engine leaves to the backend), and the caller
takes the backend's path, so results and errors are the backend's there.

``empty(shape, dtype)`` makes a new C-contiguous darray of a shape of ints and
a dtype of numbers, with no Python frame (``None`` for anything else:
``cuflow.empty``'s checks then run).

``fill(a, value)`` sets a C-contiguous array with one driver memset on the
current stream where NumPy's bytes of the value need no conversion by NumPy:
zero (``0``, ``False``, ``+0.0``) in any dtype; a bool or an in-range int in the
bool, 8-, 16- and 32-bit integer dtypes; a bool, an int of magnitude up to
2**24 or a float in float32 (``None`` for anything else: CuPy's ``fill`` runs).

All three are methods of the optional extension ``_ewlaunch.Launcher``; without it
(or with ``CUFLOW_EW_ENGINE=0`` for ``ew``) they return ``None``.  The runtime
builds one :class:`FastPath` for the CuPy backend (none for NumPy, or with
``CUFLOW_FAST=0``).

Where CuPy's array fields are found (``_ewlaunch.cupy_layout``: checked on three
probe arrays made at the first array operand of a launch, or the first
subscript), the launcher reads its operands' shape, contiguity, dtype and
pointer there rather than through attributes, builds its new results there
(once one built so matched CuPy's constructor), and darray's basic indexing
(ints, slices with ``None`` or int bounds, ``...``, ``None``) builds CuPy's view
there; other keys take CuPy's subscript, and a CuPy whose layout differs keeps
the attribute paths.

``FastCall`` (the same extension, ``None`` without it) is an entry point that
reaches those methods with no Python frame: the namespace's elementwise
functions (:func:`cuflow.core._dispatch.fast_call`), ``cuflow.fuse`` functions,
darray's operators and ``fill``, ``empty`` and ``zeros``.  Its kinds (below)
say which calls it launches; every other call runs the function it wraps.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from .._env import env_switch

__all__ = ["FastCall", "FUNCTION", "OPERATOR", "REFLECTED", "INPLACE", "EMPTY", "ZEROS",
           "FILL", "GETITEM", "FastPath", "driver_addresses", "make_fast_path"]

try:  # the optional extension (a source install without a compiler takes Python's path)
    from ._ewlaunch import FastCall
except ImportError:
    FastCall = None

#: FastCall's kinds (_ewlaunch.c): which calls of the entry point launch
FUNCTION, OPERATOR, REFLECTED, INPLACE, EMPTY, ZEROS, FILL, GETITEM = range(8)


class FastPath:
    """The launcher of one CuPy runtime: ``ew`` and ``empty``, compiled where built."""

    def __init__(self, ndarray: type, device_count: int, stream_fn: Any) -> None:
        self.ndarray = ndarray
        self.darray: type = ndarray
        self.multi = device_count > 1
        self.stream_fn = stream_fn
        self.compiled: Any = None
        self.ew: Callable[..., Any] = _no_ew
        self.empty: Callable[..., Any] = _no_empty
        self.fill: Callable[..., Any] = _no_fill

    def bind(self, darray: type) -> None:
        """Results are ``darray``s; the compiled launcher takes over where it was built."""
        self.darray = darray
        self.compiled = _compiled_launcher(darray, self.ndarray, self.stream_fn, self.multi)
        if self.compiled is not None:
            self.empty = self.compiled.empty
            self.fill = self.compiled.fill
            if ENGINE_LAUNCH:
                self.ew = self.compiled.ew


#: The engine's C launch of single ops (``ew``); ``CUFLOW_EW_ENGINE=0`` turns it off, and
#: single ops take CuPy's ufuncs, and cuflow.fuse its shape-keyed launch.
ENGINE_LAUNCH = env_switch("CUFLOW_EW_ENGINE", default=True)


def _no_ew(op: Any, args: tuple, dst: Any) -> None:
    """Without the compiled launcher single ops take the backend's path."""
    return None


def _no_empty(shape: Any, dtype: Any) -> None:
    """Without the compiled launcher, creation takes the backend's path."""
    return None


def _no_fill(a: Any, value: Any) -> None:
    """Without the compiled launcher, ``fill`` is CuPy's."""
    return None


def _compiled_launcher(darray: type, ndarray: type, stream_fn: Any, multi: bool) -> Any:
    """``_ewlaunch.Launcher`` over the driver's ``cuLaunchKernel`` (and, with several devices,
    ``cuCtxGetDevice``); ``None`` where not built."""
    try:
        from ._ewlaunch import Launcher  # noqa: PLC0415  (optional extension)
    except ImportError:
        return None
    found = driver_addresses("cuLaunchKernel", "cuMemsetD8Async", "cuMemsetD16Async",
                             "cuMemsetD32Async", *(("cuCtxGetDevice",) if multi else ()))
    if stream_fn is None or found is None:
        return None
    return Launcher(darray, ndarray, stream_fn, found[0], _launch_failed,
                    device_fn=found[4] if multi else None, memset=found[1:4])


def driver_addresses(*names: str) -> tuple[int, ...] | None:
    """The addresses of the CUDA driver's functions ``names``, in the driver CuPy loaded (the
    same soname: dlopen returns the loaded library); ``None`` where one is missing."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        found = tuple(ctypes.cast(getattr(cuda, n), ctypes.c_void_p).value for n in names)
    except (OSError, AttributeError):
        return None
    return found if all(found) else None


def _launch_failed(status: int) -> None:
    """Raise CuPy's driver error for a failed ``cuLaunchKernel`` or memset (the compiled
    launcher's)."""
    from cupy_backends.cuda.api import driver  # noqa: PLC0415  (optional dependency)

    raise driver.CUDADriverError(status)


def make_fast_path(ndarray: type, device_count: int, stream_fn: Any) -> FastPath:
    """The fast path of a CuPy runtime (its ``bind`` takes the darray type)."""
    return FastPath(ndarray, device_count, stream_fn)
