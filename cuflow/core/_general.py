"""Ops whose backend function takes ``out=``: ``matmul``, ``dot``, ``clip``, ``around``,
``cumsum``, ``cumprod``.

Their result shape and dtype come from a host-side oracle on one-element
stand-ins, so ``dst`` is checked before any device work.

Stream semantics: asynchronous; queued on ``stream`` or the current stream.
"""

from __future__ import annotations

from typing import Any

import functools

import numpy

from .._errors import ArgumentError, ArgumentTypeError
from ._docs import complete, with_common_parameters
from ._contract import bad_input, check_ints, one_element_axis, prepare_out, resolve_out
from ._dispatch import reraise, run_on
from . import _runtime
from ._engine import ew_op
from ._expr import Expr
from ._expr import clip as traced_clip
from ._expr import clip_bounds
from ._runtime import runtime

__all__ = ["matmul", "dot", "clip", "around", "round", "cumsum", "cumprod"]


def _shape_oracle(name, fn, *arrays, **kw):
    """Result (shape, dtype) of ``fn`` without computing it on full-size data.

    The dtype (and NumPy's own argument checks) come from running ``fn`` on
    one-element-per-axis host stand-ins; the shape from the op's rule.  (Running
    ``fn`` on full-size stand-ins would compute, e.g., a whole matmul on the host.)
    """
    rt = runtime()
    shapes = [a.shape for a in arrays if isinstance(a, rt.ndarray)]
    probe = [numpy.ones(tuple(min(d, 1) for d in a.shape), a.dtype) if isinstance(a, rt.ndarray)
             else a for a in arrays]
    with numpy.errstate(all="ignore"):
        dt = numpy.asarray(fn(*probe, **kw)).dtype
    if name in ("matmul", "dot"):
        return _contract_shape(name, arrays[0], arrays[1]), dt
    if name in ("cumsum", "cumprod"):
        a = arrays[0]
        return (a.size,) if kw.get("axis") is None else a.shape, dt
    return numpy.broadcast_shapes(*shapes), dt  # elementwise (clip, around)


def _contract_shape(name, a, b):
    """NumPy's result shape of ``matmul(a, b)`` / ``dot(a, b)``, inner sizes checked."""
    sa, sb = tuple(getattr(a, "shape", ())), tuple(getattr(b, "shape", ()))
    if name == "dot" and (not sa or not sb):
        return numpy.broadcast_shapes(sa, sb)
    if not sa or not sb:
        raise ArgumentError(f"cuflow.{name}: operands must be at least 1-D, got {sa} and {sb}")
    k_a = sa[-1]
    k_b = sb[-2] if len(sb) > 1 else sb[0]
    if k_a != k_b:
        raise ArgumentError(f"cuflow.{name}: the contracted sizes differ: {sa} and {sb} "
                         f"({k_a} != {k_b})")
    if name == "dot":
        return sa[:-1] + sb[:-2] + sb[-1:] if len(sb) > 1 else sa[:-1]
    batch = numpy.broadcast_shapes(sa[:-2], sb[:-2])
    return batch + (sa[-2:-1] if len(sa) > 1 else ()) + (sb[-1:] if len(sb) > 1 else ())


def _plain(rt, arrays):
    """The arrays as the backend's own type on the GPU: CuPy's dot calls methods of its
    operands and out (``out.sum(out=...)`` for booleans), which on a darray are cuflow's,
    with NumPy's result dtypes (tests/core/test_transforms.py, dot of bools into dst)."""
    if not rt.is_gpu:
        return arrays
    base = rt.ndarray
    return tuple(base.view(x, base) if isinstance(x, base) and type(x) is not base else x
                 for x in arrays)


