"""Single ops through the engine's compiled launch (core._fastpath, _ewlaunch) against NumPy."""

from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuflow
from cuflow.core import _fastpath
from cuflow.core._engine import ew_op
from cuflow.testing import poisoned, random_array, to_host

pytestmark = pytest.mark.gpu

NUMERIC = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float16", "float32", "float64"]
BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum"]
UNARY = ["negative", "absolute"]
# sizes around the 16-byte vector width and the block size, odd and large
SIZES = [1, 3, 17, 100 * 100, 256 * 16 + 5, 1_000_003]


def _assert_same(got, exp):
    """Equal values, NaN where NaN, and the same sign of every zero."""
    g, e = to_host(got), np.asarray(exp)
    assert g.dtype == e.dtype and g.shape == e.shape
    np.testing.assert_array_equal(g, e)
    if e.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(g[g == 0]), np.signbit(e[e == 0]))


def _host_inputs(rng, n, dtype, zeros=True):
    a = random_array((n,), dtype, rng, host=True)
    b = random_array((n,), dtype, rng, host=True)
    if np.dtype(dtype).kind == "f" and n > 3:
        a[1] = np.nan  # NaN handling of maximum/minimum
        b[2] = np.inf
        if zeros:  # signed zeros (maximum(-0.0, 0.0) is either zero: NumPy's loops differ)
            a[3], b[3] = -0.0, 0.0
    return a, b


def _fast():
    """The runtime's fast path."""
    return cuflow.get_backend().fast


def _engine_takes(name, dtype):
    """Integer division keeps the backend's path; everything else here is the engine's."""
    return not (name == "divide" and np.dtype(dtype).kind != "f")


def test_compiled_launcher_is_active_where_built(gpu_cf):
    try:
        import cuflow.core._ewlaunch  # noqa: F401
    except ImportError:
        pytest.skip("the _ewlaunch extension was not built")
    fast = _fast()
    assert fast.compiled is not None and fast.ew == fast.compiled.ew
    assert fast.empty == fast.compiled.empty


def test_failed_launch_raises_the_driver_error(gpu_cf):
    from cupy_backends.cuda.api.driver import CUDADriverError

    with pytest.raises(CUDADriverError, match="CUDA_ERROR_INVALID_VALUE"):
        _fastpath._launch_failed(1)


def test_launches_go_to_the_current_stream(gpu_cf, rng):
    """Captured on a stream, the launch joins the graph: nothing runs until it is launched."""
    import cupy

    cf = gpu_cf
    ha = random_array((1 << 16,), "float32", rng, host=True)
    a = cf.asarray(ha)
    dst = poisoned(a.shape, "float32")
    cf.add(a, a, dst=dst)  # the kernel is built outside the capture
    dst = poisoned(a.shape, "float32")
    before = to_host(dst)
    cf.synchronize()
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        assert _fast().ew(ew_op("add"), (a, a), dst) is dst
        g = s.end_capture()
    np.testing.assert_array_equal(to_host(dst).view(np.uint32), before.view(np.uint32))
    g.launch(stream=s)
    s.synchronize()
    np.testing.assert_array_equal(to_host(dst), ha + ha)


@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("name", BINARY)
def test_binary_matches_numpy(gpu_cf, rng, name, dtype):
    cf = gpu_cf
    for n in SIZES:
        ha, hb = _host_inputs(rng, n, dtype, zeros=name not in ("maximum", "minimum"))
        a, b = cf.asarray(ha), cf.asarray(hb)
        with np.errstate(all="ignore"):
            ref = getattr(np, name)(ha, hb)
        direct = _fast().ew(ew_op(name), (a, b), None)
        assert (direct is not None) == _engine_takes(name, dtype)
        if direct is not None:
            _assert_same(direct, ref)
        _assert_same(getattr(cf, name)(a, b), ref)
        dst = poisoned((n,), ref.dtype)
        assert getattr(cf, name)(a, b, dst=dst) is dst
        _assert_same(dst, ref)


@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("name", UNARY)
def test_unary_matches_numpy(gpu_cf, rng, name, dtype):
    cf = gpu_cf
    for n in SIZES:
        ha, _ = _host_inputs(rng, n, dtype)
        a = cf.asarray(ha)
        ref = getattr(np, name)(ha)
        dst = poisoned((n,), dtype)
        assert _fast().ew(ew_op(name), (a,), dst) is dst
        _assert_same(dst, ref)
        _assert_same(getattr(cf, name)(a), ref)
        dst = poisoned((n,), dtype)
        assert getattr(cf, name)(a, dst=dst) is dst
        _assert_same(dst, ref)


