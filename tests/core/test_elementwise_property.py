"""Elementwise functions and operators against NumPy on random calls.

Each example draws an op, its operands (arrays of any dtype and broadcastable shape, views
at odd offsets, Python scalars, special float values) and an output: none, a new array of
any dtype or shape, one of the inputs, or a view that overlaps an input.  The same call is
built on host copies with the same aliasing, and NumPy is the oracle:

* where NumPy refuses the call, cuflow refuses it too, before writing anything: a function
  with a ``CuflowError``, an operator (a darray method CuPy or NumPy implements where the
  engine does not take the call) with that library's builtin exception or a
  ``CuflowError``, which derives from the same builtin;
* otherwise the result (or ``dst``) equals NumPy's result computed in its own dtype and then
  cast into ``dst`` (cuflow never broadcasts ``dst``, and casts under ``same_kind``).

On the GPU this runs the compiled entry points, the generated kernels and the Python
contract on the same calls, so any case where they disagree with NumPy shows.
"""

from __future__ import annotations

import operator
import os
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuflow
from cuflow.testing import to_host

# name: (number of operands, exact result expected, operator form)
OPS = {
    "add": (2, True, operator.add), "subtract": (2, True, operator.sub),
    "multiply": (2, True, operator.mul), "maximum": (2, True, None),
    "minimum": (2, True, None), "greater": (2, True, operator.gt),
    "equal": (2, True, operator.eq), "logical_and": (2, True, None),
    "negative": (1, True, operator.neg), "absolute": (1, True, abs),
    "divide": (2, True, operator.truediv), "floor_divide": (2, True, operator.floordiv),
    "remainder": (2, True, operator.mod), "bitwise_and": (2, True, operator.and_),
    "less_equal": (2, True, operator.le), "not_equal": (2, True, operator.ne),
    "square": (1, True, None), "sign": (1, True, None), "logical_not": (1, True, None),
    "sqrt": (1, False, None), "exp": (1, False, None), "tanh": (1, False, None),
    "where": (3, True, None), "clip": (3, True, None),
}
INPLACE = {"add": operator.iadd, "subtract": operator.isub, "multiply": operator.imul,
           "divide": operator.itruediv}
DTYPES = ["bool", "int8", "uint8", "int32", "int64", "float16", "float32", "float64"]
SPECIALS = [np.nan, np.inf, -np.inf, -0.0]
# relative tolerance of the transcendental functions, by result dtype (the GPU's libm and
# NumPy's differ by a few ulp)
RTOL = {np.dtype("float16"): 2e-3, np.dtype("float32"): 4e-6, np.dtype("float64"): 1e-13}

_N = os.environ.get("CUFLOW_FUZZ_EXAMPLES")
PROPERTY = settings(max_examples=int(_N or 120), derandomize=_N is None, deadline=None,
                    database=None, suppress_health_check=list(HealthCheck))


def _values(rng, n, dtype):
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, n).astype(dt)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
    v = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)
    special = rng.random(n) < 0.08
    v[special] = rng.choice(SPECIALS, int(special.sum()))
    return v.astype(dt)


@st.composite
def calls(draw):
    """(op, form, operand specs, dst spec, result shape, seed)."""
    name = draw(st.sampled_from(sorted(OPS)))
    nin, _, opfn = OPS[name]
    shape = tuple(draw(st.lists(st.integers(1, 6), max_size=3)))
    if draw(st.booleans()) and shape:  # a long last axis: the vectorized kernels' body
        shape = shape[:-1] + (draw(st.integers(17, 70)),)
    specs = []
    for i in range(nin):
        if i > 0 or name == "where" or draw(st.integers(0, 4)) > 0:
            kind = "array" if draw(st.integers(0, 3)) > 0 else "scalar"
        else:
            kind = "scalar"
        if kind == "scalar":
            specs.append(("scalar", draw(st.one_of(
                st.booleans(), st.integers(-300, 300), st.integers(-2**62, 2**62),
                st.floats(-1e6, 1e6), st.sampled_from([np.nan, np.inf, -0.0, 1e300])))))
            continue
        sub = list(shape[draw(st.integers(0, len(shape))):])  # dropped leading axes
        sub = [1 if draw(st.integers(0, 4)) == 0 else d for d in sub]  # broadcast axes
        specs.append(("array", draw(st.sampled_from(DTYPES)), tuple(sub),
                      draw(st.integers(0, 3))))  # element offset into its buffer
    if all(s[0] == "scalar" for s in specs):
        specs[0] = ("array", draw(st.sampled_from(DTYPES)), shape, 0)
    arrays = [i for i, s in enumerate(specs) if s[0] == "array"]
    forms = ["function"]
    if opfn is not None:
        forms.append("operator")
    if name in INPLACE and specs[0][0] == "array":
        forms.append("inplace")
    form = draw(st.sampled_from(forms))
    out = ("none",)
    if form == "function":
        k = draw(st.integers(0, 5))
        if k in (1, 2):
            wrong = draw(st.integers(0, 5)) == 0
            out = ("new", draw(st.sampled_from(DTYPES)), shape + (2,) if wrong else shape)
        elif k == 3:
            out = ("input", draw(st.sampled_from(arrays)))
        elif k == 4:
            out = ("overlap", draw(st.sampled_from(arrays)), draw(st.integers(-3, 3)))
    return name, form, specs, out, shape, draw(st.integers(0, 2**32 - 1))


