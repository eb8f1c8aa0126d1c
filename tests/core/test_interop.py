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


def test_asarray_of_host_data_is_a_copy_on_every_backend(cf, rng):
    """An upload copies, so writes afterwards to the host data or to the darray leave the
    other as it was, on the NumPy backend as on a GPU."""
    h = random_array((4, 5), "float32", rng, host=True)
    keep = h.copy()
    for src in (h, memoryview(h)):
        d = cf.asarray(src)
        d *= 2
        np.testing.assert_array_equal(h, keep)
        h[0, 0] += 1  # a host buffer refilled after the upload
        assert_equal_host(d, keep * 2)
        h[0, 0] = keep[0, 0]


@pytest.mark.parametrize("values, dtype", [([2**64 - 1, 1], "uint64"),
                                           ([[2**63 - 1], [-2**63]], "int64"),
                                           ([2**64 - 1, 2**63], "uint64")])
def test_asarray_takes_python_ints_up_to_the_dtypes_limits(cf, values, dtype):
    assert_equal_host(cf.asarray(values, dtype=dtype), np.array(values, dtype))


@pytest.mark.parametrize("values", [[2**64, 1], [1.0, 2.0**64], [[1, 256.0]]])
def test_asarray_refuses_python_numbers_past_the_dtype(cf, values):
    dtype = "uint8" if isinstance(values[0], list) else "uint64"
    with pytest.raises(cuflow.ArgumentOverflowError, match=dtype):
        cf.asarray(values, dtype=dtype)


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
    c = cf.asarray(t, copy=True)  # new memory, whatever way the tensor comes in
    assert c.data.ptr != t.data_ptr()
    t.add_(1)
    assert_equal_host(c, np.arange(12, dtype=np.float32).reshape(3, 4) * 2)


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
        # (read on ts: a PyTorch stream is non-blocking, so a copy on the default stream
        # would not wait for the sum)
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


def test_asarray_and_array_lay_out_in_the_order_asked_for(cf, rng):
    h = rng.standard_normal((3, 4))
    t = cf.asarray(h).T
    for conv in (cf.asarray, cf.array):
        c, f = conv(t, order="C"), conv(t, order="F")
        assert c.flags.c_contiguous and f.flags.f_contiguous
        np.testing.assert_array_equal(cf.asnumpy(c), h.T)
    assert cf.asarray(t, order="F") is t and cf.asarray(t, order="K") is t  # no copy needed
    assert cf.array([[1, 2], [3, 4]], order="F").flags.f_contiguous
    with pytest.raises(cuflow.ArgumentError, match="copy=False.*order 'C'"):
        cf.asarray(t, order="C", copy=False)


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
    # to another device only with a copy: copy=False raises the standard's BufferError
    other = (1, 0) if cf.get_backend().is_gpu else (2, 0)
    with pytest.raises(BufferError, match=r"copy=False, but dl_device=\(\d, 0\) is not the "
                                          r"array's device") as e:
        x.__dlpack__(copy=False, dl_device=other)
    assert isinstance(e.value, cf.DLPackCopyError)
    x.__dlpack__(copy=False, dl_device=x.__dlpack_device__())  # its own device: no copy


