"""darray: the subclass, views, Dolphin's methods with dst=, re-classing of results."""

from __future__ import annotations

import numpy as np
import pytest

import cuflow
from cuflow.testing import assert_equal_host, random_array, to_host


def test_darray_is_backend_subclass(cf):
    a = cf.zeros((3, 4))
    assert isinstance(a, cf.darray)
    assert isinstance(a, cf.ndarray)
    assert issubclass(cf.darray, cf.get_backend().ndarray)
    if cf.get_backend().name == "cupy":
        import cupy

        assert cf.ndarray is cupy.ndarray
        assert isinstance(a, cupy.ndarray)


@pytest.mark.parametrize("make", [
    lambda a: a + a, lambda a: a[1:], lambda a: a[0], lambda a: a[[0, 1]], lambda a: a[a > 0],
    lambda a: a.T, lambda a: a.transpose(), lambda a: a.reshape(-1), lambda a: a.sum(),
    lambda a: a.sum(axis=0), lambda a: a.copy(), lambda a: a.astype("float16"),
    lambda a: a.flatten(), lambda a: a @ a.T, lambda a: a.max(), lambda a: a.argmax(),
    lambda a: a.mean(axis=1), lambda a: a.std(), lambda a: a.cumsum(), lambda a: a[0, 0],
])
def test_everything_returned_is_darray(cf, make):
    a = random_array((4, 4), "float32")
    assert isinstance(make(a), cf.darray)


def test_views_share_memory_and_write_through(cf, rng):
    host = random_array((6, 8), "float32", rng, host=True)
    a = cf.array(host)
    v = a[1:4, ::2]
    v[...] = 7
    host[1:4, ::2] = 7
    assert_equal_host(a, host)
    t = a.T
    t[0, 0] = -1
    host[0, 0] = -1
    assert_equal_host(a, host)
    r = a.reshape(48)
    r[5] = 3
    host.reshape(48)[5] = 3
    assert_equal_host(a, host)


def test_view_keeps_base_alive(cf):
    a = cf.arange(10, dtype="float32")
    v = a[2:5]
    del a
    import gc

    gc.collect()
    assert_equal_host(v, np.arange(2, 5, dtype=np.float32))


def test_dolphin_documented_api(cf):
    # ../shared/seeds/000: the documented examples, as written.
    a = cf.zeros((100, 100))
    b = cf.ones((100, 100))
    c = cf.zeros((100, 100))
    assert cf.add(src=a, other=b, dst=c) is c
    assert_equal_host(c, np.ones((100, 100)))
    d = a + b
    assert_equal_host(d, np.ones((100, 100)))
    s = cf.Stream()
    e = cf.zeros((100, 100), stream=s)
    f = cf.ones((100, 100), stream=s)
    g = cf.add(src=e, other=f)
    s.synchronize()
    assert_equal_host(g, np.ones((100, 100)))
    h = cf.zeros(shape=(2, 2), dtype=cf.float32)
    h[:, 0] = 1
    assert_equal_host(h, np.array([[1, 0], [1, 0]], np.float32))
    # the same calls on random values (zeros and ones hide a kernel that copies an operand)
    rng = np.random.default_rng(7)
    ha, hb = rng.uniform(-1e3, 1e3, (2, 100, 100))
    a, b = cf.asarray(ha), cf.asarray(hb)
    assert cf.add(src=a, other=b, dst=c) is c
    assert_equal_host(c, ha + hb)
    assert_equal_host(a + b, ha + hb)


def test_copies_of_float16_keep_every_bit(cf):
    """A copy moves bits: NaN payloads and signs, and -0.0, stay as they were."""
    bits = np.array([0x7E00, 0xFE00, 0x7C01, 0x7D55, 0x8000, 0x3C00, 0xFC00], np.uint16)
    x = cf.asarray(bits.view(np.float16))
    for y in (x.copy(), cf.copy(x), x.astype(np.float16, copy=True), cf.asarray(x, copy=True)):
        np.testing.assert_array_equal(cf.asnumpy(y).view(np.uint16), bits)