def _build(xp_asarray, specs, out, rng_seed):
    """The operands and dst, as arrays of one backend (``xp_asarray`` makes them)."""
    rng = np.random.default_rng(rng_seed)
    buffers, operands = [], []
    for s in specs:
        if s[0] == "scalar":
            buffers.append(None)
            operands.append(s[1])
            continue
        _, dtype, shape, offset = s
        n = int(np.prod(shape, dtype=np.int64))
        base = xp_asarray(_values(rng, n + offset + 3, dtype))
        buffers.append(base)
        operands.append(base[offset:offset + n].reshape(shape))
    dst = None
    if out[0] == "new":
        dst = xp_asarray(_values(rng, int(np.prod(out[2], dtype=np.int64)), out[1]).reshape(out[2]))
    elif out[0] == "input":
        dst = operands[out[1]]
    elif out[0] == "overlap":
        i, shift = out[1], out[2]
        _, dtype, shape, offset = specs[i]
        n = int(np.prod(shape, dtype=np.int64))
        start = min(max(offset + shift, 0), 3)
        dst = buffers[i][start:start + n].reshape(shape)
    return operands, dst


def _numpy_result(name, operands):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return np.asarray(getattr(np, name)(*operands))


def _call(cf, name, form, operands, dst):
    if form == "operator":
        return OPS[name][2](*operands)
    if form == "inplace":
        return INPLACE[name](operands[0], operands[1])
    return getattr(cf, name)(*operands) if dst is None else getattr(cf, name)(*operands, dst=dst)


@PROPERTY
@given(call=calls())
def test_elementwise_call_matches_numpy(cf, call):
    name, form, specs, out, shape, seed = call
    dev_ops, dst = _build(cf.asarray, specs, out, seed)
    host_ops, host_dst = _build(np.asarray, specs, out, seed)
    if form == "inplace":
        dst, host_dst = dev_ops[0], host_ops[0]
    before = None if dst is None else to_host(dst).copy()

    # NumPy's verdict: the result in its own dtype, then its cast into dst
    want = None
    try:
        want = _numpy_result(name, host_ops)
        if host_dst is not None:
            if want.shape != host_dst.shape:
                raise ValueError("dst is never broadcast")
            if not np.can_cast(want.dtype, host_dst.dtype, "same_kind"):
                raise TypeError("no same_kind cast into dst")
            with np.errstate(all="ignore"):
                want = want.astype(host_dst.dtype)
    except (TypeError, ValueError, OverflowError) as e:
        refusal = cuflow.CuflowError if form == "function" else (TypeError, ValueError,
                                                                     OverflowError)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(refusal):
                _call(cf, name, form, dev_ops, dst)
        if dst is not None:  # refused before anything was written
            np.testing.assert_array_equal(to_host(dst), before, err_msg=f"dst written ({e})")
        return

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = _call(cf, name, form, dev_ops, dst)
    if dst is not None:
        assert got is dst
    g = to_host(got)
    assert (g.dtype, g.shape) == (want.dtype, want.shape)
    if want.dtype == np.float32 and cf.get_backend().is_gpu:
        # the calls the engine declines run CuPy's kernels, which flush float32 subnormal
        # numbers to zero (docs/fusion.md)
        want = np.where((np.abs(want) < np.finfo(np.float32).tiny) & (g == 0), g, want)
    if name == "floor_divide" and want.dtype.kind == "f":
        # of an infinity (an operand that is one in the loop's dtype: 65520 in float16),
        # NumPy and CuPy differ: NaN or -1 in NumPy, an infinity or -0 in CuPy (the
        # array API standard sides with CuPy on the infinities)
        inf = np.zeros(want.shape, bool)
        for x in host_ops:
            with np.errstate(all="ignore"):
                inf |= np.broadcast_to(np.isinf(np.asarray(x).astype(want.dtype)), want.shape)
        g, want = g[~inf], want[~inf]
    if OPS[name][1] or want.dtype.kind not in "fc":
        np.testing.assert_array_equal(g, want)
    else:
        np.testing.assert_allclose(g, want, rtol=RTOL[want.dtype], atol=0)
