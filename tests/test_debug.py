"""cuflow.annotate, per-op NVTX ranges and synchronous debugging."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import types

import numpy as np
import pytest

import cuflow
from cuflow import _instrument


@pytest.fixture
def ranges(monkeypatch):
    """A fake ``nvtx`` package that records the ranges pushed and popped."""
    log = []
    fake = types.ModuleType("nvtx")
    fake.push_range = lambda msg, color=None: log.append(("push", msg, color))
    fake.pop_range = lambda: log.append(("pop",))
    monkeypatch.setitem(sys.modules, "nvtx", fake)
    monkeypatch.setattr(_instrument, "_PUSH_POP", None)
    yield log
    cuflow.debug.nvtx(False)
    cuflow.debug.sync(False)


def pushed(log):
    return [e[1] for e in log if e[0] == "push"]


def test_annotate_context_and_decorator(ranges):
    with cuflow.annotate("load", color="green"):
        pass

    @cuflow.annotate("step", color=0xFF112233)
    def step():
        return 7

    assert step() == 7
    assert ranges == [("push", "load", 0xFF76B900), ("pop",), ("push", "step", 0xFF112233),
                      ("pop",)]
    with pytest.raises(ValueError, match="color must be"):
        cuflow.annotate("x", color="mauve")
    with pytest.raises(TypeError, match="name must be a str"):
        cuflow.annotate(3)


def test_annotate_takes_a_numpy_integer_color(ranges):
    with cuflow.annotate("x", color=np.uint32(0xFF112233)):
        pass
    assert ranges == [("push", "x", 0xFF112233), ("pop",)]
    assert type(ranges[0][2]) is int  # what the NVTX bindings take
    with pytest.raises(ValueError, match=r"\[0, 2\*\*32\), got np.int64\(-1\)"):
        cuflow.annotate("x", color=np.int64(-1))
    with pytest.raises(ValueError, match="color must be"):
        cuflow.annotate("x", color=np.True_)  # a bool is not a colour


def test_every_op_kind_emits_a_named_range(cf, ranges, rng):
    a = cf.asarray(rng.uniform(-5, 5, size=(8, 8)).astype(np.float32))
    frame = cf.asarray(rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8))
    add = cf.add
    cf.debug.nvtx(True)
    assert cf.debug.is_nvtx()
    assert cf.add is not add
    c = cf.add(a, a)
    d = a * 2
    s = d.sum()
    img = cf.image.normalize(frame)
    buf = cf.Bufferizer((3, 8, 8), 2, cf.float32)
    buf.append(img)
    buf.append_one(img)
    names = pushed(ranges)
    for want in ("cuflow.add", "cuflow.darray.__mul__", "cuflow.darray.sum",
                 "cuflow.image.normalize", "cuflow.Bufferizer.append",
                 "cuflow.Bufferizer.append_one"):
        assert want in names, (want, names)
    if cf.get_backend().is_gpu:
        assert any(n.startswith("cuflow.kernel.image.") for n in names), names
    assert sum(e[0] == "push" for e in ranges) == sum(e[0] == "pop" for e in ranges)
    np.testing.assert_allclose(cf.asnumpy(c), cf.asnumpy(d))
    assert float(s) == pytest.approx(float(cf.asnumpy(a).astype(np.float64).sum() * 2), rel=1e-5)
    cf.debug.nvtx(False)
    ranges.clear()
    cf.add(a, a)
    assert ranges == []
    assert cf.add is add  # the originals are back


def test_switches_cover_every_darray_operator_and_method_only_while_on(cf, ranges):
    """The operators (arithmetic, comparison, bitwise, ``@``, indexing, in place, reflected)
    and the public methods, the ufunc-backed ones included; the class is as before once off."""
    cls = cf.get_backend().darray
    names = ("__matmul__", "__rmatmul__", "__pow__", "__rpow__", "__ipow__", "__mod__",
             "__floordiv__", "__lt__", "__eq__", "__and__", "__invert__", "__getitem__",
             "__setitem__", "__divmod__", "reshape", "clip", "fill", "cumsum", "dot", "round",
             "transpose")
    before = {n: cls.__dict__.get(n) for n in names}
    a = cf.ones((3, 3), dtype=cf.float32)
    for switch in (cf.debug.sync, cf.debug.nvtx):
        switch(True)
        for n in names:
            assert hasattr(getattr(cls, n), "__wrapped__"), (switch.__name__, n)
        switch(False)
        assert {n: cls.__dict__.get(n) for n in names} == before
    cf.debug.nvtx(True)
    a[0] = 2
    b = (a @ a) ** 2
    c = a.reshape(9).clip(0, 1) < b[0, 0]
    cf.debug.nvtx(False)
    for op in ("__setitem__", "__matmul__", "__pow__", "__getitem__", "reshape", "clip", "__lt__"):
        assert f"cuflow.darray.{op}" in pushed(ranges), (op, pushed(ranges))
    assert float(b[0, 0]) == 64 and bool(c.all())
    ranges.clear()
    _ = a @ a, a ** 2, a.reshape(9)
    assert ranges == []


def test_ranges_are_popped_when_an_op_raises(cf, ranges):
    a, d = cf.ones((3,)), cf.empty((4,))
    cf.debug.nvtx(True)
    with pytest.raises(cf.DstShapeError):
        cf.add(a, 1, dst=d)
    assert ranges[0] == ("push", "cuflow.add", _instrument._COLORS["op"])
    assert ranges[-1] == ("pop",)


def test_sync_debug_keeps_results(cf, ranges, rng):
    a = cf.asarray(rng.uniform(-5, 5, size=(64,)).astype(np.float32))
    cf.debug.sync(True)
    assert cf.debug.is_sync()
    np.testing.assert_allclose(cf.asnumpy(cf.multiply(a, 3) + 1), cf.asnumpy(a) * 3 + 1,
                               rtol=1e-6)
    cf.debug.sync(False)
    assert not cf.debug.is_sync()


def test_sync_debug_leaves_a_graph_capture_alone(cf, rng):
    """A synchronize is illegal inside a capture: the debug sync skips it there, and the
    captured function gives the same results as the eager one."""
    h = rng.uniform(-5, 5, size=(64,)).astype(np.float32)
    x = cf.asarray(h)
    cf.debug.sync(True)
    try:
        f = cf.graph.capture(lambda v: cf.multiply(v, 3) + 1, x)
        out = f(x)
        np.testing.assert_allclose(cf.asnumpy(out), h * 3 + 1, rtol=1e-6)
    finally:
        cf.debug.sync(False)


def test_environment_switches(monkeypatch):
    monkeypatch.setenv("CUFLOW_NVTX", "1")
    monkeypatch.setenv("CUFLOW_SYNC_DEBUG", "on")
    try:
        _instrument.from_environment()
        assert cuflow.debug.is_nvtx() and cuflow.debug.is_sync()
    finally:
        cuflow.debug.nvtx(False)
        cuflow.debug.sync(False)


_FAULT = textwrap.dedent("""
    import cupy, numpy, cuflow as cf
    {switch}
    bad = cupy.RawKernel(r'''extern "C" __global__ void bad(float* p) {{
        p[threadIdx.x] = 1.0f; }}''', "bad")
    a = cf.ones((4,), dtype=cf.float32)
    {before}
    try:
        cf.add(a, a)
        bad((1,), (32,), (cupy.uint64(8),))   # writes to address 8: asynchronous fault
        b = cf.multiply(a, 2)
        cf.synchronize()
    except Exception as e:
        print("RAISED", type(e).__name__, "|", e)
