"""The elementwise fast path (core._fastpath, the compiled _ewlaunch) against CuPy, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import cuflow

from cuflow.core import _fastpath
from cuflow.testing import poisoned, random_array, to_host

pytestmark = pytest.mark.gpu

NUMERIC = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float16", "float32", "float64"]
BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum"]
UNARY = ["negative", "absolute"]
# sizes around the 16-byte vector width and the block size, odd and large
SIZES = [1, 3, 17, 100 * 100, 256 * 16 + 5, 1_000_003]


def _bits(x):
    h = to_host(x)
    return h.view(f"u{h.dtype.itemsize}") if h.dtype.kind == "f" else h


def _assert_bits(got, exp):
    g, e = to_host(got), to_host(exp)
    assert g.dtype == e.dtype and g.shape == e.shape
    np.testing.assert_array_equal(_bits(g), _bits(e))


def _inputs(gpu_cf, rng, n, dtype, with_nan=True):
    a = random_array((n,), dtype, rng)
    b = random_array((n,), dtype, rng)
    if np.dtype(dtype).kind == "f" and with_nan and n > 2:
        a[1] = np.nan  # NaN handling of maximum/minimum
        b[2] = np.inf
    return a, b


def _fast():
    """The runtime's elementwise fast path."""
    return cuflow.get_backend().fast


def _impls(kind):
    """The active fast path (the compiled launcher where built) and the Python one."""
    return [getattr(_fast(), kind), getattr(_fast(), "_py_" + kind)]


def test_compiled_launcher_is_active_where_built(gpu_cf):
    import cupy

    try:
        import cuflow.core._ewlaunch  # noqa: F401
    except ImportError:
        pytest.skip("the _ewlaunch extension was not built")
    if cupy.cuda.runtime.getDeviceCount() > 1:
        assert _fast().compiled is None  # several GPUs: the Python path checks devices
        return
    fast = _fast()
    assert fast.compiled is not None and fast.binary == fast.compiled.binary
    a = random_array((5,), "float32")
    fast.binary(_fastpath.KERNELS["add"], a, a, None)  # loads: sets the grid cap
    assert fast.compiled.max_grid == fast.max_grid > 0


def test_failed_launch_raises_the_driver_error(gpu_cf):
    from cupy_backends.cuda.api.driver import CUDADriverError

    with pytest.raises(CUDADriverError, match="CUDA_ERROR_INVALID_VALUE"):
        _fastpath._launch_failed(1)


@pytest.mark.parametrize("kind", ["active", "python"])
def test_launches_go_to_the_current_stream(gpu_cf, rng, kind):
    """Captured on a stream, the launch joins the graph: nothing runs until it is launched."""
    import cupy

    cf = gpu_cf
    binary = _fast().binary if kind == "active" else _fast()._py_binary
    ha = random_array((1 << 16,), "float32", rng, host=True)
    a = cf.asarray(ha)
    dst = poisoned(a.shape, "float32")
    before = to_host(dst)
    cf.synchronize()
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        assert binary(_fastpath.KERNELS["add"], a, a, dst) is dst
        g = s.end_capture()
    np.testing.assert_array_equal(to_host(dst).view(np.uint32), before.view(np.uint32))
    g.launch(stream=s)
    s.synchronize()
    np.testing.assert_array_equal(to_host(dst), ha + ha)


def _fast_applies(name, dtype):
    return not (name == "divide" and np.dtype(dtype).kind != "f")


@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("name", BINARY)
def test_binary_matches_cupy(gpu_cf, rng, name, dtype):
    import cupy

    cf = gpu_cf
    for n in SIZES:
        a, b = _inputs(cf, rng, n, dtype)
        ref = getattr(cupy, name)(a.view(cupy.ndarray), b.view(cupy.ndarray))
        with np.errstate(all="ignore"):
            k = _fastpath.KERNELS[name]
            for impl in _impls("binary"):
                direct = impl(k, a, b, None)
                assert (direct is not None) == _fast_applies(name, dtype)
                if direct is not None:
                    _assert_bits(direct, ref)
            _assert_bits(getattr(cf, name)(a, b), ref)
            dst = poisoned((n,), ref.dtype)
            assert getattr(cf, name)(a, b, dst=dst) is dst
            _assert_bits(dst, ref)


@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("name", UNARY)
def test_unary_matches_cupy(gpu_cf, rng, name, dtype):
    import cupy

    cf = gpu_cf
    for n in SIZES:
        a, _ = _inputs(cf, rng, n, dtype)
        ref = getattr(cupy, name)(a.view(cupy.ndarray))
        for impl in _impls("unary"):
            dst = poisoned((n,), dtype)
            assert impl(_fastpath.KERNELS[name], a, dst) is dst
            _assert_bits(dst, ref)
        _assert_bits(getattr(cf, name)(a), ref)
        dst = poisoned((n,), dtype)
        assert getattr(cf, name)(a, dst=dst) is dst
        _assert_bits(dst, ref)


