"""cuflow.testing: random inputs, poisoned outputs, host assertions and the timers, through
the public API on every backend."""

from __future__ import annotations

import numpy as np
import pytest

import cuflow
from cuflow.testing import (assert_equal_host, copy_bandwidth_tbps, device_time_us,
                            host_time_us, poisoned, random_array)


@pytest.mark.parametrize("dtype", cuflow.testing.DTYPES)
def test_random_arrays_are_never_all_zeros(cf, dtype):
    for seed in range(200):  # a small bool or integer draw could be all zeros
        a = random_array((3,), dtype, np.random.default_rng(seed), host=True)
        assert a.dtype == np.dtype(dtype) and a.shape == (3,) and a.any()
    assert isinstance(random_array(np.int64(4), dtype), cf.darray)


def test_random_array_bounds(cf, rng):
    i = random_array(1000, np.int16, rng, low=-3, high=5, host=True)
    assert i.min() >= -3 and i.max() <= 4
    f = random_array(1000, np.float16, rng, low=-4, high=4, host=True)
    assert f.min() >= -4 and f.max() <= 4
    c = random_array(100, np.complex64, rng, low=0, high=1, host=True)
    assert (0 <= c.real).all() and (c.imag < 1).all()
    assert random_array((4,), np.float16, rng, low=0.0, high=1e-3, host=True).any()


@pytest.mark.parametrize(("call", "builtin", "words"), [
    (lambda: random_array(3, np.bool_, low=0, high=1), ValueError, ("bools",)),
    (lambda: random_array(3, np.float32, low=0), ValueError, ("high=None",)),
    (lambda: random_array(3, np.int8, low=3, high=3), ValueError, ("[3, 3)",)),
    (lambda: random_array(3, np.int8, low=-1000), ValueError, ("int8", "-1000")),
    (lambda: random_array(3, np.int8, low=0.5, high=3), TypeError, ("low", "0.5")),
    (lambda: random_array(3, np.float32, 0), TypeError, ("rng", "int")),
    (lambda: random_array(2.5, np.float32), TypeError, ("shape",)),
    (lambda: poisoned(3, "U2"), TypeError, ("poisoned", "<U2")),
    (lambda: host_time_us(lambda: None, number=0), ValueError, ("number", "0")),
    (lambda: host_time_us(lambda: None, repeat=True), TypeError, ("repeat", "True")),
    (lambda: device_time_us(lambda: None, number=-5), ValueError, ("number", "-5")),
    (lambda: copy_bandwidth_tbps(3), ValueError, ("nbytes", "3")),
])
def test_helpers_state_their_rules(cf, call, builtin, words):
    with pytest.raises(builtin) as e:
        call()
    assert isinstance(e.value, cuflow.CuflowError)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_assert_equal_host_checks_dtype_and_shape_without_assert_statements(cf):
    assert_equal_host(cf.ones(3, dtype=cf.float32), np.ones(3, np.float32))
    with pytest.raises(AssertionError, match="dtype"):
        assert_equal_host(cf.ones(3, dtype=cf.float32), np.ones(3))
    with pytest.raises(AssertionError, match="shape"):
        assert_equal_host(cf.ones((1,)), np.ones(()))


def test_timers_give_positive_times(cf):
    t = host_time_us(lambda: None, number=10, repeat=3, warmup=0)
    assert 0 < t.min_us <= t.median_us <= t.max_us and len(t.samples_us) == 3
    assert copy_bandwidth_tbps(1 << 22) > 0
