"""CUDA source for a traced elementwise expression: one kernel per expression and layout.

:func:`generate` turns a :class:`Layout` (the operands' dtypes and broadcast
classes, the outputs' dtypes, the vector width) and the expression's output
nodes into CUDA C++ that NVRTC compiles with no header:

* a grid-stride loop over chunks of ``vec`` elements, with 16-byte loads and
  stores of every contiguous operand (``vec`` makes the narrowest contiguous
  dtype move 16 bytes; wider dtypes move multiples of 16), and a scalar tail;
* broadcast classes per input: ``c`` contiguous (index ``i``), ``s`` one
  element, ``v`` a vector along one axis (per-channel: ``(i / inner) % len``,
  by multiply-high divisions once per chunk, advanced incrementally inside it),
  ``g`` any strides (full index arithmetic);
* NumPy's semantics per dtype: float16 is carried in float and rounded to
  half after every operation (as NumPy's float16 loops do), integers wrap,
  ``floor_divide``/``remainder`` follow Python's sign rule with NumPy's
  results for zero divisors, ``maximum``/``minimum`` propagate NaN;
* an optional trailing reduction: over everything (a per-block pass and a
  one-block finishing pass), over a last axis (a block per long row, else a
  warp per row) or over an inner axis (a thread per output).

The source is the cache key of the compiled module (memory and disk).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy

from .._errors import ArgumentTypeError

__all__ = ["Layout", "Reduction", "generate", "carried", "memtype", "BLOCK", "ROW_BLOCK_VECTORS",
           "ENTRY", "ENTRY_FIN", "LUT_BLOCK"]

BLOCK = 256
#: threads per block of a table lookup: every block first builds the whole table, so larger
#: blocks build it fewer times for the same threads (bench fusion img_gamma)
LUT_BLOCK = 1024
#: a last-axis reduction gives a row a whole block from this many vectors of V elements
#: per row (two per thread), else a warp
ROW_BLOCK_VECTORS = 2 * BLOCK
ENTRY = "cf_fused"
ENTRY_FIN = "cf_fused_fin"

_CT = {"bool": "bool", "int8": "signed char", "int16": "short", "int32": "int",
       "int64": "long long", "uint8": "unsigned char", "uint16": "unsigned short",
       "uint32": "unsigned int", "uint64": "unsigned long long", "float16": "float",
       "float32": "float", "float64": "double"}
_MT = {**_CT, "bool": "unsigned char", "float16": "unsigned short"}
#: wrapping arithmetic in an unsigned type where C would overflow a signed one (int32 and
#: int64 themselves; uint16, which C promotes to int before multiplying)
_UNSIGNED = {"int32": "unsigned int", "int64": "unsigned long long", "uint16": "unsigned int"}


def carried(dt: numpy.dtype) -> str:
    """C type a value of ``dt`` is computed in (float16 in float, rounded after each op)."""
    return _CT[dt.name]


def memtype(dt: numpy.dtype) -> str:
    """C type of an element of ``dt`` in memory (float16 as its bits, bool as a byte)."""
    return _MT[dt.name]


@dataclasses.dataclass(frozen=True)
class Reduction:
    """A trailing reduction: ``name`` in ``mode`` ``"all"``, ``"rows"`` (last axis) or ``"cols"``."""

    name: str
    mode: str
    src: numpy.dtype  # the dtype of the reduced values
    out: numpy.dtype  # the result dtype in memory


@dataclasses.dataclass(frozen=True)
class Layout:
    """What the kernel is specialized for besides the expression.

    ``inputs``: per array input, ``(dtype, class, aux)`` with class ``c``/``s``/``v``/``g``;
    ``aux`` is the ndim of a ``g`` input, and for a ``v`` input the first ``v`` input with
    the same inner extent and length, whose channel index it shares; ``scalars``: the
    dtypes of runtime scalar arguments; ``outputs``: the dtypes written to memory; ``vec``:
    elements per chunk; ``lut``: when the one contiguous input is 8-bit and every other
    input is one element or one per-channel vector of ``lut`` entries, the outputs are a
    function of (byte, channel):
    each block first evaluates the expression on all 256 x ``lut`` pairs into shared
    memory, then only looks results up (the per-element work of any chain drops to a load,
    a shared-memory read and a store).
    """

    inputs: tuple
    scalars: tuple
    outputs: tuple
    vec: int
    reduction: Reduction | None = None
    lut: int = 0  # >0: the 8-bit input through a table of 256 x lut entries (see generate)
    index64: bool = False  # indices reach 2**31: 64-bit loop indices and divisions


#: NumPy's floor division and Python-sign remainder (npy_divmod for floats), shared by the
#: generated kernels and the backend's floor_divide and divmod ufuncs (_cupy_ufuncs.py)
DIVMOD = r"""
__device__ __forceinline__ float cf_fmod(float a, float b) { return fmodf(a, b); }
__device__ __forceinline__ double cf_fmod(double a, double b) { return fmod(a, b); }
__device__ __forceinline__ float cf_floor(float a) { return floorf(a); }
__device__ __forceinline__ double cf_floor(double a) { return floor(a); }
__device__ __forceinline__ float cf_copysign(float a, float b) { return copysignf(a, b); }
__device__ __forceinline__ double cf_copysign(double a, double b) { return copysign(a, b); }
/* NumPy's npy_divmod: floor quotient and Python-sign remainder of floats */
template <typename T> __device__ __forceinline__ T cf_divmod(T a, T b, T *modp) {
    T mod = cf_fmod(a, b);
    if (!b) { *modp = mod; return a / b; }
    T div = (a - mod) / b;
    if (mod) { if ((b < 0) != (mod < 0)) { mod += b; div -= (T)1; } }
    else { mod = cf_copysign((T)0, b); }
    T fl;
    if (div) { fl = cf_floor(div); if (div - fl > (T)0.5) fl += (T)1; }
    else { fl = cf_copysign((T)0, a / b); }
    *modp = mod;
    return fl;
}
template <typename T> __device__ __forceinline__ T cf_floordiv(T a, T b) { T m; return cf_divmod(a, b, &m); }
template <typename T> __device__ __forceinline__ T cf_pymod(T a, T b) {
    if (!b) return cf_fmod(a, b);
    T m; cf_divmod(a, b, &m); return m; }
template <typename T> __device__ __forceinline__ T cf_ifloordiv(T a, T b) {
    if (b == 0) return (T)0;
    if ((T)-1 < (T)0 && b == (T)-1) return (T)(0 - a);
    T q = (T)(a / b);
    if ((T)(a % b) != 0 && ((a < 0) != (b < 0))) q = (T)(q - 1);
    return q; }
