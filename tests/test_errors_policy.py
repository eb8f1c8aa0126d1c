"""The error policy (docs/errors.md): every deliberate raise is a CuflowError, and the cases
it names get a clear one.

The first test reads cuflow's source with ``ast`` and fails on ``raise <builtin>(...)``
outside the allowlist below; the others go through the public API, one per rule.
"""

from __future__ import annotations

import ast
import builtins
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import cuflow
from cuflow.testing import to_host

ROOT = pathlib.Path(cuflow.__file__).parent

_BUILTIN_ERRORS = {n for n in dir(builtins) if isinstance(getattr(builtins, n), type)
                   and issubclass(getattr(builtins, n), BaseException)}

#: (file relative to cuflow/, enclosing function, builtin): raises that stay builtins, and why.
ALLOWED = {
    # the attribute protocol: a module's or forwarding module's __getattr__ says "no such
    # name" with AttributeError, which hasattr(), copy and pickle probe for
    ("__init__.py", "__getattr__", "AttributeError"): "attribute protocol",
    ("_forward.py", "forward", "AttributeError"): "attribute protocol (module __getattr__)",
    ("_forward.py", "__getattr__", "AttributeError"): "attribute protocol",
    ("testing/__init__.py", "__getattr__", "AttributeError"): "attribute protocol",
    # the benchmark command line exits with a message, as argparse does
    ("bench/_plot.py", "plot", "SystemExit"): "command-line exit",
    # internal: the pool catches it, retries, then raises OutOfMemoryError with the sizes
    # (the page heap's placement, compiled in _pageheap.c too, and the driver's refusal)
    ("memory/_expandable.py", "alloc", "MemoryError"): "internal signal",
    ("memory/_expandable.py", "_call", "MemoryError"): "internal signal",
    # a test helper's failed check is an assertion, as numpy.testing's are
    ("testing/__init__.py", "assert_equal_host", "AssertionError"): "test assertion",
}


