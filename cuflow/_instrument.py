"""NVTX ranges and synchronous debugging for every public cuflow op.

Off by default and then free: the public functions are the originals.  When
either switch is on (``CUFLOW_NVTX=1`` / ``CUFLOW_SYNC_DEBUG=1`` at import,
or :func:`cuflow.debug.nvtx` / :func:`cuflow.debug.sync` at run time), the
public names of ``cuflow``, ``cuflow.image``, the :class:`~cuflow.Bufferizer`
methods, the darray methods and operators, and the raw-kernel launcher are
replaced by wrappers that

* push an NVTX range named ``cuflow.<op>`` around the call (``nvtx`` package
  if installed, else CuPy's NVTX binding, else nothing), and/or
* synchronize the device before and after the call, and turn a CUDA error
  found there into :class:`~cuflow.CudaError` naming the op (the way
  ``CUDA_LAUNCH_BLOCKING=1`` does for PyTorch).

Names imported with ``from cuflow import add`` before switching on keep the
original function; set the environment variable to cover those too.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import sys
import threading
from collections.abc import Callable
from typing import Any

from ._checks import is_integer
from ._env import env_switch
from ._errors import ArgumentError, ArgumentTypeError, CudaError
from .core._fastpath import FastCall
from .core._runtime import active, get_backend, on_select
from . import image
from .pipeline._bufferizer import Bufferizer
from .raw_kernels import _launch

__all__ = ["annotate", "set_nvtx", "set_sync"]

_NVTX = False
_SYNC = False
_INHERITED = object()  # marks a class attribute that was not in the class's own __dict__
_ORIGINALS: dict[tuple[int, str], tuple[Any, str, Any]] = {}

# Colours (ARGB) by kind of work, so a timeline reads at a glance.
_COLORS = {"kernel": 0xFF76B900, "image": 0xFF1F77B4, "Bufferizer": 0xFFFF7F0E,
           "graph": 0xFF9467BD, "op": 0xFF7F7F7F}
_NAMED_COLORS = {"green": 0xFF76B900, "blue": 0xFF1F77B4, "orange": 0xFFFF7F0E,
                 "purple": 0xFF9467BD, "red": 0xFFD62728, "grey": 0xFF7F7F7F,
                 "gray": 0xFF7F7F7F, "yellow": 0xFFBCBD22, "cyan": 0xFF17BECF}


# ------------------------------------------------------------------------- NVTX
def _nvtx_backend() -> tuple[Callable[[str, int], None], Callable[[], None]]:
    """(push, pop) of the first NVTX binding found; no-ops when there is none."""
    try:
        import nvtx  # noqa: PLC0415

        return (lambda msg, color: nvtx.push_range(msg, color=color)), nvtx.pop_range
    except ImportError:
        pass
    with contextlib.suppress(Exception):
        from cupy.cuda import nvtx as cnvtx  # noqa: PLC0415

        if cnvtx.available:
            return cnvtx.RangePushC, cnvtx.RangePop
    return (lambda msg, color: None), (lambda: None)


_PUSH_POP: tuple[Callable[[str, int], None], Callable[[], None]] | None = None


def _push_pop() -> tuple[Callable[[str, int], None], Callable[[], None]]:
    global _PUSH_POP
    if _PUSH_POP is None:
        _PUSH_POP = _nvtx_backend()
    return _PUSH_POP


def _color(color: Any) -> int:
    if color is None:
        return _COLORS["op"]
    if is_integer(color):
        if not 0 <= color < 1 << 32:
            raise ArgumentError(f"cuflow.annotate: an ARGB color is an int in [0, 2**32), got "
                                f"{color!r}")
        return int(color)  # (the NVTX bindings take a Python int)
    try:
        return _NAMED_COLORS[str(color).lower()]
    except KeyError:
        raise ArgumentError(f"cuflow.annotate: color must be an ARGB int or one of "
                         f"{sorted(_NAMED_COLORS)}, got {color!r}") from None


class annotate(contextlib.ContextDecorator):  # noqa: N801 (a function-like name, as nvtx's)
    """An NVTX range named ``name``, as a context manager or a decorator.

    Parameters
    ----------
    name : str
        What Nsight Systems shows on the timeline.
    color : str or int, optional
        A colour name (``green``, ``blue``, ``orange``, ``purple``, ``red``,
        ``grey``, ``yellow``, ``cyan``) or an ARGB int.

    Notes
    -----
    Uses the ``nvtx`` package when installed, else CuPy's NVTX binding; a
    no-op when neither is available.  Ranges are host-side: they show when
    work was queued, and Nsight projects them onto the GPU rows.
    """

    def __init__(self, name: str, color: Any = None) -> None:
        if not isinstance(name, str):
            raise ArgumentTypeError(f"cuflow.annotate: name must be a str, got "
                                    f"{type(name).__name__}")
        self.name, self.color = name, _color(color)

    def __enter__(self) -> annotate:
        """Open the named range (NVTX ``push``)."""
        _push_pop()[0](self.name, self.color)
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the range the block opened (NVTX ``pop``)."""
        _push_pop()[1]()


