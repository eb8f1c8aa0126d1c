"""cuflow.testing: random inputs, poisoned outputs, host assertions and the timers, through
the public API on every backend."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import cuflow
from cuflow.testing import _timer
from cuflow.testing import (Timing, assert_equal_host, copy_bandwidth_tbps, device_time_us,
                            host_time_us, poisoned, random_array, to_host)


@pytest.mark.parametrize("dtype", cuflow.testing.DTYPES)
def test_random_arrays_are_never_all_zeros(cf, dtype):
    for seed in range(200):  # a small bool or integer draw could be all zeros
        a = random_array((3,), dtype, np.random.default_rng(seed), host=True)
        assert a.dtype == np.dtype(dtype) and a.shape == (3,) and a.any()
    assert isinstance(random_array(np.int64(4), dtype), cf.darray)


def test_random_array_bounds(cf, rng):
    """[low, high) on every dtype family: high is never drawn (a float16 draw rounded up to
    it would be), and the draws reach both ends of an integer range."""
    i = random_array(1000, np.int16, rng, low=-3, high=5, host=True)
    assert i.min() == -3 and i.max() == 4  # (each of the 8 values missed: p = 7/8 ** 1000)
    f = random_array(10**5, np.float16, rng, low=-4, high=4, host=True)
    assert f.min() >= -4 and f.max() < 4
    c = random_array(10**5, np.complex64, rng, low=-1, high=1, host=True)
    for part in (c.real, c.imag):
        assert (-1 <= part).all() and (part < 1).all() and (part < 0).any()
    assert random_array((4,), np.float16, rng, low=0.0, high=1e-3, host=True).any()


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.complex64])
@pytest.mark.parametrize(("low", "high"), [(0, 1), (0.1, 0.2), (-3e4, 3e4)])
def test_random_floats_stay_in_half_open_bounds(cf, dtype, low, high):
    """A float64 draw rounded to the dtype can reach high or fall below low: it must not."""
    a = random_array(10**5, dtype, np.random.default_rng(7), low=low, high=high, host=True)
    assert a.dtype == np.dtype(dtype)
    # (compared in float64: a float16 compared with the Python float 0.2 rounds 0.2)
    for part in ([a.real, a.imag] if np.iscomplexobj(a) else [a]):
        p = part.astype(np.float64)
        assert (low <= p).all() and (p < high).all(), (p.min(), p.max())
    assert len(np.unique(a)) > 100  # still spread over the range


@pytest.mark.parametrize(("low", "high", "values"), [
    (-1e-7, 1e-7, {0.0, -2**-24, 2**-24}),  # symmetric: (low + high) / 2 is 0
    (-1e-7, 5e-8, {0.0, -2**-24}),  # 5e-8 rounds up to 2**-24, which is not below high
])
def test_random_floats_in_a_range_around_zero_are_never_all_zeros(cf, low, high, values):
    """float16 holds only 0 and +-2**-24 (its least subnormal) in these ranges, and its
    rounding makes many draws all zeros: the fix-up writes the nonzero value of least
    magnitude in range."""
    for seed in range(50):  # (seed 16 draws two zeros in the symmetric range)
        a = random_array((2,), np.float16, np.random.default_rng(seed), low=low, high=high,
                         host=True)
        assert a.any() and set(a.astype(np.float64).tolist()) <= values, (seed, a)


@pytest.mark.parametrize(("call", "builtin", "words"), [
    (lambda: random_array(3, np.bool_, low=0, high=1), ValueError, ("bools",)),
    (lambda: random_array(3, np.float32, low=0), ValueError, ("high=None",)),
    (lambda: random_array(3, np.int8, low=3, high=3), ValueError, ("[3, 3)",)),
    (lambda: random_array(3, np.int8, low=-1000), ValueError, ("int8", "-1000")),
    (lambda: random_array(3, np.int8, low=0.5, high=3), TypeError, ("low", "0.5")),
    (lambda: random_array(3, np.float32, 0), TypeError, ("rng", "int")),
    (lambda: random_array(2.5, np.float32), TypeError, ("shape",)),
    (lambda: poisoned(3, "U2"), TypeError, ("poisoned", "<U2")),
    (lambda: poisoned((2.5,), np.float32), TypeError, ("poisoned", "2.5")),
    (lambda: poisoned((-1,), np.float32), ValueError, ("poisoned", "-1")),
    (lambda: poisoned((2**62,), np.float32), MemoryError, ("poisoned", "out of memory")),
    (lambda: host_time_us(5), TypeError, ("host_time_us", "callable", "int 5")),
    (lambda: device_time_us(5), TypeError, ("device_time_us", "callable", "int 5")),
    (lambda: random_array(3, np.float16, low=0, high=1e6), ValueError,
     ("float16", "[-65504.0, 65504.0]", "1000000.0")),
    (lambda: random_array(3, np.float32, low=-1e300, high=1e300), ValueError,
     ("float32", "3.4028234663852886e+38", "1e+300")),
    (lambda: random_array(3, np.complex64, low=0, high=10**400), ValueError,
     ("complex64", "3.4028234663852886e+38")),
    (lambda: random_array(3, np.float64, low=-1e308, high=1e308), ValueError,
     ("high - low", "inf", "1e+308")),
    (lambda: random_array(3, np.float16, low=1.0001, high=1.0002), ValueError,
     ("float16", "[1.0001, 1.0002)")),
    (lambda: host_time_us(lambda: None, number=0), ValueError, ("number", "0")),
    (lambda: host_time_us(lambda: None, repeat=True), TypeError, ("repeat", "True")),
    (lambda: device_time_us(lambda: None, number=-5), ValueError, ("number", "-5")),
    (lambda: copy_bandwidth_tbps(3), ValueError, ("nbytes", "3")),
    (lambda: Timing.of([]), ValueError, ("Timing.of", "at least one", "got []")),
    (lambda: Timing.of("12"), TypeError, ("Timing.of", "finite real numbers >= 0", "str '12'")),
    (lambda: Timing.of([2.0, True]), TypeError, ("Timing.of", "bool True", "[2.0, True]")),
    (lambda: Timing.of([float("nan"), 1.0]), ValueError, ("Timing.of", ">= 0", "got nan")),
    (lambda: Timing.of([1.0, -0.5]), ValueError, ("Timing.of", ">= 0", "got -0.5")),
    (lambda: random_array(3, np.float32, host="no"), TypeError,
     ("random_array", "host must be True or False", "'no'")),
    (lambda: random_array(3, None), TypeError, ("random_array", "dtype", "got None")),
    (lambda: poisoned(3, None), TypeError, ("poisoned", "dtype", "got None")),
    (lambda: to_host({"a": 1}), TypeError, ("to_host", "dict {'a': 1}", "object array")),
    (lambda: to_host(None), TypeError, ("to_host", "NoneType", "object array")),
    (lambda: to_host([[1.0, 2.0], [3.0]]), ValueError, ("to_host", "list", "inhomogeneous")),
])
def test_helpers_state_their_rules(cf, call, builtin, words):
    with pytest.raises(builtin) as e:
        call()
    assert isinstance(e.value, cuflow.CuflowError)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


class _Table:
    """A host mapping that is also array data (as a pandas Series): its get takes a key."""

    def __init__(self, values):
        self.values = values

    def get(self, key, default=None):
        return default

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.values, dtype=dtype)


def test_to_host_copies_array_data_and_only_that(cf, rng):
    host = rng.uniform(-9, 9, size=(3, 4)).astype(np.float32)
    for x in (cf.asarray(host), host, _Table(host), host.tolist()):
        got = to_host(x)
        assert type(got) is np.ndarray and got is not x
        np.testing.assert_array_equal(got, host)
    assert to_host(np.float32(2.5)) == np.float32(2.5) and to_host(3).shape == ()
    assert_equal_host(_Table(host), host)


def test_testing_forwards_other_names_and_says_which_ones_it_lacks(cf):
    assert cuflow.testing.assert_allclose is cf.get_backend().xp.testing.assert_allclose
    assert not hasattr(cuflow.testing, "assert_allclsoe")
    with pytest.raises(AttributeError, match=r"^module 'cuflow\.testing' has no attribute "
                                             r"'assert_allclsoe' \(not in cuflow\.testing nor in "
                                             r"(numpy|cupy)\.testing"):
        cuflow.testing.assert_allclsoe  # noqa: B018  (the attribute access is the test)


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


def test_timers_report_microseconds_per_call(cf):
    """A call that sleeps 2 ms takes 2000 us or more of host time, however many calls a loop
    makes; on the NumPy backend the device timer's events record host time too."""
    def sleep():
        time.sleep(0.002)

    timers = [host_time_us] + ([] if cf.get_backend().is_gpu else [device_time_us])
    for timer in timers:
        for number in (1, 10):
            t = timer(sleep, number=number, repeat=2, warmup=0)
            # (a loop's time not divided by its 10 calls would be 20000 us or more)
            assert 2000 <= t.min_us < 10_000, (timer.__name__, number, t)