def _builtin_raises():
    """(file, function, builtin, line) of every ``raise <builtin>`` in cuflow's source."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(), str(path))
        stack = [(tree, "<module>")]
        while stack:
            node, fn = stack.pop()
            for child in ast.iter_child_nodes(node):
                name = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) \
                    else fn
                if isinstance(child, ast.Raise) and child.exc is not None:
                    exc = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
                    if isinstance(exc, ast.Name) and exc.id in _BUILTIN_ERRORS:
                        found.append((rel, fn, exc.id, child.lineno))
                stack.append((child, name))
    return found


def test_every_deliberate_raise_is_a_cuflow_error():
    hits = [h for h in _builtin_raises() if h[:3] not in ALLOWED]
    assert not hits, "raise a CuflowError subclass (and the builtin) instead:\n" + "\n".join(
        f"  cuflow/{f}:{line} in {fn}(): raise {exc}" for f, fn, exc, line in hits)


def test_the_allowlist_has_no_stale_entries():
    seen = {h[:3] for h in _builtin_raises()}
    assert not set(ALLOWED) - seen, f"no longer raised: {sorted(set(ALLOWED) - seen)}"


def test_the_scan_finds_what_it_looks_for(tmp_path, monkeypatch):
    # the scan itself is checked on a module planted for it
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "m.py").write_text("def f():\n    raise ValueError('x')\n\n"
                              "def g():\n    raise cuflow.ArgumentError('y')\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", pkg)
    assert _builtin_raises() == [("m.py", "f", "ValueError", 2)]


def _is_clear(e: BaseException, *words: str) -> None:
    """A CuflowError whose message names each of ``words``."""
    assert isinstance(e, cuflow.CuflowError), f"{type(e).__mro__} is not a CuflowError: {e}"
    for w in words:
        assert w in str(e), f"{w!r} not in {str(e)!r}"


# ------------------------------------------------------------------ creation
def test_a_size_no_memory_holds_is_out_of_memory_giving_the_bytes(cf):
    with pytest.raises(MemoryError) as e:
        cf.empty(2**62)
    _is_clear(e.value, "cuflow.empty", "out of memory", str(2**62 * 8), "bytes")
    assert isinstance(e.value, cf.OutOfMemoryError)
    with pytest.raises(cf.OutOfMemoryError, match="zeros_like"):
        cf.zeros_like(cf.zeros(3), shape=(2**40, 2**40))
    with pytest.raises(cf.OutOfMemoryError, match="arange"):
        cf.arange(0, 2**62)
    with pytest.raises(cf.OutOfMemoryError, match="linspace"):
        cf.linspace(0.0, 1.0, 2**62)
    with pytest.raises(cf.OutOfMemoryError, match="eye"):
        cf.eye(2**32)
    with pytest.raises(cf.ArgumentError, match="finite"):
        cf.arange(0.0, float("inf"))
    assert to_host(cf.arange(10, 1, -3)).tolist() == [10, 7, 4]


@pytest.mark.parametrize("shape, err", [(-1, ValueError), ((3, -2), ValueError),
                                        (2.5, TypeError), ((3, 1.0), TypeError),
                                        ((True, 2), TypeError), ("ab", TypeError)])
def test_shapes_are_ints_at_least_zero(cf, shape, err):
    with pytest.raises(err) as e:
        cf.zeros(shape)
    _is_clear(e.value, "cuflow.zeros", "shape")


def test_creation_still_takes_numpy_ints_and_empty_shapes(cf):
    assert cf.zeros((np.int64(2), 3)).shape == (2, 3)
    assert cf.ones(()).shape == () and cf.empty(0).shape == (0,)
    assert cf.full(np.int32(4), 7).shape == (4,)


# ------------------------------------------------------------------ interop
@pytest.mark.parametrize("obj", [object(), None, "abc", {1: 2}, [1, "a"]])
def test_asarray_refuses_what_is_not_numbers(cf, obj):
    with pytest.raises(TypeError) as e:
        cf.asarray(obj)
    _is_clear(e.value, "cuflow.asarray", type(obj).__name__)


def test_asarray_refuses_ragged_and_overflowing_input(cf):
    with pytest.raises(ValueError) as e:
        cf.asarray([[1, 2], [3]])
    _is_clear(e.value, "cuflow.asarray")
    with pytest.raises(ValueError) as e:
        cf.asarray([300], dtype="uint8")
    _is_clear(e.value, "cuflow.asarray", "300")


@pytest.mark.parametrize("call, words", [
    # a Python float truncated toward zero must fit the integer dtype (NumPy wraps these)
    (lambda cf: cf.asarray(256.0, dtype="uint8"), ("256.0", "uint8", "[0, 255]")),
    (lambda cf: cf.asarray(-1.5, dtype="uint8"), ("-1.5", "uint8")),
    (lambda cf: cf.asarray([1.0, 300.7], dtype="uint8"), ("300.7", "uint8")),
    # an int past int64 and uint64 is a number, too large, not "not a number"
    (lambda cf: cf.asarray(2**64), (str(2**64), "int64", "uint64")),
    # a range's values must fit its dtype
    (lambda cf: cf.arange(250, 260, dtype="uint8"), ("arange", "259", "uint8")),
    (lambda cf: cf.arange(-3, 3, dtype="uint8"), ("arange", "-3", "uint8")),
    (lambda cf: cf.arange(65500.0, 65700.0, 50.0, dtype="float16"), ("arange", "float16")),
    (lambda cf: cf.arange(0, 10, 2**70), ("arange", str(2**70))),
    (lambda cf: cf.linspace(0, 300, 3, dtype="uint8"), ("linspace", "300", "uint8")),
    # NumPy rounds an integer linspace down: -0.999 would wrap to 255
    (lambda cf: cf.linspace(-0.999, 10, 5, dtype="uint8"), ("linspace", "-0.999", "uint8")),
    (lambda cf: cf.linspace(0, np.int64(300), 3, dtype=np.uint8), ("linspace", "300")),
])
def test_numbers_a_dtype_cannot_hold_are_refused_not_wrapped(cf, call, words):
    with pytest.raises(OverflowError) as e:
        call(cf)
    _is_clear(e.value, *words)


def test_a_linspace_of_a_real_dtype_refuses_endpoints_it_cannot_hold(cf):
    # a cast would make INT_MIN of nan and inf, and drop an imaginary part in silence
    for start, stop in [(float("nan"), 1.0), (0, float("inf")), (np.float32(-np.inf), 2)]:
        with pytest.raises(cf.ArgumentError) as e:
            cf.linspace(start, stop, 3, dtype="int32")
        _is_clear(e.value, "cuflow.linspace", "must be finite for int32")
    with pytest.raises(cf.ArgumentTypeError) as e:
        cf.linspace(0, 1 + 1j, 3, dtype="float32")
    _is_clear(e.value, "cuflow.linspace", "(1+1j)", "float32 holds real numbers")
    for got, want in [(cf.linspace(0, 1 + 0j, 3, dtype="float32"),
                       np.linspace(0, 1, 3, dtype=np.float32)),
                      (cf.linspace(-2.5, float("inf"), 3, dtype="float32"),
                       np.linspace(-2.5, np.inf, 3, dtype=np.float32))]:
        np.testing.assert_array_equal(to_host(got), want)


def test_ranges_and_floats_that_fit_convert_as_numpy_does(cf):
    for got, want in [(cf.asarray(255.9, dtype="uint8"), np.asarray(255.9).astype(np.uint8)),
                      (cf.asarray([-0.5, 3.7], dtype="uint8"), np.array([0, 3], np.uint8)),
                      (cf.arange(3, 256, 7, dtype="uint8"),
                       np.arange(3, 256, 7, dtype=np.uint8)),
                      (cf.arange(0.0, 5.0, 1.5, dtype="int32"),
                       np.arange(0.0, 5.0, 1.5, dtype=np.int32)),
                      (cf.linspace(0.5, 10.5, 4, dtype="int16"),
                       np.linspace(0.5, 10.5, 4, dtype=np.int16)),
                      # the values a range holds, not its bounds, must fit
                      (cf.linspace(0, 256, 256, endpoint=False, dtype="uint8"),
                       np.linspace(0, 256, 256, endpoint=False, dtype=np.uint8)),
                      (cf.linspace(0, 300, 1, dtype="uint8"),
                       np.linspace(0, 300, 1, dtype=np.uint8)),
                      # an integer range of a float step steps by trunc(start + step) - start
                      (cf.arange(0, 300, 1.5, dtype="uint8"),
                       np.arange(0, 300, 1.5, dtype=np.uint8)),
                      # NumPy scalars as bounds and steps
                      (cf.arange(np.int64(2), 10, dtype=np.int32),
                       np.arange(np.int64(2), 10, dtype=np.int32)),
                      (cf.arange(np.float32(0.5), 5, np.int8(1), dtype=np.int8),
                       np.arange(np.float32(0.5), 5, np.int8(1), dtype=np.int8))]:
        np.testing.assert_array_equal(to_host(got), want)
        assert got.dtype == want.dtype


@pytest.mark.parametrize("proto", [None, "abc", [1, "a"]])
def test_a_like_prototype_must_be_numbers(cf, proto):
    for fn in (cf.empty_like, cf.zeros_like, cf.ones_like):
        with pytest.raises(TypeError) as e:
            fn(proto)
        _is_clear(e.value, fn.__name__, type(proto).__name__)


def test_an_array_fill_value_broadcasts_and_casts_as_astype(cf):
    fill = np.array([1.5, -2.0, 300.0])
    got = cf.full((2, 3), cf.asarray(fill), dtype="float32")
    np.testing.assert_array_equal(to_host(got), np.broadcast_to(fill.astype(np.float32), (2, 3)))
    got = cf.full(3, cf.asarray(np.array([7, -8, 9])))
    np.testing.assert_array_equal(to_host(got), [7, -8, 9])


# ------------------------------------------------------------------ streams
@pytest.mark.parametrize("priority", ["high", 1.5, True, [0]])
def test_stream_priority_is_an_int(cf, priority):
    with pytest.raises(TypeError) as e:
        cf.Stream(priority=priority)
    _is_clear(e.value, "cuflow.Stream", "priority", repr(priority))


def test_stream_and_event_flags_are_bools(cf):
    with pytest.raises(TypeError, match="non_blocking"):
        cf.Stream(non_blocking="yes")
    with pytest.raises(TypeError, match="timing"):
        cf.Event(timing="no")
    with pytest.raises(TypeError, match="blocking"):
        cf.Event(blocking=2)
    s = cf.Stream(non_blocking=np.True_, priority=np.int64(0))  # NumPy's bool and int pass
    with s:
        x = cf.ones(4) * 2
    s.synchronize()
    assert s.query() and float(x.sum()) == 8.0
    assert (s.ptr != 0) == cf.get_backend().is_gpu  # on the GPU: a CUDA stream of its own


def test_streams_and_events_validate_their_arguments(cf):
    with pytest.raises(ValueError) as e:
        cf.streams(-1)
    _is_clear(e.value, "streams", "-1")
    with pytest.raises(ValueError) as e:  # not millions of streams (nor the memory they take)
        cf.streams(10**9)
    _is_clear(e.value, "streams", "1024", str(10**9))
    with pytest.raises(TypeError):
        cf.streams(2.0)
    with pytest.raises(TypeError) as e:
        cf.Stream().wait("event")
    _is_clear(e.value, "wait", "str")
    with pytest.raises(ValueError) as e:
        cf.Event().elapsed_time(cf.Event())
    _is_clear(e.value, "elapsed_time", "recorded")
    with pytest.raises(cf.ArgumentError) as e:
        cf.Stream(priority=2**40)
    _is_clear(e.value, "priority", str(2**40))


@pytest.mark.parametrize(("value", "dtype", "exc", "words"), [
    (None, "float32", TypeError, ("fill_value", "None")),
    (300, "uint8", ValueError, ("fill_value", "300", "[0, 255]")),
    (2.5, "int32", ValueError, ("fill_value", "whole", "2.5")),
    (float("nan"), "int8", ValueError, ("fill_value", "nan")),
    (1e300, "float32", ValueError, ("fill_value", "1e+300", "float32")),
    (3 + 1j, "float32", TypeError, ("fill_value", "complex", ".real")),
    ((None, None), "float32", TypeError, ("fill_value", "number", "(None, None)")),
    ([1.0, 2.0, 3.0], None, TypeError, ("fill_value", "number", "list")),
])
def test_fill_values_the_dtype_cannot_hold_are_refused(cf, value, dtype, exc, words):
    with pytest.raises(exc) as e:
        cf.full(3, value, dtype=dtype)
    _is_clear(e.value, "cuflow.full", *words)
    assert to_host(cf.full(3, 255, dtype="uint8")).tolist() == [255] * 3
    assert np.isinf(to_host(cf.full(2, float("inf"), dtype="float32"))).all()


def test_a_complex_fill_value_of_no_imaginary_part_fills_a_real_array(cf):
    # its real part, with no warning that a cast discards the imaginary one
    assert to_host(cf.full(3, 2.5 + 0j, dtype="float32")).tolist() == [2.5] * 3
    assert to_host(cf.full(2, -3 + 0j, dtype="int16")).tolist() == [-3, -3]


@pytest.mark.parametrize("shape", [False, (2, True), "6", 6.0])
def test_reshape_to_a_shape_that_is_not_integers_is_refused(cf, shape):
    # CuPy would read False as a size of 0; NumPy refuses it
    with pytest.raises(cf.ArgumentTypeError) as e:
        cf.reshape(cf.zeros(6), shape)
    _is_clear(e.value, "cuflow.reshape", "shape must be", repr(shape))


def test_reshape_to_a_size_that_does_not_match_is_an_argument_error(cf):
    with pytest.raises(cf.ArgumentError) as e:
        cf.reshape(cf.zeros(6), (4, 2))
    _is_clear(e.value, "cuflow.reshape", "size 6")


# ------------------------------------------------------------------ debug switches
@pytest.mark.parametrize("var", ["CUFLOW_NVTX", "CUFLOW_SYNC_DEBUG"])
@pytest.mark.parametrize("value, ok", [("maybe", False), ("2", False), ("ON", True),
                                       ("off", True), ("", True)])
def test_debug_environment_variables_refuse_unknown_values_at_import(var, value, ok):
    env = dict(os.environ, **{var: value})
    r = subprocess.run([sys.executable, "-W", "ignore", "-c", "import cuflow"], env=env,
                       capture_output=True, text=True, timeout=120)
    if ok:
        assert r.returncode == 0, r.stderr
    else:
        assert r.returncode != 0
        assert "ArgumentError" in r.stderr and var in r.stderr and repr(value) in r.stderr
        assert "true" in r.stderr and "off" in r.stderr  # the allowed values are named


@pytest.mark.parametrize("value, ok", [("maybe", False), ("0", True)])
def test_the_engine_switch_refuses_unknown_values_at_import(value, ok):
    env = dict(os.environ, CUFLOW_EW_ENGINE=value)
    r = subprocess.run([sys.executable, "-W", "ignore", "-c",
                        "import cuflow.core._fastpath as f; print(f.ENGINE_LAUNCH)"],
                       env=env, capture_output=True, text=True, timeout=120)
    if ok:
        assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr
    else:
        assert "ArgumentError" in r.stderr and "CUFLOW_EW_ENGINE" in r.stderr


@pytest.mark.parametrize("value, want", [(None, True), ("", True), (" Off ", False),
                                         ("YES", True), ("no", False)])
def test_switches_default_when_unset_and_read_on_off_words(monkeypatch, value, want):
    from cuflow._env import env_switch
    if value is None:
        monkeypatch.delenv("CUFLOW_TEST_SWITCH", raising=False)
    else:
        monkeypatch.setenv("CUFLOW_TEST_SWITCH", value)
    assert env_switch("CUFLOW_TEST_SWITCH", default=True) is want


def test_debug_switches_take_bools(cf):
    with pytest.raises(TypeError, match="sync"):
        cf.debug.sync("yes")
    with pytest.raises(TypeError, match="nvtx"):
        cf.debug.nvtx(2)
    assert not cf.debug.is_sync()
    with pytest.raises(ValueError, match="color"):
        cf.annotate("x", color="mauve")
    with pytest.raises(ValueError, match="ARGB"):
        cf.annotate("x", color=-1)
    with pytest.raises(TypeError, match="name"):
        cf.annotate(3)


# ------------------------------------------------------------------ hierarchy
@pytest.mark.parametrize("name, builtin", [
    ("ArgumentError", ValueError), ("ArgumentTypeError", TypeError),
    ("OutOfMemoryError", MemoryError), ("CudaError", RuntimeError),
    ("DstTypeError", TypeError), ("DstShapeError", ValueError),
    ("AxisError", ValueError), ("AxisError", IndexError), ("AxisError", np.exceptions.AxisError),
    ("ArgumentOverflowError", OverflowError), ("ArgumentOverflowError", ValueError),
    ("LinAlgError", np.linalg.LinAlgError), ("LinAlgError", ValueError)])
def test_each_error_is_also_the_builtin_a_user_catches(name, builtin):
    cls = getattr(cuflow, name)
    assert issubclass(cls, cuflow.CuflowError) and issubclass(cls, builtin)


def test_subpackage_errors_are_cuflow_errors():
    from cuflow.pipeline import BufferizerHookError, BufferizerStateError, PipelineError

    assert issubclass(cuflow.image.ImageFormatError, ValueError)
    assert issubclass(cuflow.image.ImageTypeError, TypeError)
    assert issubclass(BufferizerStateError, BufferError)
    assert issubclass(BufferizerHookError, RuntimeError)
    assert issubclass(PipelineError, RuntimeError)
    for cls in (cuflow.image.ImageFormatError, cuflow.image.ImageTypeError,
                BufferizerStateError, BufferizerHookError, PipelineError,
                cuflow.BufferizerError):
        assert issubclass(cls, cuflow.CuflowError)


def test_views_with_bad_axes_or_orders_are_argument_errors(cf):
    a = cf.zeros((2, 3))
    with pytest.raises(IndexError) as e:
        cf.transpose(a, (0, 5))
    _is_clear(e.value, "cuflow.transpose", "5")
    with pytest.raises(TypeError) as e:
        cf.transpose(a, "ab")
    _is_clear(e.value, "cuflow.transpose")
    with pytest.raises(ValueError) as e:
        cf.ravel(a, "Q")
    _is_clear(e.value, "cuflow.ravel", "Q")
    with pytest.raises(IndexError) as e:  # past C's integers as past the axis
        cf.take(cf.zeros(3), 2**70)
    _is_clear(e.value, "cuflow.take", "[-3, 3)", str(2**70))


@pytest.mark.parametrize(("call", "builtin", "words"), [
    (lambda cf: cf.where(cf.ones(3) > 0, cf.ones(3)), ValueError, ("cuflow.where", "x1", "x2")),
    (lambda cf: cf.linalg.eigvals(cf.ones((2, 3))), ValueError, ("cuflow.linalg.eigvals",)),
    (lambda cf: cf.linalg.eig(cf.ones((2, 3))), ValueError, ("cuflow.linalg.eig",)),
    (lambda cf: cf.argsort(cf.ones((2, 3)), axis=5, descending=True), IndexError,
     ("cuflow.argsort", "[-2, 2)", "5")),
    (lambda cf: cf.fft.fftfreq(-1), ValueError, ("cuflow.fft.fftfreq", "positive", "-1")),
    (lambda cf: cf.fft.fftfreq(0), ValueError, ("cuflow.fft.fftfreq", "positive", "0")),
    (lambda cf: cf.fft.rfftfreq(2.5), TypeError, ("cuflow.fft.rfftfreq", "integer", "2.5")),
    (lambda cf: cf.fft.fftfreq(None), TypeError, ("cuflow.fft.fftfreq", "None")),
    (lambda cf: cf.fft.fftfreq(4, dtype=cf.int32), TypeError,
     ("cuflow.fft.fftfreq", "real floating", "int32")),
    (lambda cf: cf.fft.rfftfreq(8, d=0), ZeroDivisionError, ("cuflow.fft.rfftfreq", "nonzero", "0")),
    (lambda cf: cf.average(cf.arange(4), weights=cf.zeros(4)), ZeroDivisionError,
     ("cuflow.average",)),
    (lambda cf: cf.finfo(cf.int32), ValueError, ("cuflow.finfo", "floating", "int32")),
    (lambda cf: cf.iinfo(cf.float32), ValueError, ("cuflow.iinfo", "integer", "float32")),
    (lambda cf: cf.finfo("no such dtype"), TypeError, ("cuflow.finfo", "no such dtype")),
    (lambda cf: cf.astype([1, 2], cf.float32), TypeError, ("cuflow.astype", "list")),
    (lambda cf: cf.fusion.erf(cf.asarray([1j])), TypeError, ("cuflow.erf", "complex128")),
    (lambda cf: cf.kernels.warmup("nope"), KeyError, ("warmup", "'nope'")),
])
def test_namespace_functions_state_their_rule(cf, call, builtin, words):
    with pytest.raises(builtin) as e:
        call(cf)
    _is_clear(e.value, *words)


def test_argsort_of_a_zero_dimensional_array_is_numpys_argsort(cf):
    for descending in (False, True):  # (CuPy refuses rank 0)
        assert to_host(cf.argsort(cf.asarray(3.0), descending=descending)).tolist() == [0]
        assert to_host(cf.argsort(cf.asarray(3.0), axis=None,
                                  descending=descending)).tolist() == [0]
    with pytest.raises(cuflow.AxisError) as e:
        cf.argsort(cf.asarray(3.0), axis=2)
    _is_clear(e.value, "cuflow.argsort", "axis 2", "0-d")


def test_descending_sorts_split_and_reductions_of_odd_inputs(cf):
    for fn in (cf.sort, cf.argsort):  # host data: NumPy's reading on NumPy, refused on the GPU
        if cf.get_backend().is_gpu:
            with pytest.raises(cuflow.DstTypeError, match="convert with cuflow.asarray"):
                fn([3, 1, 2], descending=True)
        else:
            assert to_host(fn([3, 1, 2], descending=True)).tolist() == (
                [3, 2, 1] if fn is cf.sort else [0, 2, 1])
    with pytest.raises(cuflow.ArgumentError) as e:
        cf.split(cf.arange(4), 0)
    _is_clear(e.value, "cuflow.split")
    with pytest.raises(cuflow.DstTypeError) as e:
        cf.sum(3)
    _is_clear(e.value, "cuflow.sum", "builtins.int")
    assert "or scalars" not in str(e.value)  # (a reduction takes an array)


def test_eigenvalues_of_integer_matrices_are_complex128(cf):
    # (computed in float64, as NumPy does; complex64 lost their precision)
    for dt in ("int8", "uint8", "bool", "int64"):
        m = cf.asarray(np.array([[0, 1], [1, 0]]).astype(dt))
        r = cf.linalg.eig(m)
        assert r.eigenvalues.dtype == r.eigenvectors.dtype == cf.linalg.eigvals(m).dtype \
            == np.complex128
    m = cf.asarray(np.array([[0, 1], [1, 0]], np.float32))
    assert cf.linalg.eigvals(m).dtype == np.complex64


def test_numpys_exception_classes_still_catch(cf):
    """Code written against NumPy catches cuflow's errors with NumPy's classes: an axis out
    of range is NumPy's AxisError, a Python int past a dtype an OverflowError, a failed
    linear-algebra precondition a LinAlgError."""
    x = cf.ones((2, 3))
    for call in (lambda: cf.sum(x, axis=2), lambda: cf.squeeze(x, axis=3),
                 lambda: cf.concatenate([x, x], axis=5), lambda: x.max(axis=-3),
                 lambda: cf.argsort(x, axis=4, descending=True)):
        with pytest.raises(np.exceptions.AxisError) as e:
            call()
        _is_clear(e.value, "axis")
    u8 = cf.asarray(np.arange(3, dtype=np.uint8))
    for call in (lambda: cf.add(u8, 300), lambda: cf.full(2, 300, dtype=cf.uint8),
                 lambda: cf.asarray([300], dtype=cf.uint8),
                 lambda: cf.asarray(300, dtype=cf.uint8),
                 lambda: cf.asarray(-300, dtype=cf.int8)):
        with pytest.raises(OverflowError) as e:
            call()
        _is_clear(e.value, "300")
    with pytest.raises(np.linalg.LinAlgError) as e:
        cf.linalg.eigvals(x)
    _is_clear(e.value, "cuflow.linalg.eigvals")
    assert float(to_host(cf.full(2, 2**70, dtype=cf.float64))[0]) == 2.0**70
    assert complex(to_host(cf.full(2, 2**70, dtype=cf.complex64))[0]) == 2.0**70
    with pytest.raises(OverflowError) as e:
        cf.full(2, 10**400, dtype=cf.float64)
    _is_clear(e.value, "cuflow.full", "float64")
    with pytest.raises(OverflowError) as e:
        cf.full(2, -2**70)
    _is_clear(e.value, "cuflow.full", str(-2**70), "int64", "float dtype")


@pytest.mark.parametrize(("call", "builtin", "words"), [
    (lambda cf: cf.arange(0, 5, np.int64(0)), ValueError, ("cuflow.arange", "non-zero")),
    (lambda cf: cf.can_cast(1, cf.int8), TypeError, ("cuflow.can_cast", "int 1")),
    (lambda cf: cf.can_cast(cf.int8, cf.int16, casting="bogus"), ValueError, ("'bogus'",)),
    (lambda cf: cf.result_type(), ValueError, ("cuflow.result_type",)),
    (lambda cf: cf.isdtype("float32", "real floating"), TypeError, ("cuflow.isdtype",)),
    (lambda cf: cf.isdtype(cf.float32, 5), TypeError, ("cuflow.isdtype", "5")),
    (lambda cf: cf.isdtype(np.dtype(bool), ("bool", "bogus")), ValueError, ("'bogus'",)),
])
def test_inspection_functions_state_their_rule(cf, call, builtin, words):
    with pytest.raises(builtin) as e:
        call(cf)
    _is_clear(e.value, *words)


@pytest.mark.parametrize("call", [
    lambda cf, x: cf.empty(3, dtype="f4,,"), lambda cf, x: cf.asarray([1], dtype="f4,,"),
    lambda cf, x: x.astype("f4,,"), lambda cf, x: cf.add(x, 1, dtype="f4,,"),
    lambda cf, x: cf.sqrt(x, dtype="f4,(2"), lambda cf, x: cf.result_type("f4,,"),
    lambda cf, x: cf.finfo("f4,,"), lambda cf, x: cf.Bufferizer((2,), 2, "f4,,"),
    lambda cf, x: cf.image.normalize(cf.zeros((8, 8, 3), cf.uint8), dtype="f4,,")])
def test_a_dtype_string_numpy_cannot_parse_is_a_type_error(cf, call):
    """NumPy reads ``"f4,,"`` as Python source, and fails with a SyntaxError."""
    with pytest.raises(TypeError) as e:
        call(cf, cf.asarray(np.random.default_rng(1).uniform(-9, 9, 4)))
    _is_clear(e.value, "dtype")


@pytest.mark.parametrize(("call", "builtin", "words"), [
    (lambda cf, f: cf.image.Norm(mean=10**400), ValueError, ("mean must be finite", "...")),
    (lambda cf, f: cf.image.normalize(f, std=-10**400), ValueError, ("std must be finite",)),
    (lambda cf, f: cf.image.letterbox(f, (8, 16), pad=10**400), ValueError,
     ("pad must be finite in float32",)),
    (lambda cf, f: cf.image.letterbox(f, (8, 16), pad=-1e39), ValueError,
     ("pad must be finite in float32", "-1e+39")),
    (lambda cf, f: cf.Pipeline(4, 2, letterbox=True, pad=1e39), ValueError, ("pad",)),
    (lambda cf, f: cf.Pipeline(4, 2, scale=10**400), ValueError, ("scale must be finite",)),
    (lambda cf, f: cf.Pipeline((1, 2**31), 1), ValueError, ("fewer than 2**31 elements",)),
    (lambda cf, f: cf.Pipeline(4, 2, n_staging=10**12), ValueError, ("n_staging", "at most 64")),
    (lambda cf, f: cf.Pipeline(4, 2, copy_threads=10**6), ValueError, ("copy_threads",)),
    (lambda cf, f: cf.Bufferizer((2,), 2, "f4", n_buffers=2**40), ValueError,
     ("n_buffers must be at most 64",)),
    (lambda cf, f: cf.FuseOptions(name=3), TypeError, ("name must be a str", "int 3")),
])
def test_image_and_pipeline_parameters_state_their_rule(cf, call, builtin, words):
    """Values past float32's range (the kernels' parameters), sizes the kernels cannot index,
    and counts of buffers, slots or threads no host holds are refused up front."""
    frame = cf.asarray(np.random.default_rng(2).integers(0, 256, (8, 8, 3), np.uint8))
    with pytest.raises(builtin) as e:
        call(cf, frame)
    _is_clear(e.value, *words)


def test_every_error_survives_pickle_and_distributeds_error_path():
    """A worker's error reaches a Dask client as itself: distributed pickles it through tblib,
    whose unpickling calls the class's ``__new__``."""
    import inspect
    import pickle

    from cuflow import _errors

    core = pytest.importorskip("distributed.core", reason="needs dask.distributed")
    classes = [c for c in vars(_errors).values()
               if inspect.isclass(c) and issubclass(c, cuflow.CuflowError)]
    assert cuflow.OutOfMemoryError in classes
    for cls in classes:
        try:
            raise cls(f"{cls.__name__}: 8 bytes more")
        except cls as e:
            msg = core.error_message(e)
            again = pickle.loads(pickle.dumps(e))
        _, back, _ = core.clean_exception(msg["exception"].data, msg["traceback"].data)
        for got in (back, again):
            assert type(got) is cls and got.args == (f"{cls.__name__}: 8 bytes more",)
    oom = pickle.loads(pickle.dumps(cuflow.OutOfMemoryError("no memory")))
    assert isinstance(oom, MemoryError) and isinstance(oom, cuflow.CuflowError)


