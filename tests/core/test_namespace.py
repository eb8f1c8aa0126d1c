"""The drop-in namespace: dtypes, CuPy-style code, forwarded names, info, dst= without allocation.

Backend selection and import hygiene are in test_runtime.py."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys

import numpy as np
import pytest

import cuflow
from cuflow.testing import to_host


def test_python_m_cuflow_info():
    r = subprocess.run([sys.executable, "-m", "cuflow", "info"], capture_output=True, text=True,
                       env={**os.environ, "CUFLOW_BACKEND": "numpy"}, timeout=120)
    assert r.returncode == 0 and "backend" in r.stdout and "numpy" in r.stdout


def test_python_m_cuflow_bench_refuses_early(capsys):
    """An output path of a missing folder is refused before the benchmarks run, and the
    pool traces, which need a GPU, say so on the NumPy backend."""
    from cuflow.__main__ import main  # noqa: PLC0415

    with pytest.raises(SystemExit) as e:
        main(["bench", "--quick", "--json", "/no/such/folder/x.json"])
    assert e.value.code == 2 and "no folder /no/such/folder" in capsys.readouterr().err
    for argv, words in ((["bench", "--json", "/"], "it is a folder"),
                        (["bench", "--record"], "go with the traces section"),
                        (["bench", "traces", "--json", "/tmp/t.json", "--from-json", __file__],
                         "not --plot or --from-json")):
        with pytest.raises(SystemExit):
            main(argv)
        assert words in capsys.readouterr().err
    before = cuflow.get_backend().name
    cuflow.set_backend("numpy")
    try:
        assert main(["bench", "traces", "--quick"]) == 1
    finally:
        cuflow.set_backend(before)
    assert "GPU" in capsys.readouterr().err


def test_python_m_cuflow_bench_reads_only_its_own_json(tmp_path, capsys):
    from cuflow.__main__ import main  # noqa: PLC0415

    for text in ("[]", "{not json", '{"rows": 3}'):
        f = tmp_path / "x.json"
        f.write_text(text)
        with pytest.raises(SystemExit) as e:
            main(["bench", "--from-json", str(f), "--plot", str(tmp_path / "p.png")])
        assert e.value.code == 2 and "--from-json" in capsys.readouterr().err


def test_python_m_cuflow_says_in_one_line_what_the_backend_refuses(monkeypatch, capsys):
    from cuflow.__main__ import main  # noqa: PLC0415

    def refuse():
        raise cuflow.BackendError("CUFLOW_BACKEND=cupy but no CuPy installed")

    monkeypatch.setattr(cuflow, "backend_info", refuse)
    assert main(["info"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["python -m cuflow info: BackendError: CUFLOW_BACKEND=cupy but no CuPy "
                   "installed"]


def test_set_backend_names_what_it_takes():
    with pytest.raises(cuflow.ArgumentTypeError, match="cuflow.set_backend.*NoneType None"):
        cuflow.set_backend(None)


def test_dtypes_are_numpy_objects():
    assert cuflow.float32 is np.float32 and cuflow.uint8 is np.uint8 and cuflow.dtype is np.dtype


def test_drop_in_cupy_style_code(cf):
    cp = cf
    x = cp.arange(12, dtype=cp.float32).reshape(3, 4)
    y = cp.linspace(0, 1, 12, dtype=cp.float32).reshape(3, 4)
    z = cp.where(x > 5, x, y)
    n = cp.linalg.norm(z)
    f = cp.fft.fft(x[0])
    r = cp.random.rand(3)
    u = cp.unique(cp.array([3, 1, 3]))
    for v in (z, n, f, r, u):
        assert isinstance(v, cp.darray), type(v)
    hz = np.where(np.arange(12).reshape(3, 4) > 5, np.arange(12).reshape(3, 4),
                  np.linspace(0, 1, 12).reshape(3, 4))
    cp.testing.assert_allclose(cp.asnumpy(z), hz, rtol=1e-6)
    cp.testing.assert_allclose(float(n), np.linalg.norm(hz), rtol=1e-5)
    cp.testing.assert_allclose(cp.asnumpy(f), np.fft.fft(np.arange(4.0)), rtol=1e-5, atol=1e-5)
    assert r.shape == (3,) and ((cp.asnumpy(r) >= 0) & (cp.asnumpy(r) < 1)).all()
    assert cp.asnumpy(u).tolist() == [1, 3]
    xp = cp.get_array_module(x)
    assert isinstance(xp.exp(x), cp.darray)
    with pytest.raises(AttributeError, match="no attribute 'not_a_function'"):
        cp.not_a_function  # noqa: B018


@pytest.mark.gpu
def test_cupy_names_forwarded(gpu_cf):
    import cupy

    cp = gpu_cf
    assert cp.ndarray is cupy.ndarray
    assert cp.cuda is cupy.cuda
    k = cp.ElementwiseKernel("T x", "T y", "y = x * 2", "dbl")
    out = k(cp.ones(4, dtype="float32"))
    assert float(out.sum()) == 8.0


@pytest.mark.gpu
def test_a_kernel_the_backend_cannot_compile_for_the_dtypes_is_a_type_error(gpu_cf):
    # (NumPy raises TypeError for dtypes it has no loop for)
    from cupy.cuda.compiler import CompileException

    from cuflow.core._dispatch import reraise

    e = CompileException("error: no instance of overloaded function", "src", "k", ())
    with pytest.raises(cuflow.ArgumentTypeError, match="cuflow.someop: the backend has no "
                                                       "kernel for these arguments' dtypes"):
        reraise("someop", e)


def test_backend_info_names_array_api_compat(cf):
    """The array API names the backend lacks come from array-api-compat: info says which."""
    assert cf.backend_info()["array_api_compat"] == importlib.metadata.version("array-api-compat")
    assert hasattr(cf.linalg, "vecdot") and hasattr(cf, "unstack")


@pytest.mark.gpu
def test_backend_info_on_gpu(gpu_cf):
    info = gpu_cf.backend_info()
    assert info["backend"] == "cupy"
    for k in ("device_name", "compute_capability", "driver_version", "runtime_version", "cupy"):
        assert info[k]


@pytest.mark.gpu
def test_dst_allocates_nothing(gpu_cf):
    import cupy

    cf = gpu_cf
    installed = cf.memory._INSTALLED  # cuflow's pool is CuPy's allocator (unless CUFLOW_POOL=off)
    pool = cf.memory.get_pool() if installed else cupy.get_default_memory_pool()
    a = cf.testing.random_array((256, 256), "float32")
    b = cf.testing.random_array((256, 256), "float32")
    c = cf.empty_like(a)
    s = cf.empty((), dtype="float32")
    col = cf.empty((256,), dtype="float32")
    h = cf.empty((256, 256), dtype="float16")
    cf.add(a, b, dst=c)  # warm-up (kernel compile may cache small buffers)
    a.sum(dst=s); a.sum(axis=0, dst=col); a.astype("float16", dst=h)
    cf.synchronize()
    before = pool.used_bytes(), pool.total_bytes()
    for _ in range(50):
        cf.add(a, b, dst=c)
        cf.multiply(c, 0.5, dst=c)
        a.sum(dst=s)
        a.sum(axis=0, dst=col)
        a.astype("float16", dst=h)
        a.copy(dst=c)
    cf.synchronize()
    assert (pool.used_bytes(), pool.total_bytes()) == before
    if installed:
        n = pool.num_alloc
        for _ in range(50):
            cf.add(a, b, dst=c)
            a.copy(dst=c)
            cf.negative(a, dst=c)
        assert pool.num_alloc == n  # the elementwise dst= paths make no allocation at all


#: backend functions the scan below does not call: files, printing, global state, the
#: backend's own test runner, and results that are not a function of the operands' values
_NOT_SCANNED = {
    "fromfile", "fromregex", "genfromtxt", "load", "loadtxt", "save", "savetxt", "savez",
    "savez_compressed", "info", "show_config", "show_runtime", "test", "printoptions",
    "set_printoptions", "get_printoptions", "setbufsize", "getbufsize", "seterr", "geterr",
    "seterrcall", "geterrcall", "array2string", "array_repr", "array_str", "get_include",
    "frompyfunc", "nested_iters", "fuse", "memoize", "clear_memo", "may_share_memory",
    "shares_memory", "byte_bounds", "require", "asmatrix", "bmat", "typename",
    "show_versions",
}


def _forwarded(cf, sub=None):
    """The backend's functions (of submodule ``sub``) that ``import cuflow as cp`` forwards
    to the backend itself: not cuflow's own, nor array-api-compat's standard forms."""
    xp = cf.get_backend().xp if sub is None else getattr(cf.get_backend().xp, sub)
    ns = cf if sub is None else getattr(cf, sub)
    for n in sorted(dir(xp)):
        f = getattr(xp, n)
        if (not n.startswith("_") and n not in _NOT_SCANNED and callable(f)
                and not isinstance(f, type)
                and getattr(getattr(ns, n), "__wrapped__", None) is f):
            yield n, f


def _differences(got, want, cf, where):
    """How ``got`` differs from the backend's ``want`` (nothing when they agree)."""
    if isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            return [f"{where}: {got!r} against {want!r}"]
        return [d for g, w in zip(got, want) for d in _differences(g, w, cf, where)]
    xp = cf.get_backend().xp
    if isinstance(want, (xp.ndarray, np.generic)):  # (NumPy's scalars are 0-d darrays)
        if not isinstance(got, cf.darray):
            return [f"{where}: a {type(got).__name__}, not a darray"]
        g, w = cf.asnumpy(got), cf.asnumpy(want)
        if g.dtype != w.dtype or g.shape != w.shape:
            return [f"{where}: {g.dtype}{g.shape} against {w.dtype}{w.shape}"]
        # floats within float32 rounding: CuPy's Python code calls the operands' methods,
        # cuflow's on a darray, whose reductions add in another order than CuPy's
        if not (np.allclose(g, w, rtol=1e-5, atol=1e-4, equal_nan=True)
                if g.dtype.kind in "fc" else np.array_equal(g, w)):
            return [f"{where}: values differ ({g.ravel()[:3]} against {w.ravel()[:3]})"]
        return []
    if type(got) is not type(want) or repr(got) != repr(want):
        return [f"{where}: {got!r} against {want!r}"]
    return []


