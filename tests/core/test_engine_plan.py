"""The engine's plans without a GPU: grid, parameter layout, scratch, per layout class.

The compile and device queries are replaced by stand-ins (a fixed function
pointer, 132 SMs, 8 resident blocks); what is checked is what the host packs
and launches for each kind of expression.  ``tests/test_fusion.py`` runs the
same plans on the GPU against NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest

from cuflow.core import _engine
from cuflow.core._expr import Expr, apply, reduce


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(_engine, "_functions", lambda src, dev: (0x100, 0x200))
    monkeypatch.setattr(_engine, "_device", lambda dev: (90, 132))
    monkeypatch.setattr(_engine, "_occupancy", lambda fp: 8)


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
    assert p.extras == (768, 64, 3)  # n, then the vector's inner extent and length
    assert p.fmt.format == "=QQQqqqd"


def test_uint8_table_plan(no_gpu):
    img = _inp((512, 512, 3), np.uint8, 0)
    v = _inp((3,), np.float32, 1)
    y = apply("multiply", apply("exp", img), v)
    arrays = [np.empty((512, 512, 3), np.uint8), np.empty(3, np.float32)]
    p = _engine.plan((y,), [img, v], [], arrays, (y.dtype,), (512, 512, 3), None, 0, True)
    assert p.lut == 3 and p.vec == 4  # a thread stores 16 bytes of float32 per chunk
    assert p.tmp_bytes == 256 * 3 * 4 and p.table_offsets == (0,)
    assert p.extras == (512 * 512 * 3, 1)
    small = _engine.plan((y,), [img, v], [], [np.empty((8, 8, 3), np.uint8), arrays[1]],
                         (y.dtype,), (8, 8, 3), None, 0, True)
    assert small.lut == 0  # below LUT_MIN_ELEMENTS the expression runs per element
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


def test_unaligned_operands_take_the_element_kernel(no_gpu):
    x = _inp((1000,), np.float16)
    y = apply("negative", x)
    p = _engine.plan((y,), [x], [], [np.empty(1000, np.float16)], (y.dtype,), (1000,), None,
                     0, False)
    assert p.vec == 1
