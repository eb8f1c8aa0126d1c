"""Elementwise expressions: the graph that ``cuflow.fuse`` traces and the engine compiles.

An :class:`Expr` is one node of a directed acyclic graph: an input array, a
runtime scalar, a constant, an elementwise operation, or a trailing
reduction.  Nodes carry their NumPy dtype (computed with NumPy's own type
resolution, Python scalars weak, float16 included) and their broadcast shape,
so Python code that branches on ``x.shape``, ``x.ndim`` or ``x.dtype`` traces;
code that branches on values (``if x > 0:``) raises :class:`TraceError`
naming the construct and the line.

Operators, NumPy ufuncs (``numpy.exp(x)`` through ``__array_ufunc__``) and
cuflow's elementwise functions all build nodes; nothing here runs on a device.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import sys
from typing import Any

import numpy

from .._errors import (ArgumentError, ArgumentOverflowError, ArgumentTypeError, AxisError,
                       CuflowError)
from ._ewgen import topo

__all__ = ["Expr", "TraceError", "UNARY", "BINARY", "REDUCTIONS", "EXTRA_UNARY", "apply",
           "is_expr", "where", "clip", "astype", "reduce", "const", "caller_line", "SHAPE_READS",
           "int_scalar_bounds"]


#: how often traced code read a shape (``x.shape``, ``ndim``, ``size``, ``len``): a trace
#: that read none holds for every shape of the same dtypes
SHAPE_READS = [0]


class TraceError(CuflowError, TypeError):
    """A construct ``cuflow.fuse`` cannot turn into a kernel (named, with its line)."""


#: NumPy ufuncs of one input the engine generates code for
UNARY = frozenset((
    "negative", "positive", "absolute", "fabs", "sign", "exp", "exp2", "expm1", "log", "log2",
    "log10", "log1p", "sqrt", "cbrt", "square", "reciprocal", "sin", "cos", "tan", "arcsin",
    "arccos", "arctan", "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh", "floor",
    "ceil", "trunc", "rint", "deg2rad", "rad2deg", "degrees", "radians", "isnan", "isinf",
    "isfinite", "signbit", "logical_not", "invert",
))
#: functions of one float input that are not NumPy ufuncs (``cuflow.fusion.erf`` & co.)
EXTRA_UNARY = frozenset(("erf", "erfc", "sigmoid", "rsqrt"))
#: NumPy ufuncs of two inputs the engine generates code for
BINARY = frozenset((
    "add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "remainder",
    "fmod", "power", "maximum", "minimum", "fmax", "fmin", "arctan2", "hypot", "copysign",
    "logaddexp", "logaddexp2", "heaviside", "equal", "not_equal", "less", "less_equal",
    "greater", "greater_equal", "logical_and", "logical_or", "logical_xor", "bitwise_and",
    "bitwise_or", "bitwise_xor", "left_shift", "right_shift",
))
#: trailing reductions
REDUCTIONS = ("sum", "mean", "max", "min", "prod", "argmax", "argmin")
#: comparisons: NumPy compares a Python int past the other operand's integer dtype exactly
_COMPARISONS = frozenset(("equal", "not_equal", "less", "less_equal", "greater",
                          "greater_equal"))

_ALIASES = {"abs": "absolute", "true_divide": "divide", "pow": "power", "mod": "remainder",
            "acos": "arccos", "asin": "arcsin", "atan": "arctan", "atan2": "arctan2",
            "acosh": "arccosh", "asinh": "arcsinh", "atanh": "arctanh", "conjugate": "positive",
            "bitwise_not": "invert", "bitwise_invert": "invert", "conj": "positive",
            "bitwise_left_shift": "left_shift", "bitwise_right_shift": "right_shift"}


#: the libraries between a traced function and the tracer (array-api-compat's wrappers
#: call the backend's functions on the traced arrays)
_LIBRARIES = ("cuflow", "numpy", "cupy", "array_api_compat")


def caller_line() -> str:
    """``file:line: source`` of the first frame outside cuflow and the array libraries it
    calls (where the user's code is)."""
    f = sys._getframe(1)
    while f is not None and f.f_globals.get("__name__", "").partition(".")[0] in _LIBRARIES:
        f = f.f_back
    if f is None:
        return "<unknown>"
    src = linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
    return f"{f.f_code.co_filename}:{f.f_lineno}" + (f": {src}" if src else "")


def is_expr(x: Any) -> bool:
    return isinstance(x, Expr)


class Expr:
    """One node of a traced elementwise expression.

    Attributes
    ----------
    op : str
        ``"input"``, ``"scalar"`` (a runtime scalar argument), ``"const"``, a ufunc
        name, ``"where"``, ``"cast"``, or ``"reduce:<name>"``.
    args : tuple of Expr
    dtype : numpy.dtype
    shape : tuple of int
    value : Any
        The input's position (``input``/``scalar``), the constant, the reduction's
        ``(axis, keepdims)``, or for a ``cast`` of an operand to a ufunc's loop dtype the
        ufunc's name (NumPy range-checks a Python int there; None: an unchecked cast).
    """

    __slots__ = ("op", "args", "dtype", "shp", "value", "weak", "__weakref__")
    __array_priority__ = 1000  # NumPy defers binary operators to us
    #: what an op that cannot fuse finds among its inputs (its refusal says why)
    cuflow_traced = True

    def __init__(self, op: str, args: tuple, dtype: Any, shape: tuple, value: Any = None,
                 weak: bool = False) -> None:
        self.op, self.args, self.dtype, self.shp = op, args, numpy.dtype(dtype), shape
        self.value, self.weak = value, weak

    # ------------------------------------------------------------ properties
    @property
    def shape(self) -> tuple:
        SHAPE_READS[0] += 1  # the traced code may depend on shapes
        return self.shp

    @property
    def ndim(self) -> int:
        SHAPE_READS[0] += 1
        return len(self.shp)

    @property
    def size(self) -> int:
        SHAPE_READS[0] += 1
        return int(numpy.prod(self.shp, dtype=numpy.int64))

    def __len__(self) -> int:
        SHAPE_READS[0] += 1
        if not self.shp:
            raise ArgumentTypeError("len() of a 0-d traced array")
        return self.shp[0]

    def __repr__(self) -> str:
        return f"<traced {self.op} {self.dtype} {self.shp}>"

    # ------------------------------------------------------ untraceable uses
    def _data_dependent(self, what: str):
        raise TraceError(
            f"cuflow.fuse cannot trace {what} at {caller_line()}: the value of a traced array "
            "is not known while tracing (Python control flow may depend on shapes and "
            "dtypes only); use cuflow.where(cond, a, b) for a data-dependent choice, or "
            "cuflow.fuse(fn, options=cuflow.FuseOptions(fallback='unfused'))")

    def __bool__(self):
        self._data_dependent("a truth test (if / while / and / or / not) on a traced array")

    def __float__(self):
        self._data_dependent("float() of a traced array")

    def __int__(self):
        self._data_dependent("int() of a traced array")

    def __index__(self):
        self._data_dependent("using a traced array as an index")

    def item(self):
        self._data_dependent(".item() of a traced array")

    def __iter__(self):
        self._data_dependent("iterating over a traced array")

    def __getitem__(self, key):
        raise TraceError(f"cuflow.fuse cannot trace indexing (x[...]) at {caller_line()}: "
                         "a fused kernel is elementwise; index the arguments before the call")

    def __array__(self, *a, **k):
        self._data_dependent("converting a traced array to a NumPy array")

    # ------------------------------------------------------------- operators
    def __add__(self, o): return python_op("add", self, o)
    def __radd__(self, o): return python_op("add", o, self)
    def __sub__(self, o): return python_op("subtract", self, o)
    def __rsub__(self, o): return python_op("subtract", o, self)
    def __mul__(self, o): return python_op("multiply", self, o)
    def __rmul__(self, o): return python_op("multiply", o, self)
    def __truediv__(self, o): return python_op("divide", self, o)
    def __rtruediv__(self, o): return python_op("divide", o, self)
    def __floordiv__(self, o): return python_op("floor_divide", self, o)
    def __rfloordiv__(self, o): return python_op("floor_divide", o, self)
    def __mod__(self, o): return python_op("remainder", self, o)
    def __rmod__(self, o): return python_op("remainder", o, self)
    def __pow__(self, o): return python_op(*pow_operator(self, o))
    def __rpow__(self, o): return python_op("power", o, self)
    def __and__(self, o): return python_op("bitwise_and", self, o)
    def __rand__(self, o): return python_op("bitwise_and", o, self)
    def __or__(self, o): return python_op("bitwise_or", self, o)
    def __ror__(self, o): return python_op("bitwise_or", o, self)
    def __xor__(self, o): return python_op("bitwise_xor", self, o)
    def __rxor__(self, o): return python_op("bitwise_xor", o, self)
    def __lshift__(self, o): return python_op("left_shift", self, o)
    def __rlshift__(self, o): return python_op("left_shift", o, self)
    def __rshift__(self, o): return python_op("right_shift", self, o)
    def __rrshift__(self, o): return python_op("right_shift", o, self)
    def __lt__(self, o): return python_op("less", self, o)
    def __le__(self, o): return python_op("less_equal", self, o)
    def __gt__(self, o): return python_op("greater", self, o)
    def __ge__(self, o): return python_op("greater_equal", self, o)
    def __eq__(self, o): return python_op("equal", self, o)  # type: ignore[override]
    def __ne__(self, o): return python_op("not_equal", self, o)  # type: ignore[override]
    def __neg__(self): return python_op("negative", self)
    def __pos__(self): return python_op("positive", self)
    def __abs__(self): return python_op("absolute", self)
    def __invert__(self): return python_op("invert", self)
    __hash__ = object.__hash__

    def _in_place(self, o):
        if self.op != "input":  # an intermediate: Python then computes x + y and rebinds x
            return NotImplemented
        # an argument: Python would rebind the name to a new value and leave it unwritten
        raise TraceError(
            f"cuflow.fuse cannot trace an in-place update of an argument (x += y, x[...] = y) "
            f"at {caller_line()}: return the new value and write it into the argument with "
            "the fused call's dst= (f(x, y, dst=x))")

    __iadd__ = __isub__ = __imul__ = __itruediv__ = __ifloordiv__ = __imod__ = _in_place
    __ipow__ = __iand__ = __ior__ = __ixor__ = __ilshift__ = __irshift__ = _in_place
    __imatmul__ = _in_place

    def __setitem__(self, key, value):
        raise TraceError(f"cuflow.fuse cannot trace an item assignment (x[...] = y) at "
                         f"{caller_line()}: a fused kernel writes its outputs whole; return the "
                         "new value (and pass dst= to write it into an argument)")

    # --------------------------------------------------------------- methods
    def astype(self, dtype, order="K", casting="unsafe", *args, **kwargs):
        return astype(self, dtype, casting)

    def clip(self, min=None, max=None):  # noqa: A002
        return clip(self, min, max)

    def sum(self, axis=None, dtype=None, keepdims=False):
        return reduce("sum", self, axis, keepdims, dtype)

    def mean(self, axis=None, dtype=None, keepdims=False):
        return reduce("mean", self, axis, keepdims, dtype)

    def max(self, axis=None, keepdims=False):
        return reduce("max", self, axis, keepdims)

    def min(self, axis=None, keepdims=False):
        return reduce("min", self, axis, keepdims)

    def prod(self, axis=None, dtype=None, keepdims=False):
        return reduce("prod", self, axis, keepdims, dtype)

    def argmax(self, axis=None, keepdims=False):
        return reduce("argmax", self, axis, keepdims)

    def argmin(self, axis=None, keepdims=False):
        return reduce("argmin", self, axis, keepdims)

    @property
    def T(self):  # noqa: N802
        raise TraceError(f"cuflow.fuse cannot trace a transpose at {caller_line()}: transpose "
                         "the arguments before the call")

    # ----------------------------------------------------- NumPy's protocols
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs.get("out") is not None:
            raise TraceError(f"cuflow.fuse cannot trace numpy.{ufunc.__name__}.{method} "
                             f"(or out=) at {caller_line()}")
        # order and subok do not change an elementwise result; where= and signature= would
        other = sorted(k for k, v in kwargs.items() if k not in _UFUNC_KWARGS
                       and not (k == "where" and v is True))
        if other:
            raise TraceError(f"cuflow.fuse cannot fuse numpy.{ufunc.__name__}'s "
                             f"{', '.join(other)} at {caller_line()}: a fused ufunc takes "
                             "dtype and casting")
        return apply(ufunc.__name__, *inputs, dtype=kwargs.get("dtype"),
                     casting=kwargs.get("casting", "same_kind"))

    def __array_function__(self, func, types, args, kwargs):
        name = func.__name__
        if name in ("ndim", "shape", "size") and len(args) == 1 and not kwargs:
            return getattr(self, name)  # static: control flow on them traces
        if name == "where":
            return where(*args, **kwargs)
        if name == "clip":
            return _numpy_clip(*args, **kwargs)
        if name in REDUCTIONS or name in ("amax", "amin"):
            sig = inspect.signature(func)
            try:  # NumPy's own signature: axis, dtype and keepdims by position or keyword
                given = sig.bind(*args, **kwargs).arguments
            except TypeError as e:
                raise TraceError(f"cuflow.fuse: numpy.{name} at {caller_line()}: {e}") from None
            other = sorted(k for k, v in given.items()  # out=None, where=True: the defaults'
                           if k not in ("a", "axis", "dtype", "keepdims") and v is not None
                           and v is not sig.parameters[k].default
                           and not (k == "where" and v is True))
            if other:
                raise TraceError(f"cuflow.fuse cannot fuse numpy.{name}'s {', '.join(other)} "
                                 f"at {caller_line()}: a fused reduction takes axis, dtype and "
                                 "keepdims")
            return reduce({"amax": "max", "amin": "min"}.get(name, name), given["a"],
                          given.get("axis"), given.get("keepdims", False), given.get("dtype"))
        raise TraceError(f"cuflow.fuse cannot trace numpy.{name} at {caller_line()}: only "
                         "elementwise functions, where, clip and trailing reductions fuse")


def _dtype_of(x: Any) -> Any:
    """The dtype, or the Python type for a weak (Python) scalar."""
    if isinstance(x, Expr):  # (a Python bool is NumPy's bool: NEP 50 leaves it strong)
        return type(x.value) if x.weak and type(x.value) is not bool else x.dtype
    if isinstance(x, bool):
        return numpy.dtype(bool)
    if isinstance(x, (int, float)):
        return type(x)
    return numpy.asarray(x).dtype


def const(x: Any) -> Expr:
    """A constant baked into the kernel (Python scalars stay weakly typed)."""
    if isinstance(x, Expr):
        return x
    # (NumPy's float64 is a float, but as every NumPy scalar it is strongly typed)
    if isinstance(x, (bool, int, float)) and not isinstance(x, numpy.generic):
        t = bool if isinstance(x, bool) else int if isinstance(x, int) else float
        dt = numpy.bool_ if t is bool else numpy.int64 if t is int else numpy.float64
        # only Python's own numbers are weak: a subclass (an IntEnum member) is NumPy's
        # int64 or float64 there, and is baked as the number it holds
        return Expr("const", (), dt, (), t(x), weak=type(x) is t)
    if isinstance(x, complex):
        raise TraceError(f"cuflow.fuse does not fuse complex values (got {x!r}) at "
                         f"{caller_line()}")
    if hasattr(x, "__cuda_array_interface__"):
        raise TraceError(
            f"cuflow.fuse cannot bake a captured device array of shape {tuple(x.shape)} into a "
            f"kernel at {caller_line()}: pass it as an argument of the fused function")
    if isinstance(x, (list, tuple)):
        # an argument that is a list is static (it may hold shapes or flags), not an operand
        raise TraceError(
            f"cuflow.fuse cannot use a Python {type(x).__name__} as an array at "
            f"{caller_line()}: lists and tuples are not array arguments of a fused function; "
            "convert it with cuflow.asarray and pass the array as an argument")
    a = numpy.asarray(x)
    if a.ndim != 0:
        raise TraceError(
            f"cuflow.fuse cannot bake a captured array of shape {a.shape} into a kernel at "
            f"{caller_line()}: pass it as an argument of the fused function")
    if a.dtype.kind not in "biuf":
        raise TraceError(f"cuflow.fuse does not fuse dtype {a.dtype} (at {caller_line()})")
    return Expr("const", (), a.dtype, (), a[()].item(), weak=False)


_UFUNC_KWARGS = frozenset(("out", "dtype", "casting", "order", "subok"))


@functools.cache
def _resolve(name: str, dts: tuple, dtype: numpy.dtype | None = None,
             casting: str = "same_kind") -> tuple:
    """NumPy's loop dtypes ``(inputs..., output)`` of ufunc ``name`` for ``dts``; with
    ``dtype``, the loop whose output is ``dtype`` (the ufunc's ``dtype=``: the inputs are
    cast to the loop's dtypes under ``casting``)."""
    uf = getattr(numpy, name)
    try:
        if dtype is None:
            return uf.resolve_dtypes((*dts, None))
        return uf.resolve_dtypes((*dts, None), signature=(*(None,) * len(dts), dtype),
                                 casting=casting)
    except Exception as e:
        what = dts if dtype is None else f"{dts} with dtype={dtype}, casting={casting!r}"
        raise TraceError(f"numpy.{name} has no loop for {what}: {e}") from None


def _fits(v: int, dt: numpy.dtype) -> bool:
    """Whether NumPy takes Python int ``v`` as an operand of a loop in ``dt``: within an
    integer dtype's range, within C's long for bool (logical) loops, finite as a float."""
    if dt.kind in "iu":
        info = numpy.iinfo(dt)
        return int(info.min) <= v <= int(info.max)
    if dt.kind == "b":
        return -2**63 <= v < 2**63
    try:
        float(v)
    except OverflowError:
        return False
    return True


def _out_of_bounds(v: int, dt: numpy.dtype, op: str) -> ArgumentOverflowError:
    shown = v if abs(v) < 2**128 else f"{'-' if v < 0 else ''}2**{abs(v).bit_length() - 1}+"
    return ArgumentOverflowError(
        f"cuflow.fuse: Python integer {shown} out of bounds for {dt} (the dtype {op} computes "
        f"in) at {caller_line()}")


def _bshape(name: str, *xs: Expr) -> tuple:
    try:
        return tuple(numpy.broadcast_shapes(*(x.shp for x in xs)))
    except ValueError:  # (bad input, not a construct the tracer cannot handle: the error
        # cuflow.add gives, whatever the fallback)
        raise ArgumentError(f"cuflow.fuse: operands of {name} do not broadcast together: "
                            f"{', '.join(str(x.shp) for x in xs)} (at {caller_line()})") from None


def python_op(name: str, *xs: Any) -> Expr:
    """The node of a Python operator (``+``, ``-x``, ``abs``) on ``xs``.  On Python scalars
    alone (``1 - t`` of a runtime ``t``) Python computes a Python scalar, which NumPy types
    weakly, as its operands: so is the node, and ``x * (1 - t)`` keeps ``x``'s float32 where
    a float64 node would promote it (a ufunc call, ``numpy.subtract(1, t)``, gives a NumPy
    scalar, strongly typed, as :func:`apply` does)."""
    node = apply(name, *xs)
    if (node.op != "const" and node.dtype.kind in "if"
            and all(isinstance(x, Expr) and x.weak or type(x) in (int, float) for x in xs)):
        node.weak, node.value = True, (0.0 if node.dtype.kind == "f" else 0)
    return node


def apply(name: str, *xs: Any, dtype: Any = None, casting: str = "same_kind") -> Expr:
    """The node of elementwise function ``name`` on ``xs`` (Exprs, scalars, 0-d constants);
    ``dtype``/``casting``: the ufunc's (its loop runs in ``dtype``)."""
    return _apply(_ALIASES.get(name, name), tuple(const(x) for x in xs), dtype, casting)


def _apply(name: str, args: tuple, dtype: Any, casting: str) -> Expr:
    if name in EXTRA_UNARY:
        (a,) = args
        _, out = _resolve("exp", (_dtype_of(a),))
        # the generated code has float versions only: an integer or bool input is cast
        return Expr(name, (_cast_node(a, out, name),), out, a.shp)
    if name not in UNARY and name not in BINARY:
        raise TraceError(f"cuflow.fuse cannot fuse {name!r} (at {caller_line()}): fusable "
                         "functions are the elementwise ufuncs, where, clip, astype, erf, "
                         "sigmoid, rsqrt and trailing reductions")
    expect = 1 if name in UNARY else 2
    if len(args) != expect:
        raise TraceError(f"cuflow.fuse: {name} takes {expect} array argument(s), got "
                         f"{len(args)} (at {caller_line()})")
    for a in args:
        if a.op.startswith("reduce:"):
            raise TraceError(f"cuflow.fuse: the result of {a.op[7:]}() is used by {name} at "
                             f"{caller_line()}; a reduction can only be an output of the "
                             "fused function (a trailing reduction)")
    *ins, out = _resolve(name, tuple(_dtype_of(a) for a in args),
                         None if dtype is None else numpy.dtype(dtype), casting)
    if all(a.op == "const" for a in args):
        kw = {} if dtype is None else {"dtype": dtype, "casting": casting}
        with numpy.errstate(all="ignore"):
            v = getattr(numpy, name)(*(a.value if a.weak else numpy.asarray(a.value, a.dtype)
                                       for a in args), **kw)
        weak = all(a.weak for a in args) and isinstance(v, (bool, int, float))
        if weak:
            return Expr("const", (), out, (), v, weak=True)
        return Expr("const", (), out, (), numpy.asarray(v, out)[()].item())
    shape = _bshape(name, *args)
    if name in _COMPARISONS:
        for k, a in enumerate(args):
            if (a.op == "const" and a.weak and type(a.value) is int and ins[k].kind in "iu"
                    and not _fits(a.value, ins[k])):
                # past every value of the other operand's dtype: one answer for all of them,
                # NumPy's (x == x is that answer's shape for an integer or bool x)
                b = args[1 - k]
                probe = [numpy.zeros((), b.dtype)] * 2
                probe[k] = a.value
                same = bool(getattr(numpy, name)(*probe))
                return Expr("equal" if same else "not_equal", (b, b), out, shape)
    # the ufunc computes in its loop dtypes: cast the operands to them first
    cargs = tuple(_cast_node(a, dt, name) for a, dt in zip(args, ins))
    if name == "power" and cargs[1].op == "const" and out.kind == "f":
        # small constant exponents as NumPy's scalar power (x ** e) computes them: square,
        # sqrt, reciprocal, identity; 3 and 4 multiplied out too, where NumPy calls pow
        # (within 2 ulp of it, and pow would make a GELU chain compute-bound: bench
        # fusion, gelu), a float16 one in float32 with one rounding at the end
        e = cargs[1].value
        b = cargs[0]
        if e == 2:
            return Expr("multiply", (b, b), out, shape)
        if e in (3, 4):
            half = out == numpy.float16
            w = _cast_node(b, numpy.dtype(numpy.float32)) if half else b
            r = Expr("multiply", (w, w), w.dtype, shape)
            for _ in range(int(e) - 2):
                r = Expr("multiply", (r, w), w.dtype, shape)
            return _cast_node(r, out) if half else r
        if e == 0.5:
            return Expr("sqrt", (b,), out, shape)
        if e == -1:
            return Expr("reciprocal", (b,), out, shape)
        if e == 1:
            return Expr("positive", (b,), out, shape)
    return Expr(name, cargs, out, shape)


def pow_operator(x: Any, y: Any) -> tuple:
    """``x ** y`` as ``apply``'s arguments: NumPy's ``ndarray.__pow__`` squares for a Python
    ``2``, and a bool array squared is int8 there, where ``power(x, 2)`` is int64."""
    if x.dtype == numpy.bool_ and type(y) is int and y == 2:
        return ("square", x)
    return ("power", x, y)


def _cast_node(a: Expr, dt: numpy.dtype, op: str | None = None) -> Expr:
    """``a`` in ``dt``.  ``op``: the ufunc whose loop runs in ``dt``: NumPy raises
    OverflowError for a Python int that ``dt`` cannot hold (a constant is checked here, a
    runtime argument at each call: :func:`int_scalar_bounds`); None: NumPy's unsafe cast
    (``where``, ``astype``), which wraps."""
    if op is not None and a.weak and type(a.value) is int:
        if a.op == "const" and not _fits(a.value, dt):
            raise _out_of_bounds(a.value, dt, op)
        if a.op == "scalar" and a.dtype != dt:
            return Expr("cast", (a,), dt, a.shp, op)
    if a.dtype == dt:
        return a
    if a.op == "const":
        return Expr("const", (), dt, (), numpy.asarray(a.value).astype(dt)[()].item())
    return Expr("cast", (a,), dt, a.shp)


_INT64 = numpy.dtype(numpy.int64)
_UINT64 = numpy.dtype(numpy.uint64)


def int_scalar_bounds(outputs: tuple, scalars: list) -> list:
    """Per node of ``scalars`` (runtime scalar arguments): None, or for a Python int
    ``(lo, hi, lo_dtype, hi_dtype)``: the values it may take, and the dtype that sets each
    bound.  NumPy raises OverflowError for a Python int that the loop dtype of a ufunc it
    meets cannot hold, where the kernel would wrap it; the kernel's parameter is a 64-bit
    integer, unsigned (``hi`` past int64's) where every use is a checked uint64."""
    uses: dict = {id(s): [] for s in scalars if s.op == "scalar" and s.weak
                  and type(s.value) is int}
    if not uses:
        return [None] * len(scalars)
    for n in topo(outputs):
        for a in n.args:
            u = uses.get(id(a))
            if u is not None:  # a use in its own int64 is NumPy's C long: checked too
                u.append((n.dtype, n.value is not None) if n.op == "cast" else (_INT64, True))
    out = []
    for s in scalars:
        u = uses.get(id(s))
        if u is None:
            out.append(None)
            continue
        if u and all(dt == _UINT64 and checked for dt, checked in u):
            out.append((0, 2**64 - 1, _UINT64, _UINT64))
            continue
        lo, hi, lo_dt, hi_dt = -2**63, 2**63 - 1, _INT64, _INT64
        for dt, checked in u:
            if checked and dt.kind in "iu":
                info = numpy.iinfo(dt)
                if info.min > lo:
                    lo, lo_dt = int(info.min), dt
                if info.max < hi:
                    hi, hi_dt = int(info.max), dt
        out.append((lo, hi, lo_dt, hi_dt))
    return out


def astype(x: Any, dtype: Any, casting: str = "unsafe") -> Expr:
    """``x.astype(dtype, casting=)`` (NumPy's, unsafe by default: it wraps), a new node
    even in ``x``'s own dtype, as NumPy's copy: an in-place update of the result then
    updates the copy, not an argument."""
    dt = numpy.dtype(dtype)
    if dt.kind not in "biuf":
        raise TraceError(f"cuflow.fuse does not fuse dtype {dt} (astype at {caller_line()})")
    x = const(x)
    if not numpy.can_cast(x.dtype, dt, casting):
        raise TraceError(f"cuflow.fuse: astype cannot cast {x.dtype} to {dt} under "
                         f"casting={casting!r} (at {caller_line()})")
    if x.dtype == dt and not x.weak and x.op != "input":
        return x
    if x.op == "const":
        return Expr("const", (), dt, (), numpy.asarray(x.value).astype(dt)[()].item())
    return Expr("cast", (x,), dt, x.shp)


def where(cond: Any, a: Any, b: Any) -> Expr:
    """``a`` where ``cond`` else ``b`` (NumPy's ``where``, promotion of ``a`` and ``b``)."""
    c, x, y = const(cond), const(a), const(b)
    # Python scalars promote weakly: as values (result_type of the type float is float64)
    dt = numpy.result_type(*(v.value if v.weak else v.dtype for v in (x, y)))
    shape = _bshape("where", c, x, y)
    # a Python int the result dtype cannot hold is refused (a constant here, an argument at
    # each call), as by cuflow.where, where NumPy's would wrap where(c, uint8, 300) to 44
    return Expr("where", (_cast_node(c, numpy.dtype(bool)) if c.dtype != bool else c,
                          _cast_node(x, dt, "where"), _cast_node(y, dt, "where")), dt, shape)


def clip(x: Any, lo: Any = None, hi: Any = None) -> Expr:
    """NumPy's ``clip``: ``minimum(maximum(x, lo), hi)`` in one dtype for the three
    operands (NaN propagates; with ``lo > hi`` the result is ``hi``).

    As NumPy (``numpy/_core/_methods.py``): a Python int bound past an integer ``x``'s
    range is no bound, and with one bound it is ``maximum`` or ``minimum`` alone.
    """
    # x is an array to NumPy's clip (asanyarray): a Python scalar x is not weak there
    r = const(numpy.asarray(x) if isinstance(x, (bool, int, float)) else x)
    lo, hi = clip_bounds(r.dtype, lo, hi)
    if lo is None and hi is None:
        return apply("positive", r)
    if lo is None:
        return apply("minimum", r, hi)
    if hi is None:
        return apply("maximum", r, lo)
    args = (r, const(lo), const(hi))
    dt = _resolve_clip(tuple(_dtype_of(a) for a in args))
    x_, lo_, hi_ = (_cast_node(a, dt, "clip") for a in args)
    return Expr("minimum", (Expr("maximum", (x_, lo_), dt, _bshape("clip", x_, lo_)), hi_),
                dt, _bshape("clip", *args))


def _numpy_clip(a: Any, a_min: Any = None, a_max: Any = None, out: Any = None, *,
                min: Any = None, max: Any = None, **kwargs: Any) -> Expr:  # noqa: A002
    """``numpy.clip``'s arguments (``a_min``/``a_max``, or NumPy 2's ``min``/``max``) as
    :func:`clip`'s."""
    if out is not None or kwargs:
        given = ["out"] * (out is not None) + sorted(kwargs)
        raise TraceError(f"cuflow.fuse cannot fuse numpy.clip's {', '.join(given)} at "
                         f"{caller_line()}: a fused clip takes a_min and a_max (or min and "
                         "max); a fused function returns its result (pass dst= to its call)")
    if (a_min is not None and min is not None) or (a_max is not None and max is not None):
        raise TraceError(f"numpy.clip takes a_min/a_max or min/max, not both (at "
                         f"{caller_line()})")
    return clip(a, a_min if min is None else min, a_max if max is None else max)


def clip_bounds(dtype: numpy.dtype, lo: Any, hi: Any) -> tuple:
    """NumPy's clip drops a Python int bound that an integer dtype's range already holds."""
    if dtype.kind in "iu":
        info = numpy.iinfo(dtype)
        if type(lo) is int and lo <= info.min:
            lo = None
        if type(hi) is int and hi >= info.max:
            hi = None
    return lo, hi


_UMATH = (getattr(numpy, "_core", None) or numpy.core).umath  # (NumPy 1.x: numpy.core)


@functools.cache
def _resolve_clip(dts: tuple) -> numpy.dtype:
    """The loop dtype of NumPy's three-operand clip ufunc for ``dts``."""
    try:
        return _UMATH.clip.resolve_dtypes((*dts, None))[-1]
    except Exception as e:
        raise TraceError(f"numpy.clip has no loop for {dts}: {e}") from None


@functools.cache
def _reduce_dtype(name: str, dt: numpy.dtype, kw: Any) -> numpy.dtype:
    if name in ("argmax", "argmin"):
        return numpy.dtype(numpy.int64)
    probe = numpy.ones((2,), dtype=dt)
    with numpy.errstate(all="ignore"):
        return numpy.asarray(getattr(probe, name)(**({} if kw is None else {"dtype": kw}))).dtype


def reduce(name: str, x: Any, axis: Any = None, keepdims: bool = False,
           dtype: Any = None) -> Expr:
    """A trailing reduction ``name`` of ``x`` over ``axis`` (None: everything)."""
    if name not in REDUCTIONS:  # (var, std, any, all reach here through the namespace)
        raise TraceError(f"cuflow.fuse cannot fuse {name} at {caller_line()}: the trailing "
                         f"reductions that fuse are {', '.join(REDUCTIONS)}; compute {name} "
                         "on the fused function's result")
    x = const(x)
    if x.op.startswith("reduce:"):
        raise TraceError(f"cuflow.fuse: a reduction of a reduction at {caller_line()}; "
                         "only one trailing reduction fuses")
    nd = len(x.shp)
    if axis is not None:
        if isinstance(axis, tuple):
            if len(axis) != 1:
                raise TraceError(f"cuflow.fuse: a fused reduction takes one axis or None, "
                                 f"got axis={axis} (at {caller_line()})")
            axis = axis[0]
        axis = int(axis)
        if nd == 0 and axis in (0, -1):  # (NumPy's one axis of a 0-d array: the whole)
            axis = None
        elif not -nd <= axis < nd:
            raise AxisError(
                f"cuflow.fuse: axis {axis} is out of bounds for a traced array of dimension {nd}")
        else:
            axis %= nd
    if axis is None:
        shape = (1,) * nd if keepdims else ()
    else:
        shape = tuple(1 if i == axis else n for i, n in enumerate(x.shp)) if keepdims else \
            tuple(n for i, n in enumerate(x.shp) if i != axis)
    kw = None if dtype is None else numpy.dtype(dtype)
    dt = _reduce_dtype(name, x.dtype, kw)
    if kw is not None:
        # NumPy's reduction loop runs in dtype: each element is cast to it first (sum of
        # [0.5] * 4 in int16 is 0), not only the kernel's accumulated result
        x = _cast_node(x, kw)
    return Expr(f"reduce:{name}", (x,), dt, shape, (axis, bool(keepdims)))
