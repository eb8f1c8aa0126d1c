"""Without a usable GPU, the NumPy backend is chosen with a one-line warning whose reason is
the true cause: no CuPy installed, no GPU found (no driver counts as that), or a driver too
old for the installed CuPy."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import types

import pytest

from cuflow.core import _runtime


class _CudaError(Exception):
    def __init__(self, status: int):
        super().__init__(f"cudaError {status}")
        self.status = status


def _fake_cupy(runtime_version: int = 13000) -> types.SimpleNamespace:
    rt = types.SimpleNamespace(runtimeGetVersion=lambda: runtime_version)
    return types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=rt))


def test_without_cupy_the_reason_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ModuleNotFoundError
    cupy, n, why = _runtime.probe_cupy()
    assert (cupy, n) == (None, 0)
    assert why.startswith("no CuPy installed") and "cuflow[cuda12]" in why


def test_no_device_is_no_gpu_found():
    assert _runtime._no_gpu_cause(_CudaError(100), _fake_cupy()) == "no GPU found"


def test_insufficient_driver_without_a_driver_is_no_gpu_found(monkeypatch):
    def no_library(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", no_library)
    why = _runtime._no_gpu_cause(_CudaError(35), _fake_cupy())
    assert why == "no GPU found (no NVIDIA driver is installed)"


@pytest.mark.parametrize("driver, runtime", [(12020, 13000), (11080, 12060)])
def test_insufficient_driver_with_an_old_driver_names_both_versions(monkeypatch, driver, runtime):
    def get_version(ptr):
        ctypes.cast(ptr, ctypes.POINTER(ctypes.c_int))[0] = driver
        return 0

    monkeypatch.setattr(ctypes, "CDLL", lambda name: types.SimpleNamespace(
        cuDriverGetVersion=get_version))
    why = _runtime._no_gpu_cause(_CudaError(35), _fake_cupy(runtime))
    have = f"{driver // 1000}.{driver % 1000 // 10}"
    need = f"{runtime // 1000}.{runtime % 1000 // 10}"
    assert why.startswith("the NVIDIA driver is too old")
    assert f"supports CUDA {have}, this CuPy needs {need}" in why


def test_other_cuda_failures_keep_cupys_message():
    why = _runtime._no_gpu_cause(RuntimeError("cudaErrorDevicesUnavailable"), _fake_cupy())
    assert why == "CuPy sees no usable GPU (cudaErrorDevicesUnavailable)"


def test_the_warning_is_one_line_with_the_cause():
    code = ("import sys; sys.modules['cupy'] = None\n"
            "import cuflow; cuflow.ones(2)")
    env = {k: v for k, v in os.environ.items() if k != "CUFLOW_BACKEND"}
    r = subprocess.run([sys.executable, "-W", "default", "-c", code], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "RuntimeWarning: cuflow: using the NumPy backend (slow, CPU only): no CuPy installed" \
        in lines[0]