def _general(name, np_fn, xp_name, arrays, dst, stream, elementwise=False, **kw):
    """dst= for ops whose backend function takes ``out=`` (matmul, dot, clip, cumsum, round)."""
    rt = runtime()
    if stream is not None:
        return run_on(stream, name, _general, name, np_fn, xp_name, arrays, dst, None,
                      elementwise, **kw)
    fn = getattr(rt.xp, xp_name)
    if name == "clip" and rt.is_gpu:  # NumPy's clip, not CuPy's
        fn = functools.partial(_clip, rt.xp)
    for a in arrays:  # (clip's bounds may be None; CuPy's matmul crashes on a None operand)
        if not (isinstance(a, rt.ndarray) or numpy.isscalar(a) or a is None and elementwise):
            bad_input(name, a)
    if "axis" in kw:
        kw["axis"] = check_ints(name, kw["axis"])
    if rt.multi:
        rt.check_devices(name, *arrays)
    try:
        if elementwise and not isinstance(arrays[0], rt.ndarray):
            # CuPy's clip and around call the first operand's method: a scalar becomes an
            # array of NumPy's result dtype (its Python scalars stay weakly typed)
            _, dt = _shape_oracle(name, np_fn, *arrays, **kw)
            arrays = (rt.xp.asarray(arrays[0], dtype=dt), *arrays[1:])
        if dst is None:
            if name == "matmul":  # (and on a 0-d operand, which NumPy's rule refuses)
                _contract_shape(name, *arrays)
            return rt.wrap(fn(*_plain(rt, arrays), **kw))
        shape, dt = _shape_oracle(name, np_fn, *arrays, **kw)
        arrays = _plain(rt, prepare_out(name, dst, shape, dt, inputs=arrays,
                                        overlap="elementwise" if elementwise else "copy"))
        out = _plain(rt, (dst,))[0]
        if name == "dot" and (dst.dtype != dt or not dst.flags.c_contiguous):
            # NumPy's dot writes only a C-contiguous out of the result's own dtype: the
            # result, then cast into dst (checked above)
            rt.xp.copyto(out, fn(*arrays, **kw), casting="unsafe")
            return dst
        fn(*arrays, out=out, **kw)
        return dst
    except Exception as e:
        reraise(name, e, dst)