@pytest.mark.parametrize("dtype", ["uint8", "int32", "float16", "float32", "float64", "complex64"])
def test_astype_copy_flatten_with_dst(cf, rng, dtype):
    host = random_array((5, 7), "float32", rng, host=True)
    if np.dtype(dtype).kind in "iu":  # float -> int outside the range is undefined behaviour
        host = np.abs(host) % 100
    a = cf.asarray(host)
    dst = cf.empty((5, 7), dtype=dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        expected = host.astype(dtype)
    assert a.astype(dtype, dst=dst) is dst
    assert_equal_host(dst, expected)
    cdst = cf.empty((5, 7), dtype="float32")
    assert a.copy(dst=cdst) is cdst
    assert_equal_host(cdst, host)
    fdst = cf.empty(35, dtype="float32")
    assert a.T.flatten(fdst) is fdst
    assert_equal_host(fdst, host.T.flatten())


def test_methods_keep_cupy_positional_order(cf):
    a = cf.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert a.copy("F").flags.f_contiguous
    assert a.flatten("F").tolist() == [0, 3, 1, 4, 2, 5]
    assert a.astype("float64", "C").dtype == np.float64


def test_fill_transpose_T_to_numpy(cf):
    a = cf.empty((2, 3), dtype="int16")
    a.fill(5)
    out = a.T.to_numpy()
    assert isinstance(out, np.ndarray) and not isinstance(out, cf.darray)
    assert out.shape == (3, 2) and (out == 5).all()
    assert isinstance(a.get(), np.ndarray)


FILL_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
               "float16", "float32", "float64", "complex64"]
FILL_VALUES = [0, 0.0, -0.0, False, True, 1, -1, 7, 255, 65535, 1 << 24, 1 << 25, 2.5, -1e300,
               float("nan"), float("inf"), np.float32(3.25), np.int16(-2)]


def _same_values(got, want):
    """Equal, NaN where NaN, and the same sign of every other float (zeros included)."""
    if got.shape != want.shape or not np.array_equal(got, want, equal_nan=want.dtype.kind in "fc"):
        return False
    if want.dtype.kind != "f":
        return True
    real = ~np.isnan(want)
    return np.array_equal(np.signbit(got[real]), np.signbit(want[real]))


@pytest.mark.parametrize("dtype", FILL_DTYPES)
@pytest.mark.parametrize("layout", ["contiguous", "odd size", "strided", "offset view"])
def test_fill_is_numpys_or_the_backends_fill(cf, rng, dtype, layout):
    """darray.fill gives NumPy's values (or, where the backend array's own fill differs from
    NumPy's, the backend's) for every value, layout and dtype, the backend's errors, and
    leaves the rest of the buffer untouched.  On the CuPy backend: one memset where the
    value's bytes repeat, CuPy's fill for the rest."""
    shape = (7,) if layout == "odd size" else (6, 10)
    host = random_array(shape, dtype, rng, host=True)
    base_fill = cf.get_backend().ndarray.fill
    view = {"strided": lambda x: x[:, ::3], "offset view": lambda x: x[1:]}.get(
        layout, lambda x: x)
    for value in FILL_VALUES:
        a, ref = cf.asarray(host), cf.asarray(host)
        try:
            with np.errstate(all="ignore"):
                base_fill(view(ref), value)
        except Exception as e:
            with pytest.raises(type(e)):
                view(a).fill(value)
            continue
        with np.errstate(all="ignore"):
            view(a).fill(value)
            want = host.copy()
            try:
                view(want).fill(value)
            except (OverflowError, TypeError, ValueError):  # NumPy refuses what CuPy takes
                want = to_host(ref)
        got = to_host(a)
        assert _same_values(got, want) or _same_values(got, to_host(ref)), (value, got, want)


def test_fill_keeps_the_sign_of_negative_zero(cf):
    """NumPy's -0.0 in float32 (CuPy's own fill of a contiguous array writes +0.0, so this
    needs the compiled launcher's memset on the CuPy backend)."""
    rt = cf.get_backend()
    if rt.name == "cupy" and (rt.fast is None or rt.fast.compiled is None):
        pytest.skip("darray.fill is CuPy's without the compiled launcher")
    a = cf.ones((5, 3), "float32")
    a.fill(-0.0)
    assert np.signbit(to_host(a)).all() and (to_host(a) == 0).all()


def test_zero_d_and_empty(cf):
    z = cf.asarray(np.float32(3.5))
    assert z.shape == () and isinstance(z + 1, cf.darray)
    assert float(z.sum()) == 3.5
    e = cf.empty((0, 4), dtype="float32")
    assert (e + 1).shape == (0, 4)
    assert to_host(e.sum(axis=0)).tolist() == [0, 0, 0, 0]


