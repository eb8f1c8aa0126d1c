"""Drop-in namespace, import hygiene, backend selection and info."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import cuflow


def _run(code, **env):
    e = {**os.environ, **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e,
                          timeout=120)


def test_import_does_not_import_cupy_or_choose_a_backend():
    r = _run("import sys, cuflow; import cuflow.core._runtime as b; "
             "print('cupy' in sys.modules, b._current is None)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "True"]


def test_import_without_cupy_installed_falls_back_with_one_line_warning():
    code = ("import sys; sys.modules['cupy'] = None\n"  # makes `import cupy` raise ImportError
            "import warnings, cuflow\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    a = cuflow.ones(3)\n"
            "print(cuflow.get_backend().name, len(w), '\\n' in str(w[0].message))")
    r = _run(code, CUFLOW_BACKEND="")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["numpy", "1", "False"]


def test_forced_backend_and_bad_value():
    r = _run("import cuflow; cuflow.ones(1); print(cuflow.get_backend().name)",
             CUFLOW_BACKEND="numpy")
    assert r.stdout.strip() == "numpy"
    r = _run("import cuflow; cuflow.ones(1)", CUFLOW_BACKEND="tpu")
    assert r.returncode != 0 and "CUFLOW_BACKEND must be one of" in r.stderr


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
def test_backend_info_on_gpu(gpu_cf):
    info = gpu_cf.backend_info()
    assert info["backend"] == "cupy"
    for k in ("device_name", "compute_capability", "driver_version", "runtime_version", "cupy"):
        assert info[k]


@pytest.mark.gpu
def test_no_cuda_context_until_first_array():
    code = (
        "import cuflow\n"
        "from cuda.bindings import driver as d\n"
        "d.cuInit(0)\n"
        "def active():\n"
        "    err, dev = d.cuDeviceGet(0)\n"
        "    err, flags, act = d.cuDevicePrimaryCtxGetState(dev)\n"
        "    return bool(act)\n"
        "a0 = active()\n"
        "cuflow.darray; info = cuflow.backend_info()\n"
        "a1 = active()\n"
        "x = cuflow.ones(3)\n"
        "print(a0, a1, active())\n")
    r = _run(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False", "True"]


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
