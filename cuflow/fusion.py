"""``cuflow.fuse``: a Python function of arrays and scalars, run as one generated kernel.

::

    @cuflow.fuse
    def gelu(x):
        return 0.5 * x * (1 + cuflow.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))

    y = gelu(x)                # one kernel: x read once, y written once
    gelu(x, dst=y)             # into a preallocated output (dst= of every op)
    gelu(x, dst=x)             # in place
    gelu(x, stream=s)          # queued on s

Array arguments and Python ``int``/``float`` arguments are the kernel's
operands (a new scalar value reuses the kernel); any other argument (a
``bool`` flag, ``None``, a string, a tuple) is static: Python code may branch
on it, and each value (and type) traces once; an unhashable one (a dict) traces
at every call.  Floats in a static tuple are told apart by their bits (``-0.0``
from ``0.0``; a NaN matches itself).  An object compared by identity (the
instance of a fused method, a function) is held by a weak reference: it traces
once per object, the cache does not keep it alive, and its entries go with it;
its attributes the trace reads (``self.k``) are baked in as captured values are
(an object that takes no weak reference, as ``None``, is held).  Kernels of the
same source are compiled once and shared (instances of equal attributes share
one).  Captured values (closures, globals) are read at the trace and
baked into the kernel: pass a value that changes as an argument.  The first
call with a new signature (dtypes, shapes, strides, scalar types, static
arguments) runs the function once on traced arrays to record the expression;
the engine (:mod:`cuflow.core._engine`) generates one kernel for it, compiles
it with NVRTC (cached in memory and on disk) and launches it.  Later calls with
the same signature only launch.

What traces: operators, comparisons, cuflow's and NumPy's elementwise
functions, ``where``, ``clip``, ``astype``, :func:`erf`, :func:`sigmoid`,
:func:`rsqrt`, lambdas, closures, captured scalars, keyword arguments, Python
control flow on shapes and dtypes, several outputs (return a tuple), and one
trailing reduction (``sum``, ``mean``, ``max``, ``min``, ``prod``, ``argmax``,
``argmin`` over one axis or everything) as the single output.  What does not:
control flow on values, indexing, non-elementwise functions; these raise
:class:`TraceError` naming the construct and its line, or, with
``FuseOptions(fallback="unfused")``, run the function op by op with a
one-time warning.  So do arrays (arguments and ``dst=``) of other dtypes than
bool, integer and float.  An exception the function raises itself (a ``raise``
or ``assert`` statement, as a shape check) propagates as itself, as the plain
function's would (with ``fallback="unfused"`` the plain function runs and
raises it).

On the NumPy backend a fused function runs op by op (the CPU test oracle),
with the same results.

Stream semantics: the kernel is queued on ``stream`` or the current stream;
nothing synchronizes the host.  A fused call inside ``cuflow.graph`` capture
is recorded like any other kernel (trace and compile outside capture first).
"""

from __future__ import annotations

import dataclasses
import dis
import functools
import inspect
import linecache
import math
import sys
import traceback
import warnings
import weakref
from collections.abc import Callable
from typing import Any, Literal

import numpy

from ._errors import ArgumentError, ArgumentOverflowError, ArgumentTypeError, CuflowError
from .core import _engine, _runtime
from .core._contract import check_outs_apart, may_share, prepare_out, resolve_out
from .core._dispatch import reraise
from .core._fastpath import FastCall
from .core._ewgen import topo
from .core._expr import EXTRA_UNARY, Expr, TraceError, apply, caller_line, int_scalar_bounds
from .core._streams import use_stream

__all__ = ["fuse", "Fused", "FuseOptions", "TraceError", "erf", "erfc", "sigmoid", "rsqrt",
           "stats"]


@dataclasses.dataclass(frozen=True)
class FuseOptions:
    """How :func:`fuse` treats a function.

    Attributes
    ----------
    fallback : {"error", "unfused"}
        What a construct the tracer cannot handle does: raise :class:`TraceError`
        (default), or run the function op by op, with a warning the first time.
    name : str or None
        The name in error and warning messages (default: the function's).
    """

    fallback: Literal["error", "unfused"] = "error"
    name: str | None = None

    def __post_init__(self) -> None:
        if self.fallback not in ("error", "unfused"):
            raise ArgumentError(f"cuflow.FuseOptions: fallback must be 'error' or 'unfused', got "
                                f"{self.fallback!r}")
        if self.name is not None and not isinstance(self.name, str):
            raise ArgumentTypeError(f"cuflow.FuseOptions: name must be a str or None, got "
                                    f"{type(self.name).__name__} {self.name!r}")


