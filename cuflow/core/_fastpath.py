"""Fast path for the common elementwise ops: cuflow's own vectorized kernels.

For ``add``, ``subtract``, ``multiply``, ``divide``, ``maximum``, ``minimum``,
``negative`` and ``absolute`` on C-contiguous arrays of one numeric dtype and
one shape (the case that dominates pre/post-processing), cuflow launches the
kernels of ``raw_kernels/elementwise.cu`` (16-byte loads and stores) straight
through ``cuLaunchKernel``, with no CuPy argument processing.  Where the optional
extension ``_ewlaunch.c`` was built, :func:`binary` and :func:`unary` are its
``Launcher`` methods: the checks below, decision for decision, and the launch,
in C.  Otherwise (and with several GPUs) they are the Python functions
:func:`_py_binary` and :func:`_py_unary`, which pack the parameters into a
per-thread buffer with one ``struct.pack_into``.  Anything
else (broadcasting, scalars, mixed dtypes, strided views, complex, bool,
partially overlapping ``dst``) returns ``None`` and the caller takes CuPy's
ufunc path unchanged, so results and errors are CuPy's there.

Results are bit-identical to CuPy's ufuncs: the kernels use the same
expressions and CuPy compiles them with the same options.

Only the CuPy backend uses this module; :func:`_bind` switches it on.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from typing import Any

from ..raw_kernels import get_function

__all__ = ["BINARY", "UNARY", "binary", "unary", "enabled"]

#: cuflow function name -> entry point in elementwise.cu
BINARY = {"add": "cf_add", "subtract": "cf_subtract", "multiply": "cf_multiply",
          "divide": "cf_divide", "true_divide": "cf_divide", "maximum": "cf_maximum",
          "minimum": "cf_minimum"}
UNARY = {"negative": "cf_negative", "absolute": "cf_absolute", "abs": "cf_absolute"}

_BLOCK = 256  # threads per block (BLOCK in _ewlaunch.c)
_D: Any = None
_ND: Any = None
_L: Any = None  # the compiled Launcher, when built and bound
_MULTI = False
_get_device: Any = None
_current_stream: Any = None
_launch: Any = None
_max_grid = 0  # set on the first kernel load (reads the SM count)
enabled = False


class _Params(threading.local):
    """Per-thread kernel-parameter slots (8 bytes each) and the ``void**`` array to them."""

    def __init__(self) -> None:
        self.slots = (ctypes.c_uint64 * 8)()
        base = ctypes.addressof(self.slots)
        self.argv = (ctypes.c_void_p * 8)(*(base + 8 * i for i in range(8)))
        self.argv_ptr = ctypes.addressof(self.argv)


_P = _Params()
_pack3 = struct.Struct("=QQq").pack_into
_pack4 = struct.Struct("=QQQq").pack_into


class Kernel:
    """One entry point of elementwise.cu; function pointers per (device, dtype), loaded lazily."""

    __slots__ = ("by_dev", "entry", "ptrs")

    def __init__(self, entry: str) -> None:
        self.entry = entry
        self.ptrs: dict[int, int] = {}
        self.by_dev: dict[int, dict[int, int]] = {}

    def load(self, dt) -> int:
        """Function pointer for dtype ``dt`` (0 when the kernel has no such instantiation)."""
        global _max_grid
        dev = _get_device()
        if not _max_grid:
            from cupy_backends.cuda.api import runtime  # noqa: PLC0415

            # at most 64 blocks of 256 threads per SM, the grid-stride loop covering the rest
            # (H200, 2160x3840 float32 add: 88.8% of copy bandwidth against 87.4% with 16)
            _max_grid = 64 * max(1, runtime.deviceGetAttribute(16, dev))  # 16: SM count
            if _L is not None:
                _L.max_grid = _max_grid
        ptrs = self.by_dev.setdefault(dev, {})
        if not _MULTI:
            self.ptrs = ptrs
        p = ptrs.get(dt.num)
        if p is None:
            try:
                p = get_function("elementwise", self.entry, dt).kernel.ptr
            except (KeyError, TypeError):
                p = 0  # no instantiation for this dtype: CuPy's path
            ptrs[dt.num] = p  # the registry keeps the module (and so the function) alive
        return p


KERNELS: dict[str, Kernel] = {}
for _n, _e in {**BINARY, **UNARY}.items():
    KERNELS[_n] = KERNELS.get(_e) or Kernel(_e)
    KERNELS[_e] = KERNELS[_n]


def _partial_overlap(x: int, y: int, nbytes: int) -> bool:
    """True when ``[x, x + nbytes)`` and ``[y, y + nbytes)`` overlap without being equal."""
    return x != y and x < y + nbytes and y < x + nbytes


def _py_binary(k: Kernel, a, b, dst):
    """``k(a, b)`` into ``dst`` (or a new darray); ``None`` when the fast path does not apply."""
    ta = type(a)
    tb = type(b)
    if (ta is not _D and ta is not _ND) or (tb is not _D and tb is not _ND):
        return None  # scalars, host arrays, other subclasses
    dt = a.dtype
    if b.dtype is not dt or not (a._c_contiguous and b._c_contiguous):
        return None
    shape = a.shape
    if b.shape != shape:
        return None
    fp = None if _MULTI else k.ptrs.get(dt.num)
    if fp is None:
        fp = k.load(dt)
    if not fp or (_MULTI and not _on_device(a, b)):
        return None
    n = a.size
    nb = n * dt.itemsize
    ap = a.data.ptr
    bp = b.data.ptr
    if dst is None:
        c = _D(shape, dt)
        cp = c.data.ptr
    else:
        td = type(dst)
        if ((td is not _D and td is not _ND) or dst.dtype is not dt or not dst._c_contiguous
                or dst.shape != shape or (_MULTI and not _on_device(dst))):
            return None
        cp = dst.data.ptr
        if ((a is not dst and _partial_overlap(cp, ap, nb))
                or (b is not dst and _partial_overlap(cp, bp, nb))):
            return None  # partial overlap: CuPy's path copies the input first
        c = dst
    if n:
        p = _P
        _pack4(p.slots, 0, ap, bp, cp, n)
        g = ((nb + 15) >> 4) + _BLOCK - 1 >> 8
        _launch(fp, g if g < _max_grid else _max_grid, 1, 1, _BLOCK, 1, 1, 0,
                _current_stream().ptr, p.argv_ptr, 0)
    return c


def _py_unary(k: Kernel, a, dst):
    """``k(a)`` into ``dst`` (or a new darray); ``None`` when the fast path does not apply."""
    ta = type(a)
    if ta is not _D and ta is not _ND:
        return None
    dt = a.dtype
    if not a._c_contiguous:
        return None
    fp = None if _MULTI else k.ptrs.get(dt.num)
    if fp is None:
        fp = k.load(dt)
    if not fp or (_MULTI and not _on_device(a)):
        return None
    shape = a.shape
    n = a.size
    nb = n * dt.itemsize
    ap = a.data.ptr
    if dst is None:
        c = _D(shape, dt)
        cp = c.data.ptr
    else:
        td = type(dst)
        if ((td is not _D and td is not _ND) or dst.dtype is not dt or not dst._c_contiguous
                or dst.shape != shape or (_MULTI and not _on_device(dst))):
            return None
        cp = dst.data.ptr
        if a is not dst and _partial_overlap(cp, ap, nb):
            return None
        c = dst
    if n:
        p = _P
        _pack3(p.slots, 0, ap, cp, n)
        g = ((nb + 15) >> 4) + _BLOCK - 1 >> 8
        _launch(fp, g if g < _max_grid else _max_grid, 1, 1, _BLOCK, 1, 1, 0,
                _current_stream().ptr, p.argv_ptr, 0)
    return c


#: the active implementations (the compiled Launcher's methods once bound, where built)
binary = _py_binary
unary = _py_unary


def _on_device(*arrays) -> bool:
    """Every one of ``arrays`` is on the current device."""
    dev = _get_device()
    return all(x.data.device_id == dev for x in arrays)


def _bind(backend) -> None:
    """Switch the fast path on for the CuPy backend (off for NumPy or ``CUFLOW_FAST=0``)."""
    global _D, _ND, _L, _MULTI, _get_device, _current_stream, _launch, _max_grid, enabled
    global binary, unary
    import os  # noqa: PLC0415

    _L = None
    binary, unary = _py_binary, _py_unary
    enabled = backend.is_gpu and os.environ.get("CUFLOW_FAST", "1") != "0"
    if not enabled:
        return
    cupy = backend.xp
    from cupy_backends.cuda.api import driver, runtime  # noqa: PLC0415

    _D, _ND = backend.darray, backend.ndarray
    _MULTI = backend.device_count > 1
    _get_device = runtime.getDevice
    _current_stream = cupy.cuda.get_current_stream
    _launch = driver.launchKernel
    _max_grid = 0
    for k in KERNELS.values():
        k.ptrs = {}
        k.by_dev = {}
    if not _MULTI:  # the compiled launcher assumes one device (no per-call device check)
        _L = _compiled_launcher(_D, _ND)
        if _L is not None:
            binary, unary = _L.binary, _L.unary


def _compiled_launcher(darray, ndarray):
    """``_ewlaunch.Launcher`` over the driver's ``cuLaunchKernel``; ``None`` where not built."""
    try:
        from ._ewlaunch import Launcher  # noqa: PLC0415
    except ImportError:
        return None
    from ..memory import _current_stream_fn  # noqa: PLC0415

    stream_fn = _current_stream_fn()
    try:
        # the driver CuPy loaded (the same soname: dlopen returns the loaded library)
        launch = ctypes.cast(ctypes.CDLL("libcuda.so.1").cuLaunchKernel, ctypes.c_void_p).value
    except (OSError, AttributeError):
        return None
    if stream_fn is None or not launch:
        return None
    return Launcher(darray, ndarray, stream_fn, launch, _launch_failed)


def _launch_failed(status: int) -> None:
    """Raise CuPy's driver error for a failed ``cuLaunchKernel`` (the compiled launcher's)."""
    from cupy_backends.cuda.api import driver  # noqa: PLC0415

    raise driver.CUDADriverError(status)