template <typename T> __device__ __forceinline__ T cf_imod(T a, T b) {
    if (b == 0 || ((T)-1 < (T)0 && b == (T)-1)) return (T)0;
    T r = (T)(a % b);
    if (r != 0 && ((r < 0) != (b < 0))) r = (T)(r + b);
    return r; }
"""

_PRELUDE = r"""
#define CF_ALIGN16 __align__(16)
__device__ __forceinline__ float cf_h2f(unsigned short h) {
    float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ unsigned short cf_f2h(float f) {
    unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ unsigned short cf_d2h(double d) {
    unsigned short h; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d)); return h; }
__device__ __forceinline__ float cf_rh(float f) { return cf_h2f(cf_f2h(f)); }
__device__ __forceinline__ int cf_neg32(int x) {
    int r; asm("neg.s32 %0, %1;" : "=r"(r) : "r"(x)); return r; }
__device__ __forceinline__ float cf_rhd(double d) { return cf_h2f(cf_d2h(d)); }
template <typename T, int V>
__device__ __forceinline__ void cf_vload(T *__restrict__ d, const T *__restrict__ s) {
    if constexpr ((sizeof(T) * V) % 16 == 0) {
#pragma unroll
        for (int j = 0; j < (int)(sizeof(T) * V / 16); ++j)
            reinterpret_cast<uint4 *>(d)[j] = reinterpret_cast<const uint4 *>(s)[j];
    } else if constexpr (sizeof(T) * V == 8) {
        *reinterpret_cast<uint2 *>(d) = *reinterpret_cast<const uint2 *>(s);
    } else if constexpr (sizeof(T) * V == 4) {
        *reinterpret_cast<unsigned int *>(d) = *reinterpret_cast<const unsigned int *>(s);
    } else {
#pragma unroll
        for (int j = 0; j < V; ++j) d[j] = s[j];
    }
}
template <typename T, int V>
__device__ __forceinline__ void cf_vstore(T *__restrict__ d, const T *__restrict__ s) {
    if constexpr ((sizeof(T) * V) % 16 == 0) {
#pragma unroll
        for (int j = 0; j < (int)(sizeof(T) * V / 16); ++j)
            reinterpret_cast<uint4 *>(d)[j] = reinterpret_cast<const uint4 *>(s)[j];
    } else if constexpr (sizeof(T) * V == 8) {
        *reinterpret_cast<uint2 *>(d) = *reinterpret_cast<const uint2 *>(s);
    } else if constexpr (sizeof(T) * V == 4) {
        *reinterpret_cast<unsigned int *>(d) = *reinterpret_cast<const unsigned int *>(s);
    } else {
#pragma unroll
        for (int j = 0; j < V; ++j) d[j] = s[j];
    }
}
""" + DIVMOD + r"""template <typename T> __device__ __forceinline__ T cf_ifmod(T a, T b) {
    if (b == 0 || ((T)-1 < (T)0 && b == (T)-1)) return (T)0;
    return (T)(a % b); }
/* the type an integer power multiplies in: unsigned where a signed product could overflow
   (undefined, so the compiler may assume x * x >= 0) or where C promotes to int */
template <typename T> struct cf_wrap { typedef T type; };
template <> struct cf_wrap<int> { typedef unsigned int type; };
template <> struct cf_wrap<long long> { typedef unsigned long long type; };
template <> struct cf_wrap<unsigned short> { typedef unsigned int type; };
template <typename T> __device__ __forceinline__ T cf_ipow(T a, T b) {
    if (b < 0) { if (a == 1) return (T)1; if (a == (T)-1) return (b & 1) ? (T)-1 : (T)1; return (T)0; }
    typedef typename cf_wrap<T>::type U;
    U r = 1, x = (U)a;
    while (b) { if (b & 1) r = (U)(r * x); x = (U)(x * x); b = (T)(b >> 1); }
    return (T)r; }
template <typename T> __device__ __forceinline__ T cf_shl(T a, T b) {
    return (b < 0 || b >= (T)(8 * sizeof(T))) ? (T)0 : (T)(a << b); }
template <typename T> __device__ __forceinline__ T cf_shr(T a, T b) {
    return (b < 0 || b >= (T)(8 * sizeof(T))) ? (T)(a < 0 ? -1 : 0) : (T)(a >> b); }
template <typename T> __device__ __forceinline__ T cf_fmax(T a, T b) { return (isnan(a) || a > b) ? a : b; }
template <typename T> __device__ __forceinline__ T cf_fmin(T a, T b) { return (isnan(a) || a < b) ? a : b; }
__device__ __forceinline__ float cf_log1p(float x) { return log1pf(x); }
__device__ __forceinline__ double cf_log1p(double x) { return log1p(x); }
__device__ __forceinline__ float cf_exp(float x) { return expf(x); }
__device__ __forceinline__ double cf_exp(double x) { return exp(x); }
__device__ __forceinline__ float cf_exp2(float x) { return exp2f(x); }
__device__ __forceinline__ double cf_exp2(double x) { return exp2(x); }
template <typename T> __device__ __forceinline__ T cf_logaddexp(T a, T b) {
    if (a == b) return a + (T)0.693147180559945309417232121458176568;
    T t = a - b;
    if (t > 0) return a + cf_log1p(cf_exp(-t));
    if (t <= 0) return b + cf_log1p(cf_exp(t));
    return t; }
template <typename T> __device__ __forceinline__ T cf_logaddexp2(T a, T b) {
    if (a == b) return a + (T)1;
    T t = a - b;
    if (t > 0) return a + cf_log1p(cf_exp2(-t)) * (T)1.442695040888963407359924681001892137;
    if (t <= 0) return b + cf_log1p(cf_exp2(t)) * (T)1.442695040888963407359924681001892137;
    return t; }
/* x / d by a multiply-high and a shift, with the host's numbers m, s for d (m = 0: d is 1);
   exact for x below 2^31 (32-bit indices) or 2^63 (64-bit) */
__device__ __forceinline__ unsigned cf_fdiv(unsigned x, long long m, long long s) {
    return m ? __umulhi(x, (unsigned)m) >> s : x; }
__device__ __forceinline__ unsigned long long cf_fdiv(unsigned long long x, long long m,
                                                      long long s) {
    return m ? __umul64hi(x, (unsigned long long)m) >> s : x; }
/* the channel (i / in) % ln of a per-channel operand, and r = i % in */
template <typename I> __device__ __forceinline__ I cf_chan(I i, long long in, long long mi,
        long long si, long long ln, long long ml, long long sl, I &r) {
    const I q = cf_fdiv(i, mi, si);
    r = i - q * (I)in;
    return q - cf_fdiv(q, ml, sl) * (I)ln; }
template <typename I> __device__ __forceinline__ I cf_chan(I i, long long in, long long mi,
        long long si, long long ln, long long ml, long long sl) {
    I r; return cf_chan(i, in, mi, si, ln, ml, sl, r); }
