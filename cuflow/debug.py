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
    """Synchronize after (and before) every cuflow op to pin asynchronous CUDA errors on it.

    Parameters
    ----------
    enabled : bool, default True
        Switch synchronous debugging on (True) or off (False); ``0``, ``1`` and NumPy's
        bools are taken too.  The ops keep their wrappers while :func:`nvtx` is on.

    Raises
    ------
    cuflow.ArgumentTypeError
        ``enabled`` is none of True, False, 0, 1 or a NumPy bool.

    Notes
    -----
    Stream semantics: the switch itself queues nothing.  While it is on, each wrapped op
    waits for the whole device (on the GPU backend) before and after it runs, and a CUDA
    error found then is raised as :class:`cuflow.CudaError` naming the op.
    """
    _instrument.set_sync(enabled)


def nvtx(enabled: bool = True) -> None:
    """Emit an NVTX range for every cuflow op, kernel launch and Bufferizer call.

    Parameters
    ----------
    enabled : bool, default True
        Switch the ranges on (True) or off (False); ``0``, ``1`` and NumPy's bools are taken
        too.  The ops keep their wrappers while :func:`sync` is on.

    Raises
    ------
    cuflow.ArgumentTypeError
        ``enabled`` is none of True, False, 0, 1 or a NumPy bool.

    Notes
    -----
    The ranges come from the ``nvtx`` package when it is installed, else from CuPy's NVTX
    binding; with neither, they are no-ops.  They are pushed and popped on the host and
    queue no device work.
    """
    _instrument.set_nvtx(enabled)


def is_sync() -> bool:
    """Whether synchronous debugging is on."""
    return _instrument._SYNC


def is_nvtx() -> bool:
    """Whether per-op NVTX ranges are on."""
    return _instrument._NVTX
