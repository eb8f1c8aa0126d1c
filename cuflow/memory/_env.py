"""The pool's environment variables, read once at import and checked against their choices.

* ``CUFLOW_POOL``: ``on`` (default) or ``off`` (CuPy keeps its own pool);
* ``CUFLOW_POOL_BACKEND``: ``driver`` (default), ``vmm`` (expandable segments, see
  ``_expandable``) or ``cudamalloc``;
* ``CUFLOW_POOL_HOTPATH``: ``compiled`` (default, where the extension was built) or ``python``;
* ``CUFLOW_MEMORY_LIMIT``: see ``_limit`` (bytes or a fraction of device memory).

A value outside the choices of the first three warns once (:class:`MemoryLimitWarning`,
naming the choices) and the default applies.  A malformed ``CUFLOW_MEMORY_LIMIT`` makes
every pool refuse to be built (:class:`MemoryValueError` when the first one is), since
running without the limit asked for could take the memory it was meant to leave to
others; ``import cuflow`` still works, so ``python -m cuflow info`` can name it.
"""

from __future__ import annotations

import os
import sys
import warnings

from ._exceptions import MemoryLimitWarning
from ._limit import check_limit_text

__all__ = ["MEMORY_LIMIT", "POOL_BACKEND", "POOL_HOTPATH", "POOL_ON", "check_memory_limit"]

_CHOICES = {
    "CUFLOW_POOL": ({"on": "on", "1": "on", "true": "on", "yes": "on", "": "on",
                     "off": "off", "0": "off", "false": "off", "no": "off"}, "on"),
    "CUFLOW_POOL_BACKEND": ({"driver": "driver", "async": "driver", "": "driver",
                             "vmm": "vmm", "expandable": "vmm",
                             "cudamalloc": "cudamalloc"}, "driver"),
    "CUFLOW_POOL_HOTPATH": ({"compiled": "compiled", "c": "compiled", "": "compiled",
                             "python": "python"}, "compiled"),
}


def _choice(name: str) -> str:
    choices, default = _CHOICES[name]
    raw = os.environ.get(name, "")
    value = choices.get(raw.strip().lower())
    if value is None:
        names = sorted({v for v in choices.values()})
        warnings.warn(f"{name}={raw!r} is not one of {names}; using {default!r}",
                      MemoryLimitWarning, stacklevel=_importer())
        return default
    return value


def _importer() -> int:
    """The ``stacklevel`` of a warning raised by this function's caller that names the code
    importing cuflow (the first frame outside cuflow and the import machinery), not this
    module, which is where the variables are read."""
    f, level = sys._getframe(1), 1
    while f is not None:
        name = f.f_globals.get("__name__", "")
        top = name.partition(".")[0]
        if top not in ("cuflow", "importlib"):
            break
        f = f.f_back
        # (warnings.warn counts every frame but the import machinery's bootstrap ones)
        level += not name.startswith("importlib._bootstrap")
    return level


POOL_ON = _choice("CUFLOW_POOL") == "on"
POOL_BACKEND = _choice("CUFLOW_POOL_BACKEND")
POOL_HOTPATH = _choice("CUFLOW_POOL_HOTPATH")
MEMORY_LIMIT = os.environ.get("CUFLOW_MEMORY_LIMIT", "")


def check_memory_limit() -> bool:
    """Whether ``CUFLOW_MEMORY_LIMIT`` sets a limit (it is unset, empty or 0 bytes otherwise);
    raise :class:`MemoryValueError` if it is no limit's text."""
    kind, x = check_limit_text(MEMORY_LIMIT)
    return kind != "none" and x != 0