"""

_FLOAT_FN = {"exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log", "log2": "log2",
             "log10": "log10", "log1p": "log1p", "sqrt": "sqrt", "cbrt": "cbrt", "sin": "sin",
             "cos": "cos", "tan": "tan", "arcsin": "asin", "arccos": "acos", "arctan": "atan",
             "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "arcsinh": "asinh",
             "arccosh": "acosh", "arctanh": "atanh", "floor": "floor", "ceil": "ceil",
             "trunc": "trunc", "rint": "rint", "erf": "erf", "erfc": "erfc", "rsqrt": "rsqrt",
             "fabs": "fabs", "absolute": "fabs"}
_FLOAT_FN2 = {"arctan2": "atan2", "hypot": "hypot", "copysign": "copysign", "fmod": "fmod",
              "power": "pow", "fmax": "fmax", "fmin": "fmin"}
_CMP = {"equal": "==", "not_equal": "!=", "less": "<", "less_equal": "<=", "greater": ">",
        "greater_equal": ">="}


def _fn(name: str, dt: numpy.dtype) -> str:
    return name if dt == numpy.float64 else name + "f"


def _literal(v: Any, dt: numpy.dtype) -> str:
    """A C literal of value ``v`` in dtype ``dt`` (carried type)."""
    if dt.kind == "b":
        return "true" if v else "false"
    if dt.kind == "f":
        v = float(v)
        if v != v:
            return "(__int_as_float(0x7fc00000))" if dt != numpy.float64 else \
                "(__longlong_as_double(0x7ff8000000000000LL))"
        if v in (float("inf"), float("-inf")):
            s = "-" if v < 0 else ""
            return (f"({s}__int_as_float(0x7f800000))" if dt != numpy.float64 else
                    f"({s}__longlong_as_double(0x7ff0000000000000LL))")
        if dt == numpy.float64:
            return f"({float.hex(v)})" if v else ("(-0.0)" if str(v).startswith("-") else "(0.0)")
        f32 = float(numpy.float32(v))
        return f"({float.hex(f32)}f)" if f32 else ("(-0.0f)" if str(v).startswith("-") else "(0.0f)")
    v = int(v)
    ct = _CT[dt.name]
    if dt == numpy.int64 and v == -2**63:
        return "(-9223372036854775807LL - 1)"
    suffix = "ULL" if dt.kind == "u" else "LL"
    return f"(({ct}){v}{suffix})"


def cast(e: str, src: numpy.dtype, dst: numpy.dtype) -> str:
    """C expression converting carried value ``e`` of ``src`` to carried ``dst`` (NumPy's unsafe cast)."""
    if src == dst:
        return e
    if dst.kind == "b":
        return f"({e} != 0)"
    if dst == numpy.float16:
        if src == numpy.float64:
            return f"cf_rhd({e})"
        if src.itemsize == 8:  # 64-bit ints: round once, through double
            return f"cf_rhd((double)({e}))"
        return f"cf_rh((float)({e}))"
    return f"(({_CT[dst.name]})({e}))"


def _unary(op: str, dt: numpy.dtype, a: str) -> str:
    T = _CT[dt.name]
    f = dt.kind == "f"
    U = _UNSIGNED.get(dt.name)
    if op == "negative":
        if f:
            return f"(-{a})"
        if dt == numpy.int32:
            # NVRTC 13.0 at -O1 and above folds an int32 max-reduction of maximum(x, -x) to
            # the maximum of x (maximum(x, -x).max() of [-20, 5, 19] gives 19); the negation
            # hidden in PTX keeps the fold away (tests/test_fusion.py,
            # test_an_int32_max_of_maximum_with_its_negation)
            return f"cf_neg32({a})"
        return f"(({T})(({U})0 - ({U}){a}))" if U else f"(({T})(0 - {a}))"
    if op == "positive":
        return a
    if op in ("absolute", "fabs"):
        if f:
            return f"{_fn('fabs', dt)}({a})"
        if dt.kind != "i":
            return a
        neg = f"({T})(({U})0 - ({U}){a})" if U else f"({T})(0 - {a})"
        return f"(({a} < 0) ? {neg} : {a})"
    if op == "sign":
        return f"(({a} > 0) ? ({T})1 : (({a} < 0) ? ({T})-1 : (({a} == 0) ? ({T})0 : {a})))"
    if op == "square":
        return f"(({T})(({U}){a} * ({U}){a}))" if U else f"(({T})({a} * {a}))"
    if op == "reciprocal":
        return f"(({T})1 / {a})" if f else f"(({a} == 0) ? ({T})0 : ({T})(1 / {a}))"
    # NumPy's constants, pi / 180 and 180 / pi divided in the dtype (npy_rad2degf's float
    # quotient is one unit in the last place below the rounded 180 / pi)
    if op in ("deg2rad", "radians"):
        return f"({a} * (({T})3.141592653589793238462643383279502884 / ({T})180))"
    if op in ("rad2deg", "degrees"):
        return f"({a} * (({T})180 / ({T})3.141592653589793238462643383279502884))"
    if op == "isnan":
        return f"isnan({a})" if f else "false"
    if op == "isinf":
        return f"isinf({a})" if f else "false"
    if op == "isfinite":
        return f"isfinite({a})" if f else "true"
    if op == "signbit":
        return f"signbit({a})" if f else f"({a} < 0)"
    if op == "logical_not":
        return f"(!({a}))"
    if op == "invert":
        return f"(!{a})" if dt.kind == "b" else f"(({T})(~{a}))"
    if op == "sigmoid":
        return f"(({T})1 / (({T})1 + {_fn('exp', dt)}(-{a})))"
    if op in ("floor", "ceil", "trunc", "rint") and not f:
        return a
    if op in _FLOAT_FN and f:
        return f"{_fn(_FLOAT_FN[op], dt)}({a})"
    raise ArgumentTypeError(f"cuflow: {op} has no kernel for dtype {dt}")


def _runtime_scalar(node: Any) -> bool:
    """Whether ``node`` is a kernel parameter (a scalar argument), cast or not."""
    while node.op == "cast":
        node = node.args[0]
    return node.op == "scalar"


def _mixed_compare(op: str, da: numpy.dtype, db: numpy.dtype, a: str, b: str) -> str:
    """``a OP b`` of operands of two dtypes (NumPy's exact uint64-with-signed loops): C would
    convert a negative signed operand to unsigned, where it is less than any unsigned."""
    sym = _CMP[op]
    if not ({da.kind, db.kind} == {"u", "i"} and numpy.uint64 in (da, db)):
        return f"({a} {sym} {b})"
    if da.kind == "i":  # a negative: a < b
        neg = "true" if op in ("less", "less_equal", "not_equal") else "false"
        return f"(({a} < 0) ? {neg} : ((unsigned long long){a} {sym} {b}))"
    neg = "true" if op in ("greater", "greater_equal", "not_equal") else "false"
    return f"(({b} < 0) ? {neg} : ({a} {sym} (unsigned long long){b}))"


def _binary(op: str, dt: numpy.dtype, a: str, b: str) -> str:
    T = _CT[dt.name]
    f = dt.kind == "f"
    bl = dt.kind == "b"
    if op in _CMP:
        return f"({a} {_CMP[op]} {b})"
    if op in ("add", "subtract", "multiply"):
        sym = {"add": "+", "subtract": "-", "multiply": "*"}[op]
        if bl:
            return f"({a} || {b})" if op == "add" else f"({a} && {b})"
        if dt.name in _UNSIGNED:  # wrap without signed-overflow UB
            U = _UNSIGNED[dt.name]
            return f"(({T})(({U}){a} {sym} ({U}){b}))"
        return f"(({T})({a} {sym} {b}))"
    if op == "divide":
        return f"({a} / {b})"
    if op == "floor_divide":
        return f"cf_floordiv<{T}>({a}, {b})" if f else f"cf_ifloordiv<{T}>({a}, {b})"
    if op == "remainder":
        return f"cf_pymod<{T}>({a}, {b})" if f else f"cf_imod<{T}>({a}, {b})"
    if op == "fmod" and not f:
        return f"cf_ifmod<{T}>({a}, {b})"
    if op == "power" and not f:
        return f"(({a}) || !({b}))" if bl else f"cf_ipow<{T}>({a}, {b})"
    if op in ("maximum", "fmax") and not f:
        return f"(({a} > {b}) ? {a} : {b})"
    if op in ("minimum", "fmin") and not f:
        return f"(({a} < {b}) ? {a} : {b})"
    if op == "maximum":
        return f"cf_fmax<{T}>({a}, {b})"
    if op == "minimum":
        return f"cf_fmin<{T}>({a}, {b})"
    if op == "logical_and":
        return f"(({a} != 0) && ({b} != 0))"
    if op == "logical_or":
        return f"(({a} != 0) || ({b} != 0))"
    if op == "logical_xor":
        return f"(({a} != 0) != ({b} != 0))"
    if op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        sym = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}[op]
        return f"(({T})({a} {sym} {b}))"
    if op == "left_shift":
        return f"cf_shl<{T}>({a}, {b})"
    if op == "right_shift":
        return f"cf_shr<{T}>({a}, {b})"
    if op == "logaddexp" and f:
        return f"cf_logaddexp<{T}>({a}, {b})"
    if op == "logaddexp2" and f:
        return f"cf_logaddexp2<{T}>({a}, {b})"
    if op == "heaviside" and f:
        return f"(({a} < 0) ? ({T})0 : (({a} > 0) ? ({T})1 : (({a} == 0) ? {b} : {a})))"
    if op in _FLOAT_FN2 and f:
        return f"{_fn(_FLOAT_FN2[op], dt)}({a}, {b})"
    raise ArgumentTypeError(f"cuflow: {op} has no kernel for dtype {dt}")