def test_device_time_calls_fn_warmup_plus_number_times_repeat(cf, rng):
    a = random_array((256,), "float32", rng)
    c = cf.empty_like(a)
    calls = []

    def counted():
        calls.append(1)
        cf.negative(a, dst=c)

    t = device_time_us(counted, number=5, repeat=3, warmup=2)
    assert len(t.samples_us) == 3
    assert len(calls) == 2 + 5 * 3  # no untimed call before each loop (nor a hold given up)
    assert_equal_host(c, -to_host(a))


def test_device_time_measurements_run_one_at_a_time(cf):
    """Two threads' measurements would share the hold's flag (on the GPU) and time each
    other's calls: the second waits for the first to end."""
    first_in, second_called = threading.Event(), threading.Event()
    overlapped = []

    def first():
        if not first_in.is_set():
            first_in.set()
            # (the second thread's measurement has 0.2 s to call its fn: it must not)
            overlapped.append(second_called.wait(0.2))

    def second():
        second_called.set()

    errors = []

    def measure(fn):
        try:
            device_time_us(fn, number=2, repeat=2, warmup=1)
        except BaseException as e:  # (reported below, not lost in the thread)
            errors.append(e)

    a = threading.Thread(target=measure, args=(first,))
    a.start()
    assert first_in.wait(30)
    b = threading.Thread(target=measure, args=(second,))
    b.start()
    a.join(30)
    b.join(30)
    assert not errors, errors
    assert overlapped == [False] and second_called.is_set()