def _compare_forwarded(cf, n, f, vals, patterns, sub=None):
    """Call ``f`` on the first pattern of operands the backend takes, and cuflow's ``n`` on
    the same values as darrays: (1 if called, else 0; the differences)."""
    import warnings

    xp = cf.get_backend().xp
    g = getattr(cf if sub is None else getattr(cf, sub), n)
    for p in patterns:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                want = f(*(xp.asarray(vals[k]) for k in p))
            except Exception:
                continue  # the backend refuses these operands: try the next pattern
            try:
                got = g(*(cf.asarray(vals[k]) for k in p))
            except Exception as e:
                return 1, [f"{n}{p}: {type(e).__name__}: {e}"]
        return 1, _differences(got, want, cf, f"{n}{p}")
    return 0, []


def test_forwarded_functions_compute_what_the_backend_computes(cf, rng):
    """Every backend function cuflow forwards, called on darrays, gives what it gives on the
    backend's own arrays: the same dtypes and shapes, as darrays, and the same values
    (floats within float32 rounding)."""
    xp = cf.get_backend().xp
    a = rng.standard_normal((6, 5)).astype(np.float32) * 100
    vals = {"a": a, "b": rng.standard_normal((6, 5)).astype(np.float32) * 100,
            "i": rng.integers(-2**31, 2**31, (6, 5)), "m": a > 0,
            "w": rng.uniform(0.5, 2.0, (6, 5)).astype(np.float32),
            "v": rng.uniform(1, 9, 5).astype(np.float32)}
    patterns = [("a",), ("a", "b"), ("m",), ("i",), ("a", "i"), ("m", "a", "b"), ("v",),
                ("v", "v")]
    called, bad = 0, []
    for n, f in _forwarded(cf):
        ok, bad_n = _compare_forwarded(cf, n, f, vals, patterns)
        called, bad = called + ok, bad + bad_n
    # keyword forms that make CuPy call its operands' methods with dtype= or out=
    for n, kw in [("average", dict(weights="w")), ("average", dict(axis=0, weights="w",
                                                                     returned=True)),
                  ("median", dict(axis=0)), ("percentile", dict(q=30, axis=1)),
                  ("cov", dict(aweights="v")), ("ptp", dict(axis=0)),
                  ("histogram", dict(bins=7)), ("nanmean", dict(axis=1)),
                  ("count_nonzero", dict(axis=0))]:
        bad += _differences(
            getattr(cf, n)(cf.asarray(a), **{k: cf.asarray(vals[v]) if v in vals else v
                                              for k, v in kw.items()}),
            getattr(xp, n)(xp.asarray(a), **{k: xp.asarray(vals[v]) if v in vals else v
                                              for k, v in kw.items()}), cf, f"{n}{kw}")
    assert called >= 100 and not bad, (called, bad)