#: operations a table lookup does not beat: a few instructions each, against a memory-bound
#: load and store (bench/test_bench_fusion.py: the uint8 -> float16 chain)
CHEAP = frozenset((
    "input", "scalar", "const", "cast", "where", "add", "subtract", "multiply", "divide",
    "true_divide", "negative", "positive", "absolute", "fabs", "square", "sign", "maximum",
    "minimum", "fmax", "fmin", "copysign", "floor", "ceil", "trunc", "rint", "reciprocal",
    "sqrt", "rsqrt", "isnan", "isinf", "isfinite", "signbit", "logical_not", "invert",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
    "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
))


def costly(outputs: tuple) -> bool:
    """Whether the expression of ``outputs`` holds an operation outside :data:`CHEAP`."""
    return any(n.op not in CHEAP for n in topo(outputs))


def topo(outputs: tuple) -> list:
    """The nodes reachable from ``outputs``, operands first (each once)."""
    order: list = []
    seen: set = set()
    stack = [(o, False) for o in reversed(outputs)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for a in reversed(node.args):
            if id(a) not in seen:
                stack.append((a, False))
    return order


def body(outputs: tuple, inputs: dict, scalars: dict) -> tuple[list, list]:
    """C statements computing ``outputs``; ``inputs``/``scalars`` map node ids to C names.

    Returns the statements and each output's C expression.
    """
    names: dict[int, str] = {}
    lines = []
    for k, node in enumerate(topo(outputs)):
        nid = id(node)
        if node.op == "input":
            names[nid] = inputs[nid]
            continue
        if node.op == "scalar":
            names[nid] = scalars[nid]
            continue
        if node.op == "const":
            names[nid] = _literal(node.value, node.dtype)
            continue
        dt = node.dtype
        args = [names[id(a)] for a in node.args]
        if node.op == "cast":
            e = cast(args[0], node.args[0].dtype, dt)
        elif node.op == "where":
            e = f"({args[0]} ? {args[1]} : {args[2]})"
        elif len(args) == 1:
            e = _unary(node.op, node.args[0].dtype, args[0])
        elif node.op == "power" and dt.kind == "f" and _runtime_scalar(node.args[1]):
            # NumPy's x ** s takes sqrt for s == 0.5 (-inf ** 0.5 is NaN, -0.0 ** 0.5 is -0.0)
            e = (f"(({args[1]} == 0.5) ? {_unary('sqrt', node.args[0].dtype, args[0])} : "
                 f"{_binary('power', node.args[0].dtype, *args)})")
        elif node.op in _CMP and node.args[0].dtype != node.args[1].dtype:
            e = _mixed_compare(node.op, node.args[0].dtype, node.args[1].dtype, *args)
        else:
            e = _binary(node.op, node.args[0].dtype, args[0], args[1])
        if dt == numpy.float16 and node.op not in ("cast", "where"):
            e = f"cf_rh({e})"
        names[nid] = f"v{k}"
        lines.append(f"const {_CT[dt.name]} v{k} = {e};")
    return lines, [names[id(o)] for o in outputs]


def _load(dt: numpy.dtype, e: str) -> str:
    if dt == numpy.float16:
        return f"cf_h2f({e})"
    if dt.kind == "b":
        return f"({e} != 0)"
    return e


def _vector_loads(layout: Layout, V: int, at: str, pad: str, name: str = "a") -> list[str]:
    """The 16-byte-aligned loads of ``V`` elements at ``p<k> + at`` into ``<name><k>``, for
    each contiguous input."""
    out = []
    for k, (dt, cls, _) in enumerate(layout.inputs):
        if cls == "c":
            out.append(f"{pad}CF_ALIGN16 {_MT[dt.name]} {name}{k}[{V}];")
            out.append(f"{pad}cf_vload<{_MT[dt.name]}, {V}>({name}{k}, p{k} + {at});")
    return out


def _store(src: numpy.dtype, dst: numpy.dtype, e: str) -> str:
    """Memory value of ``dst`` from carried ``e`` of ``src``."""
    if dst == numpy.float16:
        if src == numpy.float16:
            return f"cf_f2h({e})"
        return f"cf_d2h((double)({e}))" if src.itemsize == 8 else f"cf_f2h((float)({e}))"
    if dst.kind == "b":
        return f"(unsigned char)({e} != 0)"
    return f"({_MT[dst.name]})({e})"


_SCALAR_CT = {"b": "long long", "i": "long long", "u": "unsigned long long", "f": "double"}


def scalar_ctype(dt: numpy.dtype) -> str:
    """C type of the kernel parameter that carries a runtime scalar of ``dt``."""
    return _SCALAR_CT[dt.kind]


def _acc(red: Reduction) -> str:
    s = red.src
    if red.name in ("sum", "prod", "mean"):
        if s.kind == "f":
            return "double" if s == numpy.float64 or red.out == numpy.float64 else "float"
        if red.name == "mean":
            return "double"
        return "unsigned long long" if s.kind == "u" else "long long"
    if s.kind == "b" or (s.kind == "i" and s.itemsize < 4):
        return "int"  # warp shuffles take 32-bit and wider values
    if s.kind == "u" and s.itemsize < 4:
        return "unsigned int"
    return _CT[s.name]


def _ident(red: Reduction, acc: str) -> str:
    if red.name in ("sum", "mean"):
        return f"(({acc})0)"
    if red.name == "prod":
        return f"(({acc})1)"
    big = red.name in ("min", "argmin")
    s = red.src
    if s.kind == "f":
        return _literal(float("inf") if big else float("-inf"), numpy.dtype(
            numpy.float64 if acc == "double" else numpy.float32))
    if s.kind == "b":
        return "1" if big else "0"
    info = numpy.iinfo(s)
    return _literal(info.max if big else info.min, s)


def _combine(red: Reduction, acc: str) -> str:
    """``cf_comb(acc&, ai&, v, i)``: fold value ``v`` at index ``i`` into the accumulator."""
    f = red.src.kind == "f"
    nan_v = "isnan(v)" if f else "false"
    nan_a = "isnan(a)" if f else "false"
    if red.name in ("sum", "mean"):
        op = "a = a + v;"
    elif red.name == "prod":
        op = "a = a * v;"
    elif red.name == "max":
        op = f"if ({nan_v} || v > a) a = v;"
    elif red.name == "min":
        op = f"if ({nan_v} || v < a) a = v;"
    else:
        cmp = ">" if red.name == "argmax" else "<"
        op = (f"bool t = {nan_a} ? ({nan_v} && i < ai) : ({nan_v} || v {cmp} a || "
              "(v == a && i < ai));\n    if (t) { a = v; ai = i; }")
    return (f"__device__ __forceinline__ void cf_comb({acc} &a, long long &ai, {acc} v, "
            f"long long i) {{\n    {op}\n}}\n")


_ACC_DT = {"double": "float64", "float": "float32", "long long": "int64",
           "unsigned long long": "uint64", "int": "int32", "unsigned int": "uint32"}


def _final(red: Reduction, acc: str, a: str, ai: str, count: str) -> str:
    if red.name in ("argmax", "argmin"):
        return _store(numpy.dtype(numpy.int64), red.out, ai)
    src = numpy.dtype(_ACC_DT[acc])
    if red.name == "mean":
        return _store(src, red.out, f"({a} / ({acc})({count}))")
    return _store(src, red.out, a)


def _ix(layout: Layout) -> str:
    """The index type of per-channel divisions."""
    return "unsigned long long" if layout.index64 else "unsigned"


def _chan_args(g: int) -> str:
    return f"in{g}, mi{g}, si{g}, ln{g}, ml{g}, sl{g}"


# The last (< V) elements, taken by the highest threads: thread 0 already has the first
# chunk, and a tail in the same thread would be a second global-memory round trip after it
# (a tiny array's whole kernel time: slow_function's graph replay, bench op zoo).
_TAIL = "    for ({I} i = nchunk * {V} + (nt - 1 - tid); i < ({I})n; i += nt)"


def _generate_lut(layout: Layout, src: list) -> str:
    """The lookup kernel of a ``lut`` layout (``src``: prelude and body): each block first
    evaluates the expression on all 256 x ``lut`` (byte, channel) pairs into shared memory,
    then every element is a load, a shared-memory read and a store.  Its parameters are a
    plain kernel's: pointers, outputs, n, the channel's (inner, fastdiv), scalars."""
    L = layout.lut
    V = layout.vec
    nout = len(layout.outputs)
    (ci,) = [k for k, (_, cls, _) in enumerate(layout.inputs) if cls == "c"]
    xm = _MT[layout.inputs[ci][0].name]
    kp = [f"const {_MT[dt.name]} *__restrict__ p{k}" for k, (dt, _, _) in enumerate(layout.inputs)]
    kp += [f"{_MT[dt.name]} *__restrict__ q{j}" for j, dt in enumerate(layout.outputs)]
    kp += ["long long n", "long long inner", "long long mi", "long long si"]
    kp += [f"{scalar_ctype(dt)} s{k}_" for k, dt in enumerate(layout.scalars)]
    src.append(f'extern "C" __global__ void __launch_bounds__({LUT_BLOCK}) {ENTRY}('
               + ", ".join(kp) + ") {")
    for j, dt in enumerate(layout.outputs):
        src.append(f"    __shared__ {_MT[dt.name]} st{j}[256 * {L}];")
    # the table: entry t is (byte t / L, channel t % L); a few evaluations per thread
    src.append(f"    for (int t = threadIdx.x; t < 256 * {L}; t += {LUT_BLOCK}) {{")
    src.append(f"        const int b = t / {L}, ch = t - b * {L};")
    args = []
    for k, (dt, cls, _) in enumerate(layout.inputs):
        if cls == "c":
            args.append(_load(dt, f"(({_MT[dt.name]})b)"))
        elif cls == "v":
            args.append(_load(dt, f"p{k}[ch]"))
        else:
            args.append(_load(dt, f"p{k}[0]"))
    args += [f"s{k}_" for k in range(len(layout.scalars))] + [f"st{j}[t]" for j in range(nout)]
    src.append("        cf_body(" + ", ".join(args) + ");")
    src.append("    }")
    src.append("    __syncthreads();")
    src.append(f"    const {xm} *__restrict__ px = p{ci};")
    src.append("    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;")
    src.append("    const long long nt = (long long)gridDim.x * blockDim.x;")
    src.append(f"    const long long nchunk = n / {V};")
    src.append("    for (long long c = tid; c < nchunk; c += nt) {")
    src.append(f"        const long long base = c * {V};")
    src.append(f"        CF_ALIGN16 {xm} a[{V}];")
    src.append(f"        cf_vload<{xm}, {V}>(a, px + base);")
    ix = _ix(layout)
    if L > 1:  # the table's channel: (i / inner) % L
        src.append(f"        {ix} vr = ({ix})base, vc = cf_fdiv(vr, mi, si);")
        src.append(f"        vr -= vc * ({ix})inner; vc %= {L};")
    for j, dt in enumerate(layout.outputs):
        src.append(f"        CF_ALIGN16 {_MT[dt.name]} b{j}[{V}];")
    src.append("#pragma unroll")
    src.append(f"        for (int e = 0; e < {V}; ++e) {{")
    idx = f"(int)(unsigned char)a[e] * {L} + (int)vc" if L > 1 else "(unsigned char)a[e]"
    for j in range(nout):
        src.append(f"            b{j}[e] = st{j}[{idx}];")
    if L > 1:
        src.append(f"            if (++vr == ({ix})inner) {{ vr = 0; if (++vc == {L}) vc = 0; }}")
    src.append("        }")
    for j, dt in enumerate(layout.outputs):
        src.append(f"        cf_vstore<{_MT[dt.name]}, {V}>(q{j} + base, b{j});")
    src.append("    }")
    src.append(_TAIL.format(V=V, I="long long") + " {")
    src.append(f"        const int ch = (int)((i / inner) % {L});" if L > 1 else "        const int ch = 0;")
    for j in range(nout):
        src.append(f"        q{j}[i] = st{j}[(int)(unsigned char)px[i] * {L} + ch];")
    src.append("    }\n}")
    return "\n".join(src) + "\n"


def generate(layout: Layout, outputs: tuple, input_nodes: list, scalar_nodes: list) -> str:
    """The CUDA source of the fused kernel(s) for ``outputs`` over ``layout``.

    ``input_nodes[k]`` / ``scalar_nodes[k]`` are the ``input`` / ``scalar`` nodes of array
    input ``k`` / scalar argument ``k`` (None where the expression does not use it).
    """
    V = layout.vec
    red = layout.reduction
    ins = {id(n): f"x{k}" for k, n in enumerate(input_nodes) if n is not None}
    scs = {id(n): f"s{k}" for k, n in enumerate(scalar_nodes) if n is not None}
    lines, outs = body(outputs, ins, scs)

    # cf_body(inputs carried..., scalars..., outputs&...)
    bparams = [f"{_CT[dt.name]} x{k}" for k, (dt, _, _) in enumerate(layout.inputs)]
    bparams += [f"{scalar_ctype(dt)} s{k}_" for k, dt in enumerate(layout.scalars)]
    out_nodes = outputs
    if red is None:
        bparams += [f"{_MT[dt.name]} &y{j}" for j, dt in enumerate(layout.outputs)]
    else:
        bparams += [f"{_CT[out_nodes[0].dtype.name]} &y0"]
    src = [_PRELUDE]
    src.append("__device__ __forceinline__ void cf_body(" + ", ".join(bparams) + ") {")
    for k, dt in enumerate(layout.scalars):
        src.append(f"    const {_CT[dt.name]} s{k} = ({_CT[dt.name]})s{k}_;"
                   if dt != numpy.float16 else f"    const float s{k} = cf_rhd(s{k}_);")
    src += ["    " + ln for ln in lines]
    if red is None:
        for j, (o, dt) in enumerate(zip(out_nodes, layout.outputs)):
            src.append(f"    y{j} = {_store(o.dtype, dt, outs[j])};")
    else:
        src.append(f"    y0 = {outs[0]};")
    src.append("}")

    # kernel parameters: inputs, outputs, n, per-class extras, scalars, reduction extras
    kp = [f"const {_MT[dt.name]} *__restrict__ p{k}" for k, (dt, _, _) in enumerate(layout.inputs)]
    if red is None:
        kp += [f"{_MT[dt.name]} *__restrict__ q{j}" for j, dt in enumerate(layout.outputs)]
    kp.append("long long n")
    for k, (dt, cls, nd) in enumerate(layout.inputs):
        if cls == "v" and nd == k:  # one channel index per (inner, len)
            kp += [f"long long {a}" for a in _chan_args(k).split(", ")]
        elif cls == "g":
            kp += [f"long long g{k}n{d}" for d in range(nd)]
            kp += [f"long long g{k}t{d}" for d in range(nd)]
    kp += [f"{scalar_ctype(dt)} s{k}_" for k, dt in enumerate(layout.scalars)]

    def element_load(k, idx):
        dt, cls, nd = layout.inputs[k]
        if cls == "s":
            return _load(dt, f"p{k}[0]")
        if cls == "c":
            return _load(dt, f"p{k}[{idx}]")
        if cls == "v":
            return _load(dt, f"p{k}[cf_chan(({_ix(layout)})({idx}), {_chan_args(nd)})]")
        return _load(dt, f"p{k}[cf_off{k}({idx}" + "".join(
            f", g{k}n{d}" for d in range(nd)) + "".join(f", g{k}t{d}" for d in range(nd)) + ")]")

    for k, (dt, cls, nd) in enumerate(layout.inputs):
        if cls == "g":
            ps = ", ".join([f"long long n{d}" for d in range(nd)]
                           + [f"long long t{d}" for d in range(nd)])
            body_g = "".join(f"    off += (r % n{d}) * t{d}; r /= n{d};\n"
                             for d in reversed(range(nd)))
            src.append(f"__device__ __forceinline__ long long cf_off{k}(long long i, {ps}) {{\n"
                       f"    long long r = i, off = 0;\n{body_g}    return off;\n}}")

    scal_args = [f"s{k}_" for k in range(len(layout.scalars))]
    if layout.lut:
        return _generate_lut(layout, src)
    if red is None:
        # 32-bit indices below 2**31 elements: a 64-bit index chain delays a small array's
        # only load (bench op zoo slow_function: its graph replay, per kernel node)
        I = "long long" if layout.index64 else "unsigned"
        src.append(f'extern "C" __global__ void __launch_bounds__({BLOCK}) {ENTRY}('
                   + ", ".join(kp) + ") {")
        src.append(f"    const {I} tid = ({I})blockIdx.x * blockDim.x + threadIdx.x;")
        src.append(f"    const {I} nt = ({I})gridDim.x * blockDim.x;")
        src.append(f"    const {I} nchunk = ({I})n / {V};")
        # one channel index per (inner, len): the first v input with them
        groups = sorted({nd for _, cls, nd in layout.inputs if cls == "v"})
        src.append(f"    for ({I} c = tid; c < nchunk; c += nt) {{")
        src.append(f"        const {I} base = c * {V};")
        for k, (dt, cls, nd) in enumerate(layout.inputs):
            if cls == "c":
                src.append(f"        CF_ALIGN16 {_MT[dt.name]} a{k}[{V}];")
                src.append(f"        cf_vload<{_MT[dt.name]}, {V}>(a{k}, p{k} + base);")
            elif cls == "s":
                src.append(f"        const {_CT[dt.name]} a{k} = {_load(dt, f'p{k}[0]')};")
        ix = _ix(layout)
        for g in groups:  # per chunk, not carried from chunk to chunk: no loop dependence
            src.append(f"        {ix} vr{g}; {ix} vc{g} = cf_chan(({ix})base, "
                       f"{_chan_args(g)}, vr{g});")
        for j, dt in enumerate(layout.outputs):
            src.append(f"        CF_ALIGN16 {_MT[dt.name]} b{j}[{V}];")

        def chunk_body(per_element: bool) -> None:
            # per_element: the chunk crosses a channel boundary, so each element steps the
            # per-channel indices; else each per-channel value is loaded once per chunk
            args = []
            for k, (dt, cls, nd) in enumerate(layout.inputs):
                if cls == "c":
                    args.append(_load(dt, f"a{k}[e]"))
                elif cls == "s":
                    args.append(f"a{k}")
                elif cls == "v":
                    args.append(_load(dt, f"p{k}[vc{nd}]") if per_element else f"u{k}")
                else:
                    args.append(element_load(k, "base + e"))
            if not per_element:
                for k, (dt, cls, nd) in enumerate(layout.inputs):
                    if cls == "v":
                        src.append(f"            const {_CT[dt.name]} u{k} = "
                                   f"{_load(dt, f'p{k}[vc{nd}]')};")
            src.append("#pragma unroll")
            src.append(f"            for (int e = 0; e < {V}; ++e) {{")
            args += scal_args + [f"b{j}[e]" for j in range(len(layout.outputs))]
            src.append("                cf_body(" + ", ".join(args) + ");")
            if per_element:
                for g in groups:
                    src.append(f"                if (++vr{g} == ({ix})in{g}) {{ vr{g} = 0; "
                               f"if (++vc{g} == ({ix})ln{g}) vc{g} = 0; }}")
            src.append("            }")

        if groups and V > 1:
            # NCHW per-channel vectors (inner a multiple of V): every chunk is in one channel
            src.append("        if (" + " && ".join(f"vr{g} + {V} <= ({ix})in{g}" for g in groups)
                       + ") {")
            chunk_body(False)
            src.append("        } else {")
            chunk_body(True)
            src.append("        }")
        else:
            src.append("        {")
            chunk_body(bool(groups))
            src.append("        }")
        for j, dt in enumerate(layout.outputs):
            src.append(f"        cf_vstore<{_MT[dt.name]}, {V}>(q{j} + base, b{j});")
        src.append("    }")
        src.append(_TAIL.format(V=V, I=I) + " {")
        args = [element_load(k, "i") for k in range(len(layout.inputs))]
        args += scal_args + [f"q{j}[i]" for j in range(len(layout.outputs))]
        src.append("        cf_body(" + ", ".join(args) + ");")
        src.append("    }")
        src.append("}")
        return "\n".join(src) + "\n"

    # ------------------------------------------------------------ reductions
    acc = _acc(red)
    vdt = out_nodes[0].dtype
    vct = _CT[vdt.name]
    src.append(_combine(red, acc))
    src.append(f"__device__ __forceinline__ {acc} cf_val(" + ", ".join(
        [f"const {_MT[dt.name]} *__restrict__ p{k}" for k, (dt, _, _) in enumerate(layout.inputs)]
        + [p for p in kp if not p.startswith("const ")]) + ", long long i) {")
    src.append(f"    {vct} y;")
    src.append("    cf_body(" + ", ".join(
        [element_load(k, "i") for k in range(len(layout.inputs))] + scal_args + ["y"]) + ");")
    src.append(f"    return ({acc})y;\n}}")
    pass_args = ", ".join([f"p{k}" for k in range(len(layout.inputs))]
                          + [p.split()[-1] for p in kp if not p.startswith("const ")])
    ident = _ident(red, acc)
    shfl = (
        "    for (int o = 16; o > 0; o >>= 1) {\n"
        f"        {acc} ov = __shfl_down_sync(0xffffffffu, a, o);\n"
        "        long long oi = __shfl_down_sync(0xffffffffu, ai, o);\n"
        "        cf_comb(a, ai, ov, oi);\n    }\n")
    block_reduce = (
        f"    __shared__ {acc} sa[{BLOCK // 32}];\n"
        f"    __shared__ long long si[{BLOCK // 32}];\n"
        + shfl +
        "    if ((threadIdx.x & 31) == 0) { sa[threadIdx.x >> 5] = a; si[threadIdx.x >> 5] = ai; }\n"
        "    __syncthreads();\n"
        "    if (threadIdx.x < 32) {\n"
        f"        a = threadIdx.x < {BLOCK // 32} ? sa[threadIdx.x] : {ident};\n"
        f"        ai = threadIdx.x < {BLOCK // 32} ? si[threadIdx.x] : 0x7fffffffffffffffLL;\n"
        + shfl.replace("    ", "        ", ) + "    }\n")
    if red.mode == "all":
        # the parameters of a one-output elementwise kernel (inputs, output, n, scalars) and
        # then the partials: a one-block launch writes the result itself
        nin = len(layout.inputs)
        kp2 = (kp[:nin] + [f"{_MT[red.out.name]} *__restrict__ q"] + kp[nin:]
               + [f"{acc} *__restrict__ pa", "long long *__restrict__ pi"])
        src.append(f'extern "C" __global__ void __launch_bounds__({BLOCK}) {ENTRY}('
                   + ", ".join(kp2) + ") {")
        src.append(f"    {acc} a = {ident}; long long ai = 0x7fffffffffffffffLL;")
        src.append("    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;")
        src.append("    const long long nt = (long long)gridDim.x * blockDim.x;")
        src.append(f"    const long long nchunk = n / {V};")
        src.append("    for (long long c = tid; c < nchunk; c += nt) {")
        src.append(f"        const long long base = c * {V};")
        src += _vector_loads(layout, V, "base", "        ")
        src.append("#pragma unroll")
        src.append(f"        for (int e = 0; e < {V}; ++e) {{")
        args = []
        for k, (dt, cls, nd) in enumerate(layout.inputs):
            args.append(_load(dt, f"a{k}[e]") if cls == "c" else element_load(k, "base + e"))
        src.append(f"            {vct} y;")
        src.append("            cf_body(" + ", ".join(args + scal_args + ["y"]) + ");")
        src.append(f"            cf_comb(a, ai, ({acc})y, base + e);")
        src.append("        }\n    }")
        src.append(f"    for (long long i = nchunk * {V} + tid; i < n; i += nt)")
        src.append(f"        cf_comb(a, ai, cf_val({pass_args}, i), i);")
        src.append(block_reduce)
        src.append("    if (threadIdx.x == 0) {")
        src.append(f"        if (gridDim.x == 1) q[0] = {_final(red, acc, 'a', 'ai', 'n')};")
        src.append("        else { pa[blockIdx.x] = a; pi[blockIdx.x] = ai; }\n    }\n}")
        src.append(f'extern "C" __global__ void __launch_bounds__({BLOCK}) {ENTRY_FIN}('
                   f"const {acc} *__restrict__ pa, const long long *__restrict__ pi, "
                   f"long long g, {_MT[red.out.name]} *__restrict__ q, long long count) {{")
        # launched as a programmatic dependent of the partials' kernel where the device has
        # them (Plan.launch): its launch is prepared while that kernel runs, and the block
        # waits here for all of that kernel's writes; launched plainly, the wait returns
        src.append("#if __CUDA_ARCH__ >= 900\n"
                   '    asm volatile("griddepcontrol.wait;" ::: "memory");\n#endif')
        src.append(f"    {acc} a = {ident}; long long ai = 0x7fffffffffffffffLL;")
        src.append(f"    for (long long t = threadIdx.x; t < g; t += {BLOCK}) cf_comb(a, ai, pa[t], pi[t]);")
        src.append(block_reduce)
        src.append(f"    if (threadIdx.x == 0) q[0] = {_final(red, acc, 'a', 'ai', 'count')};\n}}")
        return "\n".join(src) + "\n"

    # (inputs, output, n, scalars) as a one-output elementwise kernel, then the row length
    # and the inner extent
    nin = len(layout.inputs)
    kp2 = (kp[:nin] + [f"{_MT[red.out.name]} *__restrict__ q"] + kp[nin:]
           + ["long long rlen", "long long inner"])
    src.append(f'extern "C" __global__ void __launch_bounds__({BLOCK}) {ENTRY}('
               + ", ".join(kp2) + ") {")
    if red.mode == "rows":
        def fold(name: str, at: str, pad: str) -> None:
            # the V elements loaded into <name><k> at row offset ``at``, folded into a
            src.append("#pragma unroll")
            src.append(f"{pad}for (int e = 0; e < {V}; ++e) {{")
            args = [_load(dt, f"{name}{k}[e]") if cls == "c"
                    else element_load(k, f"rb + {at} + e")
                    for k, (dt, cls, nd) in enumerate(layout.inputs)]
            src.append(f"{pad}    {vct} y;")
            src.append(f"{pad}    cf_body(" + ", ".join(args + scal_args + ["y"]) + ");")
            src.append(f"{pad}    cf_comb(a, ai, ({acc})y, {at} + e);")
            src.append(f"{pad}}}")

        def row_start(pad: str) -> None:
            src.append(f"{pad}{acc} a = {ident}; long long ai = 0x7fffffffffffffffLL;")
            src.append(f"{pad}const long long rb = row * rlen;")

        # long rows (ROW_BLOCK_VECTORS vectors or more): a block per row, whose warps all
        # stream it, two vectors in flight per thread (bench fusion row_sum_exp: a warp per
        # row of 4096 leaves half the SM slots empty when rows are few)
        src.append(f"    if (rlen >= {ROW_BLOCK_VECTORS * V}LL) {{")
        # rows counted by row * rlen < n: a 64-bit division per thread (a software routine)
        # would delay every block's first load (bench fusion row_sum_exp)
        src.append("        for (long long row = blockIdx.x; row * rlen < n; row += gridDim.x) {")
        pad = "            "
        row_start(pad)
        src.append(f"{pad}long long r0 = (long long)threadIdx.x * {V};")
        src.append(f"{pad}for (; r0 + {BLOCK * V} < rlen; r0 += {2 * BLOCK * V}) {{")
        src.extend(_vector_loads(layout, V, "rb + r0", pad + "    "))
        src.extend(_vector_loads(layout, V, f"rb + r0 + {BLOCK * V}", pad + "    ", "c"))
        fold("a", "r0", pad + "    ")
        fold("c", f"(r0 + {BLOCK * V})", pad + "    ")
        src.append(f"{pad}}}")
        src.append(f"{pad}if (r0 < rlen) {{")
        src.extend(_vector_loads(layout, V, "rb + r0", pad + "    "))
        fold("a", "r0", pad + "    ")
        src.append(f"{pad}}}")
        src.append("\n".join("        " + ln for ln in block_reduce.splitlines()))
        final = _final(red, acc, "a", "ai", "rlen")
        src.append(f"            if (threadIdx.x == 0) q[row] = {final};")
        src.append("            __syncthreads();  // the partials are the next row's")
        src.append("        }")
        src.append("        return;")
        src.append("    }")
        # else a warp per row: lanes read consecutive elements
        src.append("    const long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;")
        src.append("    const long long nw = ((long long)gridDim.x * blockDim.x) >> 5;")
        src.append("    const int lane = threadIdx.x & 31;")
        src.append("    for (long long row = w; row * rlen < n; row += nw) {")
        row_start("        ")
        src.append("#pragma unroll 4")  # several 16-byte loads in flight per lane
        src.append(f"        for (long long r0 = lane * {V}; r0 < rlen; r0 += {32 * V}) {{")
        src.extend(_vector_loads(layout, V, "rb + r0", "            "))
        fold("a", "r0", "            ")
        src.append("        }")
        src.append(shfl.replace("    ", "        "))
        src.append(f"        if (lane == 0) q[row] = {_final(red, acc, 'a', 'ai', 'rlen')};")
        src.append("    }\n}")
    else:  # a thread per output: neighbours read neighbouring elements of each row
        # 32-bit divisions where the indices fit (a 64-bit one is a software routine)
        src.append("    const bool i32 = n <= 0xffffffffLL;")
        src.append("    const long long outs = i32 ? (long long)((unsigned)n / (unsigned)rlen) "
                   ": n / rlen;")
        src.append("    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;")
        src.append("    const long long nt = (long long)gridDim.x * blockDim.x;")
        src.append("    for (long long t = tid; t < outs; t += nt) {")
        src.append("        const long long o = i32 ? (long long)((unsigned)t / (unsigned)inner) "
                   ": t / inner, in = t - o * inner;")
        src.append(f"        {acc} a = {ident}; long long ai = 0x7fffffffffffffffLL;")
        src.append("        for (long long r = 0; r < rlen; ++r)")
        src.append(f"            cf_comb(a, ai, cf_val({pass_args}, (o * rlen + r) * inner + in), r);")
        src.append(f"        q[t] = {_final(red, acc, 'a', 'ai', 'rlen')};")
        src.append("    }\n}")
    return "\n".join(src) + "\n"
