"""The array API surface, checked against the standard's reference implementation.

``array-api-strict`` (API version 2025.12) writes every function out with the
spec's signature, so it serves as the spec here: every name it has, cuflow has,
with a compatible signature, and the inspection and data-type functions agree
with it.  This is the fast subset that runs in CI; the whole conformance suite
(data-apis/array-api-tests) runs through ``bench/array_api.sh``.
"""

from __future__ import annotations

import inspect
from inspect import Parameter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cuflow

xps = pytest.importorskip("array_api_strict")

_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float32", "float64", "complex64", "complex128")
_KINDS = ("bool", "signed integer", "unsigned integer", "integral", "real floating",
          "complex floating", "numeric")


# array-api-strict's own additions, not names of the standard
_STRICT_ONLY = {"Device", "ArrayAPIStrictFlags", "set_array_api_strict_flags",
                "get_array_api_strict_flags", "reset_array_api_strict_flags"}
_NAMES = [n for n in xps.__all__ if n not in _STRICT_ONLY and n not in ("fft", "linalg")]


def _spec_functions():
    for name in _NAMES:
        obj = getattr(xps, name)
        if callable(obj) and not isinstance(obj, type):
            yield "", name, obj
    for sub in ("linalg", "fft"):
        mod = getattr(xps, sub)
        for name in mod.__all__:
            yield sub, name, getattr(mod, name)


_SPEC = sorted(_spec_functions(), key=lambda t: (t[0], t[1]))


def _ours(sub, name):
    return getattr(getattr(cuflow, sub) if sub else cuflow, name)


def test_version():
    assert cuflow.__array_api_version__ == "2025.12"


@pytest.mark.parametrize("name", _NAMES)
def test_every_spec_name_exists(cf, name):
    assert hasattr(cf, name)


@pytest.mark.parametrize("sub,name,spec", _SPEC, ids=[f"{s}.{n}".lstrip(".") for s, n, _ in _SPEC])
def test_signature_accepts_the_spec_call(cf, sub, name, spec):
    """The rules of array-api-tests' test_signatures: positional parameters in the spec's
    order (names matter unless positional-only), every keyword-only parameter by name."""
    try:
        sig = inspect.signature(_ours(sub, name))
    except ValueError:
        pytest.skip(f"{name} has no inspectable signature (a NumPy ufunc or builtin)")
    params = list(sig.parameters.values())
    var_positional = any(p.kind == Parameter.VAR_POSITIONAL for p in params)
    stub = list(inspect.signature(spec).parameters.values())
    positional = [p for p in stub if p.kind != Parameter.KEYWORD_ONLY]
    for i, sp in enumerate([] if var_positional else positional):  # (*args takes any)
        assert i < len(params), f"{name}: parameter {sp.name!r} missing"
        p = params[i]
        if sp.kind != Parameter.POSITIONAL_ONLY:
            assert p.name == sp.name, f"{name}: parameter {i} is {p.name!r}, spec {sp.name!r}"
            assert p.kind == sp.kind or sp.kind == Parameter.VAR_POSITIONAL
    names = {p.name: p for p in params}
    has_kwargs = any(p.kind == Parameter.VAR_KEYWORD for p in params)
    for sp in stub[len(positional):]:
        assert sp.name in names or has_kwargs, f"{name}: keyword {sp.name!r} missing"
        if sp.name in names:
            assert names[sp.name].kind in (Parameter.KEYWORD_ONLY,
                                           Parameter.POSITIONAL_OR_KEYWORD)


def test_darray_namespace_is_cuflow(cf):
    x = cf.asarray([1.0, 2.0])
    assert x.__array_namespace__() is cuflow
    assert x.__array_namespace__(api_version="2025.12") is cuflow
    with pytest.raises(ValueError, match="2025.12"):
        x.__array_namespace__(api_version="1999.01")


def test_namespace_info(cf):
    info, ref = cf.__array_namespace_info__(), xps.__array_namespace_info__()
    assert set(info.capabilities()) == set(ref.capabilities())
    assert type(info.devices()) is tuple and info.default_device() in info.devices()
    assert set(info.default_dtypes()) == set(ref.default_dtypes())
    assert set(info.dtypes()) == set(ref.dtypes())
    for kind in (*_KINDS, ("bool", "real floating")):
        assert set(info.dtypes(kind=kind)) == set(ref.dtypes(kind=kind)), kind
    with pytest.raises(cuflow.CuflowError, match="kind"):
        info.dtypes(kind="floaty")


