"""The engine's plans without a GPU: grid, parameter layout, scratch, per layout class.

The compile and device queries are replaced by stand-ins (a fixed function
pointer, 132 SMs, 8 resident blocks); what is checked is what the host packs
and launches for each kind of expression.  ``tests/test_fusion.py`` runs the
same plans on the GPU against NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cuflow.core import _engine
from cuflow.core._expr import Expr, apply, reduce


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(_engine, "_functions", lambda src, dev: (0x100, 0x200))
    monkeypatch.setattr(_engine, "_device", lambda dev: (90, 132))
    monkeypatch.setattr(_engine, "_occupancy", lambda fp, block=256: 2048 // block)
    monkeypatch.setattr(_engine, "_launch_ex", lambda dev: None)


def _inp(shape, dtype, k=0):
    return Expr("input", (), dtype, shape, k)


def test_contiguous_elementwise_plan(no_gpu):
    x = _inp((1 << 20,), np.float32)
    y = apply("tanh", x)
    p = _engine.plan((y,), [x], [], [np.empty(1 << 20, np.float32)], (y.dtype,), (1 << 20,),
                     None, 0, True)
    assert (p.vec, p.extras, p.n, p.tmp_bytes, p.lut) == (4, (1 << 20,), 1 << 20, 0, 0)
    assert p.fmt.format == "=QQq" and p.grid == (1 << 20) // 4 // 256
    assert p.cap == 8 * 132 * _engine.WAVES


def test_per_channel_vector_and_scalar_operands(no_gpu):
    x = _inp((4, 3, 8, 8), np.float32, 0)
    m = _inp((3, 1, 1), np.float32, 1)
    s = Expr("scalar", (), np.float64, (), 0.0, weak=True)
    y = apply("multiply", apply("subtract", x, m), s)
    arrays = [np.empty((4, 3, 8, 8), np.float32), np.empty((3, 1, 1), np.float32)]
    p = _engine.plan((y,), [x, m], [s], arrays, (y.dtype,), (4, 3, 8, 8), None, 0, True)
    # n, then the vector's inner extent and length, each with its multiply-high division
    assert p.extras == (768, 64, *_engine.fastdiv(64, 31), 3, *_engine.fastdiv(3, 31))
    assert p.fmt.format == "=QQQ" + "q" * 7 + "d"
    assert ("long long n, long long in1, long long mi1, long long si1, long long ln1, "
            "long long ml1, long long sl1, double s0_) {") in p.src
    assert p.grid == min(768 // 4 // 256 + 1, 8 * 132 * _engine.WAVES)


def test_vectors_of_one_layout_share_one_channel_index(no_gpu):
    x = _inp((4, 3, 8, 8), np.float32, 0)
    m, s = _inp((3, 1, 1), np.float32, 1), _inp((3, 1, 1), np.float32, 2)
    w = _inp((1, 1, 8, 1), np.float32, 3)
    y = apply("add", apply("multiply", apply("subtract", x, m), s), w)
    arrays = [np.empty((4, 3, 8, 8), np.float32), np.empty((3, 1, 1), np.float32),
              np.empty((3, 1, 1), np.float32), np.empty((1, 1, 8, 1), np.float32)]
    p = _engine.plan((y,), [x, m, s, w], [], arrays, (y.dtype,), (4, 3, 8, 8), None, 0, True)
    # m and s: one channel index (inner 64, length 3); w its own (inner 8, length 8)
    assert p.extras == (768, 64, *_engine.fastdiv(64, 31), 3, *_engine.fastdiv(3, 31),
                        8, *_engine.fastdiv(8, 31), 8, *_engine.fastdiv(8, 31))
    assert "p2[vc1]" in p.src and "vc2" not in p.src and "vc3" in p.src


def test_indices_from_2_to_the_31_are_64_bit(no_gpu):
    shape = (2, 3, 1 << 29)  # 3 * 2**30 elements, described (never allocated)
    big = np.lib.stride_tricks.as_strided(np.empty(1, np.float32), shape,
                                          (3 << 31, 1 << 31, 4))  # never read
    x, m = _inp(shape, np.float32, 0), _inp((3, 1), np.float32, 1)
    y = apply("subtract", x, m)
    s = _engine.source((y,), [x, m], [], [big, np.empty((3, 1), np.float32)], (y.dtype,),
                       shape, None, True)
    assert s.extras == (3 << 30, 1 << 29, *_engine.fastdiv(1 << 29, 63), 3,
                        *_engine.fastdiv(3, 63))
    assert "cf_chan((unsigned long long)base" in s.src and "const long long tid" in s.src
    small = _engine.source((y,), [x, m], [], [np.empty((2, 3, 8), np.float32),
                                              np.empty((3, 1), np.float32)], (y.dtype,),
                           (2, 3, 8), None, True)
    assert "cf_chan((unsigned)base" in small.src and "const unsigned tid" in small.src


@settings(max_examples=300, deadline=None)
@given(bits=st.sampled_from([31, 63]), data=st.data())
def test_fastdiv_is_exact_below_its_index_width(bits, data):
    d = data.draw(st.integers(0, 1 << bits), label="d")
    xs = data.draw(st.lists(st.integers(0, (1 << bits) - 1), min_size=1, max_size=8), label="x")
    xs += [max(d - 1, 0), d, ((1 << bits) - 1) // max(d, 1) * max(d, 1) - 1, (1 << bits) - 1]
    m, s = _engine.fastdiv(d, bits)
    mu = m & ((1 << 64) - 1)  # the kernel reads it as unsigned
    for x in (v for v in xs if 0 <= v < 1 << bits):
        # cf_fdiv: the high half of a (bits + 1)-bit product, then the shift; m = 0: x
        q = (x * mu) >> (bits + 1) >> s if mu else x
        assert q == (x // d if d > 1 else x), (d, x)


def test_uint8_table_plan(no_gpu):
    img = _inp((512, 512, 3), np.uint8, 0)
    v = _inp((3,), np.float32, 1)
    y = apply("multiply", apply("exp", img), v)
    arrays = [np.empty((512, 512, 3), np.uint8), np.empty(3, np.float32)]
    p = _engine.plan((y,), [img, v], [], arrays, (y.dtype,), (512, 512, 3), None, 0, True)
    assert p.lut == 3 and p.vec == 4  # a thread stores 16 bytes of float32 per chunk
    assert p.block == 1024 and "__launch_bounds__(1024)" in p.src  # fewer tables built
    assert p.tmp_bytes == 0  # each block builds its table in shared memory
    assert p.extras == (512 * 512 * 3, 1, 0, 0)  # n, the channel's inner extent (no division)
    # one kernel, a plain kernel's parameters: both pointers, the output, n and the channel
    assert p.fmt.format == "=QQQqqqq"
    assert "__shared__ float st0[256 * 3]" in p.src and "cf_fused_lut" not in p.src
    small = _engine.plan((y,), [img, v], [], [np.empty((8, 8, 3), np.uint8), arrays[1]],
                         (y.dtype,), (8, 8, 3), None, 0, True)
    assert small.lut == 0  # below LUT_MIN_ELEMENTS the expression runs per element
    # 16 channels over 65536 bytes: the blocks' tables (16 x 4096 evaluations) would hold
    # as many evaluations as the elements, so the expression runs per element
    wide = _inp((4096, 16), np.uint8, 0)
    w = _inp((16,), np.float32, 1)
    yw = apply("multiply", apply("exp", wide), w)
    pw = _engine.plan((yw,), [wide, w], [], [np.empty((4096, 16), np.uint8), np.empty(16, np.float32)],
                      (yw.dtype,), (4096, 16), None, 0, True)
    assert pw.lut == 0 and "__shared__" not in pw.src and pw.block == 256
    big = _engine.plan((yw,), [wide, w], [], [np.empty((1 << 21, 16), np.uint8),
                                              np.empty(16, np.float32)],
                       (yw.dtype,), (1 << 21, 16), None, 0, True)
    assert big.lut == 16 and big.grid * 256 * 16 < big.n  # 32M elements: the table pays
    cheap = apply("multiply", apply("subtract", img, v), v)
    p = _engine.plan((cheap,), [img, v], [], arrays, (cheap.dtype,), (512, 512, 3), None, 0,
                     True)
    assert p.lut == 0  # a few arithmetic ops cost less than the table


@pytest.mark.parametrize("axis,mode", [(None, "all"), (1, "rows"), (0, "cols")])
def test_reduction_plans(no_gpu, axis, mode):
    x = _inp((64, 128), np.float32)
    r = reduce("sum", apply("exp", x), axis)
    p = _engine.plan((r.args[0],), [x], [], [np.empty((64, 128), np.float32)], (r.dtype,),
                     (64, 128), ("sum", axis, r.dtype), 0, True)
    assert p.reduction.mode == mode
    if mode == "all":
        assert p.tmp_bytes == p.grid * 16 and p.fmt.format == "=QQqQQ"
    else:
        assert p.fmt.format == "=QQqqq" and p.red_extra == ((128, 1) if mode == "rows"
                                                            else (64, 128))


@pytest.mark.parametrize("axis,mode", [(None, "all"), (1, "rows")])
@pytest.mark.parametrize("has_it", [True, False])
def test_only_a_full_reductions_last_step_is_a_dependent_launch(no_gpu, monkeypatch, axis,
                                                                mode, has_it):
    # where the driver and device have programmatic dependent launch (_launch_ex finds
    # cuLaunchKernelEx), a full reduction's one-block last step uses it; nothing else does
    monkeypatch.setattr(_engine, "_launch_ex", lambda dev: object() if has_it else None)
    monkeypatch.setattr(_engine, "DEPENDENT_MIN", 64 * 128)
    x = _inp((64, 128), np.float32)
    r = reduce("sum", apply("exp", x), axis)
    p = _engine.plan((r.args[0],), [x], [], [np.empty((64, 128), np.float32)], (r.dtype,),
                     (64, 128), ("sum", axis, r.dtype), 0, True)
    assert p.reduction.mode == mode and p.dependent is (has_it and mode == "all")
    y = apply("exp", x)
    e = _engine.plan((y,), [x], [], [np.empty((64, 128), np.float32)], (y.dtype,), (64, 128),
                     None, 0, True)
    assert e.dependent is False
    monkeypatch.setattr(_engine, "DEPENDENT_MIN", 64 * 128 + 1)  # too few elements to pay
    p = _engine.plan((r.args[0],), [x], [], [np.empty((64, 128), np.float32)], (r.dtype,),
                     (64, 128), ("sum", axis, r.dtype), 0, True)
    assert p.dependent is False


@pytest.mark.parametrize("rlen,per_row", [(2048, 256), (2044, 32), (1031, 256), (511, 32)])
def test_last_axis_rows_get_a_block_when_long(no_gpu, rlen, per_row):
    # a block per row from ROW_BLOCK_VECTORS vectors (4 float32 each where rows align)
    x = _inp((300, rlen), np.float32)
    r = reduce("sum", apply("exp", x), 1)
    p = _engine.plan((r.args[0],), [x], [], [np.empty((300, rlen), np.float32)], (r.dtype,),
                     (300, rlen), ("sum", 1, r.dtype), 0, True)
    assert p.vec == (4 if rlen % 4 == 0 else 1)
    assert p.grid == -(-300 * per_row // 256)
    assert f"if (rlen >= {2 * 256 * p.vec}LL)" in p.src


def test_unaligned_operands_take_the_element_kernel(no_gpu):
    x = _inp((1000,), np.float16)
    y = apply("negative", x)
    p = _engine.plan((y,), [x], [], [np.empty(1000, np.float16)], (y.dtype,), (1000,), None,
                     0, False)
    assert p.vec == 1


def test_missing_nvrtc_bindings_raise_a_kernel_compile_error_naming_the_install(monkeypatch):
    """Without cuda-bindings the engine's compile says what to install (not an ImportError)."""
    import sys

    import cuflow

    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    with pytest.raises(cuflow.KernelCompileError, match=r"cuflow\[cuda13\]"):
        _engine.compile_cubin('extern "C" __global__ void k() {}', 90)
    info = cuflow.backend_info()["kernel_compiler"]
    assert info.startswith(("NVRTC through cuda-bindings ", "missing: ", "none (the NumPy"))