def stats() -> dict[str, Any]:
    """The engine's counters: ``compiles``, ``compile_ms``, ``disk_hits``, ``memory_hits``, ``plans``."""
    return _engine.stats()


# ------------------------------------------------- functions beyond NumPy's
def _special(name: str, x: Any, dst: Any = None, stream: Any = None) -> Any:
    if isinstance(x, Expr):
        return apply(name, x)
    rt = _runtime.runtime()
    if stream is not None:
        with use_stream(stream, f"fusion.{name}"):
            return _special(name, x, dst)
    xp = rt.xp
    a = xp.asarray(x)
    if a.dtype.kind not in "biuf":
        raise ArgumentTypeError(f"cuflow.{name} takes real numbers (bool, integer or float "
                                f"dtypes), got dtype {a.dtype}")
    dt = numpy.exp(numpy.ones((), a.dtype)).dtype  # NumPy's float result dtype
    a = a.astype(dt, copy=False)
    if name == "sigmoid":
        r = 1 / (1 + xp.exp(-a))
    elif name == "rsqrt":
        r = 1 / xp.sqrt(a)
    elif rt.is_gpu:
        from cupyx.scipy import special  # noqa: PLC0415  (optional dependency)

        r = getattr(special, name)(a)
    else:
        f = getattr(math, name)
        r = numpy.vectorize(f, otypes=[numpy.float64])(a).astype(dt)
    r = rt.wrap(xp.asarray(r, dtype=dt))
    if dst is None:
        return r
    prepare_out(name, dst, r.shape, r.dtype)
    xp.copyto(dst, r, casting="same_kind")
    return dst


def erf(x: Any, /, *, dst: Any = None, stream: Any = None) -> Any:
    """The error function, elementwise (fuses inside :func:`fuse`)."""
    return _special("erf", x, dst, stream)


def erfc(x: Any, /, *, dst: Any = None, stream: Any = None) -> Any:
    """The complementary error function, elementwise (fuses inside :func:`fuse`)."""
    return _special("erfc", x, dst, stream)


def sigmoid(x: Any, /, *, dst: Any = None, stream: Any = None) -> Any:
    """The logistic function ``1 / (1 + exp(-x))``, elementwise (fuses inside :func:`fuse`)."""
    return _special("sigmoid", x, dst, stream)


def rsqrt(x: Any, /, *, dst: Any = None, stream: Any = None) -> Any:
    """``1 / sqrt(x)``, elementwise (fuses inside :func:`fuse`; the device's rsqrt there)."""
    return _special("rsqrt", x, dst, stream)


assert EXTRA_UNARY == {"erf", "erfc", "sigmoid", "rsqrt"}

_SPECIAL_SECTIONS = """Parameters
----------
x : darray or scalar
    Real numbers (bool, integer or float dtypes); inside :func:`fuse`, a traced value.
dst : darray, optional
    Where the result is written, of exactly its shape and a dtype it casts to under
    ``"same_kind"``.
stream : cuflow.Stream, optional
    The stream the work is queued on; the current stream when omitted.

Returns
-------
darray
    ``dst`` when given, else a new array of the float dtype NumPy's ``exp`` gives
    for ``x``'s (float16 for bool and 8-bit integers, float32 for 16-bit ones,
    float64 for wider ones; a float dtype stays).

Raises
------
ArgumentTypeError
    ``x`` is complex or not numeric.

Notes
-----
Stream semantics: asynchronous; queued on ``stream`` or the current stream.
"""
if sys.flags.optimize < 2:  # (python -OO strips docstrings): the sections the four share
    for _f in (erf, erfc, sigmoid, rsqrt):
        _f.__doc__ = inspect.cleandoc(_f.__doc__) + "\n\n" + _SPECIAL_SECTIONS