@given(a=st.sampled_from(_DTYPES), b=st.sampled_from(_DTYPES))
def test_result_type_and_can_cast_follow_the_spec(a, b):
    ra, rb = getattr(xps, a), getattr(xps, b)
    try:
        want = xps.result_type(ra, rb)
    except TypeError:
        want = None  # no promotion in the spec (e.g. int64 with uint64): NumPy's rule applies
    if want is not None:
        assert cuflow.result_type(np.dtype(a), np.dtype(b)) == want._np_dtype
    # where the spec has no promotion, NumPy's rule applies
    ref = xps.can_cast(ra, rb) if want is not None else np.can_cast(np.dtype(a), np.dtype(b))
    assert cuflow.can_cast(np.dtype(a), np.dtype(b)) == ref


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("kind", _KINDS)
def test_isdtype(dtype, kind):
    assert cuflow.isdtype(np.dtype(dtype), kind) == xps.isdtype(getattr(xps, dtype), kind)


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_finfo_fields_are_python_numbers_and_accept_arrays(cf, dtype):
    ref = xps.finfo(getattr(xps, dtype))
    for f in (cf.finfo(np.dtype(dtype)), cf.finfo(cf.ones(2, dtype=dtype))):
        for name in ("bits", "eps", "max", "min", "smallest_normal"):
            got = getattr(f, name)
            assert type(got) is type(getattr(ref, name)) and got == getattr(ref, name), name


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int32", "uint64"])
def test_iinfo_accepts_arrays(cf, dtype):
    f = cf.iinfo(cf.ones(2, dtype=dtype))
    assert (f.bits, f.min, f.max) == (np.iinfo(dtype).bits, np.iinfo(dtype).min,
                                      np.iinfo(dtype).max)


def test_sort_descending_is_stable(cf):
    rng = np.random.default_rng(5)
    h = rng.integers(-3, 4, (6, 40)).astype(np.float32)
    x = cf.asarray(h)
    idx = cuflow.testing.to_host(cf.argsort(x, axis=1, descending=True))
    want = np.argsort(-h, axis=1, kind="stable")  # negation keeps ties in order
    np.testing.assert_array_equal(idx, want)
    np.testing.assert_array_equal(cuflow.testing.to_host(cf.sort(x, descending=True)),
                                  -np.sort(-h, axis=1))


def test_arange_step_without_stop(cf):
    np.testing.assert_array_equal(cuflow.testing.to_host(cf.arange(10, step=5)), [0, 5])


def test_spec_arguments_and_numpy_spellings_together(cf):
    x = cf.asarray(np.array([[3, 1], [2, 2]]))
    np.testing.assert_array_equal(cuflow.testing.to_host(cf.argsort(x, axis=None,
                                                                     descending=True)),
                                  [0, 2, 3, 1])
    np.testing.assert_array_equal(cuflow.testing.to_host(cf.arange(stop=3)), [0, 1, 2])
    with pytest.raises(TypeError, match="not both"):
        cf.clip(x, 1, a_min=0)
    with pytest.raises(cuflow.ArgumentError, match="copy=False"):
        cf.asarray(x, dtype=np.float32, copy=False)
    with pytest.raises(ValueError, match="copy=False"):
        cf.asarray([1, 2], copy=False)
    y = cf.asarray(x, copy=False)  # no copy: a write through it shows in x
    y[0, 0] = 7
    assert cuflow.testing.to_host(x)[0, 0] == 7


def test_complex_special_values_in_place(cf):
    h = np.array([complex(np.inf, 2.0), complex(-np.inf, -1.0), 1 + 1j], np.complex64)
    y = cf.asarray(h)
    assert cf.tanh(y, dst=y) is y
    got = cuflow.testing.to_host(y)
    np.testing.assert_array_equal(got[:2], [1 + 0j, -1 - 0j])
    assert not np.signbit(got[0].imag) and np.signbit(got[1].imag)
    z = cf.asarray(np.array([complex(-0.0, 0.0)], np.complex128))
    cf.expm1(z, dst=z)
    assert not np.signbit(cuflow.testing.to_host(z).real[0])
