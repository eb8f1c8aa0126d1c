"""Array creation: ``empty``, ``zeros``, ``ones``, ``full``, their ``*_like`` forms, ``arange``,
``linspace``, ``eye``, ``identity``.

Each is the backend's function of the same name with its NumPy/CuPy arguments,
returning a darray, plus keyword-only ``stream=`` (where any initialization
runs) and the array API's ``device=`` (None or the current device).

Stream semantics: asynchronous; any initialization is queued on ``stream`` or
the current stream.
"""

from __future__ import annotations

from typing import Any

from ._dispatch import call, run_on
from ._info import check_device
from ._runtime import runtime

__all__ = ["empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like",
           "full_like", "arange", "linspace", "eye", "identity"]


def _make(name: str, device: Any, stream: Any, *args: Any, **kwargs: Any) -> Any:
    if device is not None:
        check_device(name, device)
    if stream is not None:
        return run_on(stream, _make, name, None, None, *args, **kwargs)
    return call(name, getattr(runtime().xp, name), *args, **kwargs)


def _like(dtype: Any, order: str, subok: Any, shape: Any) -> dict[str, Any]:
    kw = {"dtype": dtype, "order": order, "shape": shape}
    if subok is not None:
        kw["subok"] = subok
    return kw


def empty(shape, dtype=float, order="C", *, device=None, stream=None):
    """New array of ``shape``, uninitialized (array API ``empty``)."""
    return _make("empty", device, stream, shape, dtype, order)


def zeros(shape, dtype=float, order="C", *, device=None, stream=None):
    """New array of ``shape`` filled with 0 (array API ``zeros``)."""
    return _make("zeros", device, stream, shape, dtype, order)


def ones(shape, dtype=float, order="C", *, device=None, stream=None):
    """New array of ``shape`` filled with 1 (array API ``ones``)."""
    return _make("ones", device, stream, shape, dtype, order)


def full(shape, fill_value, dtype=None, order="C", *, device=None, stream=None):
    """New array of ``shape`` filled with ``fill_value`` (array API ``full``)."""
    return _make("full", device, stream, shape, fill_value, dtype, order)


def empty_like(a, dtype=None, order="K", subok=None, shape=None, *, device=None, stream=None):
    """Uninitialized array like ``a`` (array API ``empty_like``)."""
    return _make("empty_like", device, stream, a, **_like(dtype, order, subok, shape))


def zeros_like(a, dtype=None, order="K", subok=None, shape=None, *, device=None, stream=None):
    """Array like ``a`` filled with 0 (array API ``zeros_like``)."""
    return _make("zeros_like", device, stream, a, **_like(dtype, order, subok, shape))


def ones_like(a, dtype=None, order="K", subok=None, shape=None, *, device=None, stream=None):
    """Array like ``a`` filled with 1 (array API ``ones_like``)."""
    return _make("ones_like", device, stream, a, **_like(dtype, order, subok, shape))


def full_like(a, fill_value, dtype=None, order="K", subok=None, shape=None, *, device=None,
              stream=None):
    """Array like ``a`` filled with ``fill_value`` (array API ``full_like``)."""
    return _make("full_like", device, stream, a, fill_value, **_like(dtype, order, subok, shape))


def arange(start=None, stop=None, step=1, dtype=None, *, device=None, stream=None):
    """Evenly spaced values in ``[start, stop)`` (array API ``arange``; ``arange(n)`` and
    ``arange(stop=n)`` are ``[0, n)``)."""
    if start is None and stop is None:
        raise TypeError("cuflow.arange: give stop (or start and stop)")
    if stop is None:
        start, stop = 0, start
    elif start is None:
        start = 0
    return _make("arange", device, stream, start, stop, step, dtype=dtype)


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *,
             device=None, stream=None):
    """``num`` evenly spaced values from ``start`` to ``stop`` (array API ``linspace``)."""
    return _make("linspace", device, stream, start, stop, num, endpoint, retstep, dtype, axis)


def eye(N, M=None, k=0, dtype=float, order="C", *, device=None, stream=None):  # noqa: N803
    """2-D array with ones on diagonal ``k`` (array API ``eye``: ``n_rows, n_cols``)."""
    return _make("eye", device, stream, N, M, k, dtype, order)


def identity(n, dtype=float, *, device=None, stream=None):
    """Square identity matrix."""
    return _make("identity", device, stream, n, dtype)