# ----------------------------------------------------------------- tracing
class _Entry:
    """What one call signature runs: a plan, or the unfused function."""

    __slots__ = ("plan", "arr_pos", "sc_pos", "sc_kind", "out_shapes", "out_dtypes", "single",
                 "reduction", "unfused", "sc_fix")

    def __init__(self) -> None:
        self.unfused = False
        #: (index in the scalars, argument position or keyword, bounds or None) per scalar
        #: argument that is range-checked (a Python int) or converted (a NumPy bool)
        self.sc_fix: tuple = ()


def _user_line(e: BaseException, fn: Callable) -> str:
    """``file:line: source`` of the deepest frame of ``e``'s traceback inside ``fn``'s file."""
    code = getattr(fn, "__code__", None)
    fname = code.co_filename if code is not None else None
    best = None
    for fr in traceback.extract_tb(e.__traceback__):
        if fr.filename == fname:
            best = fr
    if best is None:
        return "<unknown line>"
    src = best.line or linecache.getline(best.filename, best.lineno).strip()
    return f"{best.filename}:{best.lineno}: {src}"


_OPS_KEYS = ("dst", "stream")


class Fused(object if FastCall is None else FastCall):
    """A function compiled by :func:`fuse`; call it like the function, plus ``dst=`` (an
    array, or a tuple per output; ``out=``, NumPy's spelling, where the function takes no
    ``out`` of its own) and ``stream=``.

    :func:`fuse` makes it, and checks its arguments first.

    Parameters
    ----------
    fn : callable
        The function traced.
    options : FuseOptions
        How it is traced, and what a construct the tracer cannot handle does.

    Notes
    -----
    Stream semantics: asynchronous; queued on ``stream`` or the current stream.
    """

    def __init__(self, fn: Callable, options: FuseOptions) -> None:
        self.fn = fn
        self.options = options
        self.name = options.name or getattr(fn, "__name__", "fused")
        self._entries: dict = {}
        self._warned = False
        try:  # out= is NumPy's spelling of dst=, unless the function has a use for it
            params = inspect.signature(fn).parameters.values()
            self._own_out = any(p.name == "out" or p.kind is p.VAR_KEYWORD for p in params)
        except (TypeError, ValueError):
            self._own_out = True
        # one array output over same-shape contiguous operands: launched from C, through
        # FastCall's entry point (positional operands and dst=) or the runtime's fast path
        self._op = _engine.EwOp(self.name, fn, fused=True)
        if FastCall is not None:
            FastCall.__init__(self, self._op, self._call, -1, _runtime)
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<cuflow.fuse of {self.name}>"

    def __get__(self, obj, objtype=None):  # methods: bind like a function
        return self if obj is None else functools.partial(self, obj)

    def _call(self, *args: Any, dst: Any = None, stream: Any = None, **kwargs: Any) -> Any:
        """Run the fused function (``__call__``)."""
        if "out" in kwargs and not self._own_out:
            dst = resolve_out(dst, kwargs.pop("out"), f"fuse({self.name})")
        if any(isinstance(a, Expr) for a in (*args, *kwargs.values())):
            # called by another fused function while it is traced: part of its kernel
            if dst is not None or stream is not None:
                raise TraceError(f"cuflow.fuse: {self.name} called inside a fused function "
                                 f"takes no dst= or stream= (at {caller_line()}): its result "
                                 "is part of the outer kernel")
            return self.fn(*args, **kwargs)
        rt = _runtime._current
        if rt is not None and stream is None and not kwargs:
            fast = rt.fast
            if fast is not None:  # same-shape contiguous operands: launched from C
                r = fast.ew(self._op, args, dst)
                if r is not None:
                    return r
        if rt is None:
            rt = _runtime.runtime()
        if stream is not None:
            with use_stream(stream, f"fuse({self.name})"):
                return self(*args, dst=dst, **kwargs)
        if not rt.is_gpu:
            return self._cpu(rt, args, kwargs, dst)
        nd = rt.ndarray
        key: list = []
        for a in args:
            if isinstance(a, nd):
                key.append((a.dtype.num, a.shape, a.strides, not a.data.ptr & 15))
            else:
                key.append(_static_key(a))
        if kwargs:
            for k in sorted(kwargs):
                a = kwargs[k]
                key.append(k)
                key.append((a.dtype.num, a.shape, a.strides, not a.data.ptr & 15)
                           if isinstance(a, nd) else _static_key(a))
        if dst is not None:
            key.append(_dst_key(nd, dst))
        if rt.device_count > 1:
            key.append(rt.current_device())  # a module is loaded per device
        tkey = tuple(key)
        ent = self._entries.get(tkey)
        if ent is None:
            ent = self._build(rt, args, kwargs, dst, tkey)
            if _UNKEYED not in key:  # (an unhashable static argument: traced at every call)
                self._keep(tkey, ent)
        if ent.unfused:
            return self._unfused(rt, args, kwargs, dst)
        allargs = args if not kwargs else (*args, *(kwargs[k] for k in sorted(kwargs)))
        arrays = [allargs[i] for i in ent.arr_pos]
        if rt.multi:  # the kernel would read another device's memory
            rt.check_devices(self.name, *arrays)
        scal = [allargs[i] for i in ent.sc_pos]
        if ent.sc_fix:
            self._check_scalars(ent, scal)
        if dst is None:
            D = rt.darray
            outs = [D(s, d) for s, d in zip(ent.out_shapes, ent.out_dtypes)]
            writes = outs
        else:
            dsts = (dst,) if not isinstance(dst, (tuple, list)) else tuple(dst)
            if len(dsts) != len(ent.out_shapes):
                raise ArgumentError(f"cuflow.fuse({self.name}): dst= has {len(dsts)} arrays "
                                    f"for {len(ent.out_shapes)} outputs")
            if len(dsts) > 1:
                check_outs_apart(f"fuse({self.name})", dsts)
            outs = list(dsts)
            writes = []
            given = arrays
            for d, s, dt in zip(dsts, ent.out_shapes, ent.out_dtypes):
                arrays = list(prepare_out(self.name, d, s, dt, inputs=arrays,
                                          overlap="elementwise" if ent.reduction is None
                                          else "copy"))
                writes.append(d if d.flags.c_contiguous else rt.darray(s, d.dtype))
            if any(a is not g for a, g in zip(arrays, given)):
                # inputs that overlap dst were copied: the kernel was planned for their own
                # strides and alignment, so the call runs again with the copies in their place
                args, kwargs = _substitute(ent.arr_pos, args, kwargs, given, arrays)
                return self._call(*args, dst=dst, **kwargs)
        tmp = None
        p = ent.plan
        if p.reduction is not None and not p.n:
            return self._empty_reduction(ent, writes[0], outs)
        if p.tmp_bytes:
            tmp = rt.xp.empty(p.tmp_bytes, numpy.uint8)
        p.launch([a.data.ptr for a in arrays], [o.data.ptr for o in writes], scal,
                 rt.xp.cuda.get_current_stream().ptr, tmp)
        for o, w in zip(outs, writes):
            if o is not w:
                o[...] = w
        return outs[0] if ent.single else tuple(outs)

    if FastCall is None:
        __call__ = _call

    # ---------------------------------------------------------------- build
    def _build(self, rt: Any, args: tuple, kwargs: dict, dst: Any, tkey: tuple) -> _Entry:
        ent, t = self._trace(rt.ndarray, args, kwargs, dst)
        if t is None:
            return ent
        arrays = t[3]
        dsts = t[6]
        aligned = all(not a.data.ptr & 15 for a in arrays) and (
            dsts is None or all(not d.data.ptr & 15 for d in dsts))
        ent.plan = _engine.plan(*t[:6], ent.reduction, rt.current_device(), aligned)
        return ent

    def cuda_source(self, *args: Any, dst: Any = None, **kwargs: Any) -> str:
        """The CUDA source the GPU would run for these arguments (NumPy arrays stand in).

        For reading and for compile checks without a GPU; the pointers are taken as
        16-byte aligned.

        Parameters
        ----------
        *args
            The arguments of a call, NumPy arrays standing in for device arrays.
        dst : array or tuple of arrays, optional
            The call's ``dst=``.
        **kwargs
            The call's keyword arguments.

        Returns
        -------
        str
            The kernel's CUDA C++ source.

        Raises
        ------
        TraceError
            These arguments run unfused (``fallback="unfused"``), so there is no kernel;
            or the tracer cannot handle the function.
        """
        ent, t = self._trace(numpy.ndarray, args, kwargs, dst)
        if t is None:
            raise TraceError(f"cuflow.fuse({self.name}) runs unfused for these arguments")
        return _engine.source(*t[:6], ent.reduction, True).src

    def _trace(self, nd: type, args: tuple, kwargs: dict, dst: Any) -> tuple:
        """Trace ``fn`` for these arguments: ``(entry, plan arguments)`` (None: unfused)."""
        ent = _Entry()
        dsts = None if dst is None else ((dst,) if not isinstance(dst, (tuple, list))
                                         else tuple(dst))
        for j, d in enumerate(dsts or ()):
            if not isinstance(d, nd):  # the output contract's DstTypeError, before d.dtype
                prepare_out(f"fuse({self.name})", d, ())
            if d.dtype.kind not in "biuf":
                return self._give_up(ent, TraceError(
                    f"cuflow.fuse({self.name}): dst= {'' if dst is d else f'array {j} '}has "
                    f"dtype {d.dtype}; fused kernels write bool, integer and float arrays "
                    f"(at {caller_line()})")), None
        names = sorted(kwargs)
        allargs = (*args, *(kwargs[k] for k in names))
        targs: list = []
        arr_nodes: dict[int, Expr] = {}
        sc_nodes: dict[int, Expr] = {}
        for i, a in enumerate(allargs):
            if isinstance(a, nd):
                if a.dtype.kind not in "biuf":
                    return self._give_up(ent, TraceError(
                        f"cuflow.fuse({self.name}): argument "
                        f"{i if i < len(args) else names[i - len(args)]!r} has dtype "
                        f"{a.dtype}; fused kernels take bool, integer and float arrays "
                        f"(at {caller_line()})")), None
                t = arr_nodes[i] = Expr("input", (), a.dtype, tuple(a.shape), i)
            elif type(a) is int or type(a) is float:
                t = sc_nodes[i] = Expr("scalar", (), numpy.int64 if type(a) is int else
                                       numpy.float64, (), type(a)(0), weak=True)
            elif isinstance(a, numpy.generic) and a.dtype.kind in "biuf":
                t = sc_nodes[i] = Expr("scalar", (), a.dtype, (), i)
            else:
                t = a
            targs.append(t)
        try:
            with numpy.errstate(all="ignore"):
                res = self.fn(*targs[:len(args)], **dict(zip(names, targs[len(args):])))
            outputs = res if isinstance(res, tuple) else (res,)
            for j, o in enumerate(outputs):
                if not isinstance(o, Expr) or not any(n.op == "input" for n in topo((o,))):
                    raise TraceError(
                        f"cuflow.fuse({self.name}): output {j} does not depend on an array "
                        f"argument (got {o!r}); return arrays computed from the arguments")
            reds = [o for o in outputs if o.op.startswith("reduce:")]
            if reds and len(outputs) != 1:
                raise TraceError(f"cuflow.fuse({self.name}): a trailing reduction must be the "
                                 "only output")
            if not reds and len({o.shape for o in outputs}) != 1:
                raise TraceError(f"cuflow.fuse({self.name}): outputs of different shapes "
                                 f"({', '.join(str(o.shape) for o in outputs)}); fused outputs "
                                 "share one shape")
        except TraceError as e:
            return self._give_up(ent, e), None
        except (ArgumentOverflowError, ArgumentError):
            # a constant NumPy refuses (uint8 + 300): unfused, it would fail or wrap; operands
            # that do not broadcast: unfused, NumPy's bare ValueError
            raise
        except Exception as e:
            if self.options.fallback == "error" and _raised_by_user(e):
                raise  # the function's own error (a shape check): the plain function's
            err = TraceError(f"cuflow.fuse({self.name}) cannot trace {type(e).__name__}: {e} "
                             f"at {_user_line(e, self.fn)}")
            err.__cause__ = e
            return self._give_up(ent, err), None
        ent.single = not isinstance(res, tuple)
        used = {id(n) for n in topo(outputs)}
        ent.arr_pos = [i for i, n in arr_nodes.items() if id(n) in used]
        ent.sc_pos = [i for i, n in sc_nodes.items() if id(n) in used]
        in_nodes = [arr_nodes[i] for i in ent.arr_pos]
        s_nodes = [sc_nodes[i] for i in ent.sc_pos]
        arrays = [allargs[i] for i in ent.arr_pos]
        bounds = int_scalar_bounds(outputs, s_nodes)
        ent.sc_fix = tuple((j, i if i < len(args) else names[i - len(args)], b)
                           for j, (i, b) in enumerate(zip(ent.sc_pos, bounds))
                           if b is not None or s_nodes[j].dtype.kind == "b")
        if reds:
            r = reds[0]
            axis, _ = r.value
            src = r.args[0]
            shape = src.shape
            out_dt = r.dtype if dsts is None else dsts[0].dtype
            ent.reduction = (r.op[7:], axis, out_dt)
            ent.out_shapes = [r.shape]
            ent.out_dtypes = [r.dtype]
            outs_nodes = (src,)
            plan_dts = (out_dt,)
        else:
            shape = outputs[0].shape
            ent.reduction = None
            ent.out_shapes = [o.shape for o in outputs]
            ent.out_dtypes = [o.dtype for o in outputs]
            outs_nodes = outputs
            plan_dts = tuple(o.dtype if dsts is None else d.dtype
                             for o, d in zip(outputs, dsts or outputs))
        for x in arrays:
            if _engine.broadcast_strides(x, shape) is None:
                return self._give_up(ent, TraceError(
                    f"cuflow.fuse({self.name}): an input with strides {x.strides} that are "
                    "not whole elements; pass a copy")), None
        return ent, (outs_nodes, in_nodes, s_nodes, arrays, plan_dts, shape, dsts)

    def _keep(self, key: tuple, ent: _Entry) -> None:
        """Cache ``ent``; a key that holds an object by a weak reference goes with it."""
        self._entries[key] = ent
        for r in _refs(key):
            obj = r()
            if obj is not None:
                weakref.finalize(obj, self._entries.pop, key, None)

    def _give_up(self, ent: _Entry, err: TraceError) -> _Entry:
        if self.options.fallback == "error":
            raise err
        if not self._warned:
            self._warned = True
            warnings.warn(f"{err}; running {self.name} unfused (op by op)", RuntimeWarning,
                          stacklevel=_outside_cuflow())
        ent.unfused = True
        return ent

    def _check_scalars(self, ent: _Entry, scal: list) -> None:
        """Range-check the Python int arguments as NumPy does against the dtypes the kernel
        casts them to (it would wrap them), and make NumPy bools ints for packing."""
        for j, i, b in ent.sc_fix:
            v = scal[j]
            if b is None:
                scal[j] = int(v)
                continue
            lo, hi, lo_dt, hi_dt = b
            if not lo <= v <= hi:
                dt = lo_dt if v < lo else hi_dt
                why = ("the kernel's parameter of a Python int: pass float() for a float "
                       "operand" if dt == numpy.int64 else "the dtype the kernel computes it in")
                raise ArgumentOverflowError(
                    f"cuflow.fuse({self.name}): argument {i!r}: Python integer {v} out of bounds "
                    f"for {dt}, {why} (at {caller_line()})")

    def _empty_reduction(self, ent: _Entry, out: Any, outs: list) -> Any:
        name = ent.reduction[0]
        if out.size and name in ("max", "min", "argmax", "argmin"):
            # (no identity is needed for a result of no elements: (0, 3) over axis 1)
            raise ArgumentError(f"cuflow.fuse({self.name}): {name} of an empty array "
                                "(zero-size reduction has no identity)")
        if out.size:  # (sum, prod or mean: their identity, or NaN)
            out.fill({"sum": 0, "prod": 1, "mean": numpy.nan}[name])
        if outs[0] is not out:
            outs[0][...] = out
        return outs[0]

    # -------------------------------------------------------------- unfused
    def _cpu(self, rt: Any, args: tuple, kwargs: dict, dst: Any) -> Any:
        """The NumPy backend: trace once per signature (the same errors), then run op by op."""
        nd = rt.ndarray
        allargs = (*args, *(kwargs[k] for k in sorted(kwargs)))
        key = tuple((a.dtype.num, a.shape, a.strides) if isinstance(a, nd) else _static_key(a)
                    for a in allargs)
        key += tuple(sorted(kwargs))
        if dst is not None:  # (a dst of a dtype no kernel writes: an error, or unfused)
            key += (("dst", tuple(getattr(d, "dtype", None) for d in (
                dst if isinstance(dst, (tuple, list)) else (dst,)))),)
        ent = self._entries.get(key)
        if ent is None:
            ent = self._trace(nd, args, kwargs, dst)[0]
            if _UNKEYED not in key:
                self._keep(key, ent)
        if ent.sc_fix:  # the GPU's checks, so that both backends raise alike
            self._check_scalars(ent, [allargs[i] for i in ent.sc_pos])
        return self._unfused(rt, args, kwargs, dst, traced=not ent.unfused)

    def _unfused(self, rt: Any, args: tuple, kwargs: dict, dst: Any,
                 traced: bool = False) -> Any:
        """Run ``fn`` op by op.  ``traced``: ``fn`` traced for these arguments, so what
        fails now is an op on values that the backend checks (NumPy's integers to negative
        powers): it raises the cuflow error the op raises outside ``fuse``.  Otherwise
        (``fallback="unfused"``) it behaves as the plain Python function."""
        try:
            with numpy.errstate(all="ignore"):
                res = self.fn(*args, **kwargs)
        except Exception as e:
            if not traced or isinstance(e, CuflowError):
                raise
            try:
                reraise(f"fuse({self.name})", e)
            except CuflowError as err:
                if err.__cause__ is not e:
                    raise
                raise type(err)(f"{err} (at {_user_line(e, self.fn)})") from e
            raise
        single = not isinstance(res, tuple)
        outs = (res,) if single else res
        outs = tuple(rt.wrap(rt.xp.asarray(o)) for o in outs)
        # An output that is an argument (or a view of one) is a copy, as the kernel's are: it
        # must not change with the argument, nor with an earlier output written into a dst
        # that is that argument (step(state, x) -> (state + x, state) into (state, prev))
        inputs = [a for a in (*args, *kwargs.values()) if isinstance(a, rt.ndarray)]
        outs = tuple(o.copy() if any(may_share(o, a, rt) for a in inputs) else o for o in outs)
        if dst is None:
            return outs[0] if single else outs
        dsts = (dst,) if not isinstance(dst, (tuple, list)) else tuple(dst)
        if len(dsts) != len(outs):
            raise ArgumentError(f"cuflow.fuse({self.name}): dst= has {len(dsts)} arrays for "
                                f"{len(outs)} outputs")
        if len(dsts) > 1:
            check_outs_apart(f"fuse({self.name})", dsts)
        for d, o in zip(dsts, outs):  # every dst checked before any is written
            prepare_out(self.name, d, o.shape, o.dtype)
        for d, o in zip(dsts, outs):
            rt.xp.copyto(d, o, casting="same_kind")
        return dsts[0] if single else dsts