@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32", "float64"])
def test_unaligned_and_views(gpu_cf, rng, dtype):
    """Offsets that break 16-byte alignment take the scalar loop; results stay exact."""
    cf = gpu_cf
    hbig = random_array((4099,), dtype, rng, host=True)
    hother = random_array((4099,), dtype, rng, host=True)
    big, other = cf.asarray(hbig), cf.asarray(hother)
    for off in (1, 2, 3, 5):
        ref = hbig[off:] + hother[:-off]
        _assert_same(cf.add(big[off:], other[:-off]), ref)
        dst = poisoned(ref.shape, dtype)
        cf.add(big[off:], other[:-off], dst=dst)
        _assert_same(dst, ref)


def test_in_place_and_partial_overlap(gpu_cf, rng):
    cf = gpu_cf
    h = random_array((1000,), "float32", rng, host=True)
    a = cf.asarray(h)
    b = cf.asarray(h[::-1].copy())
    cf.add(a, b, dst=a)  # in place: the engine reads and writes the same memory
    np.testing.assert_array_equal(to_host(a), h + h[::-1])

    buf = cf.asarray(h)  # dst shifted by one element over the input: CuPy's path copies
    out = cf.multiply(buf[:-1], buf[:-1], dst=buf[1:])
    np.testing.assert_array_equal(to_host(out), h[:-1] * h[:-1])
    np.testing.assert_array_equal(to_host(buf)[0], h[0])


@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8"])
def test_operators_take_the_engine(gpu_cf, rng, dtype):
    cf = gpu_cf
    ha = random_array((64, 33), dtype, rng, host=True)
    hb = random_array((64, 33), dtype, rng, host=True)
    a, b = cf.asarray(ha), cf.asarray(hb)
    with np.errstate(all="ignore"):
        cases = [(a + b, ha + hb), (a - b, ha - hb), (a * b, ha * hb), (a / b, ha / hb),
                 (-a, -ha), (abs(a), abs(ha)), (a < b, ha < hb), (a == b, ha == hb)]
        c = a.copy()
        ident = id(c)
        c += b
        c *= b
        hc = (ha + hb) * hb
    for got, exp in cases:
        assert type(got) is cf.darray
        _assert_same(got, exp)
    assert id(c) == ident
    _assert_same(c, hc)
    # fallbacks keep CuPy's semantics: broadcasting, scalars, mixed dtypes, ints / ints
    with np.errstate(all="ignore"):
        _assert_same(a + b[0], ha + hb[0])
        _assert_same(a * 2, ha * 2)
    i = cf.asarray(np.arange(6, dtype=np.int32))
    assert (i / i[::-1]).dtype == np.float64
    assert (a + i[:1].astype(np.float64)).dtype == np.float64


def test_engine_hands_back_what_it_does_not_take(gpu_cf, rng):
    cf = gpu_cf
    add = ew_op("add")
    a = random_array((8, 8), "float32", rng)
    i = random_array((8, 8), "int32", rng)
    assert _fast().ew(add, (a, a.T), None) is None  # strided
    assert _fast().ew(add, (a, a[:1]), None) is None  # broadcasting
    assert _fast().ew(add, (a, a), cf.empty((8, 8), np.int32)) is None  # dst it cannot cast to
    assert _fast().ew(add, (a, a), np.empty((8, 8), np.float32)) is None  # host dst
    c = cf.asarray(np.ones(8, np.complex64))
    assert _fast().ew(add, (c, c), None) is None  # complex
    assert _fast().ew(add, (i, 3), None) is None  # an int array with a Python int
    assert _fast().ew(add, (i, i.astype(np.int64)), None) is None  # mixed int dtypes
    assert _fast().ew(ew_op("divide"), (i, i), None) is None  # integer division
    assert _fast().ew(add, (i, i), None) is not None


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


def _python_frames(fn, skip_under=None):
    """The Python functions that ``fn()`` enters (``fn``'s own frame aside), leaving out
    those called from a function whose file path contains ``skip_under``, and that one."""
    seen = []

    def profile(frame, event, arg):
        if event != "call":
            return
        f = frame
        while skip_under is not None and f is not None:
            if skip_under in f.f_code.co_filename:
                return
            f = f.f_back
        seen.append(frame.f_code)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    assert seen[0] is fn.__code__
    return [c.co_name for c in seen[1:]]