def test_forwarded_linalg_and_fft_compute_what_the_backend_computes(cf, rng):
    """The same for the ``linalg`` and ``fft`` submodules, on square matrices and vectors."""
    m = rng.standard_normal((5, 5))
    vals = {"s": m @ m.T + 5 * np.eye(5), "m": m.astype(np.float32),
            "v": rng.standard_normal(5), "t": rng.standard_normal((5, 5, 25))}
    patterns = [("s",), ("m",), ("s", "v"), ("s", "s"), ("v",), ("t",)]
    called, bad = 0, []
    for sub in ("linalg", "fft"):
        for n, f in _forwarded(cf, sub):
            ok, bad_n = _compare_forwarded(cf, n, f, vals, patterns, sub)
            called, bad = called + ok, bad + bad_n
    assert called >= 15 and not bad, (called, bad)


def test_forwarded_function_returning_its_operand_returns_the_callers_object(cf, rng):
    """A forwarded function that hands back its operand hands back the caller's darray, and
    never re-classes a caller's array of the backend's own type."""
    xp = cf.get_backend().xp
    x = cf.asarray(rng.standard_normal((3, 4)).astype(np.float32))
    assert cf.atleast_2d(x) is x
    assert cf.asanyarray(x) is x
    plain = xp.asarray(cf.asnumpy(x))
    r = cf.atleast_2d(plain)
    assert type(plain) is xp.ndarray and isinstance(r, cf.darray)
    r[0, 0] = 7.5  # a view of the caller's array, not a copy
    assert float(plain[0, 0]) == 7.5
    # in a returned list, and passed by keyword
    r1, r2 = cf.atleast_2d(plain, x)
    assert type(plain) is xp.ndarray and isinstance(r1, cf.darray) and r2 is x
    o = xp.zeros((3, 4), dtype=xp.float32)
    r = cf.fix(x, out=o)
    assert type(o) is xp.ndarray and isinstance(r, cf.darray)
    np.testing.assert_array_equal(cf.asnumpy(r), np.fix(cf.asnumpy(x)))
    np.testing.assert_array_equal(cf.asnumpy(o), np.fix(cf.asnumpy(x)))


