"""On/off environment variables, read with one rule: an unknown value is refused."""

from __future__ import annotations

import os

from ._errors import ArgumentError

__all__ = ["env_switch"]

_ON = ("1", "true", "on", "yes")
_OFF = ("0", "false", "off", "no")


def env_switch(name: str, default: bool = False) -> bool:
    """The boolean environment variable ``name`` (``default`` when unset or empty).

    Raises
    ------
    ArgumentError
        The value is none of ``1``, ``true``, ``on``, ``yes`` (on) or ``0``, ``false``,
        ``off``, ``no`` (off), in any case.
    """
    value = os.environ.get(name, "")
    v = value.strip().lower()
    if not v:
        return default
    if v in _ON:
        return True
    if v in _OFF:
        return False
    raise ArgumentError(f"{name}={value!r}: expected one of {', '.join(_ON)} (on) or "
                        f"{', '.join(_OFF)} (off)")