@pytest.mark.gpu
def test_device_time_leaves_out_a_slow_hosts_launches(gpu_cf, rng):
    """Calls the host launches every 2 ms still time as their kernels: the hold queues them
    behind it until all are launched."""
    a, b = (random_array((256,), "float32", rng) for _ in range(2))
    c = gpu_cf.empty_like(a)

    def slow_host():
        time.sleep(0.002)
        gpu_cf.add(a, b, dst=c)

    t = device_time_us(slow_host, number=5, repeat=3, warmup=1)
    assert t.max_us < 500, t  # the kernel alone takes microseconds; its host path 2000 us
    assert_equal_host(c, a.get() + b.get())


@pytest.mark.gpu
def test_device_time_of_a_call_that_waits_for_the_gpu(gpu_cf, rng, monkeypatch):
    """A call that synchronizes cannot be held: the hold gives up, that run is taken again,
    and the rest queue an untimed call first; every run counts once."""
    a = random_array((256,), "float32", rng)
    c = gpu_cf.empty_like(a)

    def waits():
        gpu_cf.negative(a, dst=c)
        gpu_cf.synchronize()

    holds = []
    hold = _timer._Hold.hold
    monkeypatch.setattr(_timer._Hold, "hold", lambda self: (holds.append(1), hold(self))[1])
    t = device_time_us(waits, number=3, repeat=4, warmup=1)
    assert len(t.samples_us) == 4 and 0 < t.min_us <= t.max_us
    assert len(holds) == 1  # one hold given up, then none: not one 50 ms wait per run
    assert_equal_host(c, -a.get())


@pytest.mark.gpu
def test_device_time_leaves_no_stream_held_when_a_call_raises(gpu_cf, rng):
    a = random_array((256,), "float32", rng)
    c = gpu_cf.empty_like(a)
    calls = []

    def fails_on_its_sixth_call():
        calls.append(1)
        if len(calls) == 6:  # two warm-up calls, then the timed ones, held
            raise RuntimeError("boom")
        gpu_cf.negative(a, dst=c)

    with pytest.raises(RuntimeError, match="boom"):
        device_time_us(fails_on_its_sixth_call, number=5, repeat=2, warmup=2)
    flag = _timer._Hold(_timer.runtime()).flag  # [released, timed out]
    assert flag[0] == 1  # released by the host as the call raised
    gpu_cf.synchronize()
    assert flag[1] == 0  # so the hold never waited out its 50 ms
    assert_equal_host(c, -a.get())
