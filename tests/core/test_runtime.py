"""The runtime (core._runtime): import hygiene and backend selection, in fresh interpreters."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


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
