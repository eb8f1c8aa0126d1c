"""Every registry entry compiles with NVRTC for sm_80 and sm_90, without a GPU."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import cuflow
from cuflow.raw_kernels import REGISTRY, _registry, compile_for_arch

CASES = [(name, dt) for name, spec in REGISTRY.items() for dt in spec.dtypes()]


@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize(("kernel", "dtype"), CASES, ids=[f"{k}-{d}" for k, d in CASES])
def test_compiles_for_arch(kernel, dtype, arch):
    cubin = compile_for_arch(REGISTRY[kernel], dtype, arch)
    assert cubin[:4] == b"\x7fELF"  # a cubin is an ELF image


def test_compile_error_names_kernel_arch_and_log(monkeypatch):
    spec = dataclasses.replace(REGISTRY["image"], name="broken")
    monkeypatch.setattr(_registry, "source_of", lambda s: "__global__ void k() { int x = ; }")
    with pytest.raises(cuflow.KernelCompileError) as ei:
        compile_for_arch(spec, "float32", 90)
    msg = str(ei.value)
    assert "broken" in msg and "sm_90" in msg and "expected an expression" in msg



@pytest.mark.parametrize("dtype", ["float64", "complex64", "int32"])
def test_compile_for_arch_refuses_a_dtype_the_kernel_has_no_instantiation_for(dtype):
    """As get_function does: NVRTC alone would compile the source into a cubin of no kernels."""
    with pytest.raises(cuflow.kernels.KernelLookupError) as ei:
        compile_for_arch(REGISTRY["image"], dtype, 90)
    assert str(ei.value) == (f"cuflow kernel 'image' has no instantiation for dtype {dtype!r}; "
                             f"it has {', '.join(REGISTRY['image'].dtypes())}")


def test_every_registered_pair_is_compile_checked():
    """The compile check above covers each (kernel, dtype) an entry point is instantiated for."""
    pairs = {(k, d) for k, spec in REGISTRY.items() for _, dts in spec.entries for d in dts}
    assert pairs == set(CASES)
    assert all(REGISTRY[k].name_expressions(d) for k, d in CASES)


def test_kernel_lookup_error_prints_its_message_as_written(cf):
    with pytest.raises(cuflow.kernels.KernelLookupError) as ei:
        cuflow.kernels.warmup("it's")
    msg = ei.value.args[0]
    assert str(ei.value) == msg and msg.startswith("cuflow.kernels.warmup: ") and "it's" in msg


def test_warmup_names_an_unknown_kernel_on_every_backend(cf):
    with pytest.raises(cuflow.kernels.KernelLookupError, match="'nope'.*the registry has image"
                       ) as ei:
        cuflow.kernels.warmup(["image", "nope"])
    assert isinstance(ei.value, KeyError) and isinstance(ei.value, cuflow.CuflowError)


def test_warmup_loads_the_modules_asked_for(cf):
    dtypes = REGISTRY["image"].dtypes()
    gpu = cf.backend_info()["backend"] == "cupy"
    assert cuflow.kernels.warmup("image", dtypes=dtypes[:1]) == (1 if gpu else 0)
    assert cuflow.kernels.warmup() == (len(CASES) if gpu else 0)
    # without names, each kernel warms the dtypes asked for that it has (timing: int32 only)
    n32 = sum(1 for spec in REGISTRY.values() for d in spec.dtypes() if d == "float32")
    assert cuflow.kernels.warmup(dtypes="float32") == (n32 if gpu else 0)
    with pytest.raises(cuflow.kernels.KernelLookupError,
                       match="no registered kernel has an instantiation for int8"):
        cuflow.kernels.warmup(dtypes="int8")


@pytest.mark.parametrize(("dtypes", "missing"), [
    (["int32"], "int32"), ("int32", "int32"), ([cuflow.float32, "int8"], "int8")])
def test_warmup_refuses_a_dtype_a_kernel_has_no_instantiation_for(cf, dtypes, missing):
    """On every backend, though only the GPU compiles: the same call must fail on both."""
    with pytest.raises(cuflow.kernels.KernelLookupError) as ei:
        cuflow.kernels.warmup("image", dtypes=dtypes)
    msg = str(ei.value)
    assert isinstance(ei.value, KeyError) and isinstance(ei.value, cuflow.CuflowError)
    assert f"'image' has no instantiation for {missing};" in msg
    assert ", ".join(REGISTRY["image"].dtypes()) in msg


@pytest.mark.parametrize(("kw", "words"), [
    (dict(dtypes=["notadtype"]), ("dtype", "'notadtype'")),
    (dict(dtypes=[None]), ("dtypes", "None")),
    (dict(kernels=5), ("kernels", "int 5")),
    (dict(kernels=[["image"]]), ("kernels", "[['image']]")),
    (dict(kernels=b"image"), ("kernels", "b'image'")),
])
def test_warmup_refuses_arguments_of_the_wrong_type(cf, kw, words):
    with pytest.raises(cuflow.ArgumentTypeError) as ei:
        cuflow.kernels.warmup(**kw)
    assert str(ei.value).startswith("cuflow.kernels.warmup: ")
    for w in words:
        assert w in str(ei.value), (w, str(ei.value))


@pytest.mark.parametrize("dtype", ["float16", cuflow.float16, np.dtype("float16")])
def test_warmup_takes_one_dtype_as_one_dtype(cf, dtype):
    """A string is one dtype, not its characters ('f' would name float32, 'o' nothing)."""
    gpu = cf.backend_info()["backend"] == "cupy"
    assert cuflow.kernels.warmup("image", dtypes=dtype) == (1 if gpu else 0)