# ------------------------------------------------------------------ sync debug
def _device_sync(label: str, when: str) -> None:
    b = get_backend()
    if not b.is_gpu:
        return
    # inside a graph capture (cuflow.graph) a synchronize is illegal and would end the
    # capture: the op's errors show at the replay instead
    try:
        capturing = b.xp.cuda.get_current_stream().is_capturing()
    except b.cuda_errors:  # (the legacy stream while another stream captures)
        capturing = True
    if capturing:
        return
    try:
        b.xp.cuda.Device().synchronize()
    except b.cuda_errors as e:
        if when == "before":
            raise CudaError(
                f"cuflow debug sync: an asynchronous CUDA error was pending before {label} "
                f"started, so it comes from work queued outside cuflow since the previous "
                f"cuflow op: {e}") from e
        raise CudaError(f"cuflow debug sync: {label} raised an asynchronous CUDA error: {e}") \
            from e


def _call(fn: Callable[..., Any], label: str, color: int, args: Any, kwargs: Any) -> Any:
    nvtx, sync = _NVTX, _SYNC
    if nvtx:
        push, pop = _push_pop()
        push(label, color)
    try:
        if sync:
            _device_sync(label, "before")
        r = fn(*args, **kwargs)
        if sync:
            _device_sync(label, "after")
        return r
    finally:
        if nvtx:
            pop()


def _wrap(fn: Callable[..., Any], label: str, color: int) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return _call(fn, label, color, args, kwargs)

    return wrapper


def _wrap_launch(launch: Callable[..., Any], label: str, color: int) -> Callable[..., Any]:
    """The launcher's range is named after the kernel (``cuflow.kernel.image.cf_warp``)."""
    @functools.wraps(launch)
    def wrapper(kernel: str, entry: str, *args: Any) -> Any:
        return _call(launch, f"{label}.{kernel}.{entry}", color, (kernel, entry, *args), {})

    return wrapper


# --------------------------------------------------------------------- targets
#: Python's operators on an array: the operator module's dunders (arithmetic, comparison,
#: bitwise, ``@``, in place, ``a[i]``, ``a[i] = v``), and ``divmod``, a builtin.  Derived,
#: so no operator the darray class has is missed.
_OPERATORS = tuple(n for n in dir(operator) if n.startswith("__") and n.endswith("__")
                   and callable(getattr(operator, n))) + ("__divmod__",)


def _darray_ops(cls: type) -> list[str]:
    """Every public method of ``cls`` (its own and the base class's, the ufunc-backed ones
    such as ``clip`` included) and every operator it has, reflected ones (``__rsub__``) too."""
    have = set(dir(cls))
    ops = [n for n in sorted(have) if not n.startswith("_") and callable(getattr(cls, n, None))]
    for n in _OPERATORS:
        ops += [m for m in (n, f"__r{n[2:]}") if m in have]
    return list(dict.fromkeys(ops))


_NOT_OPS = ("get_backend", "set_backend", "backend_info", "get_array_module")
_BUFFERIZER_METHODS = ("allocate", "append", "append_one", "append_multiple", "next_slot",
                       "commit", "take", "release", "flush", "reset")