#: CuPy-based library calls a vision or signal pipeline makes, each run on darrays and on
#: plain cupy.ndarrays of the same values: (module, function, arguments after the image;
#: "u8" first: the image is uint8; "kernel", "matrix", "coords": arrays of the call)
_CUPYX_CALLS = [
    ("cupyx.scipy.ndimage", "gaussian_filter", (1.5,)),
    ("cupyx.scipy.ndimage", "gaussian_filter", ("u8", 1.5)),
    ("cupyx.scipy.ndimage", "zoom", ("u8", (0.5, 0.75))),
    ("cupyx.scipy.ndimage", "affine_transform", ("u8", "matrix")),
    ("cupyx.scipy.ndimage", "map_coordinates", ("coords",)),
    ("cupyx.scipy.ndimage", "uniform_filter", (3,)),
    ("cupyx.scipy.ndimage", "median_filter", (3,)),
    ("cupyx.scipy.ndimage", "maximum_filter", (3,)),
    ("cupyx.scipy.ndimage", "percentile_filter", (30, 3)),
    ("cupyx.scipy.ndimage", "sobel", ()),
    ("cupyx.scipy.ndimage", "laplace", ()),
    ("cupyx.scipy.ndimage", "gaussian_laplace", (1.0,)),
    ("cupyx.scipy.ndimage", "zoom", (0.5,)),
    ("cupyx.scipy.ndimage", "rotate", (30.0,)),
    ("cupyx.scipy.ndimage", "shift", ((1.5, -2.25),)),
    ("cupyx.scipy.ndimage", "spline_filter", ()),
    ("cupyx.scipy.ndimage", "fourier_gaussian", (2.0,)),
    ("cupyx.scipy.ndimage", "label", ()),
    ("cupyx.scipy.ndimage", "binary_erosion", ()),
    ("cupyx.scipy.ndimage", "binary_opening", ()),
    ("cupyx.scipy.ndimage", "distance_transform_edt", ()),
    ("cupyx.scipy.ndimage", "center_of_mass", ()),
    ("cupyx.scipy.ndimage", "extrema", ()),
    ("cupyx.scipy.ndimage", "histogram", (-2.0, 2.0, 8)),
    ("cupyx.scipy.ndimage", "variance", ()),
    ("cupyx.scipy.ndimage", "standard_deviation", ()),
    ("cupyx.scipy.signal", "convolve2d", ("kernel",)),
    ("cupyx.scipy.signal", "correlate2d", ("kernel",)),
    ("cupyx.scipy.signal", "fftconvolve", ("kernel",)),
    ("cupyx.scipy.signal", "medfilt2d", ()),
    ("cupyx.scipy.signal", "wiener", ()),
    ("cupyx.scipy.signal", "detrend", ()),
    ("cupyx.scipy.signal", "hilbert", ()),
    ("cupyx.scipy.signal", "resample", (24,)),
    ("cupyx.scipy.signal", "welch", ()),
    ("cupyx.scipy.special", "expit", ()),
    ("cupyx.scipy.special", "logsumexp", ()),
    ("cupyx.scipy.special", "softmax", ()),
    ("cupyx.scipy.special", "erfinv", ()),
    ("cupyx.scipy.fft", "dctn", ()),
    ("cupyx.scipy.fft", "rfft2", ()),
    ("cupyx.scipy.linalg", "expm", ()),
    ("cupyx.scipy.linalg", "lu_factor", ()),
    ("cupyx.scipy.stats", "zscore", ()),
    ("cupyx.scipy.stats", "entropy", ()),
    ("cupyx.scipy.sparse", "csr_matrix", ()),
]


@pytest.mark.gpu
@pytest.mark.parametrize("module, name, args", _CUPYX_CALLS,
                         ids=[f"{m.rsplit('.', 1)[1]}.{n}" for m, n, _ in _CUPYX_CALLS])
