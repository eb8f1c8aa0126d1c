"""Debugging and profiling switches.

* :func:`sync` (or ``CUFLOW_SYNC_DEBUG=1``): synchronize the device before and
  after every public cuflow op, so an asynchronous CUDA error is raised by the
  op that caused it (as :class:`~cuflow.CudaError`, CUDA's error as
  ``__cause__``), the way ``CUDA_LAUNCH_BLOCKING=1`` works for PyTorch.  An
  error already pending when an op starts is reported as coming from work
  queued outside cuflow.  Slow: for finding bugs, not for production.
* :func:`nvtx` (or ``CUFLOW_NVTX=1``): every public op, kernel launch and
  Bufferizer call pushes an NVTX range named ``cuflow.<op>``, so an Nsight
  Systems timeline shows cuflow's work by name.  :func:`cuflow.annotate` marks
  your own code.

Both are free when off: the public functions are then the originals.
Switching on at run time rewires cuflow's namespaces; a name imported with
``from cuflow import add`` earlier keeps the original (use the environment
variables to cover those).
"""

from __future__ import annotations

from . import _instrument
from ._instrument import annotate

__all__ = ["annotate", "is_nvtx", "is_sync", "nvtx", "sync"]


def sync(enabled: bool = True) -> None:
    """Synchronize after (and before) every cuflow op to pin asynchronous CUDA errors on it."""
    _instrument.set_sync(enabled)


def nvtx(enabled: bool = True) -> None:
    """Emit an NVTX range for every cuflow op, kernel launch and Bufferizer call."""
    _instrument.set_nvtx(enabled)


def is_sync() -> bool:
    """Whether synchronous debugging is on."""
    return _instrument._SYNC


def is_nvtx() -> bool:
    """Whether per-op NVTX ranges are on."""
    return _instrument._NVTX
