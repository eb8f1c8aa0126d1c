"""The drop-in namespace: dtypes, CuPy-style code, forwarded names, info, dst= without allocation.

Backend selection and import hygiene are in test_runtime.py."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys

import numpy as np
import pytest

import cuflow


def test_python_m_cuflow_info():
    r = subprocess.run([sys.executable, "-m", "cuflow", "info"], capture_output=True, text=True,
                       env={**os.environ, "CUFLOW_BACKEND": "numpy"}, timeout=120)
    assert r.returncode == 0 and "backend" in r.stdout and "numpy" in r.stdout


def test_dtypes_are_numpy_objects():
    assert cuflow.float32 is np.float32 and cuflow.uint8 is np.uint8 and cuflow.dtype is np.dtype


def test_drop_in_cupy_style_code(cf):
    cp = cf
    x = cp.arange(12, dtype=cp.float32).reshape(3, 4)
    y = cp.linspace(0, 1, 12, dtype=cp.float32).reshape(3, 4)
    z = cp.where(x > 5, x, y)
    n = cp.linalg.norm(z)
    f = cp.fft.fft(x[0])
    r = cp.random.rand(3)
    u = cp.unique(cp.array([3, 1, 3]))
    for v in (z, n, f, r, u):
        assert isinstance(v, cp.darray), type(v)
    cp.testing.assert_allclose(cp.asnumpy(z), np.where(np.arange(12).reshape(3, 4) > 5,
                                                        np.arange(12).reshape(3, 4),
                                                        np.linspace(0, 1, 12).reshape(3, 4)),
                               rtol=1e-6)
    xp = cp.get_array_module(x)
    assert isinstance(xp.exp(x), cp.darray)
    with pytest.raises(AttributeError, match="no attribute 'not_a_function'"):
        cp.not_a_function  # noqa: B018


@pytest.mark.gpu
def test_cupy_names_forwarded(gpu_cf):
    import cupy

    cp = gpu_cf
    assert cp.ndarray is cupy.ndarray
    assert cp.cuda is cupy.cuda
    k = cp.ElementwiseKernel("T x", "T y", "y = x * 2", "dbl")
    out = k(cp.ones(4, dtype="float32"))
    assert float(out.sum()) == 8.0


@pytest.mark.gpu
def test_a_kernel_the_backend_cannot_compile_for_the_dtypes_is_a_type_error(gpu_cf):
    # (NumPy raises TypeError for dtypes it has no loop for)
    from cupy.cuda.compiler import CompileException

    from cuflow.core._dispatch import reraise

    e = CompileException("error: no instance of overloaded function", "src", "k", ())
    with pytest.raises(cuflow.ArgumentTypeError, match="cuflow.someop: the backend has no "
                                                       "kernel for these arguments' dtypes"):
        reraise("someop", e)


def test_backend_info_names_array_api_compat(cf):
    """The array API names the backend lacks come from array-api-compat: info says which."""
    assert cf.backend_info()["array_api_compat"] == importlib.metadata.version("array-api-compat")
    assert hasattr(cf.linalg, "vecdot") and hasattr(cf, "unstack")


@pytest.mark.gpu
def test_backend_info_on_gpu(gpu_cf):
    info = gpu_cf.backend_info()
    assert info["backend"] == "cupy"
    for k in ("device_name", "compute_capability", "driver_version", "runtime_version", "cupy"):
        assert info[k]


@pytest.mark.gpu
def test_dst_allocates_nothing(gpu_cf):
    import cupy

    cf = gpu_cf
    installed = cf.memory._INSTALLED  # cuflow's pool is CuPy's allocator (unless CUFLOW_POOL=off)
    pool = cf.memory.get_pool() if installed else cupy.get_default_memory_pool()
    a = cf.testing.random_array((256, 256), "float32")
    b = cf.testing.random_array((256, 256), "float32")
    c = cf.empty_like(a)
    s = cf.empty((), dtype="float32")
    col = cf.empty((256,), dtype="float32")
    h = cf.empty((256, 256), dtype="float16")
    cf.add(a, b, dst=c)  # warm-up (kernel compile may cache small buffers)
    a.sum(dst=s); a.sum(axis=0, dst=col); a.astype("float16", dst=h)
    cf.synchronize()
    before = pool.used_bytes(), pool.total_bytes()
    for _ in range(50):
        cf.add(a, b, dst=c)
        cf.multiply(c, 0.5, dst=c)
        a.sum(dst=s)
        a.sum(axis=0, dst=col)
        a.astype("float16", dst=h)
        a.copy(dst=c)
    cf.synchronize()
    assert (pool.used_bytes(), pool.total_bytes()) == before
    if installed:
        n = pool.num_alloc
        for _ in range(50):
            cf.add(a, b, dst=c)
            a.copy(dst=c)
            cf.negative(a, dst=c)
        assert pool.num_alloc == n  # the elementwise dst= paths make no allocation at all
