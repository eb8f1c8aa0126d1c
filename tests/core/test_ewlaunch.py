"""The elementwise fast path's decisions and launch parameters, without a GPU.

One test body runs on both implementations, the compiled ``_ewlaunch.Launcher``
and the Python functions it mirrors (``FastPath._py_binary``/``_py_unary`` in
``core/_fastpath.py``), over stand-in arrays and a recording ``cuLaunchKernel``:
which calls take the fast path, which fall back (``None``), and what is
launched (kernel, grid, block, stream, parameters).  GPU results are checked bit for bit against CuPy in
``test_fastpath_gpu.py``.
"""

from __future__ import annotations

import ctypes
import itertools
import math

import numpy as np
import pytest

from cuflow.core import _fastpath as ew

STREAM = 0x5EED
_next_ptr = itertools.count(1 << 40, 1 << 32)


class _Data:
    def __init__(self, ptr, device_id=0):
        self.ptr = ptr
        self.device_id = device_id


class FakeND:
    """Stands for cupy.ndarray: the attributes the fast path reads."""

    def __init__(self, shape, dtype, ptr=None, contiguous=True):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.size = math.prod(self.shape)
        self._c_contiguous = contiguous
        self.data = _Data(next(_next_ptr) if ptr is None else ptr)


class FakeD(FakeND):
    """Stands for cuflow.darray: ``FakeD(shape, dtype)`` allocates, as the fast path calls it."""


class FakeKernel:
    """A _fastpath.Kernel: ``ptrs`` by dtype.num, ``load`` on a miss."""

    def __init__(self, fp=0xF00, missing=()):
        self.fp = fp
        self.missing = set(missing)
        self.ptrs = {}
        self.loads = []

    def load(self, dt):
        self.loads.append(dt)
        p = 0 if dt.num in self.missing else self.fp
        self.ptrs[dt.num] = p
        return p


class Recorder:
    """Launches seen: (function, grid x, block x, stream, the kernel's 8-byte parameters)."""

    def __init__(self):
        self.calls = []
        self.status = 0
        self.nparams = 0


_LAUNCH_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7,
                             ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)
_STREAM_T = ctypes.CFUNCTYPE(ctypes.c_ssize_t)


class _Failed(Exception):
    pass


def _fail(status):
    raise _Failed(status)


def _capsule(addr):
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(addr, None, None)


@pytest.fixture(params=["compiled", "python"])
def impl(request):
    """(binary, unary, recorder, set_max_grid) for the implementation of the parameter."""
    return _make_impl(request.param, request)