def _targets() -> list[tuple[Any, str, str, int, Callable[..., Any]]]:
    """(owner, attribute, label, colour, wrapper maker) of everything instrumented."""
    cuflow = sys.modules["cuflow"]  # the namespace above, whose public functions it wraps
    out = []
    for name in cuflow.__all__:
        obj = cuflow.__dict__.get(name)
        if (type(obj).__name__ == "function" or type(obj) is FastCall) and name not in _NOT_OPS:
            out.append((cuflow, name, f"cuflow.{name}", _COLORS["op"], _wrap))
    for name in image.__all__:
        obj = getattr(image, name)
        if type(obj).__name__ == "function":
            out.append((image, name, f"cuflow.image.{name}", _COLORS["image"], _wrap))
    for name in _BUFFERIZER_METHODS:
        out.append((Bufferizer, name, f"cuflow.Bufferizer.{name}", _COLORS["Bufferizer"],
                    _wrap))
    b = active()
    if b is not None:
        for name in _darray_ops(b.darray):
            out.append((b.darray, name, f"cuflow.darray.{name}", _COLORS["op"], _wrap))
    out.append((_launch, "launch", "cuflow.kernel", _COLORS["kernel"], _wrap_launch))
    return out


#: One switch at a time: two threads installing and removing wrappers at once would remove
#: each other's originals (and leave names deleted from darray).
_SWITCH_LOCK = threading.RLock()


def _refresh() -> None:
    """Install the wrappers when a switch is on, restore the originals when both are off."""
    with _SWITCH_LOCK:
        _refresh_locked()


def _refresh_locked() -> None:
    want = _NVTX or _SYNC
    if not want:
        for (_, name), (owner, _, orig) in list(_ORIGINALS.items()):
            if orig is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, orig)
        _ORIGINALS.clear()
        return
    for owner, name, label, color, make in _targets():
        key = (id(owner), name)
        if key in _ORIGINALS:
            continue
        if isinstance(owner, type) and name not in owner.__dict__:  # e.g. numpy's operators
            fn, orig = getattr(owner, name), _INHERITED
        else:
            fn = orig = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        _ORIGINALS[key] = (owner, name, orig)
        setattr(owner, name, make(fn, label, color))


def _switch(name: str, enabled: Any) -> bool:
    if isinstance(enabled, bool) or (isinstance(enabled, int) and enabled in (0, 1)):
        return bool(enabled)
    if type(enabled).__module__ == "numpy" and type(enabled).__name__ in ("bool", "bool_"):
        return bool(enabled)  # NumPy's bool (named bool_ before NumPy 2)
    raise ArgumentTypeError(f"cuflow.debug.{name}: enabled must be True or False, got "
                            f"{enabled!r}")


def set_nvtx(enabled: bool) -> None:
    """Switch the per-op NVTX ranges on or off."""
    global _NVTX
    on = _switch("nvtx", enabled)
    with _SWITCH_LOCK:
        _NVTX = on
        _refresh_locked()


def set_sync(enabled: bool) -> None:
    """Switch synchronous debugging on or off."""
    global _SYNC
    on = _switch("sync", enabled)
    with _SWITCH_LOCK:
        _SYNC = on
        _refresh_locked()


def _on_select(rt: Any) -> None:
    """A new runtime has a new darray class: wrap its methods too if a switch is on."""
    if _NVTX or _SYNC:
        _refresh()


def from_environment() -> None:
    """Apply ``CUFLOW_NVTX`` / ``CUFLOW_SYNC_DEBUG`` (``1``, ``true``, ``on``, ``yes``, or
    ``0``, ``false``, ``off``, ``no``); any other value raises :class:`~cuflow.ArgumentError`
    naming the variable, at ``import cuflow``."""
    nvtx, sync = env_switch("CUFLOW_NVTX"), env_switch("CUFLOW_SYNC_DEBUG")
    if nvtx:
        set_nvtx(True)
    if sync:
        set_sync(True)


on_select(_on_select)