def matmul(a: Any, b: Any, dst: Any = None, *, out: Any = None, stream: Any = None) -> Any:
    """Matrix product (NumPy ``matmul`` semantics); with ``dst`` written there.

    Parameters
    ----------
    a, b : darray
        The matrices (stacks of them broadcast, NumPy's rule).

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    return _general("matmul", numpy.matmul, "matmul", (a, b), resolve_out(dst, out, "matmul"),
                    stream)


def dot(a: Any, b: Any, dst: Any = None, *, out: Any = None, stream: Any = None) -> Any:
    """Dot product (NumPy ``dot`` semantics); with ``dst`` written there.

    Parameters
    ----------
    a, b : darray
        The operands (NumPy's ``dot``).

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    return _general("dot", numpy.dot, "dot", (a, b), resolve_out(dst, out, "dot"), stream)


_CLIP = ew_op("clip")


def _clip(xp, a, lo, hi, out=None):
    """NumPy's clip (:func:`cuflow.core._expr.clip`) on CuPy, whose own clip returns ``lo``
    where ``lo > hi`` and keeps ``a`` under a NaN bound, where NumPy gives ``hi`` and NaN."""
    lo, hi = clip_bounds(a.dtype, lo, hi)
    if lo is None or hi is None:
        if lo is None and hi is None:
            return xp.positive(a, out=out)
        return xp.minimum(a, hi, out=out) if lo is None else xp.maximum(a, lo, out=out)
    kinds = tuple(x.dtype if isinstance(x, xp.ndarray) else type(x) for x in (a, lo, hi))
    dt = _CLIP_DTYPES.get(kinds)
    if dt is None:  # (a Python int out of range raises here, as in NumPy)
        dt = _shape_oracle("clip", numpy.clip, a, lo, hi)[1]
        if int not in kinds:  # NumPy checks a Python int's value: those are not cached
            _CLIP_DTYPES[kinds] = dt
    if dt.kind not in "biuf":
        return xp.clip(a, lo, hi, out=out)
    args = [x.astype(dt, copy=False) if isinstance(x, xp.ndarray) else x for x in (a, lo, hi)]
    kernel = _clip_kernel(xp)
    if out is None:
        return kernel(*args)
    if out.dtype == dt:
        return kernel(*args, out)
    xp.copyto(out, kernel(*args))
    return out


_CLIP_DTYPES: dict = {}


@functools.cache
def _clip_kernel(xp):
    return xp.ElementwiseKernel(
        "T x, T lo, T hi", "T y",
        "T t = x < lo ? lo : x; y = lo != lo ? lo : hi != hi ? hi : t > hi ? hi : t;",
        "cuflow_clip")


def clip(a: Any, min: Any = None, max: Any = None, dst: Any = None, *,  # noqa: A002
         a_min: Any = None, a_max: Any = None, out: Any = None, stream: Any = None) -> Any:
    """Clamp to ``[min, max]`` (array API ``clip``); with ``dst`` written there.

    ``a_min`` and ``a_max`` are NumPy's names for ``min`` and ``max``.  The rules are
    NumPy's: ``minimum(maximum(a, min), max)`` in one dtype for the three operands, so a
    NaN bound gives NaN and where ``min > max`` the result is ``max``; with one bound,
    ``maximum`` or ``minimum`` alone.

    Parameters
    ----------
    min, max : number or darray, optional
        The bounds; at least one of them.
    a_min, a_max : number or darray, optional
        NumPy's names for ``min`` and ``max``.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    if (min is not None and a_min is not None) or (max is not None and a_max is not None):
        raise ArgumentTypeError("cuflow.clip: give min/max (array API) or a_min/a_max (NumPy), not both")
    lo = a_min if min is None else min
    hi = a_max if max is None else max
    if isinstance(a, Expr):  # inside cuflow.fuse
        return traced_clip(a, lo, hi)
    rt = _runtime._current
    if stream is out is None and rt is not None and rt.fast is not None and (
            lo is not None and hi is not None):
        r = rt.fast.ew(_CLIP, (a, lo, hi), dst)
        if r is not None:
            return r
    return _general("clip", numpy.clip, "clip", (a, lo, hi), resolve_out(dst, out, "clip"),
                    stream, elementwise=True)


def cumsum(a: Any, axis: int | None = None, dtype: Any = None, dst: Any = None, *, out: Any = None,
           stream: Any = None) -> Any:
    """Cumulative sum; with ``dst`` written there.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    if not isinstance(a, Expr):
        a, axis = one_element_axis("cumsum", a, axis, "accumulated")
    return _general("cumsum", numpy.cumsum, "cumsum", (a,), resolve_out(dst, out, "cumsum"),
                    stream, axis=axis, dtype=dtype)


def cumprod(a: Any, axis: int | None = None, dtype: Any = None, dst: Any = None, *, out: Any = None,
            stream: Any = None) -> Any:
    """Cumulative product; with ``dst`` written there.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    if not isinstance(a, Expr):
        a, axis = one_element_axis("cumprod", a, axis, "accumulated")
    return _general("cumprod", numpy.cumprod, "cumprod", (a,), resolve_out(dst, out, "cumprod"),
                    stream, axis=axis, dtype=dtype)


def around(a: Any, decimals: int = 0, dst: Any = None, *, out: Any = None,
           stream: Any = None) -> Any:
    """Round to ``decimals``; with ``dst`` written there.

    Parameters
    ----------
    decimals : int, default 0
        Decimal places kept; negative rounds to tens, hundreds...

    Notes
    -----
    Halves round to even, as in NumPy.  With ``decimals != 0``, NumPy scales by
    ``10**decimals`` in the array's dtype, and an inexact product can land on a half
    (-219.95 in float32 scales to -2199.5 and rounds to -220.0); on the GPU the scaling is
    CuPy's, in higher precision, which gives the nearer -219.9.  The two differ by one unit
    of the last decimal on such values.

    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """
    return _general("around", numpy.around, "around", (a,), resolve_out(dst, out, "around"),
                    stream, elementwise=True, decimals=decimals)


round = around  # noqa: A001  (NumPy's name)


complete(globals(), __all__, with_common_parameters)