def test_an_error_of_the_callers_own_function_comes_out_as_it_is(cf, rng):
    """A forwarded op that calls the caller's function (apply_along_axis's func1d) passes that
    function's errors on untouched: they are its bugs, not bad arguments of the op."""
    a = cf.asarray(rng.uniform(-1, 1, (2, 3)))

    def broken(x):
        raise IndexError(f"the caller's own bug, on {x.shape}")

    with pytest.raises(IndexError, match="the caller's own bug") as e:
        cf.apply_along_axis(broken, 0, a)
    assert not isinstance(e.value, cuflow.CuflowError)
    with pytest.raises(ZeroDivisionError) as e:
        cf.apply_along_axis(lambda x: 1 / 0, 0, a)
    assert not isinstance(e.value, cuflow.CuflowError)
    with pytest.raises(cf.AxisError):  # the op's own argument is still the op's error
        cf.apply_along_axis(lambda x: x.sum(), 5, a)
    np.testing.assert_allclose(to_host(cf.apply_along_axis(lambda x: x.sum(), 0, a)),
                               to_host(a).sum(axis=0))


@pytest.mark.parametrize("call", [
    lambda cf, x: cf.argsort(x, descending="no"), lambda cf, x: cf.sort(x, stable="yes"),
    lambda cf, x: cf.sum(x, keepdims="no"), lambda cf, x: cf.max(x, axis=0, keepdims=[]),
    lambda cf, x: cf.mean(x, keepdims=2)])
def test_flags_are_true_or_false_not_any_truthy_value(cf, rng, call):
    # "no" is true: taken as a bool, it would sort descending, or keep the dimensions
    x = cf.asarray(rng.uniform(-1, 1, (3, 4)))
    with pytest.raises(cf.ArgumentTypeError) as e:
        call(cf, x)
    _is_clear(e.value, "must be True or False")


def test_flags_take_numpys_bools_and_stable_none(cf, rng):
    h = rng.uniform(-1, 1, (3, 4))
    x = cf.asarray(h)
    np.testing.assert_array_equal(to_host(cf.sort(x, descending=np.True_)),
                                  -np.sort(-h, axis=-1))
    np.testing.assert_array_equal(to_host(cf.sort(x, stable=None)), np.sort(h, stable=None))
    assert cf.sum(x, axis=1, keepdims=np.True_).shape == (3, 1)
    assert cf.sum(x, axis=1, keepdims=0).shape == (3,)
