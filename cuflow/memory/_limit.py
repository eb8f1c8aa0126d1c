"""Memory limits: ``Pool.set_limit`` and ``CUFLOW_MEMORY_LIMIT``, in bytes or a fraction.

The pool checks its limit where a miss would take a new segment (see
``_pool``): its free segments go back first, so the limit bounds reserved
bytes, not only bytes in use.
"""

from __future__ import annotations

from ._backends import Backend, HostBackend
from ._exceptions import MemoryValueError

__all__ = ["limit_bytes", "parse_limit_env"]


def limit_bytes(size: int | None, fraction: float | None, backend: Backend) -> int | None:
    """The limit ``size`` bytes, or ``fraction`` of the device memory of ``backend``."""
    if size is not None and fraction is not None:
        raise MemoryValueError("cuflow.memory.set_limit: give size or fraction, not both")
    if fraction is not None:
        if not 0 < fraction <= 1:
            raise MemoryValueError(f"cuflow.memory.set_limit: fraction must be in (0, 1], "
                                   f"got {fraction}")
        return int(fraction * device_total(backend))
    if size is not None and size < 0:
        raise MemoryValueError(f"cuflow.memory.set_limit: size must be >= 0 bytes, got {size}")
    return size


def device_total(backend: Backend) -> int:
    """Bytes of memory ``backend`` draws from (a host backend: its capacity)."""
    if isinstance(backend, HostBackend):
        if backend.capacity is None:
            raise MemoryValueError("a fraction limit needs a backend with a known capacity")
        return backend.capacity
    from cupy_backends.cuda.api import runtime  # noqa: PLC0415  (optional dependency)

    return int(runtime.memGetInfo()[1])


def parse_limit_env(value: str, backend: Backend) -> int | None:
    """``CUFLOW_MEMORY_LIMIT``: bytes (``8e9``, ``8GiB``, ``512MB``) or a fraction of device
    memory (``0.8``, ``80%``)."""
    v = value.strip()
    if not v:
        return None
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 10**3, "mb": 10**6,
             "gb": 10**9, "b": 1}
    low = v.lower()
    try:
        if low.endswith("%"):
            return limit_bytes(None, float(low[:-1]) / 100, backend)
        for u, mult in units.items():
            if low.endswith(u):
                return int(float(low[: -len(u)]) * mult)
        x = float(low)
    except ValueError:
        raise MemoryValueError(f"CUFLOW_MEMORY_LIMIT={value!r}: expected bytes (8e9, 8GiB, "
                               f"512MB) or a fraction of device memory (0.8, 80%)") from None
    return limit_bytes(None, x, backend) if x <= 1 else int(x)