def test_cupyx_takes_darrays(gpu_cf, rng, module, name, args):
    """A CuPy-based library computes on darrays what it computes on CuPy's own arrays: the
    same dtypes and shapes, values within float32 rounding (its Python code calls the
    operands' methods, which on a darray are cuflow's)."""
    import importlib

    import cupy

    fn = getattr(importlib.import_module(module), name)
    host = rng.standard_normal((24, 24)).astype(np.float32)
    if args[:1] == ("u8",):
        host, args = rng.integers(0, 256, (24, 24), dtype=np.uint8), args[1:]
    elif name in ("label", "binary_erosion", "binary_opening", "distance_transform_edt"):
        host = host > 0
    elif name in ("erfinv",):
        host = np.tanh(host)
    elif name in ("entropy", "expm"):
        host = np.abs(host) / 24
    operands = {"kernel": rng.standard_normal((5, 5)).astype(np.float32),
                "matrix": np.array([[0.9, 0.2, 1.5], [-0.1, 1.1, -2.0], [0, 0, 1]]),
                "coords": rng.uniform(0, 23, (2, 40))}

    def run(conv):
        return fn(conv(host), *(conv(operands[x]) if isinstance(x, str) else x for x in args))

    def same(g, w):
        if isinstance(w, (tuple, list)):
            assert isinstance(g, (tuple, list)) and len(g) == len(w)
            for x, y in zip(g, w):
                same(x, y)
            return
        if hasattr(w, "toarray"):  # a sparse matrix
            return same(g.toarray(), w.toarray())
        g, w = cupy.asnumpy(g), cupy.asnumpy(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        if g.dtype.kind in "fc":
            # within float32 rounding: the library's sums may run through cuflow's
            # reductions (darray's methods), which add in another order than CuPy's
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(g, w)

    same(run(gpu_cf.asarray), run(cupy.asarray))


class _Producer:
    """A DLPack producer and nothing else (no __array__, no __cuda_array_interface__)."""

    def __init__(self, a, device_type=1):
        self.a, self.device_type = a, device_type

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return (self.device_type, 0)


def test_copies_of_host_buffers_are_copies(cf, rng):
    import array

    h = random_array((6,), "float32", rng, host=True)
    sources = [lambda: bytearray(h.tobytes()), lambda: array.array("f", h.tolist()),
               lambda: memoryview(bytearray(h.tobytes())).cast("f"), lambda: _Producer(h.copy())]
    for make in sources:
        src = make()
        for a in (cf.array(src), cf.asarray(src, copy=True)):
            before = to_host(a).copy()
            (src.a if isinstance(src, _Producer) else memoryview(src).cast("B"))[0] = 99
            np.testing.assert_array_equal(to_host(a), before)


def test_asarray_takes_a_dlpack_producer(cf, rng):
    h = random_array((3, 4), "float32", rng, host=True)
    np.testing.assert_array_equal(to_host(cf.asarray(_Producer(h))), h)
    np.testing.assert_array_equal(to_host(cf.asarray(_Producer(h), dtype="float64")), h)
    if not cf.get_backend().is_gpu:
        with pytest.raises(cuflow.DstTypeError, match="DLPack device type 2"):
            cf.asarray(_Producer(h, device_type=2))


def test_arrays_of_no_numbers_are_refused(cf):
    for obj in (np.array(["a"]), np.array([1], dtype=object),
                np.array(["2020-01-01"], dtype="datetime64[D]")):
        with pytest.raises(cuflow.ArgumentTypeError, match="cuflow.asarray"):
            cf.asarray(obj)
    for dtype in (object, "U3"):
        with pytest.raises(cuflow.ArgumentTypeError, match="bool, an integer, real or complex"):
            cf.asarray(cf.ones(2), dtype=dtype)


def test_device_arguments_take_the_arrays_own_device(cf):
    x = cf.ones(2)
    info = cf.__array_namespace_info__()
    assert x.device in info.devices()
    for device in (x.device, cf.Device(), info.default_device()):
        assert cf.zeros_like(x, device=device).shape == (2,)
        assert cf.asarray([1.0], device=device).shape == (1,)
    with pytest.raises(cuflow.ArgumentError, match=r"cuflow.zeros: .*with cuflow.Device\(i\)"):
        cf.zeros(2, device="no such device")


def test_imports_and_host_copies_state_their_rules(cf):
    x = cf.asarray([1.0, 2.0])
    with pytest.raises(cuflow.ArgumentTypeError, match="cuflow.from_dlpack: x must have __dlpack__"):
        cf.from_dlpack([1, 2])
    with pytest.raises(cuflow.DstTypeError, match="cuflow.as_darray"):
        cf.as_darray([1, 2])
    with pytest.raises(cuflow.DstDtypeError, match="cuflow.asnumpy: out.dtype"):
        cf.asnumpy(x, out=np.empty(2, np.int8))
    with pytest.raises(cuflow.DstShapeError, match="cuflow.asnumpy: out.shape"):
        cf.asnumpy(cf.asarray(1.0), out=np.empty(5))
    with pytest.raises(cuflow.DstShapeError, match="out.shape"):
        x.get(out=np.empty(3))
    with pytest.raises(cuflow.DstDtypeError, match="out.dtype"):
        x.get(out=np.empty(2, np.float32))
    with pytest.raises(cuflow.ArgumentTypeError, match="dl_device must be a"):
        x.__dlpack__(dl_device=3, copy=False)
    o = np.empty(2)
    assert x.get(out=o) is o and cf.asnumpy(x, out=o) is o
    np.testing.assert_array_equal(o, [1.0, 2.0])


def test_array_and_asarray_take_cupys_signatures(cf, rng):
    """CuPy's (and NumPy's) ``array(obj, dtype, copy, order, subok, ndmin)`` by position, and
    ``blocking=`` on both functions; cuflow's keywords work with them."""
    import inspect

    h = random_array((2, 3), "float32", rng, host=True)
    params = list(inspect.signature(cf.array).parameters)
    assert params[:6] == ["obj", "dtype", "copy", "order", "subok", "ndmin"]
    assert list(inspect.signature(cf.asarray).parameters)[:3] == ["obj", "dtype", "order"]
    a = cf.array(h, None, True, "K", False, 4)  # ndmin is the sixth, as in NumPy
    assert a.shape == (1, 1, 2, 3)
    assert_equal_host(cf.array(h, subok=False), h)
    for b in (cf.asarray(h, blocking=True), cf.array(h, blocking=True),
              cf.asarray(h, "float64", blocking=True, stream=cf.Stream()),
              cf.array(h, ndmin=3, blocking=True, copy=True, stream=cf.Stream())):
        assert isinstance(b, cf.darray)
        np.testing.assert_array_equal(to_host(b).reshape(h.shape), h)
    for bad in (lambda: cf.array(h, subok=True), lambda: cf.array(h, None, True, "K", True)):
        with pytest.raises(cf.ArgumentError, match="cuflow.array: subok must be False"):
            bad()


@pytest.mark.gpu
def test_asarray_blocking_waits_for_the_upload(gpu_cf, rng):
    """blocking=True (CuPy's meaning): the host waits for the stream that runs the upload."""
    import cupy

    cf = gpu_cf
    slow = cupy.RawKernel(r"""
    extern "C" __global__ void slow_spin(float* x, long long cycles) {
        long long t0 = clock64();
        while (clock64() - t0 < cycles) { }
        x[0] = 1.0f;
    }""", "slow_spin")
    h = random_array((256,), "float32", rng, host=True)
    s = cf.Stream()
    x = cf.zeros(1, dtype="float32")
    cf.synchronize()
    with s:
        slow((1,), (1,), (x, np.int64(50_000_000)))
        a = cf.asarray(h, blocking=True)
        assert s.query()  # the slow kernel and the upload after it are done
    np.testing.assert_array_equal(to_host(a), h)


def test_host_copies_check_the_stream_on_every_backend(cf, rng):
    h = random_array((3, 4), "float32", rng, host=True)
    d = cf.asarray(h)
    for bad in (lambda: cf.asnumpy(d, stream="bad"), lambda: d.get(stream=5),
                lambda: d.to_numpy(stream=object()), lambda: cf.asnumpy(h, stream=2.5)):
        with pytest.raises(cuflow.ArgumentTypeError, match="cuflow.asnumpy: stream= must be"):
            bad()
    cf.synchronize()  # (the upload is queued on the current stream, not ordered before another)
    np.testing.assert_array_equal(cf.asnumpy(d, stream=cf.Stream()), h)


class _NoCopyRefused:
    """Host data behind ``__array__`` that, as the array API asks, refuses ``copy=False``
    when it can hand out its data only as a copy."""

    def __init__(self, a):
        self.a = a

    def __array__(self, dtype=None, copy=None):
        if copy is False:
            raise ValueError("cannot hand out the data without a copy")
        return self.a.copy()


def test_asarray_copy_false_never_copies_host_data(cf, rng):
    """copy=False never copies (the array API's and NumPy's rule): a cast or a source that
    hands out only copies is refused; on the GPU every host source needs an upload."""
    h = random_array((6,), "float64", rng, host=True)
    sources = [lambda: memoryview(h.copy()), lambda: _NoCopyRefused(h), lambda: _Producer(h.copy())]
    xp = pytest.importorskip("array_api_strict")
    sources.append(lambda: xp.asarray(h))
    for make in sources:
        for kw in ({"dtype": "float32"}, {"dtype": "int16"}):
            with pytest.raises(cuflow.ArgumentError, match="cuflow.asarray: copy=False"):
                cf.asarray(make(), copy=False, **kw)
    with pytest.raises(cuflow.ArgumentError, match="cuflow.asarray: copy=False"):
        cf.asarray(_NoCopyRefused(h), copy=False)
    if not cf.get_backend().is_gpu:  # a view of the host data, where no cast is asked for
        src = h.copy()
        a = cf.asarray(memoryview(src), copy=False)
        src[0] += 1
        np.testing.assert_array_equal(to_host(a), src)


class _CudaArrayInterface:
    """A device array behind ``__cuda_array_interface__`` only."""

    def __init__(self, a):
        self.a = a
        self.__cuda_array_interface__ = a.__cuda_array_interface__


@pytest.mark.gpu
def test_asarray_of_device_data_keeps_order_and_refuses_copies_under_copy_false(gpu_cf, rng):
    """DLPack and __cuda_array_interface__ imports lay out in the order asked for; with
    copy=False a cast or a relayout is refused, and otherwise the memory is shared."""
    cf = gpu_cf
    h = random_array((3, 4, 5), "float32", rng, host=True)
    x = cf.asarray(h).transpose(2, 0, 1)  # neither C- nor F-contiguous
    for make in (lambda: _Producer(x, device_type=2), lambda: _CudaArrayInterface(x)):
        for order, flag in (("C", "c_contiguous"), ("F", "f_contiguous")):
            a = cf.asarray(make(), order=order)
            assert getattr(a.flags, flag)
            np.testing.assert_array_equal(to_host(a), h.transpose(2, 0, 1))
            with pytest.raises(cuflow.ArgumentError, match="cuflow.asarray: copy=False"):
                cf.asarray(make(), order=order, copy=False)
        with pytest.raises(cuflow.ArgumentError, match="cuflow.asarray: copy=False"):
            cf.asarray(make(), dtype="float64", copy=False)
        shared = cf.asarray(make(), copy=False)
        assert shared.data.ptr == x.data.ptr and shared.strides == x.strides
        c = cf.asarray(make(), copy=True)
        assert c.data.ptr != x.data.ptr
        np.testing.assert_array_equal(to_host(c), h.transpose(2, 0, 1))
    z = cf.asarray(x, dtype="complex64")
    for src in (_Producer(z, device_type=2), _CudaArrayInterface(z)):
        with pytest.raises(cuflow.ArgumentTypeError, match="would discard the imaginary"):
            cf.asarray(src, dtype="float32")


def test_asarray_refuses_complex_to_real_from_any_source(cf, rng):
    h = random_array((6,), "complex128", rng, host=True)
    sources = [lambda: list(h), lambda: memoryview(h.copy()), lambda: _Producer(h.copy()),
               lambda: _NoCopyRefused(h), lambda: [h[:3], h[3:]]]
    xp = pytest.importorskip("array_api_strict")
    sources.append(lambda: xp.asarray(h))
    for make in sources:
        for dtype in ("float64", "float32", "int32", "bool", cf.float64):
            with pytest.raises(cuflow.ArgumentTypeError, match="would discard the imaginary"):
                cf.asarray(make(), dtype=dtype)
        np.testing.assert_array_equal(to_host(cf.asarray(make(), dtype="complex128")).ravel(), h)


class _RefusingProducer:
    """A producer whose export fails with ``error``, as a tensor that requires grad does."""

    def __init__(self, error, device_type):
        self.error, self.device_type = error, device_type

    def __dlpack__(self, **kw):
        raise self.error

    def __dlpack_device__(self):
        return (self.device_type, 0)


class _RefusingArray:
    def __init__(self, error):
        self.error = error

    def __array__(self, dtype=None, copy=None):
        raise self.error


def test_asarray_wraps_a_producers_refusal_as_from_dlpack_does(cf):
    dev = 2 if cf.get_backend().is_gpu else 1  # (the backend's own device: kDLCUDA, kDLCPU)
    for kind in (BufferError, RuntimeError, NotImplementedError):
        err = kind("cannot export this")
        calls = [lambda: cf.asarray(_RefusingProducer(err, dev)),
                 lambda: cf.from_dlpack(_RefusingProducer(err, dev)),
                 lambda: cf.asarray(_RefusingArray(err))]
        for call in calls:
            with pytest.raises(cuflow.ArgumentError, match="refused the export: cannot export"
                               ) as e:
                call()
            assert e.value.__cause__ is err


def test_asarray_and_array_check_order_and_ndmin(cf, rng):
    h = random_array((2, 3), "float32", rng, host=True)
    d = cf.asarray(h)
    for conv in (cf.asarray, cf.array):
        name = conv.__name__
        for src in (h, d, h.tolist()):
            for order in ("X", "", "CF", 5, b"C"):
                with pytest.raises(cuflow.ArgumentError,
                                   match=f"cuflow.{name}: order must be one of C, F, A, K"):
                    conv(src, order=order)
                with pytest.raises(cuflow.ArgumentError, match=f"cuflow.{name}: order"):
                    conv(src, order=order, dtype="float32")
    for ndmin in ("x", 2.5, None, True):
        with pytest.raises(cuflow.ArgumentTypeError, match="cuflow.array: ndmin must be"):
            cf.array(d, ndmin=ndmin)
    for ndmin in (-1, 65):
        with pytest.raises(cuflow.ArgumentError, match="cuflow.array: ndmin must be"):
            cf.array(d, ndmin=ndmin)
    assert cf.array(d, ndmin=np.int64(4), order="c").shape == (1, 1, 2, 3)


def test_copy_from_host_keeps_the_uploads_rules_on_every_backend(cf, rng):
    """A host array copied into dst: same dtype, C-contiguous dst (no cast, as an upload)."""
    h = random_array((6,), "int64", rng, host=True)
    with pytest.raises(cuflow.DstDtypeError, match="cuflow.copy: dst.dtype must be int64"):
        cf.copy(h, cf.empty(6))
    with pytest.raises(cuflow.DstError, match="cuflow.copy: dst must be C-contiguous"):
        cf.copy(h, cf.empty(12, dtype="int64")[::2])
    d = cf.empty(6, dtype="int64")
    assert cf.copy(h, d) is d
    np.testing.assert_array_equal(to_host(d), h)


def test_copy_takes_numpys_positional_order_and_refuses_lists(cf, rng):
    a = cf.asarray(random_array((3, 4), "float32", rng, host=True))
    f = cf.copy(a, "F")
    assert f.flags.f_contiguous and f is not a
    assert_equal_host(f, to_host(a))
    with pytest.raises(cuflow.DstTypeError, match=r"cuflow\.copy: inputs must be arrays"):
        cf.copy([1, 2])
