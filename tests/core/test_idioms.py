"""``import cuflow as cp``: everyday CuPy (and NumPy) code gives the backend's own results.

Each idiom runs twice on the same random inputs, once through cuflow and once through the
backend module itself (CuPy on the GPU, NumPy on the CPU), and the two results must agree:
values, dtypes and shapes, or both calls raise.  Arrays cuflow returns are darrays.
"""

from __future__ import annotations

import numpy as np
import pytest

from cuflow.testing import random_array, to_host

# each idiom: (m, a, b, i, s) -> result, where m is the module, a and b float32 (6, 8),
# i int32 (6, 8) in [0, 6), s a symmetric positive definite float64 (4, 4)
IDIOMS = {
    # creation and conversion
    "asarray of device scalars": lambda m, a, b, i, s: m.asarray([a.max(), a.min(), b[0, 0]]),
    "array of device rows": lambda m, a, b, i, s: m.array([a[0], b[1]]),
    "asarray of a numpy scalar": lambda m, a, b, i, s: m.asarray(np.float16(1.5)),
    "zeros float16": lambda m, a, b, i, s: m.zeros((3, 4), dtype=m.float16),
    "full_like": lambda m, a, b, i, s: m.full_like(a, 2.5),
    "full int": lambda m, a, b, i, s: m.full((2, 3), 7, dtype=int),
    "arange float step": lambda m, a, b, i, s: m.arange(0, 1, 0.125),
    "linspace no endpoint": lambda m, a, b, i, s: m.linspace(0, 1, 5, endpoint=False),
    "eye k": lambda m, a, b, i, s: m.eye(4, 5, k=1, dtype=m.float32),
    "meshgrid": lambda m, a, b, i, s: m.meshgrid(a[0, :3], b[:2, 0]),
    "tri and triu": lambda m, a, b, i, s: (m.tri(3), m.triu(a, 1), m.tril(a)),
    # shape manipulation
    "concatenate axis 1": lambda m, a, b, i, s: m.concatenate([a, b], axis=1),
    "stack last axis": lambda m, a, b, i, s: m.stack([a, b], axis=-1),
    "vstack hstack": lambda m, a, b, i, s: (m.vstack([a, b]), m.hstack([a, b])),
    "split": lambda m, a, b, i, s: m.split(a, 2, axis=1),
    "expand squeeze": lambda m, a, b, i, s: m.squeeze(m.expand_dims(a, 0)),
    "transpose moveaxis": lambda m, a, b, i, s: (m.transpose(a, (1, 0)), m.moveaxis(a[None], 0, -1)),
    "flip roll": lambda m, a, b, i, s: (m.flip(a, 0), m.roll(a, 3), m.roll(a, -1, axis=1)),
    "tile repeat": lambda m, a, b, i, s: (m.tile(a[0], 2), m.repeat(a[:2], 3, axis=0)),
    "pad": lambda m, a, b, i, s: m.pad(a, ((1, 0), (2, 2))),
    "broadcast_to": lambda m, a, b, i, s: m.broadcast_to(a[0], (3, 8)),
    "reshape -1": lambda m, a, b, i, s: (a.reshape(-1, 4), a.ravel(), a.T.flatten()),
    # indexing
    "boolean mask": lambda m, a, b, i, s: a[a > 0],
    "integer array index": lambda m, a, b, i, s: (a[[0, 2, 5]], a[:, i[0]]),
    "newaxis ellipsis": lambda m, a, b, i, s: (a[:, None], a[..., 0], a[m.newaxis]),
    "masked assignment": lambda m, a, b, i, s: _set(a, a < 0, 0),
    "slice augmented assignment": lambda m, a, b, i, s: _iadd(a, slice(1, 3), 1),
    "take take_along_axis": lambda m, a, b, i, s: (m.take(a, i[0]),
                                                   m.take_along_axis(a, m.argsort(a, axis=1), 1)),
    "nonzero where argwhere": lambda m, a, b, i, s: (m.nonzero(a > 0), m.where(a > 0),
                                                     m.argwhere(a > 0)),
    "where three": lambda m, a, b, i, s: m.where(a > b, a, 0.0),
    "item and scalars": lambda m, a, b, i, s: (a[0, 0].item(), float(a.sum()), int(i[0, 0]),
                                               len(a), a[1].tolist()),
    # products
    "matmul operator": lambda m, a, b, i, s: a.T @ b,
    "dot einsum": lambda m, a, b, i, s: (m.dot(a, b.T), m.einsum("ij,kj->ik", a, b)),
    "tensordot outer kron": lambda m, a, b, i, s: (m.tensordot(a, b, axes=([1], [1])),
                                                   m.outer(a[0], b[0]), m.kron(a[:2, :2], b[:2, :2])),
    "trace diag": lambda m, a, b, i, s: (m.trace(a), m.diag(a), m.diag(a[0])),
    # reductions and statistics
    "sum keepdims": lambda m, a, b, i, s: a.sum(axis=0, keepdims=True),
    "mean over axes": lambda m, a, b, i, s: (a.mean(axis=(0, 1)), m.mean(a, axis=1)),
    "std var ddof": lambda m, a, b, i, s: (m.std(a, ddof=1), a.var(axis=0)),
    "median percentile": lambda m, a, b, i, s: (m.median(a, axis=1), m.percentile(a, [10, 90])),
    "cumsum cumprod diff": lambda m, a, b, i, s: (m.cumsum(a, axis=1), m.cumprod(a[0] / 4),
                                                 m.diff(a, axis=0)),
    "any all count_nonzero": lambda m, a, b, i, s: (m.any(a > 3), (a > -9).all(axis=1),
                                                    m.count_nonzero(a > 0, axis=0)),
    "argmax axis": lambda m, a, b, i, s: (a.argmax(axis=1), m.argmin(a), a.max(axis=0)),
    "nan reductions": lambda m, a, b, i, s: _nans(m, a),
    "average weights": lambda m, a, b, i, s: m.average(a, axis=1, weights=b[0] ** 2),
    "ptp prod": lambda m, a, b, i, s: (m.ptp(a, axis=0), m.prod(a[0] / 2)),
    # ufuncs, operators and scalars
    "ufunc reduce": lambda m, a, b, i, s: (m.add.reduce(a, axis=0), m.maximum.reduce(a, axis=1)),
    "ufunc outer": lambda m, a, b, i, s: m.multiply.outer(a[0], b[0]),
    "ufunc at": lambda m, a, b, i, s: _add_at(m, a[0], i[0]),
    "out argument": lambda m, a, b, i, s: _out(m, a),
    "numpy scalar on the left": lambda m, a, b, i, s: (np.float32(2) * a, np.float64(1) + a,
                                                       np.int8(3) * i),
    "python scalars": lambda m, a, b, i, s: (2 * a, a + True, 1.5 - i, i // 2, i % 3, a ** 2),
    "power sqrt abs": lambda m, a, b, i, s: (m.power(a, 2), abs(a) ** 0.5, m.sqrt(abs(b))),
    "divmod floor": lambda m, a, b, i, s: (divmod(a, 3), m.floor(a), m.ceil(b), m.trunc(a)),
    "round": lambda m, a, b, i, s: (m.round(a, 2), m.around(b), a.round(1)),
    "clip one bound": lambda m, a, b, i, s: (m.clip(a, None, 1), a.clip(0), m.clip(i, 1, 4)),
    "isnan nan_to_num": lambda m, a, b, i, s: _special(m, a),
    "sign hypot arctan2": lambda m, a, b, i, s: (m.sign(a), m.hypot(a, b), m.arctan2(a, b)),
    "logaddexp heaviside": lambda m, a, b, i, s: (m.logaddexp(a, b), m.heaviside(a, 0.5)),
    "fmod remainder copysign": lambda m, a, b, i, s: (m.fmod(a, 3), m.remainder(a, 3),
                                                      m.copysign(a, b)),
    "logical ops": lambda m, a, b, i, s: (~(a > 0), (a > 0) & (b > 0), (a > 0) | (b > 0),
                                          (a > 0) ^ (b > 0), m.logical_not(a > 0)),
    "comparisons": lambda m, a, b, i, s: (m.allclose(a, a + 1e-9), m.array_equal(a, b),
                                          m.isclose(a, b), a == a[0]),
    "in-place operators": lambda m, a, b, i, s: _inplace(a, b, i),
    # dtypes
    "astype and view": lambda m, a, b, i, s: (a.astype(m.int32), a.astype("float16"),
                                              a.view(m.int32), i.astype(bool)),
    "complex parts": lambda m, a, b, i, s: _complex(m, a, b),
    "result_type finfo iinfo": lambda m, a, b, i, s: (m.result_type(a, 1.0), float(m.finfo(m.float32).eps),
                                                      int(m.iinfo(m.int32).max), m.can_cast(a, m.int8)),
    "constants": lambda m, a, b, i, s: (m.pi, m.e, m.inf, m.isnan(m.nan)),
    "contiguity": lambda m, a, b, i, s: (m.ascontiguousarray(a.T), m.asfortranarray(a).flags.f_contiguous,
                                         a.copy(order="F").strides, a.nbytes, a.itemsize),
    # sorting, searching, counting
    "sort argsort": lambda m, a, b, i, s: (m.sort(a, axis=-1), m.argsort(a[0]), m.sort(a, axis=0)),
    "unique counts": lambda m, a, b, i, s: m.unique(i, return_counts=True),
    "unique inverse": lambda m, a, b, i, s: m.unique(i[0], return_index=True, return_inverse=True),
    "searchsorted": lambda m, a, b, i, s: m.searchsorted(m.sort(a[0]), b[0]),
    "bincount histogram": lambda m, a, b, i, s: (m.bincount(i.ravel()),
                                                 m.histogram(a, bins=5, range=(-3, 3))),
    "digitize": lambda m, a, b, i, s: m.digitize(a[0], m.asarray([-1.0, 0.0, 1.0])),
    # linear algebra and FFT
    "norm": lambda m, a, b, i, s: (m.linalg.norm(a, axis=1), m.linalg.norm(a)),
    "inv solve det": lambda m, a, b, i, s: (m.linalg.inv(s), m.linalg.solve(s, s[0]),
                                           m.linalg.det(s)),
    "cholesky eigvalsh": lambda m, a, b, i, s: (m.linalg.cholesky(s), m.linalg.eigvalsh(s)),
    "svd values qr r": lambda m, a, b, i, s: (m.linalg.svd(a, compute_uv=False),
                                              m.linalg.svd(a[:3], compute_uv=False),
                                              m.linalg.qr(s, mode="r")),
    "fft": lambda m, a, b, i, s: (m.fft.fft(a[0]), m.fft.rfft(a, axis=1), m.fft.fftshift(a[0])),
    "fft2 ifft": lambda m, a, b, i, s: (m.fft.ifft(m.fft.fft2(a)).real, m.fft.fftfreq(8)),
    # images and dtypes
    "uint8 image to float and back": lambda m, a, b, i, s: _image(m, i),
    "reduction dtype keywords": lambda m, a, b, i, s: (a.sum(dtype=m.float64), a.mean(dtype=m.float64),
                                                       m.cumsum(i, dtype=m.int64), i.sum(axis=0, dtype=m.int8),
                                                       i.astype(m.uint8).sum(), (i > 2).sum()),
    "reduction keywords": lambda m, a, b, i, s: (a.max(axis=None, keepdims=True), m.amax(a, axis=0),
                                                 m.amin(a, axis=1, keepdims=True), a.min(0),
                                                 m.sum(a, axis=(1,)), a.prod(axis=1, keepdims=True)),
    "float16 arithmetic": lambda m, a, b, i, s: _half(m, a, b),
    "integer promotion": lambda m, a, b, i, s: _ints(m, i),
    "negative strides": lambda m, a, b, i, s: (a[::-1].copy(), a[:, ::-2] + 1, m.sort(a[0])[::-1],
                                               m.ascontiguousarray(a[:, ::2]), a[::-1, ::-1].sum(axis=0)),
    "fortran order": lambda m, a, b, i, s: (a.reshape(8, 6, order="F"), m.asfortranarray(a) * 2,
                                            a.ravel(order="F"), a.T.copy() + a.T),
    "one-d products": lambda m, a, b, i, s: (m.dot(a[0], b[0]), a[0] @ b[0], a @ b[0], m.inner(a[0], b[0]),
                                             m.einsum("ii->i", a[:, :6]), m.vdot(a[0], b[0])),
    "complex arithmetic": lambda m, a, b, i, s: _complex_math(m, a, b),
    "set operations": lambda m, a, b, i, s: (m.isin(i[0], i[1]), m.intersect1d(i[0], i[1]),
                                             m.union1d(i[0], i[1]), m.setdiff1d(i[0], i[1])),
    "statistics": lambda m, a, b, i, s: (m.cov(a[:3]), m.corrcoef(a[0], b[0]), m.histogram2d(
        a[0], b[0], bins=3, range=[[-3, 3], [-3, 3]])[0], m.quantile(a, 0.25, axis=0)),
    "signal": lambda m, a, b, i, s: (m.convolve(a[0], b[0, :3]), m.correlate(a[0], b[0]),
                                     m.interp(a[0], m.sort(b[0]), m.arange(8.0)),
                                     m.polyval(m.asarray([1.0, -2.0, 0.5]), a[0])),
    "argsort stable and lexsort": lambda m, a, b, i, s: (m.argsort(i[0], kind="stable"),
                                                         m.lexsort(m.stack([i[0], i[1]]))),
    "clip into uint8": lambda m, a, b, i, s: m.clip(a * 60 + 128, 0, 255).astype(m.uint8),
    "where with scalars": lambda m, a, b, i, s: (m.where(a > 0, 1.0, -1.0), m.where(a > 0, a, 0),
                                                 m.where(i > 2, i, 0), m.where(a > 0, 1, 0)),
    "maximum with scalars of other kinds": lambda m, a, b, i, s: (m.maximum(i, 2.5), m.minimum(a, 1),
                                                                  m.maximum(i, True), i * 0.5),
    "comparisons of mixed dtypes": lambda m, a, b, i, s: (a > i, i == a.astype(m.int32), a < 1,
                                                          i.astype(m.uint8) < -1, i != 2.5),
    "bitwise": lambda m, a, b, i, s: (i & 3, i | i[::-1], i ^ 5, ~i, i << 2, i >> 1,
                                      m.bitwise_and(i.astype(m.uint8), 0xF0)),
    "astype to bool and back": lambda m, a, b, i, s: (a.astype(bool), (a > 0).astype(m.float16),
                                                      a.astype(m.int8), (a * 1e3).astype(m.int16)),
    # in place into existing arrays
    "copyto where": lambda m, a, b, i, s: _copyto(m, a, b),
    "fill": lambda m, a, b, i, s: _fill(a),
}

# CuPy's own API on cuflow's arrays (GPU only)
CUPY_IDIOMS = {
    "ElementwiseKernel": lambda m, a, b, i, s: m.ElementwiseKernel(
        "T x, T y", "T z", "z = x * y + 1", "idiom_fma")(a, b),
    "RawKernel": lambda m, a, b, i, s: _raw(m, a),
    "fuse": lambda m, a, b, i, s: _fused(m, a, b),
    "stream context": lambda m, a, b, i, s: _on_stream(m, a, b),
    "get and set": lambda m, a, b, i, s: _get_set(m, a, b),
    "cupyx.scipy.ndimage": lambda m, a, b, i, s: _ndimage(a),
    "asnumpy on a stream": lambda m, a, b, i, s: m.asnumpy(a * 2, stream=m.cuda.Stream()),
    "random": lambda m, a, b, i, s: _random(m),
}


def _raw(m, a):
    k = m.RawKernel(r"""extern "C" __global__ void idiom_twice(const float* x, float* y, int n) {
        int t = blockIdx.x * blockDim.x + threadIdx.x; if (t < n) y[t] = 2.0f * x[t]; }""",
                    "idiom_twice")
    y = m.empty_like(a)
    k((1,), (64,), (a, y, np.int32(a.size)))
    return y


def _fused(m, a, b):
    @m.fuse()
    def tanh_fma(x, y):  # a def: cupy.fuse cannot compile a lambda's name
        return m.tanh(x) * y + 1

    return tanh_fma(a, b)


def _on_stream(m, a, b):
    with m.cuda.Stream(non_blocking=True) as st:
        c = m.maximum(a * 2 - b, 0.0)
        d = c.sum(axis=1)
    st.synchronize()
    return c, d


def _get_set(m, a, b):
    h = a.get()
    b.set(h * 3)
    return b, m.asnumpy(b)


def _ndimage(a):
    import cupyx.scipy.ndimage as ndi  # the module runs on any cupy.ndarray subclass
    return ndi.gaussian_filter(a, 1.0), ndi.uniform_filter(a, 3)


def _random(m):
    m.random.seed(5)
    g = m.random.default_rng(5)
    return m.random.rand(3, 2), m.random.normal(size=4).dtype, g.standard_normal(3)


def _set(x, key, v):
    x[key] = v
    return x


def _iadd(x, key, v):
    x[key] += v
    return x


def _nans(m, a):
    a[0, 0] = np.nan
    return m.nanmean(a, axis=0), m.nansum(a), m.nanmax(a, axis=1), m.isnan(a).sum()


def _add_at(m, x, idx):
    m.add.at(x, idx, 1)
    return x


def _out(m, a):
    o = m.empty_like(a)
    r = m.exp(a / 8, out=o)
    return r is o, o, m.add(a[0:1], 1, out=a[0:1]), a


def _special(m, a):
    a[0, :3] = m.asarray([np.nan, np.inf, -np.inf], dtype=a.dtype)
    return m.isnan(a), m.isfinite(a), m.isinf(a), m.nan_to_num(a), m.nan_to_num(a, nan=-1.0)


def _inplace(a, b, i):
    a += 1
    a *= b
    i //= 2
    i <<= 1
    b /= 3
    return a, b, i


def _complex(m, a, b):
    z = a + 1j * b
    return z.real, z.imag, m.real(z), m.conj(z), m.abs(z), m.angle(z), z.dtype


def _image(m, i):
    img = (i * 40).astype(m.uint8)
    f = img.astype(m.float32) / 255
    back = m.clip(f * 255 + 0.5, 0, 255).astype(m.uint8)
    return f, back, img.mean(), img.sum(axis=1), img // 3, img - 1, img + 250


def _half(m, a, b):
    h, g = a.astype(m.float16), b.astype(m.float16)
    return h + g, h * 2, h / g, m.exp(h), h.sum(), h.mean(axis=0), h + a, m.maximum(h, 0)


def _ints(m, i):
    u8, i8, u16 = i.astype(m.uint8), i.astype(m.int8), i.astype(m.uint16)
    return (u8 + i8, u8 * u16, i8 - u8, i / 2, i // 2, i % 4, u8 + 1, i8 * 100, i ** 2,
            -u8, abs(i8 - 3), i.astype(m.int64) + i.astype(m.uint32))


def _complex_math(m, a, b):
    z = (a + 1j * b).astype(m.complex64)
    return z * z, z / (z + 1), m.exp(z), m.sqrt(z), abs(z), z.conj() * z, z.sum(), z == z


def _copyto(m, a, b):
    m.copyto(a, b, where=b > 0)
    m.copyto(b, 3)
    return a, b


def _fill(a):
    a.fill(3)
    a[0].fill(-1)
    return a


def _inputs(m, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((6, 8)).astype(np.float32)
    b = rng.standard_normal((6, 8)).astype(np.float32)
    i = rng.integers(0, 6, (6, 8)).astype(np.int32)
    r = rng.standard_normal((4, 4))
    s = r @ r.T + 4 * np.eye(4)
    return tuple(m.asarray(x) for x in (a, b, i, s))


def _run(m, name, table=IDIOMS):
    try:
        return table[name](m, *_inputs(m, 1 + sorted(table).index(name))), None
    except Exception as e:  # compared with the backend's own outcome below
        return None, e


def _agree(got, want, where, base, darray):
    if isinstance(want, tuple | list):
        assert isinstance(got, tuple | list) and len(got) == len(want), f"{where}: {got!r}"
        for k, (g, w) in enumerate(zip(got, want)):
            _agree(g, w, f"{where}[{k}]", base, darray)
    elif isinstance(want, base | np.ndarray | np.generic):  # arrays, NumPy's scalars
        if isinstance(want, base):
            assert isinstance(got, darray), f"{where}: {type(got).__name__} is not a darray"
        g, w = to_host(got), to_host(want)
        assert (g.dtype, g.shape) == (w.dtype, w.shape), \
            f"{where}: {g.dtype}{g.shape} != {w.dtype}{w.shape}"
        np.testing.assert_allclose(g, w, rtol=2e-6 if w.dtype.itemsize >= 4 else 1e-3,
                                   atol=1e-6, equal_nan=True, err_msg=where)
    elif isinstance(want, float):
        assert type(got) is float and got == pytest.approx(want, rel=2e-6, nan_ok=True), where
    else:  # Python ints and bools, dtypes, shapes, strides, flags
        assert type(got) is type(want) and got == want, f"{where}: {got!r} != {want!r}"


@pytest.mark.parametrize("name", sorted(IDIOMS))
def test_idiom_gives_the_backends_result(cf, name):
    ref = cf.get_backend().xp
    want, ref_err = _run(ref, name)
    got, err = _run(cf, name)
    if ref_err is not None:  # an idiom CuPy does not run (each runs on NumPy)
        assert ref is not np, f"the idiom fails on NumPy itself: {ref_err!r}"
        assert err is not None, f"the backend raises {ref_err!r}, cuflow returns {got!r}"
        return
    assert err is None, f"cuflow raises {err!r} where the backend returns a result"
    _agree(got, want, name, cf.get_backend().ndarray, cf.darray)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CUPY_IDIOMS))
def test_cupy_idiom_on_cuflow_arrays(gpu_cf, name):
    import cupy

    want, ref_err = _run(cupy, name, CUPY_IDIOMS)
    assert ref_err is None, f"the idiom itself fails on CuPy: {ref_err!r}"
    got, err = _run(gpu_cf, name, CUPY_IDIOMS)
    assert err is None, f"cuflow raises {err!r} where CuPy returns a result"
    _agree(got, want, name, cupy.ndarray, cupy.ndarray)
