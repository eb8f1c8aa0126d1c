"""Launching registry kernels whose one parameter is a struct passed by value.

The image kernels take a single ``struct`` parameter; the host packs it with a
:class:`struct.Struct` whose field order matches the C declaration (fields
ordered 8-byte first, so neither side inserts padding) and hands the driver a
pointer to the bytes.  ``cuLaunchKernel`` copies the parameter bytes when it
is called, so one per-thread buffer serves every launch.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from typing import Any

from .._errors import CudaError
from ._registry import get_function

__all__ = ["launch", "one_wave"]

_BUF_BYTES = 1024


class _Arg(threading.local):
    def __init__(self) -> None:
        self.buf = (ctypes.c_uint64 * (_BUF_BYTES // 8))()  # 8-byte aligned
        self.argv = (ctypes.c_void_p * 1)(ctypes.addressof(self.buf))
        self.argv_ptr = ctypes.addressof(self.argv)


_ARG = _Arg()
_CUDA: list[Any] = []


def _cuda() -> tuple[Any, Any]:
    """CuPy's driver and runtime modules (imported on first use: ``import cuflow`` does not
    need CuPy; a launch costs a few microseconds of host time, so no import per call)."""
    if not _CUDA:
        from cupy_backends.cuda.api import driver, runtime  # noqa: PLC0415

        _CUDA[:] = [(driver, runtime)]
    return _CUDA[0]


_PTRS: dict[tuple[str, str, str, int], int] = {}


def _function(kernel: str, entry: str, dtype: str) -> int:
    key = (kernel, entry, dtype, _cuda()[1].getDevice())
    fp = _PTRS.get(key)
    if fp is None:
        fp = _PTRS[key] = get_function(kernel, entry, dtype).kernel.ptr
    return fp


_WAVES: dict[tuple[str, str, str, int, int], int] = {}


def one_wave(kernel: str, entry: str, dtype: str, block_threads: int) -> int:
    """Blocks of ``block_threads`` that the current device runs at once (SMs times resident blocks per SM).

    For persistent kernels that stride over their work: launching exactly
    this many keeps every SM full with no second, partial wave.
    """
    driver, runtime = _cuda()
    dev = runtime.getDevice()
    key = (kernel, entry, dtype, block_threads, dev)
    n = _WAVES.get(key)
    if n is None:
        per_sm = driver.occupancyMaxActiveBlocksPerMultiprocessor(
            _function(kernel, entry, dtype), block_threads, 0)
        sms = runtime.deviceGetAttribute(runtime.cudaDevAttrMultiProcessorCount, dev)
        n = _WAVES[key] = max(1, per_sm) * sms
    return n


def launch(kernel: str, entry: str, dtype: str, grid: tuple[int, int, int],
           block: tuple[int, int, int], stream_ptr: int, fmt: struct.Struct,
           fields: tuple[Any, ...]) -> None:
    """Launch registry ``kernel``'s ``entry`` for ``dtype`` with ``fmt.pack(*fields)`` as its argument.

    Raises :class:`~cuflow.CudaError` (the driver's error as ``__cause__``)
    when the launch fails.
    """
    driver = _cuda()[0]
    fp = _function(kernel, entry, dtype)
    a = _ARG
    fmt.pack_into(a.buf, 0, *fields)
    try:
        driver.launchKernel(fp, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0,
                            stream_ptr, a.argv_ptr, 0)
    except driver.CUDADriverError as e:
        raise CudaError(f"launching cuflow kernel {kernel}.{entry} ({dtype}) with grid {grid} "
                        f"and block {block} failed: {e}") from e
