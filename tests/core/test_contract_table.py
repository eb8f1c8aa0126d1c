"""The output contract as one table: every dst= case of ``add`` and ``negative``, on every path.

Each row runs through the public function on every path the backend has.  On
CuPy: the engine's launch as built (the compiled ``_ewlaunch`` launcher where
built) and disabled (``ew`` hands every call back, so
``core._contract.prepare_out`` and the backend's ufunc do all the work).  Both
paths must give the same outcome: the same bits in the result and in every
array the call could touch, or the same error class with the same message (and
nothing written).  The ``fast`` column says which rows the engine takes itself;
every other row it must hand back unchanged.

On the NumPy backend there is no fast path: the table runs on the one path and
is checked against the expected-outcome column and NumPy's own ufunc (same
inputs, same ``out=``), so CPU CI exercises every row.
"""

from __future__ import annotations

import dataclasses
import re
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import cuflow
from cuflow.core._engine import ew_op
from cuflow.testing import assert_equal_host, random_array, to_host

OK = "result"


@dataclass(frozen=True)
class Row:
    """One dst= case.

    ``inputs``: per input, ``(shape, dtype)`` (a random full-range array), a Python
    scalar, ``"x0"`` (the first input again), or ``"buf[:-1]"`` / ``"buf[1:]"``
    (views of one shared buffer).
    ``dst``: ``None``; ``(shape, dtype)`` (a new random array); ``"x0"`` / ``"x1"``
    (an input itself); ``"x0[...]"`` (another view with x0's exact layout);
    ``("strided", shape, dtype)`` (every other row and column of a buffer twice
    the size); ``"buf[:-1]"`` / ``"buf[1:]"``; ``"list"``; ``("host", shape, dtype)``
    (a NumPy array, whatever the backend).
    ``want``: ``OK``, ``(error class, message regex)``, or a dict of those by backend.
    ``fast``: the CuPy fast path takes the call itself (else it returns None).
    """

    id: str
    op: str
    inputs: tuple
    dst: Any
    want: Any = OK
    fast: bool = False
    casting: str | None = None


F4 = ((4, 5), "float32")
SHAPE_ERR = cuflow.DstShapeError
DTYPE_ERR = cuflow.DstDtypeError
TYPE_ERR = cuflow.DstTypeError
NOT_ACTIVE = (TYPE_ERR, r"dst must be an array of the active \w+ backend .* got builtins\.list")
HOST_DST = {"numpy": OK,  # on the NumPy backend a host array *is* the backend's array
            "cupy": (TYPE_ERR, r"dst must be an array of the active cupy backend .*numpy\.ndarray")}

