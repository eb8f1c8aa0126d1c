"""Fixtures of the core tests."""

import warnings

import pytest

import cuflow

EMULATED = 3  # devices the NumPy backend emulates in the multi-device tests


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def dcf(request, monkeypatch):
    """cuflow with several devices: emulated on NumPy, the machine's GPUs on CuPy."""
    if request.param == "numpy":
        monkeypatch.setenv("CUFLOW_NUMPY_DEVICES", str(EMULATED))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cuflow.set_backend(request.param)
    yield cuflow
    if request.param == "numpy":
        monkeypatch.undo()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cuflow.set_backend("numpy")