def test_numpy_positional_arguments_of_standard_functions(cf, rng):
    """Functions taken from array-api-compat (keyword-only past the standard's operands)
    take NumPy's positional arguments too, as the backend's own function does."""
    h = rng.standard_normal((4, 3))
    m = h.T @ h + np.eye(3)
    a, s = cf.asarray(h), cf.asarray(m)
    cases = [
        (lambda x: x.tensordot(a, a.T, 1), np.tensordot(h, h.T, 1)),
        (lambda x: x.tensordot(a, a, ([0, 1], [0, 1])), np.tensordot(h, h, ([0, 1], [0, 1]))),
        (lambda x: x.linalg.svd(a, False)[1], np.linalg.svd(h, False)[1]),
        (lambda x: abs(x.linalg.qr(a, "complete")[1]), abs(np.linalg.qr(h, "complete")[1])),
        (lambda x: x.linalg.eigh(s, "U")[0], np.linalg.eigh(m, "U")[0]),
        (lambda x: x.linalg.pinv(a, 1e-5), np.linalg.pinv(h, 1e-5)),
        (lambda x: x.linalg.matrix_rank(a, 1e-3), np.linalg.matrix_rank(h, 1e-3)),
    ]
    for fn, want in cases:
        got = fn(cf)
        assert isinstance(got, cf.darray)
        np.testing.assert_allclose(cf.asnumpy(got), want, rtol=1e-10, atol=1e-12)