#: the key of a static argument that has none (unhashable): its call is traced, not cached
_UNKEYED = object()


def _substitute(positions: list[int], args: tuple, kwargs: dict, old: list,
                new: list) -> tuple[tuple, dict]:
    """``args`` and ``kwargs`` with the arrays at ``positions`` (in the order positional
    arguments, then keyword arguments by name) replaced by ``new`` where it differs from
    ``old``."""
    args, kwargs, names = list(args), dict(kwargs), sorted(kwargs)
    for pos, o, n in zip(positions, old, new):
        if n is not o:
            if pos < len(args):
                args[pos] = n
            else:
                kwargs[names[pos - len(args)]] = n
    return tuple(args), kwargs


def _raised_by_user(e: BaseException) -> bool:
    """Whether ``e`` comes from a ``raise`` (or ``assert``) statement outside cuflow, not
    from an operation that a traced value does not support."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or tb.tb_frame.f_globals.get("__name__", "").partition(".")[0] == "cuflow":
        return False
    code = tb.tb_frame.f_code.co_code
    return 0 <= tb.tb_lasti < len(code) and code[tb.tb_lasti] == _RAISE


_RAISE = dis.opmap["RAISE_VARARGS"]


def _static_key(a: Any) -> Any:
    t = type(a)
    if t is int or t is float:
        return t  # a runtime scalar: one kernel for every value
    if isinstance(a, numpy.generic) and a.dtype.kind in "biuf":
        return ("np", a.dtype.num)  # a typed runtime scalar
    k = _typed_key(a)
    return _UNKEYED if k is None else k


def _typed_key(a: Any) -> Any:
    """A static value with its type, element by element in tuples and lists (``(2,)`` and
    ``(2.0,)`` are equal, and trace differently); None where a value is unhashable.

    Floats by their bits: ``-0.0 == 0.0`` traces to another constant, and a NaN, equal to
    nothing, would trace at every call.  An object compared by identity by a weak
    reference, so that the cache does not keep it alive (``Fused._keep`` drops its
    entries with it)."""
    t = type(a)
    if isinstance(a, (tuple, list)):
        ks = tuple(_typed_key(x) for x in a)
        return None if None in ks else (t, ks)
    if isinstance(a, (float, complex, numpy.inexact)):
        return (t, numpy.asarray(a).tobytes())
    try:
        hash(a)
    except TypeError:
        return None
    if t.__hash__ is object.__hash__ and t.__eq__ is object.__eq__:
        try:
            return (t, weakref.ref(a))
        except TypeError:  # (None, object(): no weak reference, and long-lived)
            pass
    return (t, a)


def _refs(key: Any) -> list:
    """The weak references in a cache key."""
    if isinstance(key, weakref.ref):
        return [key]
    if isinstance(key, tuple):
        return [r for k in key for r in _refs(k)]
    return []


def _outside_cuflow() -> int:
    """The ``stacklevel`` of a warning raised by this function's caller that names the first
    frame outside cuflow (the user's call, through any of cuflow's own frames)."""
    f = sys._getframe(1)
    level = 1
    while f is not None and f.f_globals.get("__name__", "").partition(".")[0] == "cuflow":
        f = f.f_back
        level += 1
    return level


def _dst_key(nd: type, dst: Any) -> Any:
    ds = dst if isinstance(dst, (tuple, list)) else (dst,)
    return tuple((d.dtype.num, d.shape, d.strides, not d.data.ptr & 15) if isinstance(d, nd)
                 else ("bad", type(d)) for d in ds)


def fuse(fn: Callable | None = None, *, options: FuseOptions | None = None,
         fallback: Literal["error", "unfused"] | None = None,
         kernel_name: str | None = None) -> Any:
    """Compile ``fn`` (a function of arrays and scalars) into one elementwise kernel.

    Usable as ``@cuflow.fuse``, ``@cuflow.fuse(fallback="unfused")`` or
    ``cuflow.fuse(fn, options=FuseOptions(...))``.

    Parameters
    ----------
    fn : callable, optional
        Arrays in, one array (or a tuple of same-shape arrays, or one trailing
        reduction) out.  Left out, ``fuse`` returns a decorator that takes it.
    options : FuseOptions, optional
    fallback : {"error", "unfused"}, optional
        Shorthand for ``options=FuseOptions(fallback=...)``.
    kernel_name : str, optional
        ``cupy.fuse``'s keyword: shorthand for ``options=FuseOptions(name=...)``.

    Returns
    -------
    Fused or callable
        The ``Fused`` function; without ``fn``, a decorator that makes it.  Call a
        ``Fused`` with the function's arguments plus keyword-only ``dst=`` (an array, or a
        tuple with one array per output) and ``stream=``.

    Notes
    -----
    Stream semantics: each call is asynchronous, queued on ``stream`` or the current stream.
    """
    if options is not None and not isinstance(options, FuseOptions):
        raise ArgumentTypeError(f"cuflow.fuse: options must be a cuflow.FuseOptions or None, "
                                f"got {type(options).__name__}")
    if kernel_name is not None and not isinstance(kernel_name, str):
        raise ArgumentTypeError(f"cuflow.fuse: kernel_name must be a str, got "
                                f"{type(kernel_name).__name__}")
    given = {k: v for k, v in (("fallback", fallback), ("name", kernel_name)) if v is not None}
    options = dataclasses.replace(options or FuseOptions(), **given)
    if fn is None:
        return lambda f: Fused(f, options)
    if not callable(fn):
        raise ArgumentTypeError(f"cuflow.fuse: fn must be callable, got {type(fn).__name__}")
    return Fused(fn, options)