""")


@pytest.mark.gpu
@pytest.mark.parametrize("switch, want", [
    ("cf.debug.sync(True)", "pending before cuflow.multiply started"),
    ("", "RAISED CudaError | cuflow.multiply: CUDA call failed"),
])
def test_sync_debug_attributes_asynchronous_errors(gpu_cf, switch, want):
    code = _FAULT.format(switch=switch, before="")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    out = r.stdout + r.stderr
    assert "RAISED" in out and want in out, out
    if not switch:
        # without the switch the fault surfaces at the next launch and is blamed on it
        assert "pending before" not in out


def test_switches_take_numpys_bools(cf, ranges):
    cf.debug.sync(np.True_)
    assert cf.debug.is_sync()
    cf.debug.sync(np.False_)
    assert not cf.debug.is_sync()
    cf.debug.nvtx(np.True_)
    assert cf.debug.is_nvtx()
    cf.debug.nvtx(np.False_)
    assert not cf.debug.is_nvtx()
    with pytest.raises(cf.ArgumentTypeError, match="True or False"):
        cf.debug.sync("yes")


def test_switches_toggled_from_two_threads_end_consistent(cf):
    cls = cf.get_backend().darray
    names = ("__add__", "__mul__", "__getitem__", "reshape", "fill", "sum")
    before = {n: cls.__dict__.get(n) for n in names}

    def toggle():
        for k in range(200):
            cf.debug.sync(k % 2 == 0)

    ts = [threading.Thread(target=toggle) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    # both threads ended on False: the switch is off and the class is as before, with no
    # wrapper left behind by an interleaving
    assert not cf.debug.is_sync()
    assert {n: cls.__dict__.get(n) for n in names} == before
    assert float(cf.asnumpy(cf.ones(2) + 1).sum()) == 4