def test_forwarded_classes_stay_the_backends_classes(cf):
    xp = cf.get_backend().xp
    for name in ("Generator", "RandomState"):
        assert getattr(cf.random, name) is getattr(xp.random, name)
    g = cf.random.default_rng(0)
    assert isinstance(g, cf.random.Generator)
    assert isinstance(cf.as_darray(g.random(3)), cf.darray)


@pytest.mark.parametrize("call", ["unique_counts", "unique_all", "unique_inverse", "eigh", "svd",
                                  "qr", "slogdet"])
def test_named_tuple_results_hold_darrays(cf, rng, call):
    h = rng.integers(-3, 4, 12).astype(np.float64)
    m = cf.asarray(np.diag(rng.uniform(1, 2, 3)) + 0.1)
    r = {"unique_counts": lambda: cf.unique_counts(cf.asarray(h)),
         "unique_all": lambda: cf.unique_all(cf.asarray(h)),
         "unique_inverse": lambda: cf.unique_inverse(cf.asarray(h)),
         "eigh": lambda: cf.linalg.eigh(m), "svd": lambda: cf.linalg.svd(m),
         "qr": lambda: cf.linalg.qr(m), "slogdet": lambda: cf.linalg.slogdet(m)}[call]()
    assert isinstance(r, tuple) and hasattr(type(r), "_fields")
    assert all(isinstance(v, cf.darray) for v in r), [type(v).__name__ for v in r]
    total = cf.empty((), r[0].dtype)
    assert r[-1].sum(dst=total) is total  # cuflow's own methods on every field


@pytest.mark.parametrize("a_shape, b_shape", [((0, 0), (0,)), ((2, 0, 0), (2, 0, 3)),
                                              ((0, 3, 3), (0, 3, 2)), ((3, 3), (3, 0))])
def test_linalg_solve_of_empty_operands(cf, a_shape, b_shape):
    """Empty systems (0 x 0 matrices, an empty stack, no right-hand sides) give an empty
    result of NumPy's shape and dtype (CuPy's batched solver fails on some)."""
    a = cf.asarray(np.ones(a_shape, np.float32) + np.eye(a_shape[-1], dtype=np.float32))
    r = cf.linalg.solve(a, cf.ones(b_shape, dtype=cf.float32))
    want = np.linalg.solve(np.ones(a_shape, np.float32) + np.eye(a_shape[-1], dtype=np.float32),
                           np.ones(b_shape, np.float32))
    assert isinstance(r, cf.darray) and r.shape == want.shape and r.dtype == want.dtype