def _make_impl(kind, request):
    """(binary, unary, recorder, set_max_grid) of ``kind``: "compiled" (skips where not built)
    or "python", each with its own recorder."""
    rec = Recorder()
    if kind == "compiled":
        launcher_mod = pytest.importorskip("cuflow.core._ewlaunch",
                                           reason="the _ewlaunch extension was not built")

        def launch(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            vals = tuple(ctypes.c_uint64.from_address(params[i]).value
                         for i in range(rec.nparams))
            rec.calls.append((f, gx, (gy, gz, by, bz, shared), bx, stream, vals))
            return rec.status

        cb_launch, cb_stream = _LAUNCH_T(launch), _STREAM_T(lambda: STREAM)
        request.addfinalizer(lambda: (cb_launch, cb_stream))  # keep the callbacks alive
        lo = launcher_mod.Launcher(FakeD, FakeND, _capsule(ctypes.cast(cb_stream, ctypes.c_void_p)
                                                           .value),
                                   ctypes.cast(cb_launch, ctypes.c_void_p).value, _fail)

        def set_max_grid(v):
            lo.max_grid = v

        return lo.binary, lo.unary, rec, set_max_grid

    def launch(f, gx, gy, gz, bx, by, bz, shared, stream, argv, extra):
        assert argv == ew._P.argv_ptr
        vals = tuple(v & (1 << 64) - 1 for v in ew._P.slots[:rec.nparams])
        rec.calls.append((f, gx, (gy, gz, by, bz, shared), bx, stream, vals))
        if rec.status:
            _fail(rec.status)

    path = ew.FastPath(FakeND, 1, None, get_device=lambda: 0,
                       current_stream=lambda: _Data(STREAM), launch=launch,
                       sm_count=lambda dev: 1 << 25)
    path.darray = FakeD
    path.max_grid = 1 << 31

    def set_max_grid(v):
        path.max_grid = v or 1 << 31

    return path._py_binary, path._py_unary, rec, set_max_grid


def _grid(nbytes):
    return ((nbytes + 15) // 16 + 255) // 256


@pytest.mark.parametrize("shape,dtype", [((100, 100), "float32"), ((7,), "uint8"),
                                         ((3, 5, 17), "float64"), ((1 << 20,), "int16")])
def test_binary_launch_parameters(impl, shape, dtype):
    binary, _, rec, _ = impl
    rec.nparams = 4
    k = FakeKernel(fp=0xABC0)
    a, b = FakeD(shape, dtype), FakeND(shape, dtype)
    n = math.prod(shape)
    c = binary(k, a, b, None)
    assert type(c) is FakeD and c.shape == a.shape and c.dtype == a.dtype
    dst = FakeD(shape, dtype)
    assert binary(k, a, b, dst) is dst
    g = _grid(n * np.dtype(dtype).itemsize)
    assert rec.calls == [
        (0xABC0, g, (1, 1, 1, 1, 0), 256, STREAM, (a.data.ptr, b.data.ptr, c.data.ptr, n)),
        (0xABC0, g, (1, 1, 1, 1, 0), 256, STREAM, (a.data.ptr, b.data.ptr, dst.data.ptr, n)),
    ]
    assert k.loads == [np.dtype(dtype)]  # loaded on the first call, from ptrs after


def test_unary_launch_parameters(impl):
    _, unary, rec, _ = impl
    rec.nparams = 3
    k = FakeKernel()
    a = FakeND((33, 3), "float16")
    c = unary(k, a, None)
    assert type(c) is FakeD and c.shape == (33, 3)
    assert unary(k, a, a) is a  # in place
    assert [call[-1] for call in rec.calls] == [(a.data.ptr, c.data.ptr, 99),
                                               (a.data.ptr, a.data.ptr, 99)]


def test_fallbacks_return_none_and_launch_nothing(impl):
    binary, unary, rec, _ = impl
    rec.nparams = 4
    k = FakeKernel()
    a = FakeD((8, 8), "float32")
    b = FakeD((8, 8), "float32")
    shifted = FakeD((8, 8), "float32", ptr=a.data.ptr + 4)
    cases = _binary_fallbacks(a, b, shifted)
    for why, (x, y, d) in cases.items():
        assert binary(k, x, y, d) is None, why
    assert unary(k, a, shifted) is None
    assert unary(k, FakeD((8, 8), "float32", contiguous=False), None) is None
    assert unary(k, 3, None) is None
    assert unary(k, np.ones(3), None) is None
    assert rec.calls == []


def _binary_fallbacks(a, b, shifted):
    """Binary calls the fast path hands back: why -> (a, b, dst); ``a``, ``b`` are (8, 8) float32."""
    return {
        "dtypes differ": (a, FakeD((8, 8), "float64"), None),
        "a strided": (FakeD((8, 8), "float32", contiguous=False), b, None),
        "b strided": (a, FakeD((8, 8), "float32", contiguous=False), None),
        "shapes differ (broadcasting)": (a, FakeD((1, 8), "float32"), None),
        "same size, other shape": (a, FakeD((4, 16), "float32"), None),
        "dst on the host": (a, b, np.empty((8, 8), np.float32)),
        "dst dtype": (a, b, FakeD((8, 8), "float64")),
        "dst strided": (a, b, FakeD((8, 8), "float32", contiguous=False)),
        "dst shape": (a, b, FakeD((64,), "float32")),
        "dst overlaps a, shifted": (a, b, shifted),
        "dst overlaps b, shifted": (b, a, shifted),
        "dst is a subclass": (a, b, type("Sub", (FakeD,), {})((8, 8), "float32")),
        "b a scalar": (a, 2.0, None),
        "a a host array": (np.ones((8, 8), np.float32), b, None),
        "b a subclass": (a, type("Sub", (FakeND,), {})((8, 8), "float32"), None),
    }


def test_no_instantiation_falls_back(impl):
    binary, unary, rec, _ = impl
    k = FakeKernel(missing={np.dtype(np.complex64).num})
    c = FakeD((4,), np.complex64)
    assert binary(k, c, c, None) is None
    assert unary(k, c, None) is None
    assert k.loads == [np.dtype(np.complex64)]  # the miss is remembered (ptrs[num] = 0)
    assert rec.calls == []


def test_in_place_and_aliases_launch(impl):
    binary, _, rec, _ = impl
    rec.nparams = 4
    k = FakeKernel()
    a, b = FakeD((10,), "int32"), FakeD((10,), "int32")
    alias = FakeND((10,), "int32", ptr=a.data.ptr)  # another view of a's memory
    assert binary(k, a, b, a) is a
    assert binary(k, a, b, b) is b
    assert binary(k, a, a, a) is a
    assert binary(k, a, b, alias) is alias
    assert [call[-1][2] for call in rec.calls] == [a.data.ptr, b.data.ptr, a.data.ptr,
                                                   a.data.ptr]


def test_adjacent_buffers_do_not_overlap(impl):
    binary, _, rec, _ = impl
    rec.nparams = 4
    a = FakeD((16,), "float32")
    after = FakeD((16,), "float32", ptr=a.data.ptr + 64)  # ends where the other begins
    before = FakeD((16,), "float32", ptr=a.data.ptr - 64)
    assert binary(FakeKernel(), a, a, after) is after
    assert binary(FakeKernel(), a, a, before) is before
    assert len(rec.calls) == 2


def test_empty_arrays_launch_nothing(impl):
    binary, unary, rec, _ = impl
    a = FakeD((0, 3), "float32")
    assert binary(FakeKernel(), a, a, None).shape == (0, 3)
    assert unary(FakeKernel(), a, None).shape == (0, 3)
    assert rec.calls == []


def test_grid_is_capped(impl):
    binary, _, rec, set_max_grid = impl
    rec.nparams = 4
    a = FakeD((1 << 24,), "float32")
    set_max_grid(132 * 64)
    binary(FakeKernel(), a, a, a)
    assert rec.calls[-1][1] == 132 * 64
    set_max_grid(1 << 30)
    binary(FakeKernel(), a, a, a)
    assert rec.calls[-1][1] == _grid(a.size * 4)


def test_failed_launch_raises(impl):
    binary, unary, rec, _ = impl
    rec.nparams = 4
    rec.status = 700
    a = FakeD((5,), "float32")
    with pytest.raises(_Failed) as e:
        binary(FakeKernel(), a, a, None)
    assert e.value.args == (700,)
    rec.nparams = 3
    with pytest.raises(_Failed):
        unary(FakeKernel(), a, a)


def test_python_path_with_several_gpus_checks_devices(impl, monkeypatch):
    """With several GPUs only the Python functions run: arrays on another device fall back."""
    binary, unary, rec, _ = impl
    path = getattr(binary, "__self__", None)
    if not isinstance(path, ew.FastPath):
        pytest.skip("the compiled launcher is bound only with one GPU")
    rec.nparams = 4
    path.multi = True
    k = FakeKernel()  # with several GPUs every call asks load() (per-device pointers)
    a, b = FakeD((8,), "float32"), FakeD((8,), "float32")
    other = FakeD((8,), "float32")
    other.data.device_id = 1
    assert binary(k, a, other, None) is None
    assert binary(k, a, b, other) is None
    assert binary(k, a, b, np.empty(8, np.float32)) is None  # a host dst: refused, not an error
    assert unary(k, other, None) is None
    assert rec.calls == []
    assert binary(k, a, b, None) is not None
    assert len(rec.calls) == 1


def test_compiled_launcher_checks_its_arguments():
    launcher_mod = pytest.importorskip("cuflow.core._ewlaunch",
                                       reason="the _ewlaunch extension was not built")
    cap = _capsule(0x1000)
    with pytest.raises(TypeError, match="fail must be callable"):
        launcher_mod.Launcher(FakeD, FakeND, cap, 0x2000, None)
    with pytest.raises(ValueError, match="non-zero address"):
        launcher_mod.Launcher(FakeD, FakeND, cap, 0, _fail)
    with pytest.raises(TypeError):
        launcher_mod.Launcher(FakeD, FakeND, "not a capsule", 0x2000, _fail)
    lo = launcher_mod.Launcher(FakeD, FakeND, cap, 0x2000, _fail)
    with pytest.raises(TypeError, match="takes 4 arguments"):
        lo.binary(FakeKernel(), FakeD((1,), "f4"), None)
    with pytest.raises(TypeError, match="takes 3 arguments"):
        lo.unary(FakeKernel(), FakeD((1,), "f4"))


def _decision_table():
    """(why, "binary" or "unary", arguments after the kernel, launches?) over fresh fakes."""
    a = FakeD((8, 8), "float32")
    b = FakeD((8, 8), "float32")
    shifted = FakeD((8, 8), "float32", ptr=a.data.ptr + 4)
    rows = [(why, "binary", args, False) for why, args in _binary_fallbacks(a, b, shifted).items()]
    c = FakeD((4,), np.complex64)  # FakeKernel(missing=complex64): no instantiation
    return rows + [
        ("new result", "binary", (a, b, None), True),
        ("dst fresh", "binary", (a, b, FakeD((8, 8), "float32")), True),
        ("plain ndarray inputs and dst", "binary",
         (FakeND((8, 8), "float32"), FakeND((8, 8), "float32"), FakeND((8, 8), "float32")), True),
        ("in place, dst is a", "binary", (a, b, a), True),
        ("in place, dst is b", "binary", (a, b, b), True),
        ("a + a into a", "binary", (a, a, a), True),
        ("dst another view of a, same start", "binary",
         (a, b, FakeND((8, 8), "float32", ptr=a.data.ptr)), True),
        ("dst right after a", "binary", (a, a, FakeD((8, 8), "float32", ptr=a.data.ptr + 256)),
         True),
        ("dst ends where a begins", "binary",
         (a, a, FakeD((8, 8), "float32", ptr=a.data.ptr - 256)), True),
        ("dst one byte into a", "binary", (a, a, FakeD((8, 8), "float32", ptr=a.data.ptr + 1)),
         False),
        ("0-d", "binary", (FakeD((), "float64"), FakeD((), "float64"), None), True),
        ("empty", "binary", (FakeD((0, 3), "int8"), FakeD((0, 3), "int8"), None), True),
        ("no instantiation", "binary", (c, c, None), False),
        ("unary new result", "unary", (a, None), True),
        ("unary in place", "unary", (a, a), True),
        ("unary dst another view, same start", "unary",
         (a, FakeND((8, 8), "float32", ptr=a.data.ptr)), True),
        ("unary dst shifted", "unary", (a, shifted), False),
        ("unary a strided", "unary", (FakeD((8, 8), "float32", contiguous=False), None), False),
        ("unary dst strided", "unary", (a, FakeD((8, 8), "float32", contiguous=False)), False),
        ("unary dst dtype", "unary", (a, FakeD((8, 8), "float64")), False),
        ("unary dst shape", "unary", (a, FakeD((64,), "float32")), False),
        ("unary dst on the host", "unary", (a, np.empty((8, 8), np.float32)), False),
        ("unary a scalar", "unary", (3, None), False),
        ("unary a host array", "unary", (np.ones(3), None), False),
        ("unary a subclass", "unary", (type("Sub", (FakeD,), {})((8, 8), "float32"), None), False),
        ("unary no instantiation", "unary", (c, None), False),
    ]


def test_compiled_and_python_make_the_same_decision(request):
    """Row by row, the C launcher and its Python twin both launch or both hand back (None),
    as the table says, and launch the same kernel with the same grid, block and stream."""
    compiled = _make_impl("compiled", request)
    python = _make_impl("python", request)
    for _, _, rec, _ in (compiled, python):
        rec.nparams = 4
    rows = _decision_table()
    for why, kind, args, launches in rows:
        results = []
        for binary, unary, rec, _ in (compiled, python):
            k = FakeKernel(missing={np.dtype(np.complex64).num})
            fn = binary if kind == "binary" else unary
            rec.nparams = 4 if kind == "binary" else 3
            before = len(rec.calls)
            r = fn(k, *args)
            results.append((r is not None, [c[:5] for c in rec.calls[before:]]))
            if args[-1] is not None and r is not None:
                assert r is args[-1], why  # with dst given, the result is dst
        assert results[0] == results[1], f"{why}: compiled {results[0]} != python {results[1]}"
        assert results[0][0] == launches, f"{why}: launched={results[0][0]}, table={launches}"
    assert len(rows) >= 40


# ------------------------------------------------- the engine's single-op launch
class FakeOp:
    """An engine EwOp: ``plans`` by key, ``load(key, args, dst)`` on a miss."""

    def __init__(self, plan):
        self.plans = {}
        self.plan = plan
        self.loads = []

    def load(self, key, args, dst):
        self.loads.append(key)
        self.plans[key] = self.plan
        return self.plan


def _compiled(request, darray=None, ndarray=None):
    launcher_mod = pytest.importorskip("cuflow.core._ewlaunch",
                                       reason="the _ewlaunch extension was not built")
    rec = Recorder()
    darray, ndarray = darray or FakeD, ndarray or FakeND

    def launch(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        vals = tuple(ctypes.c_uint64.from_address(params[i]).value for i in range(rec.nparams))
        rec.calls.append((f, gx, bx, stream, vals))
        return rec.status

    cb_launch, cb_stream = _LAUNCH_T(launch), _STREAM_T(lambda: STREAM)
    request.addfinalizer(lambda: (cb_launch, cb_stream))
    lo = launcher_mod.Launcher(darray, ndarray,
                               _capsule(ctypes.cast(cb_stream, ctypes.c_void_p).value),
                               ctypes.cast(cb_launch, ctypes.c_void_p).value, _fail)
    return lo, rec


class _Base:
    """Stands for CuPy's array extension type: ``_init(shape, dtype)`` allocates."""

    def _init(self, shape, dtype):
        FakeND.__init__(self, shape, dtype)


_frames: list[str] = []


class _ND(_Base):
    """Stands for cupy.ndarray, whose Python-level constructor frames the launcher skips."""

    def __new__(cls, shape, dtype):
        _frames.append("__new__")
        x = super().__new__(cls)
        x._init(shape, dtype)
        x.__array_finalize__(None)
        return x

    def __init__(self, shape, dtype):
        _frames.append("__init__")

    def __array_finalize__(self, obj):
        _frames.append("__array_finalize__")


class _D(_ND):
    pass


class _DFinalizing(_ND):
    def __array_finalize__(self, obj):
        _frames.append("own __array_finalize__")


@pytest.mark.parametrize(("darray", "frames"), [
    (_D, []),
    (_DFinalizing, ["__new__", "own __array_finalize__", "__init__"]),
])
def test_ew_results_skip_constructor_frames_only_where_inherited(request, darray, frames):
    """A result is the base type's new object after ``_init``, as ``darray(shape, dtype)``
    would build it; a darray with its own ``__array_finalize__`` is called instead."""
    lo, rec = _compiled(request, darray, _ND)
    rec.nparams = 3
    _frames.clear()
    x = darray((30, 7), "float16")
    _frames.clear()
    c = lo.ew(FakeOp((0xE3, np.dtype("float32"), 4, 0, 0, None, 0)), (x,), None)
    assert type(c) is darray and c.shape == (30, 7) and c.dtype == np.float32
    assert c.size == 210 and c._c_contiguous and rec.calls[0][-1][1] == c.data.ptr
    assert _frames == frames


def _code(x):
    if isinstance(x, float):
        return 250
    if isinstance(x, int):
        return 251
    return 2 + 2 * x.dtype.num + (x.data.ptr % 16 == 0)


def test_ew_packs_arrays_output_n_and_scalars(request):
    lo, rec = _compiled(request)
    op = FakeOp((0xE0, np.dtype("float16"), 8, 3, 0, None, 0))
    a, b = FakeD((40, 50), "float32", ptr=1 << 40), FakeND((40, 50), "float32", ptr=2 << 40)
    rec.nparams = 5
    c = lo.ew(op, (a, 2.5, b), None)
    assert type(c) is FakeD and c.shape == (40, 50) and c.dtype == np.float16
    key = _code(a) | 250 << 8 | _code(b) << 16
    assert op.loads == [key]
    (f, g, bx, stream, vals) = rec.calls[0]
    assert (f, bx, stream) == (0xE0, 256, STREAM)
    assert g == 1  # ceil(ceil(2000 / 8) / 256), under the cap of 3
    assert vals[:4] == (a.data.ptr, b.data.ptr, c.data.ptr, 2000)
    assert ctypes.c_double.from_buffer_copy(vals[4].to_bytes(8, "little")).value == 2.5
    rec.calls.clear()
    lo.ew(op, (a, 7, b), None)  # an int scalar: its own key, packed as a 64-bit int
    assert op.loads[-1] == _code(a) | 251 << 8 | _code(b) << 16
    assert rec.calls[0][-1][4] == 7


def test_ew_grid_is_chunks_over_blocks_capped(request):
    lo, rec = _compiled(request)
    rec.nparams = 3
    x = FakeD((1 << 20,), "float32", ptr=1 << 40)
    lo.ew(FakeOp((0xE1, np.dtype("float32"), 4, 0, 0, None, 0)), (x,), None)
    lo.ew(FakeOp((0xE1, np.dtype("float32"), 4, 100, 0, None, 0)), (x,), None)
    assert [c[1] for c in rec.calls] == [(1 << 20) // 4 // 256, 100]


def test_ew_hands_back_what_it_does_not_take(request):
    lo, rec = _compiled(request)
    op = FakeOp((0xE2, np.dtype("float32"), 4, 0, 0, None, 0))
    a = FakeD((8, 8), "float32", ptr=1 << 40)
    cases = {
        "strided": ((FakeD((8, 8), "float32", contiguous=False),), None),
        "shapes differ": ((a, FakeD((8,), "float32")), None),
        "a bool scalar": ((a, True), None),
        "a NumPy array": ((a, np.ones((8, 8), np.float32)), None),
        "only scalars": ((1.0, 2.0), None),
        "dst strided": ((a,), FakeD((8, 8), "float32", contiguous=False)),
        "dst of another shape": ((a,), FakeD((4, 16), "float32")),
        "dst partly overlapping": ((a,), FakeD((8, 8), "float32", ptr=a.data.ptr + 4)),
        "dst not an array": ((a,), np.empty((8, 8), np.float32)),
        "an int beyond 64 bits": ((a, 1 << 70), None),
    }
    for why, (args, dst) in cases.items():
        assert lo.ew(op, args, dst) is None, why
    declined = FakeOp(None)
    assert lo.ew(declined, (a,), None) is None
    assert lo.ew(declined, (a,), None) is None
    assert len(declined.loads) == 1  # the refusal is remembered
    assert rec.calls == []
    rec.nparams = 3
    assert lo.ew(op, (a,), a) is a  # in place: dst is the input itself
    assert rec.calls[-1][-1] == (a.data.ptr, a.data.ptr, 64)


def test_ew_one_block_reduction_writes_a_0d_result(request):
    lo, rec = _compiled(request)
    op = FakeOp((0xE3, np.dtype("int64"), 4, 1, 2, (), 1000))
    x = FakeD((10, 100), "float32", ptr=1 << 40)
    rec.nparams = 5
    r = lo.ew(op, (x,), None)
    assert r.shape == () and r.dtype == np.int64
    assert rec.calls == [(0xE3, 1, 256, STREAM, (x.data.ptr, r.data.ptr, 1000, 0, 0))]
    assert lo.ew(op, (FakeD((1001,), "float32", ptr=1 << 40),), None) is None  # too many
    assert lo.ew(op, (x,), FakeD((), "int64")) is None  # dst: the contract's path
    assert lo.ew(op, (FakeD((0,), "float32", ptr=1 << 40),), None) is None  # empty


def test_ew_last_axis_reduction_appends_the_row_length(request):
    lo, rec = _compiled(request)
    op = FakeOp((0xE4, np.dtype("float32"), 4, 0, -1, None, 0))
    x = FakeD((10, 100), "float32", ptr=1 << 40)
    rec.nparams = 5
    r = lo.ew(op, (x,), None)
    assert r.shape == (10,)
    assert rec.calls == [(0xE4, 2, 256, STREAM, (x.data.ptr, r.data.ptr, 1000, 100, 1))]
    assert lo.ew(op, (FakeD((10, 102), "float32", ptr=1 << 40),), None) is None  # 102 % 4


@pytest.mark.parametrize(("shape", "dtype", "want"), [
    ((30, 7), "float16", ((30, 7), "float16")),
    (5, np.float32, ((5,), "float32")),
    ((), bool, ((), "bool")),
    ((0, 4), "complex64", ((0, 4), "complex64")),
    ((2, 3), np.dtype("int8"), ((2, 3), "int8")),
])
def test_empty_builds_the_base_type_result(request, shape, dtype, want):
    lo, rec = _compiled(request, _D, _ND)
    _frames.clear()
    c = lo.empty(shape, dtype)
    assert type(c) is _D and (c.shape, c.dtype) == (want[0], np.dtype(want[1]))
    assert c._c_contiguous and _frames == [] and rec.calls == []
    assert lo.empty(shape, dtype).dtype == c.dtype  # the dtype now from the launcher's cache


@pytest.mark.parametrize(("shape", "dtype"), [
    ((2, -1), "float32"),                 # a negative size
    ((2, True), "float32"),               # a bool is no size
    (np.int64(4), "float32"),             # NumPy integers: the checked path converts them
    ((np.int64(4),), "float32"),
    ([2, 3], "float32"),                  # a list: the checked path
    ((2.0,), "float32"),
    ((1 << 62, 4), "float32"),            # past the address space
    ((3,), "U5"),                          # not a dtype of numbers
    ((3,), object),
    ((3,), "no such dtype"),
    ((3,), [("a", "f4")]),                # unhashable
])
def test_empty_hands_back_what_the_checked_path_must_see(request, shape, dtype):
    lo, _ = _compiled(request, _D, _ND)
    assert lo.empty(shape, dtype) is None