@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32", "float64"])
def test_unaligned_and_views(gpu_cf, rng, dtype):
    """Offsets that break 16-byte alignment take the scalar loop; results stay exact."""
    import cupy

    cf = gpu_cf
    big = random_array((4099,), dtype, rng)
    other = random_array((4099,), dtype, rng)
    for off in (1, 2, 3, 5):
        a, b = big[off:], other[:-off]
        ref = cupy.add(a.view(cupy.ndarray), b.view(cupy.ndarray))
        _assert_bits(cf.add(a, b), ref)
        dst = poisoned(ref.shape, dtype)
        cf.add(a, b, dst=dst)
        _assert_bits(dst, ref)


def test_in_place_and_partial_overlap(gpu_cf, rng):
    cf = gpu_cf
    h = random_array((1000,), "float32", rng, host=True)
    a = cf.asarray(h)
    b = cf.asarray(h[::-1].copy())
    cf.add(a, b, dst=a)  # in place: fast path, same memory read and written
    np.testing.assert_array_equal(to_host(a), h + h[::-1])

    buf = cf.asarray(h)  # dst shifted by one element over the input: CuPy's path copies
    out = cf.multiply(buf[:-1], buf[:-1], dst=buf[1:])
    np.testing.assert_array_equal(to_host(out), h[:-1] * h[:-1])
    np.testing.assert_array_equal(to_host(buf)[0], h[0])


def test_operators_take_the_fast_path(gpu_cf, rng):
    cf = gpu_cf
    ha = random_array((64, 33), "float32", rng, host=True)
    hb = random_array((64, 33), "float32", rng, host=True)
    a, b = cf.asarray(ha), cf.asarray(hb)
    for got, exp in ((a + b, ha + hb), (a - b, ha - hb), (a * b, ha * hb), (a / b, ha / hb),
                     (-a, -ha), (abs(a), abs(ha))):
        assert type(got) is cf.darray
        np.testing.assert_array_equal(to_host(got), exp)
    c = a.copy()
    ident = id(c)
    c += b
    c *= b
    assert id(c) == ident
    np.testing.assert_array_equal(to_host(c), (ha + hb) * hb)
    # fallbacks keep CuPy's semantics: broadcasting, scalars, mixed dtypes, ints / ints
    np.testing.assert_array_equal(to_host(a + b[0]), ha + hb[0])
    np.testing.assert_array_equal(to_host(a * 2), ha * 2)
    i = cf.asarray(np.arange(6, dtype=np.int32))
    assert (i / i[::-1]).dtype == np.float64
    assert (a + i[:1].astype(np.float64)).dtype == np.float64


def test_fallbacks_return_none(gpu_cf, rng):
    cf = gpu_cf
    k = _fastpath.KERNELS["add"]
    a = random_array((8, 8), "float32", rng)
    assert _fast().binary(k, a, a.T, None) is None  # strided
    assert _fast().binary(k, a, a.astype(np.float64), None) is None  # mixed dtypes
    assert _fast().binary(k, a, a[:1], None) is None  # broadcasting
    assert _fast().binary(k, a, a, cf.empty((8, 8), np.float64)) is None  # dst dtype
    assert _fast().binary(k, a, a, np.empty((8, 8), np.float32)) is None  # host dst
    c = cf.asarray(np.ones(8, np.complex64))
    assert _fast().binary(k, c, c, None) is None  # complex


def test_errors_still_raised(gpu_cf, rng):
    cf = gpu_cf
    a = random_array((4, 4), "float32", rng)
    with pytest.raises(cf.DstShapeError):
        cf.add(a, a, dst=cf.empty((4, 5), np.float32))
    with pytest.raises(cf.DstDtypeError):
        cf.add(a, a, dst=cf.empty((4, 4), np.int32))
    with pytest.raises(cf.DstTypeError):
        cf.add(a, a, dst=np.empty((4, 4), np.float32))


def test_stream_argument_runs_there(gpu_cf, rng):
    cf = gpu_cf
    ha = random_array((1 << 20,), "float32", rng, host=True)
    a = cf.asarray(ha)
    s = cf.Stream()
    out = cf.add(a, a, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(to_host(out), ha + ha)


def test_empty_arrays(gpu_cf):
    cf = gpu_cf
    a = cf.empty((0, 3), np.float32)
    r = cf.add(a, a)
    assert r.shape == (0, 3) and type(r) is cf.darray
