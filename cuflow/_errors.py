"""The cuflow exception hierarchy.

Every error cuflow raises on purpose derives from :class:`CuflowError`, and
also from the builtin a Python user would catch (``ValueError``,
``TypeError``, ``MemoryError``, ``RuntimeError``, ``BufferError``), so
``except ValueError`` and ``except cuflow.CuflowError`` both work.  Errors that
come from CUDA or the backend keep the original exception as ``__cause__``.
The rules every message follows are on ``docs/errors.md``.
"""

from __future__ import annotations

import numpy

__all__ = [
    "CuflowError",
    "ArgumentError",
    "ArgumentTypeError",
    "ArgumentIndexError",
    "ArgumentOverflowError",
    "ArgumentZeroDivisionError",
    "AxisError",
    "LinAlgError",
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


class AxisError(ArgumentIndexError, numpy.exceptions.AxisError):
    """An axis is out of range for the array's dimensions: NumPy's ``AxisError``, so also a
    ``ValueError`` and an ``IndexError``."""

    def __init__(self, message: str) -> None:
        numpy.exceptions.AxisError.__init__(self, message)
        Exception.__init__(self, message)  # (args, for pickling: NumPy's sets none)


class ArgumentOverflowError(ArgumentError, OverflowError):
    """A number is out of the range of the dtype that must hold it: NumPy's
    ``OverflowError``, and a ``ValueError``."""


class ArgumentZeroDivisionError(ArgumentError, ZeroDivisionError):
    """A division by a zero argument (weights summing to zero, a spacing of zero, a split
    into zero sections): NumPy's ``ZeroDivisionError``, and a ``ValueError``."""


class LinAlgError(CuflowError, numpy.linalg.LinAlgError):
    """A linear-algebra operation failed on its input (a singular or non-square matrix):
    NumPy's and CuPy's ``LinAlgError``, a ``ValueError``."""


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


# MemoryError first: MemoryError.__new__, which tblib's unpickling calls (as when Dask sends
# a worker's error to the client), refuses a class whose first base is not a MemoryError
class OutOfMemoryError(MemoryError, CuflowError):
    """The device ran out of memory; ``__cause__`` holds the allocator's exception."""


class KernelCompileError(CudaError):
    """NVRTC failed to compile a cuflow kernel; the message holds the kernel, target and log."""
