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

``empty(shape, dtype)`` (compiled launcher only) makes a new C-contiguous darray of a
shape of ints and a dtype of numbers, with no Python frame (``None`` for anything else:
``cuflow.empty``'s checks then run).

``ew(op, args, dst)`` (compiled launcher only) runs any elementwise function
of the namespace (an :class:`~cuflow.core._engine.EwOp`) on same-shape
C-contiguous floating/bool arrays and Python scalars through the kernel the
engine generated for it: one dictionary lookup keyed by the operands' dtypes,
alignment and scalar kinds, one allocation, one ``cuLaunchKernel``.

The runtime builds one :class:`FastPath` for the CuPy backend (none for NumPy,
or with ``CUFLOW_FAST=0``) and ops ask it for ``binary`` / ``unary``.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from collections.abc import Callable
from typing import Any

from .._env import env_switch
from ..raw_kernels import get_function

__all__ = ["BINARY", "UNARY", "KERNELS", "FastPath", "make_fast_path"]

#: cuflow function name -> entry point in elementwise.cu
BINARY = {"add": "cf_add", "subtract": "cf_subtract", "multiply": "cf_multiply",
          "divide": "cf_divide", "true_divide": "cf_divide", "maximum": "cf_maximum",
          "minimum": "cf_minimum"}
UNARY = {"negative": "cf_negative", "absolute": "cf_absolute", "abs": "cf_absolute"}

_BLOCK = 256  # threads per block (BLOCK in _ewlaunch.c)


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
    """One entry point of elementwise.cu; function pointers per (device, dtype), loaded lazily.

    ``ptrs`` holds the current device's pointers (what the compiled launcher reads);
    ``load`` fills a miss.  The active :class:`FastPath` resets them when it is built.
    """

    __slots__ = ("by_dev", "entry", "ptrs", "path")

    def __init__(self, entry: str) -> None:
        self.entry = entry
        self.ptrs: dict[int, int] = {}
        self.by_dev: dict[int, dict[int, int]] = {}
        self.path: FastPath | None = None

    def load(self, dt) -> int:
        """Function pointer for dtype ``dt`` (0 when the kernel has no such instantiation)."""
        path = self.path
        dev = path.get_device()
        path.set_max_grid(dev)
        ptrs = self.by_dev.setdefault(dev, {})
        if not path.multi:
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


class FastPath:
    """The launcher of one CuPy runtime: ``binary`` and ``unary``, compiled where built.

    ``binary(kernel, a, b, dst)`` / ``unary(kernel, a, dst)`` return the result
    (``dst`` when given), or None when the fast path does not apply.
    """

    def __init__(self, ndarray: type, device_count: int, stream_fn: Any, *,
                 get_device: Callable[[], int], current_stream: Callable[[], Any],
                 launch: Callable[..., Any], sm_count: Callable[[int], int]) -> None:
        self.ndarray = ndarray
        self.darray: type = ndarray
        self.multi = device_count > 1
        self.stream_fn = stream_fn
        self.get_device = get_device
        self.current_stream = current_stream
        self.launch = launch
        self.sm_count = sm_count
        self.max_grid = 0  # set on the first kernel load (reads the SM count)
        self.compiled: Any = None
        self.binary: Callable[..., Any] = self._py_binary
        self.unary: Callable[..., Any] = self._py_unary
        self.ew: Callable[..., Any] = _no_ew
        self.empty: Callable[..., Any] = _no_empty
        for k in KERNELS.values():
            k.ptrs, k.by_dev, k.path = {}, {}, self

    def bind(self, darray: type) -> None:
        """Results are ``darray``s; the compiled launcher takes over where it was built."""
        self.darray = darray
        if not self.multi:  # the compiled launcher assumes one device (no per-call device check)
            self.compiled = _compiled_launcher(darray, self.ndarray, self.stream_fn)
            if self.compiled is not None:
                self.binary, self.unary = self.compiled.binary, self.compiled.unary
                self.empty = self.compiled.empty
                if ENGINE_LAUNCH:
                    self.ew = self.compiled.ew

    def set_max_grid(self, dev: int) -> None:
        if not self.max_grid:
            # at most 64 blocks of 256 threads per SM, the grid-stride loop covering the rest
            # (bench/test_bench_elementwise.py, large add: the fastest cap)
            self.max_grid = 64 * max(1, self.sm_count(dev))
            if self.compiled is not None:
                self.compiled.max_grid = self.max_grid

    def on_device(self, *arrays) -> bool:
        """Every one of ``arrays`` is on the current device."""
        dev = self.get_device()
        return all(x.data.device_id == dev for x in arrays)

    def _py_binary(self, k: Kernel, a, b, dst):
        """``k(a, b)`` into ``dst`` (or a new darray); ``None`` when the fast path does not apply."""
        ta = type(a)
        tb = type(b)
        D, ND = self.darray, self.ndarray
        if (ta is not D and ta is not ND) or (tb is not D and tb is not ND):
            return None  # scalars, host arrays, other subclasses
        dt = a.dtype
        if b.dtype is not dt or not (a._c_contiguous and b._c_contiguous):
            return None
        shape = a.shape
        if b.shape != shape:
            return None
        fp = None if self.multi else k.ptrs.get(dt.num)
        if fp is None:
            fp = k.load(dt)
        if not fp or (self.multi and not self.on_device(a, b)):
            return None
        n = a.size
        nb = n * dt.itemsize
        ap = a.data.ptr
        bp = b.data.ptr
        if dst is None:
            c = self.darray(shape, dt)
            cp = c.data.ptr
        else:
            td = type(dst)
            if ((td is not self.darray and td is not self.ndarray) or dst.dtype is not dt
                    or not dst._c_contiguous or dst.shape != shape
                    or (self.multi and not self.on_device(dst))):
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
            mg = self.max_grid
            self.launch(fp, g if g < mg else mg, 1, 1, _BLOCK, 1, 1, 0,
                        self.current_stream().ptr, p.argv_ptr, 0)
        return c

    def _py_unary(self, k: Kernel, a, dst):
        """``k(a)`` into ``dst`` (or a new darray); ``None`` when the fast path does not apply."""
        ta = type(a)
        if ta is not self.darray and ta is not self.ndarray:
            return None
        dt = a.dtype
        if not a._c_contiguous:
            return None
        fp = None if self.multi else k.ptrs.get(dt.num)
        if fp is None:
            fp = k.load(dt)
        if not fp or (self.multi and not self.on_device(a)):
            return None
        shape = a.shape
        n = a.size
        nb = n * dt.itemsize
        ap = a.data.ptr
        if dst is None:
            c = self.darray(shape, dt)
            cp = c.data.ptr
        else:
            td = type(dst)
            if ((td is not self.darray and td is not self.ndarray) or dst.dtype is not dt
                    or not dst._c_contiguous or dst.shape != shape
                    or (self.multi and not self.on_device(dst))):
                return None
            cp = dst.data.ptr
            if a is not dst and _partial_overlap(cp, ap, nb):
                return None
            c = dst
        if n:
            p = _P
            _pack3(p.slots, 0, ap, cp, n)
            g = ((nb + 15) >> 4) + _BLOCK - 1 >> 8
            mg = self.max_grid
            self.launch(fp, g if g < mg else mg, 1, 1, _BLOCK, 1, 1, 0,
                        self.current_stream().ptr, p.argv_ptr, 0)
        return c


#: The engine's C launch of single ops (``ew``); ``CUFLOW_EW_ENGINE=0`` turns it off, and
#: single ops take the compiled binary/unary kernels or CuPy's ufuncs, and cuflow.fuse its
#: shape-keyed launch.
ENGINE_LAUNCH = env_switch("CUFLOW_EW_ENGINE", default=True)


def _no_ew(op: Any, args: tuple, dst: Any) -> None:
    """Without the compiled launcher (or with several GPUs) single ops take the backend's path."""
    return None


def _no_empty(shape: Any, dtype: Any) -> None:
    """Without the compiled launcher, creation takes the backend's path."""
    return None


def _compiled_launcher(darray, ndarray, stream_fn):
    """``_ewlaunch.Launcher`` over the driver's ``cuLaunchKernel``; ``None`` where not built."""
    try:
        from ._ewlaunch import Launcher  # noqa: PLC0415  (optional extension)
    except ImportError:
        return None
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
    from cupy_backends.cuda.api import driver  # noqa: PLC0415  (optional dependency)

    raise driver.CUDADriverError(status)


def make_fast_path(ndarray: type, device_count: int, stream_fn: Any) -> FastPath:
    """The fast path of a CuPy runtime (its ``bind`` takes the darray type)."""
    import cupy  # noqa: PLC0415  (optional dependency)
    from cupy_backends.cuda.api import driver, runtime  # noqa: PLC0415  (optional dependency)

    return FastPath(ndarray, device_count, stream_fn, get_device=runtime.getDevice,
                    current_stream=cupy.cuda.get_current_stream, launch=driver.launchKernel,
                    sm_count=lambda dev: runtime.deviceGetAttribute(16, dev))  # 16: SM count