TABLE = [
    # add: the shapes and places dst can have
    Row("add-dst-new", "add", (F4, F4), F4, fast=True),
    Row("add-no-dst", "add", (F4, F4), None, fast=True),
    Row("add-in-place-x1", "add", (F4, F4), "x0", fast=True),
    Row("add-in-place-x2", "add", (F4, F4), "x1", fast=True),
    Row("add-both-inputs-are-dst", "add", (F4, "x0"), "x0", fast=True),
    Row("add-dst-aliases-x1-same-layout", "add", (F4, F4), "x0[...]", fast=True),
    Row("add-0d", "add", (((), "float32"), ((), "float32")), ((), "float32"), fast=True),
    Row("add-empty", "add", (((0, 5), "float32"),) * 2, ((0, 5), "float32"), fast=True),
    Row("add-int8-wraps", "add", (((33,), "int8"),) * 2, ((33,), "int8"), fast=True),
    Row("add-dst-wrong-shape", "add", (F4, F4), ((5, 4), "float32"),
        (SHAPE_ERR, r"result shape \(4, 5\) \(an output is never broadcast\), "
                    r"got dst\.shape=\(5, 4\)")),
    Row("add-dst-needs-broadcast", "add", (F4, F4), ((2, 4, 5), "float32"),
        (SHAPE_ERR, r"an output is never broadcast\), got dst\.shape=\(2, 4, 5\)")),
    Row("add-inputs-broadcast-into-exact-dst", "add", (((4, 1), "float32"), ((1, 5), "float32")),
        F4),
    Row("add-inputs-do-not-broadcast", "add", (((4, 5), "float32"), ((4,), "float32")), F4,
        (cuflow.ArgumentError, r"inputs do not broadcast together: \(4, 5\), \(4,\)")),
    # dtypes and casting=
    Row("add-casting-no-same-dtype", "add", (F4, F4), F4, casting="no"),
    Row("add-casting-no-wider-dst", "add", (F4, F4), ((4, 5), "float64"),
        (DTYPE_ERR, r"inputs \(float32, float32\) cannot be computed into dst of dtype float64 "
                    r"under casting='no'"), casting="no"),
    Row("add-float-into-int8-same-kind", "add", (F4, F4), ((4, 5), "int8"),
        (DTYPE_ERR, r"inputs \(float32, float32\) cannot be computed into dst of dtype int8 "
                    r"under casting='same_kind'")),
    Row("add-float32-into-float64-widens", "add", (F4, F4), ((4, 5), "float64"), fast=True),
    Row("add-mixed-int16-float32", "add", (((4, 5), "int16"), F4), None),
    Row("add-mixed-int16-float32-dst", "add", (((4, 5), "int16"), F4), F4),
    Row("add-mixed-uint8-int8-promotes", "add", (((4, 5), "uint8"), ((4, 5), "int8")), None),
    Row("add-mixed-float-result-into-int16", "add", (((4, 5), "int16"), F4), ((4, 5), "int16"),
        (DTYPE_ERR, r"inputs \(int16, float32\) cannot be computed into dst of dtype int16")),
    # scalars
    Row("add-scalar-second", "add", (F4, 2.5), None, fast=True),
    Row("add-scalar-second-dst", "add", (F4, 2.5), F4, fast=True),
    Row("add-scalar-first-int", "add", (3, ((4, 5), "int32")), ((4, 5), "int32")),
    Row("add-two-scalars-0d-dst", "add", (2.0, 3.0), ((), "float64")),
    Row("add-scalar-into-wrong-shape", "add", (F4, 2.5), ((4,), "float32"),
        (SHAPE_ERR, r"result shape \(4, 5\)")),
    # what dst is
    Row("add-dst-a-list", "add", (((3,), "float32"),) * 2, "list", NOT_ACTIVE),
    Row("add-dst-a-host-array", "add", (F4, F4), ("host", (4, 5), "float32"), HOST_DST),
    Row("add-dst-strided", "add", (F4, F4), ("strided", (4, 5), "float32")),
    # overlap: the contract reads a private copy of an input that dst partly overlaps
    Row("add-dst-shifted-after-inputs", "add", ("buf[:-1]", "buf[:-1]"), "buf[1:]"),
    Row("add-dst-shifted-before-inputs", "add", ("buf[1:]", "buf[1:]"), "buf[:-1]"),
    Row("add-dst-shifted-one-input", "add", ("buf[:-1]", ((63,), "float32")), "buf[1:]"),

    # negative
    Row("neg-dst-new", "negative", (F4,), F4, fast=True),
    Row("neg-no-dst", "negative", (F4,), None, fast=True),
    Row("neg-in-place", "negative", (F4,), "x0", fast=True),
    Row("neg-dst-aliases-x1-same-layout", "negative", (F4,), "x0[...]", fast=True),
    Row("neg-int8-wraps", "negative", (((33,), "int8"),), ((33,), "int8"), fast=True),
    Row("neg-dst-wrong-shape", "negative", (F4,), ((5, 4), "float32"),
        (SHAPE_ERR, r"result shape \(4, 5\) \(an output is never broadcast\), "
                    r"got dst\.shape=\(5, 4\)")),
    Row("neg-dst-needs-broadcast", "negative", (((5,), "float32"),), F4,
        (SHAPE_ERR, r"result shape \(5,\) \(an output is never broadcast\), "
                    r"got dst\.shape=\(4, 5\)")),
    Row("neg-casting-no-wider-dst", "negative", (F4,), ((4, 5), "float64"),
        (DTYPE_ERR, r"inputs \(float32\) cannot be computed into dst of dtype float64 "
                    r"under casting='no'"), casting="no"),
    Row("neg-float-into-int8-same-kind", "negative", (F4,), ((4, 5), "int8"),
        (DTYPE_ERR, r"inputs \(float32\) cannot be computed into dst of dtype int8")),
    Row("neg-float32-into-float64-widens", "negative", (F4,), ((4, 5), "float64"), fast=True),
    Row("neg-scalar-0d-dst", "negative", (2.5,), ((), "float64")),
    Row("neg-dst-a-list", "negative", (((3,), "float32"),), "list", NOT_ACTIVE),
    Row("neg-dst-a-host-array", "negative", (F4,), ("host", (4, 5), "float32"), HOST_DST),
    Row("neg-dst-strided", "negative", (F4,), ("strided", (4, 5), "float32")),
    Row("neg-dst-shifted-after-input", "negative", ("buf[:-1]",), "buf[1:]"),
    Row("neg-dst-shifted-before-input", "negative", ("buf[1:]",), "buf[:-1]"),
]


