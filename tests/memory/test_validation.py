"""Argument and environment checks of cuflow.memory's module API (cuflow/memory/__init__.py,
_limit.py, _env.py): every deliberate error is a CuflowError naming the argument, the rule
and the value."""

from __future__ import annotations

import ctypes
import math
import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

import cuflow
from cuflow.memory import HostBackend, MemoryLimitWarning
from cuflow.memory._limit import limit_of


@pytest.fixture
def restore_limit(cf):
    pool = cf.memory.get_pool()
    old = pool.limit
    yield pool
    pool.limit = old


@pytest.mark.parametrize(("value", "exc", "words"), [
    (1.5, ValueError, ("limit", "(0, 1]", "1.5")),
    (float("nan"), ValueError, ("limit", "(0, 1]", "nan")),
    (-0.5, ValueError, ("limit", "(0, 1]", "-0.5")),
    (True, TypeError, ("limit", "bool", "True")),
    (-5, ValueError, ("size", ">= 0", "-5")),
    ("lots", ValueError, ("limit", "8GiB", "lots")),
    ("-1GB", ValueError, ("limit", "positive", "-1GB")),
    ("150%", ValueError, ("limit", "(0, 1]", "150%")),
    ([1], TypeError, ("limit", "list", "[1]")),
    (1e-15, ValueError, ("fraction", "at least 1 byte", "1e-15", "0 bytes")),
    ("\u0661\u0660\u0660", ValueError, ("limit", "ASCII digits", "'\u0661\u0660\u0660'")),
    ("\uff18GB", ValueError, ("limit", "ASCII digits")),  # a fullwidth 8
    ("1e-13%", ValueError, ("fraction", "at least 1 byte", "0 bytes")),
])
def test_set_limit_refuses(cf, restore_limit, value, exc, words):
    # a limit of its own (above any pool's reserve), so that a reset to None would show
    cf.memory.set_limit(3 << 40)
    with pytest.raises(cuflow.CuflowError) as ei:
        cf.memory.set_limit(value)
    assert isinstance(ei.value, exc)
    for w in words:
        assert w in str(ei.value)
    assert restore_limit.limit == 3 << 40  # a refused value leaves the limit as it was
    assert cf.memory.stats()["limit_bytes"] == 3 << 40


@pytest.mark.parametrize(("value", "expected"), [
    ("1GB", 10**9), ("8GiB", 8 << 30), ("512MB", 512 * 10**6), ("8e9", 8 * 10**9),
    (123456, 123456), (None, None), ("0", None), ("0.0", None), (0, None)])
def test_set_limit_accepts_the_env_forms(cf, restore_limit, value, expected):
    cf.memory.set_limit(value)
    assert restore_limit.limit == expected
    assert cf.memory.stats()["limit_bytes"] == expected


@pytest.mark.parametrize(("value", "frac"), [(0.8, 0.8), ("80%", 0.8), ("0.5", 0.5)])
def test_a_fraction_limit_runs_on_every_backend(cf, restore_limit, value, frac):
    # a fraction of the device's memory on the GPU, of the host's on the NumPy backend
    cf.memory.set_limit(value)
    first = restore_limit.limit
    assert 0 < first < 1 << 60 and cf.memory.stats()["limit_bytes"] == first
    cf.memory.set_limit(frac / 2)  # the same total: half the bytes
    assert abs(restore_limit.limit * 2 - first) <= 2


@given(st.text(min_size=1, max_size=6).filter(lambda t: not t.strip().isascii()))
def test_a_limit_string_outside_ascii_is_refused(text):
    """The documented forms are ASCII ('8GiB', '80%', '8e9'): other scripts' digits, which
    float() would take, are refused naming the rule."""
    with pytest.raises(cuflow.memory.MemoryValueError, match="in ASCII digits"):
        limit_of(text, HostBackend(capacity=10**9))


@given(st.floats(min_value=1e-6, max_value=1.0))
def test_fractions_of_a_known_capacity(x):
    assert limit_of(x, HostBackend(capacity=10**9)) == int(x * 10**9)


@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True).filter(
    lambda v: math.isnan(v) or not 0 < v <= 1), st.booleans(), st.text(max_size=8).filter(
    lambda t: t.strip() and not any(c.isdigit() for c in t))))
def test_other_limits_are_refused(v):
    with pytest.raises(cuflow.CuflowError) as ei:
        limit_of(v, HostBackend(capacity=10**9))
    assert isinstance(ei.value, ValueError | TypeError)


