"""Fast path for the common elementwise ops: cuflow's own vectorized kernels.

For ``add``, ``subtract``, ``multiply``, ``divide``, ``maximum``, ``minimum``,
``negative`` and ``absolute`` on C-contiguous arrays of one numeric dtype and
one shape (the case that dominates pre/post-processing), cuflow launches the
kernels of ``raw_kernels/elementwise.cu`` (16-byte loads and stores) straight
through ``cuLaunchKernel``: the parameters are packed into a per-thread buffer
with one ``struct.pack_into`` and no CuPy argument processing runs.  Anything
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

from .raw_kernels import get_function

__all__ = ["BINARY", "UNARY", "binary", "unary", "enabled"]

#: cuflow function name -> entry point in elementwise.cu
BINARY = {"add": "cf_add", "subtract": "cf_subtract", "multiply": "cf_multiply",
          "divide": "cf_divide", "true_divide": "cf_divide", "maximum": "cf_maximum",
          "minimum": "cf_minimum"}
UNARY = {"negative": "cf_negative", "absolute": "cf_absolute", "abs": "cf_absolute"}

_BLOCK = 256
_D: Any = None
_ND: Any = None
_UNOWNED: Any = None
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


def _overlaps(x, y, nbytes) -> bool:
    """True when ``x`` and ``y`` (same size, contiguous) may partially overlap."""
    xm = x.data.mem
    ym = y.data.mem
    if xm is not ym and type(xm) is not _UNOWNED and type(ym) is not _UNOWNED:
        return False  # distinct allocations never overlap
    xp = x.data.ptr
    yp = y.data.ptr
    return xp != yp and xp < yp + nbytes and yp < xp + nbytes


def binary(k: Kernel, a, b, dst):
    """``k(a, b)`` into ``dst`` (or a new darray); ``None`` when the fast path does not apply."""
    dt = a.dtype
    if b.dtype is not dt or not (a._c_contiguous and b._c_contiguous):
        return None
    shape = a.shape
    if b.shape != shape:
        return None
    fp = None if _MULTI else k.ptrs.get(dt.num)
    if fp is None:
        fp = k.load(dt)
    if not fp or (_MULTI and not _same_device(a, b, dst)):
        return None
    n = a.size
    if dst is None:
        c = _D(shape, dt)
    else:
        td = type(dst)
        if ((td is not _D and td is not _ND) or dst.dtype is not dt or not dst._c_contiguous
                or dst.shape != shape):
            return None
        dm = dst.data.mem
        am = a.data.mem
        bm = b.data.mem
        # inline fast exit: distinct pool allocations never overlap
        if ((am is dm and a is not dst) or (bm is dm and b is not dst) or type(dm) is _UNOWNED
                or type(am) is _UNOWNED or type(bm) is _UNOWNED):
            nb = n * dt.itemsize
            if (dst is not a and _overlaps(dst, a, nb)) or (dst is not b and _overlaps(dst, b, nb)):
                return None  # partial overlap: CuPy's path copies the input first
        c = dst
    if n:
        p = _P
        _pack4(p.slots, 0, a.data.ptr, b.data.ptr, c.data.ptr, n)
        g = ((n * dt.itemsize + 15) >> 4) + _BLOCK - 1 >> 8
        _launch(fp, g if g < _max_grid else _max_grid, 1, 1, _BLOCK, 1, 1, 0,
                _current_stream().ptr, p.argv_ptr, 0)
    return c


def unary(k: Kernel, a, dst):
    """``k(a)`` into ``dst`` (or a new darray); ``None`` when the fast path does not apply."""
    dt = a.dtype
    if not a._c_contiguous:
        return None
    fp = None if _MULTI else k.ptrs.get(dt.num)
    if fp is None:
        fp = k.load(dt)
    if not fp or (_MULTI and not _same_device(a, a, dst)):
        return None
    shape = a.shape
    n = a.size
    if dst is None:
        c = _D(shape, dt)
    else:
        td = type(dst)
        if ((td is not _D and td is not _ND) or dst.dtype is not dt or not dst._c_contiguous
                or dst.shape != shape):
            return None
        if dst is not a and _overlaps(dst, a, n * dt.itemsize):
            return None
        c = dst
    if n:
        p = _P
        _pack3(p.slots, 0, a.data.ptr, c.data.ptr, n)
        g = ((n * dt.itemsize + 15) >> 4) + _BLOCK - 1 >> 8
        _launch(fp, g if g < _max_grid else _max_grid, 1, 1, _BLOCK, 1, 1, 0,
                _current_stream().ptr, p.argv_ptr, 0)
    return c


def _same_device(a, b, dst) -> bool:
    dev = _get_device()
    return (a.data.device_id == dev and b.data.device_id == dev
            and (dst is None or dst.data.device_id == dev))


def _bind(backend) -> None:
    """Switch the fast path on for the CuPy backend (off for NumPy or ``CUFLOW_FAST=0``)."""
    global _D, _ND, _UNOWNED, _MULTI, _get_device, _current_stream, _launch, _max_grid, enabled
    import os  # noqa: PLC0415

    enabled = backend.is_gpu and os.environ.get("CUFLOW_FAST", "1") != "0"
    if not enabled:
        return
    cupy = backend.xp
    from cupy_backends.cuda.api import driver, runtime  # noqa: PLC0415

    _D, _ND = backend.darray, backend.ndarray
    _UNOWNED = cupy.cuda.memory.UnownedMemory
    _MULTI = backend.device_count > 1
    _get_device = runtime.getDevice
    _current_stream = cupy.cuda.get_current_stream
    _launch = driver.launchKernel
    _max_grid = 0
    for k in KERNELS.values():
        k.ptrs = {}
        k.by_dev = {}