def _want(row: Row, backend: str):
    return row.want[backend] if isinstance(row.want, dict) else row.want


class _Case:
    """A row's arrays, made with ``put`` (the backend's asarray, or a host copy for NumPy's answer).

    The random host values depend only on the row, so every path and the reference
    start from the same bits.  ``roots`` are the arrays the call could write: each
    input array, the shared buffer, dst or the buffer a strided dst is a view of.
    """

    def __init__(self, row: Row, put):
        rng = np.random.default_rng(zlib.crc32(row.id.encode()))
        self.roots = []

        def new(shape, dtype):
            x = put(random_array(shape, dtype, rng, host=True))
            self.roots.append(x)
            return x

        buf = None
        self.inputs = []
        for spec in row.inputs:
            if spec == "x0":
                self.inputs.append(self.inputs[0])
            elif isinstance(spec, str):
                if buf is None:
                    buf = new((64,), "float32")
                self.inputs.append(buf[:-1] if spec == "buf[:-1]" else buf[1:])
            elif isinstance(spec, tuple):
                self.inputs.append(new(*spec))
            else:
                self.inputs.append(spec)
        d = row.dst
        if d is None:
            self.dst = None
        elif d == "x0" or d == "x1":
            self.dst = self.inputs[int(d[1])]
        elif d == "x0[...]":
            self.dst = self.inputs[0][...]
        elif d in ("buf[:-1]", "buf[1:]"):
            self.dst = buf[:-1] if d == "buf[:-1]" else buf[1:]
        elif d == "list":
            self.dst = [0.0] * self.inputs[0].size
        elif d[0] == "strided":
            shape = d[1]
            self.dst = new(tuple(2 * n for n in shape), d[2])[::2, ::2]
        elif d[0] == "host":
            self.dst = random_array(d[1], d[2], rng, host=True)
            self.roots.append(self.dst)
        else:
            self.dst = new(*d)

    def call(self, fn, casting):
        kw = {} if casting is None else {"casting": casting}
        if self.dst is not None:
            kw["dst"] = self.dst
        with np.errstate(all="ignore"):
            return fn(*self.inputs, **kw)

    def snapshot(self):
        return [to_host(x) for x in self.roots]


def _bits(h: np.ndarray):
    """Everything that makes two host arrays the same bit for bit (NaN payloads, -0.0 included)."""
    return h.dtype.str, h.shape, np.ascontiguousarray(h).tobytes()


def _outcome(cf, row: Row):
    """Run ``row`` once on the active path: ("result", bits...) or ("raised", class, message)."""
    case = _Case(row, cf.asarray)
    before = case.snapshot()
    try:
        r = case.call(getattr(cf, row.op), row.casting)
    except Exception as e:  # noqa: BLE001  (the class is what the table checks)
        after = case.snapshot()
        assert [_bits(h) for h in after] == [_bits(h) for h in before], \
            f"{row.id}: the call raised {type(e).__name__} but wrote into its arrays"
        return ("raised", type(e), str(e)), None
    if case.dst is not None:
        assert r is case.dst, f"{row.id}: with dst= the result must be dst itself"
    else:
        assert isinstance(r, cf.darray), f"{row.id}: a new result is a darray, got {type(r)}"
    got = [to_host(r)] + case.snapshot()
    return ("result", *[_bits(h) for h in got]), got


def _reference(row: Row):
    """NumPy's answer for the same inputs and out= (result, then every root array)."""
    case = _Case(row, lambda h: np.array(h, copy=True))
    fn = getattr(np, row.op)
    if case.dst is not None:
        kw = {} if row.casting is None else {"casting": row.casting}
        with np.errstate(all="ignore"):
            r = fn(*case.inputs, out=case.dst, **kw)
    else:
        with np.errstate(all="ignore"):
            r = fn(*case.inputs)
    return [np.asarray(r)] + case.snapshot()


def _paths(cf):
    """(label, {attribute: replacement}) for every path of the active backend's fast path."""
    fast = cf.get_backend().fast
    if fast is None:
        return [("contract only", None, {})]
    return [("as built", fast, {}), ("disabled", fast, {"ew": lambda *a: None})]