def test_limit_below_use_warns_applies_to_new_segments_and_keeps_data(cf, restore_limit):
    pool = restore_limit
    held = pool.alloc(3 << 20, 0)  # the pool holds more than the new limit
    # more than every cached block together, so a new segment is needed (earlier tests of
    # the process leave cached segments on a GPU)
    big = cf.memory.stats()["reserved_bytes.all.current"] + (4 << 20)
    ctypes.memset(held.ptr, 0x5A, held.req) if not cf.memory._INSTALLED else None
    try:
        with pytest.warns(MemoryLimitWarning, match="more than the new limit"):
            cf.memory.set_limit(1000)
        assert pool.limit == 1000
        with pytest.raises(cuflow.OutOfMemoryError, match="limit"):
            pool.alloc(big, 0)
        if not cf.memory._INSTALLED:  # host memory: the held block is intact
            assert ctypes.string_at(held.ptr, held.req) == b"\x5a" * held.req
    finally:
        pool.limit = None
        pool.free(held)


@pytest.mark.parametrize("name", ["stats", "summary", "snapshot", "empty_cache",
                                  "reset_peak_stats", "set_limit"])
def test_a_bad_device_is_refused_naming_the_function_called(cf, name):
    args = (None,) if name == "set_limit" else ()
    with pytest.raises(cuflow.memory.MemoryValueError,
                       match=rf"^cuflow.memory.{name}: device must be in \[0, ") as ei:
        getattr(cf.memory, name)(*args, device=99)
    assert "get_pool" not in str(ei.value) and "got 99" in str(ei.value)


@pytest.mark.parametrize(("call", "exc", "words"), [
    (lambda m: m.empty_cache(device=99), ValueError, ("device", "[0,", "99")),
    (lambda m: m.stats(device="x"), TypeError, ("device", "int", "'x'")),
    (lambda m: m.summary(device=-1), ValueError, ("device", "[0,", "-1")),
    (lambda m: m.snapshot(device=True), TypeError, ("device", "bool", "True")),
    (lambda m: m.set_limit(None, device=1.0), TypeError, ("device", "float", "1.0")),
    (lambda m: m.warmup(42), TypeError, ("fn", "callable", "42")),
    (lambda m: m.warmup(print, keep="yes"), TypeError, ("keep", "True or False", "'yes'")),
    (lambda m: m.using_pool(3), TypeError, ("using_pool", "cuflow.memory.Pool", "int 3")),
    (lambda m: m.using_pool(m.HostBackend()), TypeError, ("pool", "HostBackend")),
    (lambda m: m.round_size(-1), ValueError, ("round_size", ">= 0", "-1")),
    (lambda m: m.round_size(1.5), TypeError, ("round_size", "int", "1.5")),
    (lambda m: m.size_class(-5), ValueError, ("size_class", ">= 0", "-5")),
    (lambda m: m.size_class(True), TypeError, ("size_class", "int", "True")),
    (lambda m: m.HostBackend(capacity="x"), TypeError, ("capacity", "int", "str 'x'")),
    (lambda m: m.HostBackend(capacity=True), TypeError, ("capacity", "int", "bool True")),
    (lambda m: m.HostBackend(capacity=-1), ValueError, ("capacity", ">= 0", "-1")),
    (lambda m: m.Pool(m.HostBackend()).free_ptr({}), TypeError, ("free_ptr", "int", "dict {}")),
    (lambda m: m.Pool(m.HostBackend()).stop_recording(), ValueError,
     ("stop_recording", "active recording")),
])
def test_module_api_refuses(cf, call, exc, words):
    with pytest.raises(cuflow.CuflowError) as ei:
        call(cf.memory)
    assert isinstance(ei.value, exc)
    for w in words:
        assert w in str(ei.value)


def test_malloc_needs_the_cupy_backend(cf):
    """Pool.malloc is CuPy's allocator hook: on another backend it is refused at once,
    naming the rule and the backend (not a ModuleNotFoundError from inside)."""
    from cuflow.core._runtime import runtime  # noqa: PLC0415  (which backend is active)

    if runtime().is_gpu:
        pytest.skip("the CuPy backend has the hook")
    with pytest.raises(cuflow.BackendError, match="needs the CuPy backend, but the active "
                                                  "backend is 'numpy'"):
        cf.memory.get_pool().malloc  # noqa: B018


