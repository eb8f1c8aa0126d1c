"""The cuflow exception hierarchy.

Every error cuflow raises on purpose derives from :class:`CuflowError`, and
also from the builtin a Python user would catch (``ValueError``,
``TypeError``, ``MemoryError``, ``RuntimeError``, ``BufferError``), so
``except ValueError`` and ``except cuflow.CuflowError`` both work.  Errors that
come from CUDA or the backend keep the original exception as ``__cause__``.
The rules every message follows are on ``docs/errors.md``.
"""

from __future__ import annotations

__all__ = [
    "CuflowError",
    "ArgumentError",
    "ArgumentTypeError",
    "DLPackCopyError",
    "BackendError",
    "DstError",
    "DstShapeError",
    "DstDtypeError",
    "DstTypeError",
    "DeviceError",
    "CudaError",
    "OutOfMemoryError",
    "KernelCompileError",
]


class CuflowError(Exception):
    """Base class of every error raised by cuflow."""


class BackendError(CuflowError, RuntimeError):
    """The requested backend cannot be used (no CuPy, no GPU, bad ``CUFLOW_BACKEND``)."""


class ArgumentError(CuflowError, ValueError):
    """An argument's value breaks the function's rule (the message names both)."""


class ArgumentTypeError(CuflowError, TypeError):
    """An argument has the wrong type (the message names the argument, the types it takes and
    the type it got)."""


class ArgumentIndexError(CuflowError, IndexError):
    """An index or axis argument is out of range (the message names it and the range)."""


class DLPackCopyError(CuflowError, BufferError):
    """A DLPack export with ``copy=False`` to another device than the array's (it needs a copy)."""


class DstError(CuflowError, ValueError):
    """``dst=`` breaks the output contract (shape, device, overlap, both ``dst`` and ``out``)."""


class DstShapeError(DstError):
    """The result shape differs from ``dst.shape`` (outputs are never broadcast)."""


class DstDtypeError(CuflowError, TypeError):
    """The result dtype cannot be cast to ``dst.dtype`` under the casting rule."""


class DstTypeError(CuflowError, TypeError):
    """``dst`` (or an input) is not an array of the active backend."""


class DeviceError(CuflowError, ValueError):
    """An array is on another device than the op (or ``dst``, stream, Bufferizer) runs on."""


class CudaError(CuflowError, RuntimeError):
    """A CUDA call failed; ``__cause__`` holds the CuPy / CUDA exception."""


class OutOfMemoryError(CuflowError, MemoryError):
    """The device ran out of memory; ``__cause__`` holds the allocator's exception."""


class KernelCompileError(CudaError):
    """NVRTC failed to compile a cuflow kernel; the message holds the kernel, target and log."""
