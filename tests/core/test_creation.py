"""Creation: empty, zeros and their _like forms, through the public API on every backend.

On the CuPy backend ``empty``/``zeros`` of an int or a tuple of ints and a dtype of numbers
(and the ``_like`` forms of a C-contiguous array) are built by the compiled launcher; the
rest takes the checked path.  Both give the same arrays; ``tests/core/test_ewlaunch.py``
checks which calls the launcher takes.
"""

from __future__ import annotations

import numpy as np
import pytest

from cuflow.testing import assert_equal_host, random_array, to_host


@pytest.mark.parametrize(("shape", "dtype"), [
    ((3, 4), None), (7, "float16"), ((), bool), ((0, 5), np.int8), ((2, 3, 4), complex),
    ((np.int64(2), 3), "float32"),
])
@pytest.mark.parametrize("name", ["empty", "zeros"])
def test_empty_and_zeros_are_darrays_of_the_shape_and_dtype(cf, name, shape, dtype):
    a = getattr(cf, name)(shape) if dtype is None else getattr(cf, name)(shape, dtype)
    want = getattr(np, name)(shape) if dtype is None else getattr(np, name)(shape, dtype)
    assert isinstance(a, cf.darray) and a.flags.c_contiguous
    assert (a.shape, a.dtype) == (want.shape, want.dtype)
    if name == "zeros":
        assert not to_host(a).any()


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("name", ["empty_like", "zeros_like"])
def test_like_forms_keep_shape_dtype_and_layout(cf, rng, name, order):
    host = np.asarray(random_array((5, 6), "float32", rng, host=True), order=order)
    a = cf.asarray(host)
    r = getattr(cf, name)(a)
    want = getattr(np, name)(host)
    assert isinstance(r, cf.darray) and (r.shape, r.dtype) == (want.shape, want.dtype)
    assert (r.flags.c_contiguous, r.flags.f_contiguous) == (want.flags.c_contiguous,
                                                            want.flags.f_contiguous)
    if name == "zeros_like":
        assert not to_host(r).any()
    assert getattr(cf, name)(a, dtype="int16").dtype == np.int16


def test_zeros_on_a_stream_are_zero_there(cf, rng):
    s = cf.Stream()
    a = cf.zeros((64, 64), "float32", stream=s)
    s.synchronize()
    assert not to_host(a).any()
    # on memory that held other values: the pool hands the block just freed back
    like = cf.empty((64, 64), "float32")
    for name, stream in (("zeros", None), ("zeros", s), ("zeros_like", None)):
        dirty = cf.asarray(random_array((64, 64), "float32", rng, host=True) + 1)
        del dirty
        a = cf.zeros((64, 64), "float32", stream=stream) if name == "zeros" else \
            cf.zeros_like(like)
        s.synchronize()
        assert not to_host(a).any(), name


@pytest.mark.gpu
@pytest.mark.parametrize("call", [lambda cf, x: cf.empty(10), lambda cf, x: cf.zeros_like(x),
                                  lambda cf, x: cf.exp(x), lambda cf, x: cf.add(x, x),
                                  lambda cf, x: cf.negative(x)])
def test_a_failed_allocation_on_the_fast_path_is_cuflows_error(gpu_cf, monkeypatch, call):
    # the compiled launches allocate their results themselves: CuPy's OutOfMemoryError
    # from there is translated as the checked path's is
    import cupy

    cf = gpu_cf
    x = cf.ones(10, cf.float32)
    from cuflow.core import _runtime

    rt = _runtime.runtime()
    if rt.fast is None:
        pytest.skip("no fast path on this runtime (CUFLOW_FAST=0)")

    def refuse(*args):
        raise cupy.cuda.memory.OutOfMemoryError(1 << 40, 0)

    for launch in ("empty", "ew"):
        monkeypatch.setattr(rt.fast, launch, refuse)
    with pytest.raises(cf.OutOfMemoryError, match="out of device memory"):
        call(cf, x)


class _Three:
    """An integer that is no int: what operator.index reads (NumPy and CuPy take it)."""

    def __index__(self):
        return 3


def test_a_0d_integer_array_is_a_size(cf, rng):
    """``n = mask.sum()`` is a 0-d array (CuPy's rule, and cuflow's on both backends); NumPy
    and CuPy take it as a size, and so does cuflow (read to the host on the GPU, as CuPy
    reads it)."""
    mask = cf.asarray(rng.integers(0, 2, 40).astype(bool))
    n = mask.sum()
    k = int(np.asarray(to_host(mask)).sum())
    assert isinstance(n, cf.darray) and n.ndim == 0
    assert cf.zeros(n).shape == (k,) and not to_host(cf.zeros(n)).any()
    assert cf.empty((n, 4)).shape == (k, 4)
    assert to_host(cf.ones(n, dtype=cf.float32)).tolist() == [1.0] * k
    assert to_host(cf.full(n, 1.5)).tolist() == [1.5] * k
    assert cf.zeros_like(cf.ones(2), shape=(2, n)).shape == (2, k)
    for size in (np.array(3), np.uint8(3), _Three(), cf.asarray(np.int16(3))):
        assert cf.zeros(size).shape == (3,) and cf.empty((1, size)).shape == (1, 3)


def test_a_0d_integer_array_is_a_size_to_reshape_too(cf, rng):
    """The same rule as creation's: ``x.reshape(n, -1)`` with ``n = mask.sum()``."""
    mask = cf.asarray(np.array([True, False, True, True]))
    n = mask.sum()
    x = cf.asarray(rng.standard_normal(12).astype(np.float32))
    got = cf.reshape(x, (n, -1))
    assert got.shape == (3, 4) and np.array_equal(to_host(got), to_host(x).reshape(3, 4))
    assert x.reshape(n, 4).shape == (3, 4) and x.reshape([2, n, 2]).shape == (2, 3, 2)
    for size in (np.array(3), np.uint8(3), _Three()):
        assert cf.reshape(x, (size, 4)).shape == (3, 4)
    with pytest.raises(cf.ArgumentTypeError, match="shape must be"):
        cf.reshape(x, (cf.asarray(3.0), 4))


@pytest.mark.parametrize("size", [2.0, True], ids=["float", "bool"])
def test_a_0d_array_of_floats_or_bools_is_no_size(cf, size):
    x = cf.asarray(size)
    with pytest.raises(cf.ArgumentTypeError, match="cuflow.zeros: shape must be an int"):
        cf.zeros(x)
    with pytest.raises(cf.ArgumentTypeError, match="cuflow.ones: shape must hold ints"):
        cf.ones((x, 2))
    with pytest.raises(cf.ArgumentTypeError, match="shape must hold ints"):
        cf.empty((cf.asarray([3]),))  # one element, but not 0-d


def test_linspace_retstep_gives_the_step_as_a_python_number(cf):
    x, step = cf.linspace(0, 1, 5, retstep=True)
    assert type(step) is float and step == 0.25
    assert_equal_host(x, np.linspace(0, 1, 5))
    # array endpoints: one step per element, as NumPy's
    _, step = cf.linspace(cf.asarray([0.0, 1.0]), cf.asarray([1.0, 3.0]), 3, retstep=True)
    assert_equal_host(step, np.array([0.5, 1.0]))