def test_numpys_forms_of_the_standards_linalg_functions(cf, rng):
    h = rng.standard_normal((4, 3))
    a = cf.asarray(h)
    np.testing.assert_allclose(to_host(cf.linalg.pinv(a, rcond=1e-3)),
                               np.linalg.pinv(h, rcond=1e-3), rtol=1e-6, atol=1e-9)
    hi = np.array([[1, 2], [3, 4]])
    np.testing.assert_allclose(to_host(cf.linalg.pinv(cf.asarray(hi))), np.linalg.pinv(hi),
                               rtol=1e-6)
    assert int(cf.linalg.matrix_rank(a, tol=1e-3)) == np.linalg.matrix_rank(h, tol=1e-3)
    assert int(cf.linalg.matrix_rank(cf.asarray(np.ones(3)))) == 1
    if not cf.get_backend().is_gpu:  # (empty stacks: NumPy's answer)
        assert to_host(cf.linalg.matrix_rank(cf.empty((2, 0, 0)))).tolist() == [0, 0]
    assert cf.permute_dims(cf.ones((2, 3, 4))).shape == (4, 3, 2)


@pytest.mark.parametrize("call", [
    lambda r, dt: r.rand(3, dtype=dt), lambda r, dt: r.randn(2, 3, dtype=dt),
    lambda r, dt: r.random_sample(3, dt), lambda r, dt: r.uniform(0, 1, (3,), dtype=dt),
    lambda r, dt: r.normal(0, 1, 3, dt), lambda r, dt: r.standard_normal(3, dtype=dt),
    lambda r, dt: r.exponential(2.0, 3, dtype=dt), lambda r, dt: r.rand(dtype=dt),
], ids=["rand", "randn", "random_sample", "uniform", "normal", "standard_normal",
        "exponential", "rand_0d"])
def test_random_takes_cupys_dtype(cf, call):
    """CuPy's random functions take ``dtype=`` (by keyword, or by position after ``size``),
    float32 or float64 where CuPy draws with cuRAND; on NumPy too."""
    cf.random.seed(0)
    for dt in (cf.float32, cf.float64, "float32"):
        r = call(cf.random, dt)
        assert isinstance(r, cf.darray) and r.dtype == np.dtype(dt), (dt, r.dtype)
        assert np.isfinite(to_host(r)).all()
    with pytest.raises(cf.ArgumentTypeError, match=r"cuflow\.random\.\w+: .*float32"):
        call(cf.random, cf.float16)


def test_random_kernels_take_any_dtype_of_numbers(cf):
    """The distributions CuPy draws with its own kernels write the dtype asked for."""
    cf.random.seed(0)
    p = cf.random.poisson(3.0, 50, dtype=cf.int32)
    assert isinstance(p, cf.darray) and p.dtype == np.int32 and (to_host(p) >= 0).all()
    g = cf.random.gamma(2.0, 1.0, 5, cf.float32)
    assert g.dtype == np.float32 and g.shape == (5,)
    assert cf.random.rand(3).dtype == np.float64  # no dtype: the default
    assert cf.random.randint(0, 5, 3, dtype=cf.int8).dtype == np.int8


#: array API functions the namespace takes from array-api-compat, whose wrappers read
#: attributes of their operands
_STANDARD = ["nonzero", "unique_all", "unique_counts", "unique_inverse", "unique_values",
             "unstack", "matrix_transpose", "permute_dims", "count_nonzero", "cumulative_sum",
             "cumulative_prod", "vecdot", "isin", "searchsorted", "meshgrid", "tensordot",
             "linalg.pinv", "linalg.matrix_rank", "linalg.matrix_transpose", "linalg.det",
             "linalg.inv", "linalg.qr", "linalg.svd", "linalg.svdvals", "linalg.slogdet",
             "linalg.vector_norm", "linalg.matrix_norm", "linalg.trace", "linalg.diagonal",
             "linalg.eigh", "linalg.eigvalsh", "linalg.cholesky", "linalg.solve",
             "linalg.tensordot", "linalg.vecdot", "linalg.matmul", "linalg.matrix_power"]