def _run_paths(cf, row: Row):
    """The row's outcome on every path, and per path whether the fast path took each call."""
    outcomes, launched = {}, {}
    for label, fast, patch in _paths(cf):
        with pytest.MonkeyPatch.context() as mp:
            for attr, fn in patch.items():
                mp.setattr(fast, attr, fn)
            if fast is not None:
                seen = launched.setdefault(label, [])
                inner = fast.ew
                target = ew_op(row.op)

                def spy(*a, _inner=inner, _seen=seen, _op=target):
                    r = _inner(*a)
                    if a[0] is _op:  # the row's op, not a copy the contract makes
                        _seen.append(r is not None)
                    return r

                mp.setattr(fast, "ew", spy)
            outcomes[label] = _outcome(cf, row)
    return outcomes, launched


@pytest.mark.parametrize("row", [pytest.param(r, id=r.id) for r in TABLE])
def test_contract_table(cf, row):
    backend = cf.get_backend().name
    if backend == "numpy":
        assert cf.get_backend().fast is None  # the table's one path is the contract's
    want = _want(row, backend)
    outcomes, launched = _run_paths(cf, row)

    labels = list(outcomes)
    first, got = outcomes[labels[0]]
    for label in labels[1:]:
        assert outcomes[label][0] == first, (
            f"{row.id}: the {label!r} path differs from the {labels[0]!r} path:\n"
            f"  {_describe(outcomes[label][0])}\n  {_describe(first)}")

    if want == OK:
        assert first[0] == "result", f"{row.id}: expected a result, got {_describe(first)}"
        ref = _reference(row)
        assert len(got) == len(ref)
        for g, e in zip(got, ref):
            assert_equal_host(g, e)
    else:
        cls, pattern = want
        assert first[0] == "raised", f"{row.id}: expected {cls.__name__}, got a result"
        assert first[1] is cls, f"{row.id}: expected {cls.__name__}, got {first[1].__name__}"
        assert re.search(pattern, first[2]), f"{row.id}: message {first[2]!r} !~ {pattern!r}"
        assert first[2].startswith(f"cuflow.{row.op}: "), first[2]  # errors name the op

    if launched:
        took = any(launched["as built"])
        assert took == row.fast, (
            f"{row.id}: the fast path {'took' if took else 'handed back'} the call; the table "
            f"says it {'takes' if row.fast else 'hands back'} it")
        assert not any(launched["disabled"])


def _describe(outcome):
    if outcome[0] == "raised":
        return f"raised {outcome[1].__name__}: {outcome[2]}"
    return "result " + ", ".join(f"{dt}{shape}" for dt, shape, _ in outcome[1:])


def test_table_covers_the_contract():
    """Every rule of the contract has a row for both ops (a guard against the table thinning)."""
    errors = {r.op: set() for r in TABLE}
    for r in TABLE:
        for w in (r.want.values() if isinstance(r.want, dict) else [r.want]):
            if w != OK:
                errors[r.op].add(w[0])
    for op in ("add", "negative"):
        assert errors[op] >= {SHAPE_ERR, DTYPE_ERR, TYPE_ERR}, op
        kinds = {r.dst if isinstance(r.dst, str) or r.dst is None else r.dst[0]
                 for r in TABLE if r.op == op}
        assert {None, "x0", "x0[...]", "list", "strided", "host", "buf[1:]", "buf[:-1]"} <= kinds
        assert any(r.fast for r in TABLE if r.op == op)
        assert any(not r.fast and _want(r, "cupy") == OK for r in TABLE if r.op == op)


class _HandsBack:
    """A fast path that takes nothing: stands in for CuPy's on the NumPy backend."""

    def __init__(self):
        self.calls = []

    def _none(self, *a):
        self.calls.append(a)

    ew = _none


@pytest.mark.parametrize("row", [pytest.param(r, id=r.id) for r in TABLE[::7]])
def test_every_path_is_run_and_compared(monkeypatch, row):
    """The two-path machinery of the table, on the CPU.

    A stand-in fast path that hands every call back is asked once on the built path (under
    the default casting) and never on the disabled one, and the two outcomes come out equal.
    """
    from cuflow.core import _runtime  # noqa: PLC0415  (the runtime object is what is swapped)

    cuflow.set_backend("numpy")
    stub = _HandsBack()
    monkeypatch.setattr(_runtime, "_current", dataclasses.replace(_runtime.runtime(), fast=stub))
    outcomes, launched = _run_paths(cuflow, row)
    asked = [False] if row.casting in (None, "same_kind") else []
    assert list(outcomes) == ["as built", "disabled"]
    assert outcomes["as built"][0] == outcomes["disabled"][0]
    assert launched == {"as built": asked, "disabled": asked}
    assert len(stub.calls) == len(asked)  # the disabled path never reached the stand-in