#: an operand of a method's call: the array ``h.T`` (for ``dot``, ``__matmul__`` & co.)
_MAT = object()

#: argument patterns tried on every public method (each one the backend takes)
_METHOD_ARGS = [(), (0,), (1,), ({"axis": 1, "keepdims": True},),
                ({"axis": 0, "dtype": "float64"},), ({"ddof": 1, "axis": 0},), ("F",),
                (-1.5, 2.5), ("int32",), ("b",), ([2, 0, 1],), (_MAT,), ({"decimals": 2},)]

#: methods whose results are not a function of the values: addresses, buffers, views of
#: raw bytes, in-place mutators the scan would chain, and transfers
_METHODS_NOT_SCANNED = {
    "data", "tobytes", "tofile", "dump", "dumps", "setflags", "resize", "byteswap",
    "newbyteorder", "view", "fill", "put", "itemset", "sort", "partition", "setfield",
    "getfield", "set", "get", "toDlpack", "reduced_view", "scatter_add", "scatter_max",
    "scatter_min", "to_device", "to_numpy", "argpartition",
}


def test_methods_give_the_backends_results(cf, rng):
    """Every public method of the backend's array, called on a darray, gives what it gives
    on the backend's own array of the same values (dtype, shape, values), with each of the
    argument patterns the backend takes."""
    import warnings

    xp = cf.get_backend().xp
    h = rng.standard_normal((4, 6)).astype(np.float32) * 10

    def call(conv, name, args):
        pos = [conv(h.T) if a is _MAT else a for a in args if not isinstance(a, dict)]
        kw = next((a for a in args if isinstance(a, dict)), {})
        return getattr(conv(h), name)(*pos, **kw)

    called, bad = 0, []
    for name in sorted(dir(xp.ndarray)):
        if name.startswith("_") or name in _METHODS_NOT_SCANNED or \
                not callable(getattr(xp.ndarray, name)):
            continue
        for args in _METHOD_ARGS:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    want = call(xp.asarray, name, args)
                except Exception:
                    continue  # the backend refuses these arguments
                try:
                    got = call(cf.asarray, name, args)
                except Exception as e:
                    bad.append(f"x.{name}{args}: {type(e).__name__}: {e}")
                    continue
            called += 1
            if isinstance(want, tuple):  # (nonzero's)
                want, got = want[0], got[0]
            if isinstance(want, (xp.ndarray, np.generic)):
                g, w = to_host(got), to_host(want)
                # floats within float32 rounding: cuflow's reductions add in another order
                if g.dtype != w.dtype or g.shape != w.shape or not (
                        np.allclose(g, w, rtol=1e-5, atol=1e-5, equal_nan=True)
                        if g.dtype.kind in "fc" else np.array_equal(g, w)):
                    bad.append(f"x.{name}{args}: {g.dtype}{g.shape} against {w.dtype}{w.shape}"
                               f" ({g.ravel()[:3]} against {w.ravel()[:3]})")
            elif repr(got) != repr(want):
                bad.append(f"x.{name}{args}: {got!r} against {want!r}")
    assert called >= 100 and not bad, (called, bad)


def test_arrays_print_numpys_digits(cf):
    """An array prints as NumPy prints its values (the shortest digits of its dtype)."""
    for h in (np.array([0.1, 0.2, 1 / 3], np.float16), np.arange(4, dtype=np.float32) / 3,
              np.arange(24, dtype=np.float64).reshape(2, 3, 4) / 7, np.arange(5, dtype=np.int8)):
        x = cf.asarray(h)
        assert str(x) == str(h)
        assert repr(x).split("(", 1)[1].split("\n")[0] == repr(h).split("(", 1)[1].split("\n")[0]


def test_method_arguments_are_checked_whatever_else_is_passed(cf):
    x = cf.arange(6.0)
    for call in (lambda: x.astype("bogus"), lambda: x.astype("bogus", casting="unsafe")):
        with pytest.raises(cuflow.ArgumentTypeError, match="cuflow.astype: dtype must name"):
            call()
    for call in (lambda: x.astype(cf.float32, order="Z"), lambda: x.copy(order="Z"),
                 lambda: x.copy(order="Z", stream=cf.Stream())):
        with pytest.raises(cuflow.ArgumentError, match="order"):
            call()
    with pytest.raises(cuflow.DstTypeError, match="numpy.ndarray"):
        x.get(out=cf.empty(6))
