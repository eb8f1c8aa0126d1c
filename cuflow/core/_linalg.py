"""``cuflow.linalg``'s own functions; everything else in it is the backend's ``linalg``.

``outer`` and ``cross`` are the array API's: NumPy's and CuPy's top-level functions of
those names flatten inputs of any dimension (``outer``) and take 2-element vectors
(``cross``), which the standard's ``linalg`` versions refuse.

Stream semantics: the eigen-decompositions synchronize (the solvers return on the host);
``outer`` and ``cross`` are queued on ``stream`` or the current stream.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy

from .._checks import is_integer
from .._errors import ArgumentError, ArgumentTypeError, AxisError
from ._contract import bad_input
from ._dispatch import call, run_on
from ._docs import complete, with_common_parameters
from ._interop import copy_into
from ._runtime import runtime

__all__ = ["eig", "eigvals", "EigResult", "outer", "cross"]


class EigResult(NamedTuple):
    """``eig``'s result (array API)."""

    eigenvalues: Any
    eigenvectors: Any


def _complex(r: Any) -> numpy.dtype:
    """The complex dtype of the backend's result ``r`` (an integer or bool matrix is computed
    in float64, so its eigenvalues are complex128, as NumPy's)."""
    return numpy.result_type(r.dtype, numpy.complex64)


def eig(x, /):
    """Eigenvalues and right eigenvectors of square matrices, always complex (array API).

    NumPy returns real arrays when every eigenvalue is real; the array API asks
    for the complex dtype matching ``x`` (float32 -> complex64) in every case.
    """
    xp = runtime().xp

    def run(a):
        w, v = xp.linalg.eig(a)
        return w.astype(_complex(w), copy=False), v.astype(_complex(v), copy=False)

    return EigResult(*call("linalg.eig", run, x))


def eigvals(x, /):
    """Eigenvalues of square matrices, always complex (array API)."""
    xp = runtime().xp

    def run(a):
        w = xp.linalg.eigvals(a)
        return w.astype(_complex(w), copy=False)

    return call("linalg.eigvals", run, x)


def _arrays(name: str, *xs: Any) -> None:
    """Refuse an input that is not an array of the active backend (a scalar or a list
    included: the standard's functions take arrays, and CuPy's would refuse a list)."""
    nd = runtime().ndarray
    for x in xs:
        if not isinstance(x, nd):
            bad_input(name, x, scalars=False)


def outer(x1, x2, /, *, dst=None, stream=None):
    """Outer product of two 1-D arrays (array API): ``out[i, j] = x1[i] * x2[j]``.

    The backend's top-level ``outer`` flattens inputs of other dimensions; the array
    API's ``linalg.outer`` takes 1-D arrays only.

    Parameters
    ----------
    x1, x2 : darray
        1-D arrays.

    Returns
    -------
    darray
        ``dst`` when given, else a new ``(x1.size, x2.size)`` array.

    Raises
    ------
    ArgumentError
        ``x1`` or ``x2`` is not 1-D.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    if stream is not None:
        return run_on(stream, "linalg.outer", outer, x1, x2, dst=dst)
    _arrays("linalg.outer", x1, x2)
    for arg, x in (("x1", x1), ("x2", x2)):
        if x.ndim != 1:
            raise ArgumentError(f"cuflow.linalg.outer: {arg} must be a 1-D array, got an "
                                f"array of shape {x.shape}")
    r = call("linalg.outer", runtime().xp.outer, x1, x2)
    return r if dst is None else copy_into("linalg.outer", dst, r, "same_kind")


def cross(x1, x2, /, *, axis=-1, dst=None, stream=None):
    """Cross products of the 3-element vectors along ``axis`` of ``x1`` and ``x2`` (array API).

    The other axes broadcast; the vectors' axis does not.  ``axis`` counts from the last
    axis when negative, in ``[-N, -1]`` where ``N`` is the smaller number of dimensions;
    a non-negative ``axis`` (NumPy's form) is taken where both inputs have the same
    number of dimensions, the one case where it names the same axis of both.

    Parameters
    ----------
    x1, x2 : darray
        Arrays of 3-element vectors along ``axis``.
    axis : int, default -1
        The axis of the vectors.

    Returns
    -------
    darray
        ``dst`` when given, else a new array of the broadcast shape.

    Raises
    ------
    ArgumentError
        The vectors do not have 3 elements (NumPy's top-level ``cross`` also takes 2; the
        array API does not), or the other axes do not broadcast.
    AxisError
        ``axis`` is out of that range.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    if stream is not None:
        return run_on(stream, "linalg.cross", cross, x1, x2, axis=axis, dst=dst)
    name = "linalg.cross"
    _arrays(name, x1, x2)
    if not is_integer(axis):
        raise ArgumentTypeError(f"cuflow.{name}: axis must be an int, got {axis!r}")
    n = min(x1.ndim, x2.ndim)
    if n == 0:
        raise AxisError(f"cuflow.{name}: x1 and x2 must have an axis of 3-element vectors, "
                        f"got shapes {x1.shape} and {x2.shape}")
    if not -n <= axis < (n if x1.ndim == x2.ndim else 0):
        raise AxisError(
            f"cuflow.{name}: axis must be in [-{n}, -1] for arrays of {x1.ndim} and "
            f"{x2.ndim} dimensions" + (f" (or [0, {n}) as both have {n})"
                                       if x1.ndim == x2.ndim else "") + f", got {axis}")
    given, axis = axis, int(axis) - n if axis >= 0 else int(axis)
    for arg, x in (("x1", x1), ("x2", x2)):
        if x.shape[axis] != 3:
            raise ArgumentError(f"cuflow.{name}: {arg}.shape[{given}] must be 3 (3-element "
                                f"vectors along axis={given}), got an array of shape "
                                f"{x.shape}")

    def others(x):
        return x.shape[:x.ndim + axis] + x.shape[x.ndim + axis + 1:]

    try:
        numpy.broadcast_shapes(others(x1), others(x2))
    except ValueError:
        raise ArgumentError(
            f"cuflow.{name}: the axes of x1 and x2 other than axis={given} must broadcast "
            f"together, got shapes {x1.shape} and {x2.shape}") from None
    r = call(name, runtime().xp.cross, x1, x2, axis=axis)
    return r if dst is None else copy_into(name, dst, r, "same_kind")


complete(globals(), ["outer", "cross"], with_common_parameters)
