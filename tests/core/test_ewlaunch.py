"""The compiled launcher's decisions and launch parameters, without a GPU.

``_ewlaunch.Launcher`` runs over stand-in arrays and a recording
``cuLaunchKernel``: which calls take the engine's kernel, which fall back
(``None``), and what is launched (kernel, grid, block, stream, parameters).
GPU results are checked against NumPy in ``test_engine.py`` and
``tests/test_fusion.py``.
"""

from __future__ import annotations

import ctypes
import inspect
import itertools
import math
import pickle
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuflow.core import _fastpath


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


_DEVICE_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int))
# cuMemsetD8Async / D16 / D32: the value is an unsigned char, short and int
_MEMSET_T = {w: ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, t, ctypes.c_size_t,
                                 ctypes.c_void_p)
             for w, t in ((8, ctypes.c_ubyte), (16, ctypes.c_ushort), (32, ctypes.c_uint))}


def _compiled(request, darray=None, ndarray=None, device=None):
    """A Launcher over recording callbacks; with ``device`` (a one-item list: the current
    device, which a test may change) the several-device launcher.  Memsets are recorded in
    ``rec.calls`` as ("memset", bits per element, pointer, value, count, stream)."""
    launcher_mod = pytest.importorskip("cuflow.core._ewlaunch",
                                       reason="the _ewlaunch extension was not built")
    rec = Recorder()
    darray, ndarray = darray or FakeD, ndarray or FakeND

    def launch(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        vals = tuple(ctypes.c_uint64.from_address(params[i]).value for i in range(rec.nparams))
        rec.calls.append((f, gx, bx, stream, vals))
        return rec.status

    def get_device(out):
        out[0] = device[0]
        return 0

    def memset(width):
        def f(ptr, value, n, stream):
            rec.calls.append(("memset", width, ptr, value, n, stream))
            return rec.status
        return _MEMSET_T[width](f)

    cb_launch, cb_stream = _LAUNCH_T(launch), _STREAM_T(lambda: STREAM)
    cb_device = _DEVICE_T(get_device)
    cb_memset = tuple(memset(w) for w in (8, 16, 32))
    request.addfinalizer(lambda: (cb_launch, cb_stream, cb_device, cb_memset))
    lo = launcher_mod.Launcher(darray, ndarray,
                               _capsule(ctypes.cast(cb_stream, ctypes.c_void_p).value),
                               ctypes.cast(cb_launch, ctypes.c_void_p).value, _fail,
                               device_fn=None if device is None else
                               ctypes.cast(cb_device, ctypes.c_void_p).value,
                               memset=tuple(ctypes.cast(m, ctypes.c_void_p).value
                                            for m in cb_memset))
    return lo, rec


def test_the_compiled_launcher_was_built_and_loads():
    """The extension is optional to the install, not to the tests: one that failed to build
    or to load would otherwise skip every test here and quietly send every op to CuPy."""
    if not _fastpath.ENGINE_LAUNCH:
        pytest.skip("CUFLOW_EW_ENGINE=0: the engine's C launch is off")
    try:
        from cuflow.core import _ewlaunch  # noqa: F401
    except ImportError as e:
        pytest.fail(f"the elementwise launcher (cuflow/core/_ewlaunch.c) was not built or does "
                    f"not load ({e}): install with a C compiler and Python's headers "
                    f"(pip install -e .), or set CUFLOW_EW_ENGINE=0 to test without it")


def test_compiled_launcher_checks_its_arguments():
    launcher_mod = pytest.importorskip("cuflow.core._ewlaunch",
                                       reason="the _ewlaunch extension was not built")
    cap = _capsule(0x1000)
    with pytest.raises(TypeError, match="fail must be callable"):
        launcher_mod.Launcher(FakeD, FakeND, cap, 0x2000, None)
    with pytest.raises(ValueError, match="non-zero address"):
        launcher_mod.Launcher(FakeD, FakeND, cap, 0, _fail)
    with pytest.raises(ValueError, match="device_fn must be a non-zero address"):
        launcher_mod.Launcher(FakeD, FakeND, cap, 0x2000, _fail, device_fn=0)
    with pytest.raises(TypeError):
        launcher_mod.Launcher(FakeD, FakeND, "not a capsule", 0x2000, _fail)
    lo = launcher_mod.Launcher(FakeD, FakeND, cap, 0x2000, _fail)
    with pytest.raises(TypeError, match="takes 3 arguments"):
        lo.ew(FakeOp(None), (FakeD((1,), "f4"),))


def test_ew_with_several_devices_keys_plans_by_device_and_declines_others(request):
    """Plans hold one device's functions: the current device is in the key, and an operand
    or dst on another device is handed back (CuPy's path then checks it)."""
    device = [1]
    lo, rec = _compiled(request, device=device)
    rec.nparams = 3
    op = FakeOp((0xE4, np.dtype("float32"), 4, 0, 0, None, 0))
    a = FakeD((8, 8), "float32", ptr=1 << 40)
    a.data.device_id = 1
    assert lo.ew(op, (a,), None) is not None
    assert op.loads == [_code(a) | 2 << 56]
    device[0] = 0  # the same array, another current device: declined before any plan
    assert lo.ew(op, (a,), None) is None
    other = FakeD((8, 8), "float32")
    other.data.device_id = 0
    assert lo.ew(op, (other,), None) is not None
    assert op.loads[-1] == _code(other) | 1 << 56
    dst = FakeD((8, 8), "float32")
    dst.data.device_id = 1
    assert lo.ew(op, (other,), dst) is None
    assert len(rec.calls) == 2


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


# ------------------------------------------------------------------ fill by memset
def _bits(value, dtype):
    """NumPy's bytes of ``value`` in ``dtype``, as an unsigned integer."""
    return int(np.array(value, dtype).view(f"u{np.dtype(dtype).itemsize}"))


@pytest.mark.parametrize("dtype, value", [
    ("float32", 1.5), ("float32", -2.0), ("float32", -0.0), ("float32", float("inf")), ("float32", float("nan")),
    ("float32", 3), ("float32", True), ("float32", -(1 << 24)), ("int32", -7),
    ("int32", 2**31 - 1), ("uint32", 2**32 - 1), ("int16", -32768), ("uint16", 65535),
    ("int8", -1), ("uint8", 200), ("bool", True), ("bool", 1), ("bool", False),
    ("int32", True), ("float32", 1e300), ("float32", -float("nan")), ("float32", 1 << 24)])
def test_fill_sets_a_repeating_value_with_one_memset(request, dtype, value):
    lo, rec = _compiled(request)
    a = FakeD((3, 5), dtype)
    assert lo.fill(a, value) is a
    isz = np.dtype(dtype).itemsize
    with np.errstate(over="ignore"):
        want = _bits(value, dtype)
    if want == 0:  # zero bytes (False): the widest words the 15 * isz bytes allow
        w = next(w for w in (4, 2, 1) if 15 * isz % w == 0)
        assert rec.calls == [("memset", 8 * w, a.data.ptr, 0, 15 * isz // w, STREAM)]
    else:
        assert rec.calls == [("memset", 8 * isz, a.data.ptr, want, 15, STREAM)]


@pytest.mark.parametrize("dtype", ["float16", "float64", "int64", "complex64", "complex128",
                                   "uint8", "bool", "float32"])
@pytest.mark.parametrize("value", [0, 0.0, False])
def test_fill_writes_zero_bytes_in_any_dtype_as_32_bit_words_where_it_can(request, dtype, value):
    lo, rec = _compiled(request)
    a = FakeD((4, 6), dtype, ptr=1 << 41)
    assert lo.fill(a, value) is a
    nbytes = 24 * np.dtype(dtype).itemsize
    assert rec.calls == [("memset", 32, a.data.ptr, 0, nbytes // 4, STREAM)]


@pytest.mark.parametrize("dtype, value", [
    ("float64", -0.0),  # the sign bit: not zero bytes
    ("float16", 1.0), ("float64", 1.0), ("int64", 5), ("complex64", 1.0),  # no exact memset
    ("int32", 1.5), ("bool", 2), ("bool", 0.5), ("uint8", 256), ("int8", -129),
    ("uint32", -1), ("float32", 1 << 25), ("float32", (1 << 24) + 1), ("float32", 1 << 70),
    ("int32", np.int32(3)),
    ("float32", np.float32(1.0)), ("float32", "1"), ("float32", None)])
def test_fill_hands_back_values_numpy_must_convert(request, dtype, value):
    """Values whose bytes need NumPy's conversion (or its errors) go to CuPy's fill."""
    lo, rec = _compiled(request)
    assert lo.fill(FakeD((7,), dtype), value) is None
    assert rec.calls == []


def test_fill_hands_back_strided_misaligned_foreign_and_other_device_arrays(request):
    lo, rec = _compiled(request)
    assert lo.fill(FakeD((7,), "float32", contiguous=False), 1.0) is None
    assert lo.fill(FakeD((7,), "float32", ptr=(1 << 40) + 2), 1.0) is None  # not on 4 bytes
    assert lo.fill(FakeD((7,), "int16", ptr=(1 << 40) + 1), 3) is None  # not on 2 bytes
    assert lo.fill(object(), 1.0) is None
    device = [0]
    lo2, rec2 = _compiled(request, device=device)
    a = FakeD((7,), "float32")
    a.data.device_id = 1
    assert lo2.fill(a, 1.0) is None
    a.data.device_id = 0
    assert lo2.fill(a, 1.0) is a
    assert rec.calls == [] and len(rec2.calls) == 1


def test_fill_of_an_empty_array_and_a_failed_memset(request):
    lo, rec = _compiled(request)
    a = FakeD((0, 3), "float32")
    assert lo.fill(a, 2.0) is a and rec.calls == []
    rec.status = 1
    with pytest.raises(_Failed):
        lo.fill(FakeD((2,), "float32"), 2.0)


def test_fill_without_memset_addresses_declines(request):
    launcher_mod = pytest.importorskip("cuflow.core._ewlaunch",
                                       reason="the _ewlaunch extension was not built")
    lo = launcher_mod.Launcher(FakeD, FakeND, _capsule(0x1000), 0x2000, _fail)
    assert lo.fill(FakeD((2,), "float32"), 0) is None
    with pytest.raises(TypeError, match="memset must be 3 addresses"):
        launcher_mod.Launcher(FakeD, FakeND, _capsule(0x1000), 0x2000, _fail, memset=(1, 2))
    with pytest.raises(ValueError, match="memset addresses must be non-zero"):
        launcher_mod.Launcher(FakeD, FakeND, _capsule(0x1000), 0x2000, _fail, memset=(0, 0, 0))


def test_fill_zero_bytes_of_an_odd_size_use_byte_writes(request):
    lo, rec = _compiled(request)
    a = FakeD((7,), "uint8")
    assert lo.fill(a, 0) is a
    assert rec.calls == [("memset", 8, a.data.ptr, 0, 7, STREAM)]


# ----------------------------------------------- FastCall: a function's entry in C
def _entry(request, nin, fn=None, ew=None):
    """A FastCall over a recording function, and a stand-in runtime module whose current
    runtime's ``fast.ew`` is a recording Launcher's (or ``ew``)."""
    launcher_mod = pytest.importorskip("cuflow.core._ewlaunch",
                                       reason="the _ewlaunch extension was not built")
    lo, rec = _compiled(request)
    rec.nparams = 3
    calls = []

    def python_path(*args, **kwargs):
        calls.append((args, kwargs))
        return "python"

    rt_module = types.ModuleType("stand_in_runtime")
    rt_module._current = types.SimpleNamespace(fast=types.SimpleNamespace(
        ew=lo.ew if ew is None else ew))
    op = FakeOp((0xE5, np.dtype("float32"), 4, 0, 0, None, 0))
    entry = launcher_mod.FastCall(op, fn or python_path, nin, rt_module)
    return entry, rec, calls, rt_module


def test_fastcall_launches_operands_and_dst_without_the_function(request):
    entry, rec, calls, _ = _entry(request, 2)
    a, b = FakeD((8, 8), "float32", ptr=1 << 40), FakeD((8, 8), "float32", ptr=2 << 40)
    c = entry(a, b)
    assert type(c) is FakeD and c.shape == (8, 8)
    o = FakeD((8, 8), "float32", ptr=3 << 40)
    assert entry(a, b, o) is o  # dst by position
    assert entry(a, b, dst=o) is o  # and by keyword
    assert [v[:3] for *_, v in rec.calls] == [(a.data.ptr, b.data.ptr, c.data.ptr),
                                              (a.data.ptr, b.data.ptr, o.data.ptr),
                                              (a.data.ptr, b.data.ptr, o.data.ptr)]
    assert calls == []


def test_fastcall_runs_the_function_for_every_other_call(request):
    entry, rec, calls, _ = _entry(request, 1)
    a = FakeD((8, 8), "float32", ptr=1 << 40)
    o = FakeD((8, 8), "float32", ptr=3 << 40)
    other = {
        "no operand": ((), {}),
        "too many positionals": ((a, o, o), {}),
        "another keyword": ((a,), {"stream": None}),
        "dst twice": ((a, o), {"dst": o}),
        "dst and another keyword": ((a,), {"dst": o, "out": None}),
        "declined: strided": ((FakeD((8, 8), "float32", contiguous=False),), {}),
        "declined: a NumPy array": ((np.ones((8, 8), np.float32),), {}),
    }
    for why, (args, kwargs) in other.items():
        calls.clear()
        assert entry(*args, **kwargs) == "python", why
        assert calls == [(args, kwargs)], why
    assert rec.calls == []


def test_fastcall_without_a_launcher_runs_the_function(request):
    entry, rec, calls, rt_module = _entry(request, 1)
    a = FakeD((8, 8), "float32", ptr=1 << 40)
    for current in (None, types.SimpleNamespace(fast=None),
                    types.SimpleNamespace(fast=types.SimpleNamespace(ew=lambda *a: None)),
                    types.SimpleNamespace()):
        rt_module._current = current
        calls.clear()
        assert entry(a) == "python"
        assert calls == [((a,), {})]
    del rt_module._current
    assert entry(a) == "python"
    assert rec.calls == []


def test_fastcall_lets_the_function_raise_a_failed_launch(request):
    """A launch error is the function's to report (as cuflow's error): it runs again there."""
    def strict(*args, **kwargs):
        raise ArithmeticError("reported by the function")

    entry, rec, _, _ = _entry(request, 1, fn=strict)
    rec.status = 700
    with pytest.raises(ArithmeticError, match="reported by the function"):
        entry(FakeD((8, 8), "float32", ptr=1 << 40))
    assert len(rec.calls) == 1


def test_fastcall_of_any_arity_takes_dst_by_keyword_only(request):
    entry, rec, calls, _ = _entry(request, -1)
    a, b = FakeD((8,), "float32", ptr=1 << 40), FakeD((8,), "float32", ptr=2 << 40)
    o = FakeD((8,), "float32", ptr=3 << 40)
    assert entry(a, b, dst=o) is o
    assert entry(a, b, a, b) is not None
    assert calls == [] and len(rec.calls) == 2


def test_fastcall_is_a_function_to_python(request):
    launcher_mod = pytest.importorskip("cuflow.core._ewlaunch",
                                       reason="the _ewlaunch extension was not built")
    from cuflow.core import _dispatch

    @_dispatch.fast_call(1)
    def negative(src, dst=None, *, out=None, stream=None, casting="same_kind", dtype=None):
        """Negate."""
        return "python"

    assert type(negative) is launcher_mod.FastCall
    assert negative.__name__ == "negative" and negative.__doc__ == "Negate."
    assert list(inspect.signature(negative).parameters) == ["src", "dst", "out", "stream",
                                                             "casting", "dtype"]
    assert repr(negative) == repr(negative.__wrapped__)
    import cuflow
    assert pickle.loads(pickle.dumps(cuflow.tanh)) is cuflow.tanh

    class Sub(launcher_mod.FastCall):
        def __init__(self):
            super().__init__(FakeOp(None), self.slow, -1, types.ModuleType("m"))

        def slow(self, *args, **kwargs):
            return ("slow", args, kwargs)

    assert Sub()(1, dst=2) == ("slow", (1,), {"dst": 2})
    with pytest.raises(TypeError, match="fn must be callable"):
        launcher_mod.FastCall(FakeOp(None), 3, 1, types.ModuleType("m"))
    with pytest.raises(ValueError, match="nin must be at most 6, got 7"):
        launcher_mod.FastCall(FakeOp(None), print, 7, types.ModuleType("m"))
    with pytest.raises(ValueError, match="kind must be 0 .* got 8"):
        launcher_mod.FastCall(FakeOp(None), print, 1, types.ModuleType("m"), 8)
    with pytest.raises(ValueError, match="takes 2 operands, got nin=1"):
        launcher_mod.FastCall(FakeOp(None), print, 1, types.ModuleType("m"), 3)
    with pytest.raises(ValueError, match="1 or more operands, got nin=-1"):
        launcher_mod.FastCall(FakeOp(None), print, -1, types.ModuleType("m"), 1)
    with pytest.raises(TypeError, match="not initialized"):
        launcher_mod.FastCall.__new__(launcher_mod.FastCall)(1)


def test_fastcall_getitem_is_the_bases_subscript_with_base_results_reclassed():
    """``darray.__getitem__`` from C: the base's own subscript, any result of the base type
    re-classed (on CuPy, advanced indexing builds one), other calls through the function."""
    launcher_mod = pytest.importorskip("cuflow.core._ewlaunch",
                                       reason="the _ewlaunch extension was not built")

    class Base(np.ndarray):  # a heap type, as cupy.ndarray is
        pass

    class Sub(Base):
        pass

    def fallback(self, *args, **kwargs):
        return ("function", args, kwargs)

    getitem = launcher_mod.FastCall((Base, Sub), fallback, 2, None, _fastpath.GETITEM)
    Sub.__getitem__ = getitem
    h = np.random.default_rng(0).standard_normal((3, 4))
    x = h.view(Sub)
    for key in (slice(1, None), (Ellipsis, 0), [0, 2], h > 0, (1, 2)):
        r, want = x[key], h[key]
        assert type(r) is (Sub if isinstance(want, np.ndarray) else type(want))
        np.testing.assert_array_equal(r, want)
    r = getitem(h.view(Base), [2, 0])  # the base type's result: re-classed
    assert type(r) is Sub and r.tolist() == h[[2, 0]].tolist()
    assert getitem(x, 0, extra=1) == ("function", (0,), {"extra": 1})
    with pytest.raises(IndexError):
        x["no"]
    for op in ((np.ndarray, int), (int, Sub), np.ndarray):
        with pytest.raises(TypeError, match="getitem takes op=.base, subclass."):
            launcher_mod.FastCall(op, fallback, 2, None, _fastpath.GETITEM)


def test_cupy_layout_is_found_only_on_cupys_arrays():
    """The launcher reads CuPy's array fields only where they were found and checked on
    probe arrays: NumPy's arrays (no such fields), types whose base is a Python class and
    objects that are not types are refused."""
    launcher_mod = pytest.importorskip("cuflow.core._ewlaunch",
                                       reason="the _ewlaunch extension was not built")

    class Sub(np.ndarray):
        pass

    assert launcher_mod.cupy_layout(np.ndarray) is False
    assert launcher_mod.cupy_layout(Sub) is False
    assert launcher_mod.cupy_layout(FakeND) is False
    assert launcher_mod.cupy_layout(3) is False


def test_fastcall_operators_launch_exact_operands_of_a_fast_path(request):
    """Operators read ``ew`` of the darray's fast path (any object's, not a module's), take
    exactly their operands and bind as methods; reflected ones launch (other, self),
    in-place ones write into self."""
    launcher_mod = pytest.importorskip("cuflow.core._ewlaunch",
                                       reason="the _ewlaunch extension was not built")
    fast = types.SimpleNamespace(ew=None)
    calls = []

    def python_path(*args):
        calls.append(args)
        return "python"

    op = FakeOp((0xE6, np.dtype("float32"), 4, 0, 0, None, 0))
    ops = {name: launcher_mod.FastCall(op, python_path, nin, fast, kind)
           for name, nin, kind in (("__neg__", 1, 1), ("__sub__", 2, 1), ("__rsub__", 2, 2),
                                   ("__isub__", 2, 3))}
    A = type("A", (FakeD,), ops)
    lo, rec = _compiled(request, darray=A)
    rec.nparams = 3
    fast.ew = lo.ew
    a, b = A((8,), "float32", ptr=1 << 40), A((8,), "float32", ptr=2 << 40)
    neg = -a
    assert type(neg) is A and rec.calls[-1][-1][:2] == (a.data.ptr, neg.data.ptr)
    d = a - b
    assert rec.calls[-1][-1] == (a.data.ptr, b.data.ptr, d.data.ptr)
    r = a.__rsub__(b)  # b - a
    assert rec.calls[-1][-1] == (b.data.ptr, a.data.ptr, r.data.ptr)
    c = a
    c -= b
    assert c is a and rec.calls[-1][-1] == (a.data.ptr, b.data.ptr, a.data.ptr)
    assert calls == []
    assert a.__sub__(b, b) == "python" and calls[-1] == (a, b, b)  # pow's modulo & co.
    fast.ew = lambda *args: None  # not a Launcher: the function
    assert a - b == "python"
    assert len(rec.calls) == 4


def test_fastcall_creation_and_fill_take_the_launchers_own_methods(request):
    """empty / zeros read the source's ``empty`` (zeros then its ``fill`` with 0), and
    ``fill`` its ``fill``, returning None as NumPy's does; other calls run the function."""
    launcher_mod = pytest.importorskip("cuflow.core._ewlaunch",
                                       reason="the _ewlaunch extension was not built")
    lo, rec = _compiled(request)
    fast = types.SimpleNamespace(ew=None, empty=lo.empty, fill=lo.fill)
    calls = []

    def python_path(*args, **kwargs):
        calls.append((args, kwargs))
        return "python"

    empty, zeros, fill = (launcher_mod.FastCall(float, python_path, 1, fast, kind)
                          for kind in (_fastpath.EMPTY, _fastpath.ZEROS, _fastpath.FILL))
    a = empty((4, 5))
    assert type(a) is FakeD and a.shape == (4, 5) and a.dtype == np.float64
    assert empty(7, np.float32).dtype == np.float32 and empty(7, dtype="i2").dtype == np.int16
    assert rec.calls == []
    z = zeros(6, np.int32)
    assert z.shape == (6,) and rec.calls == [("memset", 32, z.data.ptr, 0, 6, STREAM)]
    assert fill(z, 3) is None
    assert rec.calls[-1] == ("memset", 32, z.data.ptr, 3, 6, STREAM)
    assert calls == []
    for f, args, kwargs in ((empty, ((2,), "f4"), {"order": "C"}),
                            (empty, ((2,),), {"device": 0}),
                            (empty, (np.int64(2),), {}),  # NumPy integers: the checked path
                            (zeros, ((2,), "f4", "C"), {}),
                            (fill, (z, 0.5), {}),  # 0.5 in int32: NumPy's conversion
                            (fill, (z,), {"value": 1})):
        calls.clear()
        assert f(*args, **kwargs) == "python"
        assert calls == [(args, kwargs)]
    fast.empty = fast.fill = print  # not a Launcher's: the function
    assert empty(3) == "python" and fill(z, 0) == "python"


_KWARGS = ("dst", "out", "stream", "dtype")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from([0, 1, 2, 3]), nin=st.integers(1, 3), npos=st.integers(0, 5),
       kws=st.lists(st.sampled_from(_KWARGS), unique=True, max_size=3))
def test_fastcall_launches_exactly_its_call_shapes(request, kind, nin, npos, kws):
    """Any call: launched when it has the entry point's shape (a function: nin operands, then
    dst by position or keyword and nothing else; an operator: exactly its operands), else
    the function runs with the call's own arguments."""
    launcher_mod = pytest.importorskip("cuflow.core._ewlaunch",
                                       reason="the _ewlaunch extension was not built")
    if kind in (2, 3):
        nin = 2
    lo, rec = _compiled(request)
    rec.nparams = nin + 1
    fast = types.SimpleNamespace(ew=lo.ew)
    calls = []

    def python_path(*args, **kwargs):
        calls.append((args, kwargs))
        return "python"

    op = FakeOp((0xE7, np.dtype("float32"), 4, 0, 0, None, 0))
    entry = launcher_mod.FastCall(op, python_path, nin, fast, kind)
    arrays = [FakeD((8,), "float32", ptr=(k + 1) << 40) for k in range(6)]
    dst_kw = FakeD((8,), "float32", ptr=9 << 40)
    args = tuple(arrays[:npos])
    kwargs = {k: (dst_kw if k == "dst" else None) for k in kws}
    r = entry(*args, **kwargs)
    if kind == 0:
        launches = (nin <= npos <= nin + 1 and set(kws) <= {"dst"}
                    and not (npos == nin + 1 and kws))
    else:
        launches = npos == nin and not kws
    if not launches:
        assert r == "python" and calls == [(args, kwargs)] and rec.calls == []
        return
    assert calls == [] and len(rec.calls) == 1
    operands = args[:nin] if kind != 2 else args[::-1]
    dst = (args[nin] if npos > nin else dst_kw if kws else
           args[0] if kind == 3 else None)
    assert rec.calls[0][-1][:nin] == tuple(a.data.ptr for a in operands)
    if dst is not None:
        assert r is dst and rec.calls[0][-1][nin] == dst.data.ptr
    else:
        assert type(r) is FakeD and rec.calls[0][-1][nin] == r.data.ptr