def test_record_stream_refuses_what_is_not_a_stream(cf):
    a = cf.testing.random_array((1000,), "float32")
    with pytest.raises(cuflow.CuflowError) as ei:
        cf.memory.record_stream(a, "bogus")
    assert isinstance(ei.value, TypeError) and "stream" in str(ei.value)
    assert "'bogus'" in str(ei.value)
    for junk in ("junk", 3, None):  # (not an array: nothing would be recorded)
        with pytest.raises(cuflow.memory.MemoryTypeError, match="array must be an array"):
            cf.memory.record_stream(junk, cf.Stream())


def test_a_limiting_adaptor_needs_a_backend_and_a_backend_refuses_past_its_capacity():
    for up in (None, "host", object()):
        with pytest.raises(cuflow.memory.MemoryTypeError,
                           match="upstream must be a cuflow.memory.Backend"):
            cuflow.memory.LimitingAdaptor(up, 5)
    with pytest.raises(cuflow.OutOfMemoryError, match=r"HostBackend: 1000 bytes requested, 100 "
                                                      r"of its capacity 100 left"):
        cuflow.memory.HostBackend(capacity=100).alloc(1000, 0)


def test_every_device_has_its_pool(cf):
    from cuflow.core._runtime import runtime  # noqa: PLC0415  (the device count to check)

    n = max(runtime().device_count, 1)
    pools = [cf.memory.get_pool(i) for i in range(n)]
    assert len({id(p) for p in pools}) == n
    for i in range(n):
        assert cf.memory.stats(device=i)["allocated_bytes.all.current"] >= 0
        assert cf.memory.empty_cache(device=i) >= 0
    with pytest.raises(cuflow.CuflowError, match=f"\\[0, {n}\\)"):
        cf.memory.stats(device=n)


_IMPORT = "import warnings, cuflow.memory as m; print('imported')"


@pytest.mark.parametrize(("name", "value", "allowed"), [
    ("CUFLOW_POOL", "maybe", "'off'"), ("CUFLOW_POOL_BACKEND", "magic", "'cudamalloc'"),
    ("CUFLOW_POOL_HOTPATH", "rust", "'python'")])
def test_bogus_pool_env_warns_once_naming_the_choices(name, value, allowed):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUFLOW_POOL")}
    env[name] = value
    r = subprocess.run([sys.executable, "-W", "always", "-c", _IMPORT], env=env,
                       capture_output=True, text=True, check=True)
    assert "imported" in r.stdout
    warned = [line for line in r.stderr.splitlines() if "MemoryLimitWarning" in line]
    assert len(warned) == 1 and name in warned[0] and allowed in warned[0]
    assert warned[0].startswith("<string>:1: ")  # the import that read it, not cuflow's file


_FIRST_POOL = """
import cuflow
print('imported')
try:
    cuflow.memory.get_pool()
except cuflow.memory.MemoryValueError as e:
    print('refused:', e)
"""


def test_bogus_memory_limit_env_refuses_every_pool():
    """The package imports (so ``python -m cuflow info`` can name the setting), and no pool
    is built without the limit asked for."""
    env = {k: v for k, v in os.environ.items() if k != "CUFLOW_MEMORY_LIMIT"}
    env["CUFLOW_MEMORY_LIMIT"] = "plenty"
    r = subprocess.run([sys.executable, "-c", _FIRST_POOL], env=env, capture_output=True,
                       text=True, check=True)
    assert r.stdout.splitlines()[0] == "imported"
    assert r.stdout.splitlines()[1].startswith("refused: CUFLOW_MEMORY_LIMIT='plenty'")


@pytest.mark.parametrize(("value", "expected"), [("1GiB", "1073741824"), ("", "None")])
def test_memory_limit_env_applies_to_the_numpy_backends_pool(value, expected):
    """CUFLOW_MEMORY_LIMIT sets the limit of the host pool the NumPy backend reports, as it
    does for device pools."""
    env = {k: v for k, v in os.environ.items() if k != "CUFLOW_MEMORY_LIMIT"}
    env.update(CUFLOW_MEMORY_LIMIT=value, CUFLOW_BACKEND="numpy")
    code = "import cuflow.memory as m; print(m.stats()['limit_bytes'], m.get_pool().limit)"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       check=True)
    assert r.stdout.split() == [expected, expected]