@pytest.mark.parametrize("name", _STANDARD)
def test_forwarded_functions_refuse_non_arrays_with_the_input_error(cf, name):
    """A list or a number where a forwarded function reads an array's attributes is the
    namespace's input error (a TypeError naming the function), never a bare AttributeError;
    NumPy's functions that take lists still do on the NumPy backend."""
    fn = cf
    for part in name.split("."):
        fn = getattr(fn, part)
    for args in ([[1.0, 0.0, 2.0]], [[[2.0, 1.0], [1.0, 3.0]]], [3],
                 [[[2.0, 1.0], [1.0, 3.0]], [[2.0, 1.0], [1.0, 3.0]]]):
        try:
            fn(*args)
        except (AttributeError, TypeError) as e:
            assert isinstance(e, TypeError) and isinstance(e, cf.CuflowError), \
                f"cuflow.{name}{tuple(args)}: {e!r}"
            assert f"cuflow.{name}" in str(e), e
        except cf.CuflowError:  # other rules of the function (a 1-d matrix ...), stated as
            pass  # cuflow's errors: anything else fails the test
    with pytest.raises(cf.DstTypeError,
                       match="cuflow.nonzero: inputs must be arrays .*got builtins.list"):
        cf.nonzero([1, 0, 2])


def test_is_available_says_whether_arrays_are_on_a_gpu(cf):
    assert cf.is_available() is cf.get_backend().is_gpu


@pytest.mark.parametrize("name", ["RawKernel", "RawModule", "ElementwiseKernel",
                                  "ReductionKernel", "get_default_pinned_memory_pool"])
def test_cupy_only_names_say_they_need_the_cupy_backend(cf, name):
    if cf.get_backend().is_gpu:
        assert hasattr(cf, name)
        return
    assert not hasattr(cf, name)
    with pytest.raises(AttributeError, match=f"cupy.{name} and needs the CuPy backend"):
        getattr(cf, name)


def test_get_default_memory_pool_is_the_pool_that_serves_allocations(cf):
    """CuPy's ``get_default_memory_pool()`` is cuflow's pool where that one is CuPy's
    allocator: its figures and its limit are of the memory in use."""
    pool = cf.get_default_memory_pool()
    if cf.get_backend().is_gpu and not cf.memory._INSTALLED:  # CUFLOW_POOL=off
        import cupy

        assert pool is cupy.get_default_memory_pool()
        return
    assert pool is cf.memory.get_pool()
    before = pool.get_limit()
    try:
        pool.set_limit(size=1 << 40)
        assert pool.get_limit() == 1 << 40 and cf.memory.stats()["limit_bytes"] == 1 << 40
    finally:
        pool.set_limit(size=before)
    assert pool.used_bytes() >= 0 and pool.total_bytes() >= pool.used_bytes()
    if cf.get_backend().is_gpu:
        before = pool.used_bytes()
        held = [cf.empty(1 << 20, dtype=cf.uint8)]
        assert pool.used_bytes() >= before + (1 << 20)
        held.clear()
    pool.free_all_blocks()


@pytest.mark.gpu
def test_get_default_memory_pool_is_cupys_with_the_pool_off(gpu_cf):
    code = ("import cupy, cuflow as cp; cp.zeros(3); "
            "assert cp.get_default_memory_pool() is cupy.get_default_memory_pool()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "CUFLOW_POOL": "off", "CUFLOW_BACKEND": "cupy"},
                       timeout=300)
    assert r.returncode == 0, r.stderr


def test_index_tricks_give_darrays(cf):
    g = cf.mgrid[0:3, 0:2]
    assert isinstance(g, cf.darray)
    np.testing.assert_array_equal(cf.asnumpy(g), np.mgrid[0:3, 0:2])
    o = cf.ogrid[0:3, 0:2]
    assert all(isinstance(t, cf.darray) for t in o) and [t.shape for t in o] == [(3, 1), (1, 2)]
    r = cf.r_[cf.asarray([1, 2]), 5]  # (CuPy's r_ takes no slices)
    assert isinstance(r, cf.darray)
    np.testing.assert_array_equal(cf.asnumpy(r), [1, 2, 5])
    c = cf.c_[cf.ones(2), cf.zeros(2)]
    assert isinstance(c, cf.darray) and c.shape == (2, 2)
    assert cf.s_[1:2] == slice(1, 2)  # (a slice, not an array)
