"""asarray/from_dlpack/asnumpy, and zero-copy, stream-correct hand-offs with PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import cuflow
from cuflow.testing import assert_equal_host, random_array, to_host


def test_asarray_from_host_and_back(cf, rng):
    h = random_array((4, 5), "float32", rng, host=True)
    a = cf.asarray(h)
    assert isinstance(a, cf.darray)
    assert_equal_host(a, h)
    out = cf.asnumpy(a)
    assert type(out) is np.ndarray
    np.testing.assert_array_equal(out, h)
    assert cf.asarray(a) is a
    assert cf.asarray(a, dtype="float64").dtype == np.float64
    assert_equal_host(cf.array([[1, 2], [3, 4]], dtype="int16"), np.array([[1, 2], [3, 4]], np.int16))


def test_get_array_module(cf):
    a = cf.ones(3)
    assert cf.get_array_module(a) is cuflow
    assert cf.get_array_module(np.ones(3)) is np


def test_asarray_does_not_reclass_callers_array(cf):
    base = cf.get_backend().ndarray
    plain = cf.ones(3).view(base)
    d = cf.asarray(plain)
    assert type(plain) is base and isinstance(d, cf.darray)




@pytest.mark.gpu
def test_torch_dlpack_round_trip_zero_copy(gpu_cf):
    torch = pytest.importorskip("torch")
    cf = gpu_cf
    a = cf.arange(12, dtype="float32").reshape(3, 4)
    t = torch.from_dlpack(a)
    assert t.data_ptr() == a.data.ptr and t.is_cuda
    t.mul_(2)  # visible through a: same memory
    assert_equal_host(a, np.arange(12, dtype=np.float32).reshape(3, 4) * 2)
    back = cf.asarray(t)
    assert isinstance(back, cf.darray) and back.data.ptr == t.data_ptr()
    b = cf.from_dlpack(t)
    assert b.data.ptr == t.data_ptr()


@pytest.mark.gpu
def test_torch_cuda_array_interface(gpu_cf):
    torch = pytest.importorskip("torch")
    cf = gpu_cf
    t = torch.arange(6, dtype=torch.float32, device="cuda")
    a = cf.asarray(t)
    assert a.data.ptr == t.data_ptr()
    a2 = cf.get_backend().xp.asarray(cf.ones(4))  # CuPy accepts darray via its own type
    assert a2.shape == (4,)
    t2 = torch.as_tensor(cf.ones(5), device="cuda")  # via __cuda_array_interface__
    assert float(t2.sum()) == 5.0


@pytest.mark.gpu
def test_torch_sees_work_queued_on_the_arrays_stream(gpu_cf):
    """x is produced on a busy non-blocking stream; torch.from_dlpack on another stream must wait."""
    torch = pytest.importorskip("torch")
    import cupy

    cf = gpu_cf
    slow = cupy.RawKernel(r"""
    extern "C" __global__ void slow_set(float* x, int n, long long cycles) {
        long long t0 = clock64();
        while (clock64() - t0 < cycles) { }
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) x[i] = 1.0f;
    }""", "slow_set")
    s = cf.Stream()
    n = 1 << 16
    x = cf.zeros(n, dtype="float32")
    cf.synchronize()
    with s:
        slow((n // 256,), (256,), (x, np.int32(n), np.int64(100_000_000)))
    y = cf.add(x, 1, stream=s)  # y remembers s
    ts = torch.cuda.Stream()
    with torch.cuda.stream(ts):
        t = torch.from_dlpack(y)
        total = t.sum()
    assert float(total.cpu()) == 2.0 * n


def test_cuda_tensor_on_numpy_backend_is_refused():
    cuflow.set_backend("numpy")

    class FakeCuda:
        __cuda_array_interface__ = {"shape": (1,), "typestr": "<f4", "data": (0, False), "version": 3}

    with pytest.raises(cuflow.DstTypeError, match="NumPy backend"):
        cuflow.asarray(FakeCuda())


@pytest.mark.parametrize("value", [-0.0, complex(-0.0, -0.0), np.float32(-0.0)])
def test_asarray_keeps_the_sign_of_zero(cf, value):
    x = cf.asarray(value)
    assert np.signbit(np.real(to_host(x))) and x.shape == ()
    assert np.signbit(to_host(cf.sqrt(cf.asarray(-0.0))))


def test_asarray_of_a_nest_of_arrays_is_numpys_conversion_of_them(cf, rng):
    """``cp.asarray([x.max(), x.min()])``: a nest of the backend's arrays converts as NumPy
    converts the same arrays on the host, whatever else the nest holds."""
    h = random_array((6,), "float32", rng, host=True)
    hi = random_array((6,), "int64", rng, host=True)
    x, xi = cf.asarray(h), cf.asarray(hi)
    for build in (lambda m: [m.max(), m.min()], lambda m: [[m[0], m[1]], (m[2], m[3])],
                  lambda m: [m, m[::-1]], lambda m: [m.max(), 2.5]):
        got, want = cf.asarray(build(x)), np.asarray(build(h))
        assert isinstance(got, cf.darray) and got.dtype == want.dtype
        assert_equal_host(got, want)
    mixed = cf.asarray([x[:2], xi[:2]], dtype="float64")
    assert_equal_host(mixed, np.asarray([h[:2], hi[:2]], dtype="float64"))
    promoted = cf.asarray([x[0], xi[0]])
    assert promoted.dtype == np.result_type(h.dtype, hi.dtype)
    with pytest.raises(cuflow.ArgumentError, match="cannot be converted"):
        cf.asarray([x, x[:2]])


def test_dlpack_export_shares_or_copies_as_asked(cf, rng):
    """``__dlpack__(copy=True)`` exports a copy on the array's own device (array API)."""
    h = random_array((3, 4), "float32", rng, host=True)
    x = cf.asarray(h)

    class Producer:  # hands over x's capsule with the consumer's arguments and ``copy``
        def __init__(self, copy):
            self.copy = copy

        def __dlpack__(self, **kw):
            return x.__dlpack__(**{**kw, "copy": self.copy})

        def __dlpack_device__(self):
            return x.__dlpack_device__()

    before = h.copy()  # on the NumPy backend x is h
    shared, copied = cf.from_dlpack(Producer(None)), cf.from_dlpack(Producer(True))
    x[0, 0] = before[0, 0] + 1
    assert to_host(shared)[0, 0] == before[0, 0] + 1
    assert_equal_host(copied, before)