def test_entry_points_launch_without_a_python_frame(gpu_cf, rng):
    """Namespace functions, operators, fused functions, empty, zeros and fill reach the
    launcher from C (``_ewlaunch.FastCall``): once a plan is cached, no Python frame runs."""
    if _fastpath.FastCall is None or not _fastpath.ENGINE_LAUNCH:
        pytest.skip("the _ewlaunch extension was not built, or CUFLOW_EW_ENGINE=0")
    cf = gpu_cf
    ha = random_array((64, 33), "float32", rng, host=True)
    hb = random_array((64, 33), "float32", rng, host=True)
    a, b, o = cf.asarray(ha), cf.asarray(hb), cf.empty((64, 33), np.float32)
    gelu = cf.fuse(lambda v: 0.5 * v * (1 + cf.tanh(0.7978845608 * (v + 0.044715 * v ** 3))))
    calls = {
        "tanh(a)": lambda: cf.tanh(a),
        "minimum(a, b, o)": lambda: cf.minimum(a, b, o),
        "add(a, b, dst=o)": lambda: cf.add(a, b, dst=o),
        "a * 2": lambda: a * 2,
        "2 - a": lambda: 2 - a,
        "-a": lambda: -a,
        "a == b": lambda: a == b,
        "o += a": lambda: o.__iadd__(a),
        "gelu(a)": lambda: gelu(a),
        "gelu(a, dst=o)": lambda: gelu(a, dst=o),
        "empty": lambda: cf.empty((64, 33), np.float32),
        "zeros": lambda: cf.zeros(100, dtype=np.int32),
        "o.fill(0)": lambda: o.fill(0),
        "a[1:]": lambda: a[1:],
        "a[:, 0]": lambda: a[:, 0],
        "a[None, -3, ::-2]": lambda: a[None, -3, ::-2],
    }
    # with several devices CuPy's allocator hook picks the device's pool in C
    # (_hotpath.DeviceMalloc), except in a build without the pool's extension
    import cupy

    allocator = (os.sep + os.path.join("cuflow", "memory") + os.sep
                 if cf.get_backend().device_count > 1
                 and type(cupy.cuda.get_allocator()).__name__ != "DeviceMalloc" else None)
    for name, call in calls.items():
        call()  # the plan is loaded (in Python) on the first call
        assert _python_frames(call, allocator) == [], name
    # and the results are NumPy's
    with np.errstate(all="ignore"):
        _assert_same(cf.minimum(a, b, o), np.minimum(ha, hb))
        _assert_same(2 - a, 2 - ha)
        want = 0.5 * ha * (1 + np.tanh(np.float32(0.7978845608) * (
            ha + np.float32(0.044715) * ha ** 3)))
    np.testing.assert_allclose(to_host(cf.tanh(a)), np.tanh(ha), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(to_host(gelu(a)), want, rtol=1e-5, atol=1e-4)
    z = cf.zeros(100, dtype=np.int32)
    assert type(z) is cf.darray and not to_host(z).any()
    e = cf.empty((5, 7), "f2")
    assert type(e) is cf.darray and e.shape == (5, 7) and e.dtype == np.float16
    assert o.fill(1.5) is None and (to_host(o) == 1.5).all()


def test_cupy_array_fields_are_found(gpu_cf):
    """The compiled launcher reads operands, and darray's indexing builds views, at CuPy's
    fields, found and checked on probe arrays (a CuPy whose layout differs keeps the
    attribute paths: this test then says so)."""
    if _fastpath.FastCall is None:
        pytest.skip("the _ewlaunch extension was not built")
    from cuflow.core import _ewlaunch

    backend = cuflow.get_backend()
    assert _ewlaunch.cupy_layout(backend.ndarray) and _ewlaunch.layout_found()
    assert not _ewlaunch.cupy_layout(np.ndarray)  # found for CuPy's type only


_INDEX = st.one_of(st.integers(-8, 8), st.none(), st.just(Ellipsis),
                   st.builds(slice, st.none() | st.integers(-9, 9), st.none() | st.integers(-9, 9),
                             st.none() | st.integers(-4, 4).filter(bool)))


def _views_built():
    from cuflow.core import _ewlaunch

    return _ewlaunch.views_built()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.lists(st.integers(1, 6), max_size=4), key=st.lists(_INDEX, max_size=5),
       as_tuple=st.booleans(), of_view=st.booleans(),
       dtype=st.sampled_from(["float32", "int8", "float64", "uint16"]))
def test_basic_indexing_builds_cupys_view(gpu_cf, shape, key, as_tuple, of_view, dtype):
    """darray's basic indexing (ints, slices, Ellipsis, None) is CuPy's own, field for field:
    the same shape, strides, pointer, base, flags and values, or the same error; every
    non-empty view is built by the compiled path."""
    import cupy

    if _fastpath.FastCall is None:
        pytest.skip("the _ewlaunch extension was not built")
    cf = gpu_cf
    rng = np.random.default_rng(len(shape) * 7 + len(key))
    h = random_array(tuple(shape), dtype, rng, host=True)
    x = cf.asarray(h)
    if of_view:
        x = x[...]  # a view: views of it take its base
    k = tuple(key) if as_tuple or len(key) != 1 else key[0]
    try:
        want = cupy.ndarray.__getitem__(x, k)
    except Exception as e:  # noqa: BLE001  (whatever CuPy raises, darray raises too)
        with pytest.raises(type(e)):
            x[k]
        return
    before = _views_built()
    got = x[k]
    assert (_views_built() > before) == (want.size > 0)
    assert type(got) is cf.darray and type(want) is cf.darray
    assert (got.shape, got.strides, got.size, got.dtype) == \
        (want.shape, want.strides, want.size, want.dtype)
    assert got.data.ptr == want.data.ptr and got.data.mem is want.data.mem
    assert got.base is want.base is (x if x.base is None else x.base)
    assert (got._c_contiguous, got._f_contiguous, got._index_32_bits) == \
        (want._c_contiguous, want._f_contiguous, want._index_32_bits)
    np.testing.assert_array_equal(to_host(got), h[k])


class _Index:
    """A slice bound read through __index__, which runs Python code."""

    def __index__(self):
        return 1


def test_basic_views_leave_other_keys_to_cupy(gpu_cf, rng):
    """Keys whose reading runs Python code (it could reshape the array under the path's
    reads) or passes Py_ssize_t, NumPy integers, bools and tuple subclasses take CuPy's
    subscript, with CuPy's result or error; a view holds a MemoryPointer of its own, as
    CuPy's subscript gives it."""
    import collections

    import cupy

    if _fastpath.FastCall is None:
        pytest.skip("the _ewlaunch extension was not built")
    h = random_array((2, 3, 4), "float32", rng, host=True)
    x = gpu_cf.asarray(h)
    pair = collections.namedtuple("pair", "a b")
    for k in (np.int64(1), (slice(None), np.int32(2)), True, pair(0, slice(1, None)),
              slice(_Index(), None), (0, slice(None, None, _Index()))):
        before = _views_built()
        got, want = x[k], cupy.ndarray.__getitem__(x, k)
        assert _views_built() == before, k
        assert got.shape == want.shape and got.strides == want.strides
        np.testing.assert_array_equal(to_host(got), to_host(want))
    for k in (slice(None, 2 ** 70), slice(-2 ** 70, None), slice(None, None, 2 ** 63), 2 ** 70):
        with pytest.raises((OverflowError, IndexError)) as caught:
            cupy.ndarray.__getitem__(x, k)
        with pytest.raises(caught.type):
            x[k]
    before = _views_built()
    v = x[:, 0]
    assert _views_built() == before + 1
    assert v.data is not x.data and v.data.ptr == x.data.ptr
    p = v.data
    p += 4  # in place on the view's pointer only
    assert x.data.ptr == v.data.ptr - 4
    w = x[1:, ::2]
    assert w.data.ptr == x.data.ptr + 12 * 4 and w.base is x
    w[...] = 7  # a view writes through to its array
    assert (to_host(x)[1:, ::2] == 7).all() and (to_host(x)[0] != 7).any()


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int32", "int64", "float16",
                                   "float32", "float64", "complex64", "complex128"])
def test_new_results_are_cupys_arrays_field_for_field(gpu_cf, rng, dtype):
    """A new result built at CuPy's fields (the launcher's empty, and every op's result) holds
    what CuPy's constructor puts in an array of its shape and dtype; more axes than the
    fields path takes go through CuPy's _init, with the same result."""
    import cupy

    if _fastpath.FastCall is None:
        pytest.skip("the _ewlaunch extension was not built")
    from cuflow.core import _ewlaunch

    cf = gpu_cf
    x = cf.asarray(random_array((7, 9), "float32", rng, host=True))
    y = x * 2  # a launch: the launcher has decided to read fields
    assert _ewlaunch.fresh_found()
    if importlib.util.find_spec("cuflow.core._vectors") is not None:
        assert _ewlaunch.vectors_found()  # the C++ part was built: it sets the vectors
    shapes = [(), (0,), (5,), (3, 0, 2), (7, 9), (1, 4, 1), (4, 1), (1, 1), (1, 6),
              (2, 3, 1, 2, 1, 2, 1, 3), (1,) * 9]
    for shape in shapes:
        got, want = cf.empty(shape, dtype), cupy.ndarray(shape, dtype)
        assert type(got) is cf.darray and got.base is None
        assert (got.shape, got.strides, got.size, got.dtype, got.nbytes) == \
            (want.shape, want.strides, want.size, want.dtype, want.nbytes), shape
        assert (got._c_contiguous, got._f_contiguous, got._index_32_bits) == \
            (want._c_contiguous, want._f_contiguous, want._index_32_bits), shape
        assert type(got.data) is type(want.data) and got.dtype is want.dtype
        if got.size:
            got.fill(1)  # the memory is its own and writable
            assert (to_host(got) == 1).all()
    assert y.shape == (7, 9) and y.strides == (36, 4) and y._c_contiguous
    np.testing.assert_array_equal(to_host(y), to_host(x) * 2)
