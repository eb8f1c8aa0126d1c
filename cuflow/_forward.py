"""The drop-in namespace: CuPy (or NumPy) names that cuflow does not define.

``import cuflow as cp`` runs CuPy code: a name cuflow lacks is looked up on the
backend module and, when it is a function, wrapped so that array results come
back as darrays (an O(1) re-class; a caller's own array object is never
re-classed, it is viewed instead).  Submodules ``linalg``, ``fft`` and
``random`` are forwarded the same way; ``cuda`` is CuPy's own.

Array API functions the backend lacks (``unstack``, ``vecdot``, most of
``linalg``'s extension on CuPy) or defines with non-standard signatures or
results (``meshgrid(indexing=)``, ``count_nonzero(keepdims=)``, the ``unique_*``
family, ``linalg``'s named tuples) come from array-api-compat's wrapper of the
backend instead, which keeps the backend's extra NumPy arguments.

On the NumPy backend, ``random``'s functions take CuPy's ``dtype=`` too (NumPy
draws, the result is cast), and CuPy's own names (``RawKernel`` ...) say that
they need the CuPy backend.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import math
import sys
import types
from typing import Any

import numpy

from ._errors import ArgumentTypeError
from .core._contract import check_dtype
from .core._dispatch import call_backend
from .core._runtime import get_backend

__all__ = ["forward", "ForwardModule", "install_submodules"]

_cache: dict[tuple[str, str, str], Any] = {}

#: array API names whose backend version breaks the standard, taken from array-api-compat
_STANDARD_FROM_COMPAT = {
    "": {"count_nonzero", "meshgrid", "unique_all", "unique_counts", "unique_inverse",
         "unique_values", "cumulative_sum", "cumulative_prod", "permute_dims",
         "matrix_transpose", "tensordot", "vecdot", "unstack", "nonzero", "isin",
         "searchsorted"},
    "linalg": {"cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matmul",
               "matrix_norm", "matrix_power", "matrix_rank", "matrix_transpose", "outer",
               "pinv", "qr", "slogdet", "solve", "svd", "svdvals", "tensordot", "trace",
               "vecdot", "vector_norm"},
}


def _small_or_empty(args: tuple) -> bool:
    """A first operand of fewer than 2 dimensions or no elements (array-api-compat's
    ``matrix_rank`` needs a stack of non-empty matrices; NumPy's and CuPy's take any)."""
    x = args[0] if args else None
    return getattr(x, "ndim", 2) < 2 or getattr(x, "size", 1) == 0


#: calls of NumPy's form, which array-api-compat's function does not take or answers in
#: another form: ``svd`` of a 3 x n matrix with ``compute_uv=False`` would come back as
#: three scalars named U, S and Vh; ``pinv`` takes no ``rcond``, nor integers;
#: ``matrix_rank`` no ``tol`` or ``hermitian``; ``permute_dims`` needs ``axes``.  These
#: calls go to the backend's own function (a hook sees the call's args and kwargs)
_BACKEND_FORM = {
    ("linalg", "svd"): lambda a, kw: not kw.get("compute_uv", True),
    ("linalg", "qr"): lambda a, kw: kw.get("mode") in ("r", "raw"),
    ("linalg", "pinv"): lambda a, kw: "rcond" in kw or "hermitian" in kw or (
        bool(a) and getattr(getattr(a[0], "dtype", None), "kind", "f") not in "fc"),
    ("linalg", "matrix_rank"): lambda a, kw: "tol" in kw or "hermitian" in kw or (
        _small_or_empty(a)),
    ("", "permute_dims"): lambda a, kw: len(a) < 2 and "axes" not in kw,
}


#: calls the backend fails on empty operands (CuPy's batched solver on 0 x 0 matrices or an
#: empty stack): their result is empty, of the shape and dtype NumPy gives the same call
_EMPTY_BY_NUMPY = {("linalg", "solve")}


def _stand_in(a: Any) -> numpy.ndarray:
    """A host array of ``a``'s shape and dtype for NumPy to compute a result's shape and dtype
    from: identities where the last two axes are square (so no stand-in is singular)."""
    s = numpy.zeros(a.shape, a.dtype)
    if s.ndim >= 2 and s.shape[-1] == s.shape[-2]:
        i = numpy.arange(s.shape[-1])
        s[..., i, i] = 1
    return s


def _empty_by_numpy(fn, sub, name):
    ref = getattr(_compat("numpy", sub), name)

    @functools.wraps(fn)
    def f(*args, **kwargs):
        if any(getattr(a, "size", 1) == 0 for a in args):
            r = ref(*(_stand_in(a) if hasattr(a, "shape") else a for a in args), **kwargs)
            return get_backend().xp.empty(r.shape, r.dtype)
        return fn(*args, **kwargs)

    return f


def _positional(fn) -> float:
    """How many arguments ``fn`` takes by position (inf with ``*args`` or no signature)."""
    try:
        ps = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return math.inf
    if any(p.kind is p.VAR_POSITIONAL for p in ps):
        return math.inf
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in ps)


def _by_form(standard, own, own_form):
    """``standard``, or the backend's ``own`` function for the calls the standard's form
    does not take: NumPy's positional arguments past the standard's (``tensordot(a, b, 1)``,
    ``linalg.svd(a, False)``), and the calls ``own_form`` picks."""
    npos = _positional(standard)

    @functools.wraps(standard)
    def f(*args, **kwargs):
        mine = len(args) > npos or own_form is not None and own_form(args, kwargs)
        return (own if mine else standard)(*args, **kwargs)

    return f


def _compat(backend: str, sub: str | None) -> Any:
    """array-api-compat's wrapper of the backend (or of its submodule ``sub``)."""
    try:
        ns = importlib.import_module(f"array_api_compat.{backend}")
    except ImportError:  # no array-api-compat: the backend's own names only
        return None
    return ns if sub is None else getattr(ns, sub, None)


#: CuPy's random functions that take ``dtype=`` and NumPy's lack, with the position of
#: ``dtype`` in CuPy's signature (None: keyword only) and whether CuPy draws them with
#: cuRAND, which fills float32 and float64 only (CuPy's ``_check_and_get_dtype``); the
#: others are CuPy kernels that write any dtype of numbers (cupy/random/_sample.py,
#: _distributions.py, _generator.py).  ``randint`` is left out: NumPy's takes ``dtype``.
_RANDOM_DTYPE: dict[str, tuple[int | None, bool]] = {
    "rand": (None, True), "randn": (None, True), "random_sample": (1, True),
    "random": (1, True), "ranf": (1, True), "sample": (1, True),
    "standard_normal": (1, True), "standard_exponential": (1, True),
    "standard_cauchy": (1, True), "normal": (3, True), "uniform": (3, True),
    "lognormal": (3, True), "laplace": (3, True), "gumbel": (3, True), "wald": (3, True),
    "exponential": (2, True), "pareto": (2, True), "power": (2, True),
    "rayleigh": (2, True), "weibull": (2, True), "triangular": (4, True),
    "multivariate_normal": (6, True),
    "beta": (3, False), "binomial": (3, False), "f": (3, False), "gamma": (3, False),
    "logistic": (3, False), "negative_binomial": (3, False),
    "noncentral_chisquare": (3, False), "vonmises": (3, False), "chisquare": (2, False),
    "dirichlet": (2, False), "geometric": (2, False), "logseries": (2, False),
    "poisson": (2, False), "standard_gamma": (2, False), "standard_t": (2, False),
    "zipf": (2, False), "hypergeometric": (4, False), "noncentral_f": (4, False),
}


def _random_dtype(fn, name: str, pos: int | None, curand: bool):
    """NumPy's random function ``fn`` taking CuPy's ``dtype`` (by keyword, or at ``pos``):
    checked as CuPy checks it, the draw made by NumPy, the result cast to it."""
    where = f"cuflow.random.{name}"

    @functools.wraps(fn)
    def f(*args, **kwargs):
        dtype = kwargs.pop("dtype", None)
        if pos is not None and len(args) > pos:
            if dtype is not None:
                raise ArgumentTypeError(f"{where}: dtype given by position and by keyword")
            dtype, args = args[pos], args[:pos] + args[pos + 1:]
        if dtype is None:
            return fn(*args, **kwargs)
        dt = check_dtype(f"random.{name}", dtype)
        if curand and dt not in (numpy.float32, numpy.float64):
            raise ArgumentTypeError(f"{where}: dtype must be float32 or float64 (CuPy draws "
                                    f"these with cuRAND, which makes no other), got {dt}")
        return numpy.asarray(fn(*args, **kwargs)).astype(dt, copy=False)

    return f


#: CuPy's names that NumPy has no counterpart of: on the NumPy backend they say they need
#: the CuPy backend (``cuda`` too, in cuflow/__init__.py), with what runs on both where
#: cuflow has it
_CUPY_ONLY = {
    "ElementwiseKernel": "cuflow.fuse compiles a Python function of arrays into one kernel "
                         "on the GPU and runs it on NumPy",
    "ReductionKernel": "cuflow.fuse compiles a Python function of arrays into one kernel "
                       "on the GPU and runs it on NumPy",
    "RawKernel": "CUDA C needs a GPU; cuflow.fuse writes elementwise kernels that run on "
                 "both backends",
    "RawModule": "CUDA C needs a GPU; cuflow.fuse writes elementwise kernels that run on "
                 "both backends",
    "memoize": "", "clear_memo": "",
    "get_default_pinned_memory_pool": "cuflow.memory.empty_pinned works on both",
    "fromDlpack": "cuflow.from_dlpack works on both",
    "disable_experimental_feature_warning": "",
}


def _wrap_function(fn, name: str):
    @functools.wraps(fn)
    def w(*args, **kwargs):
        return call_backend(name, fn, args, kwargs)

    return w


#: the backend's index tricks whose subscripts build arrays (``s_`` and ``index_exp`` build
#: slices, and stay as they are)
_INDEX_TRICKS = ("mgrid", "ogrid", "r_", "c_")


class _IndexTrick:
    """The backend's ``mgrid``, ``ogrid``, ``r_`` or ``c_``, its subscripts' arrays darrays."""

    def __init__(self, trick: Any, name: str) -> None:
        self._trick, self._name = trick, name

    def __getitem__(self, key: Any) -> Any:
        return call_backend(self._name, self._trick.__getitem__, (key,), {})

    def __repr__(self) -> str:
        return f"<cuflow.{self._name}: the backend's {self._name}, giving darrays>"


def forward(name: str, sub: str | None = None, owner: str = "cuflow") -> Any:
    """Resolve ``name`` on the backend module (or its submodule ``sub``)."""
    b = get_backend()
    key = (b.name, sub or "", name)
    hit = _cache.get(key)
    if hit is not None:
        return hit
    mod = b.xp if sub is None else getattr(b.xp, sub, None)
    compat = _compat(b.name, sub)
    if compat is not None and hasattr(compat, name) and (
            mod is None or not hasattr(mod, name) or name in _STANDARD_FROM_COMPAT.get(sub or "", ())):
        mod = compat
    if mod is None:
        raise AttributeError(f"module {owner!r} has no attribute {name!r} "
                             f"({b.name} has no submodule {sub!r})")
    try:
        obj = getattr(mod, name)
    except AttributeError:
        if sub is None and not b.is_gpu and name in _CUPY_ONLY:
            hint = _CUPY_ONLY[name]
            raise AttributeError(
                f"module {owner!r} has no attribute {name!r} on the {b.name} backend: "
                f"cuflow.{name} is CuPy's cupy.{name} and needs the CuPy backend"
                f"{'; ' + hint if hint else ''}") from None
        raise AttributeError(
            f"module {owner!r} has no attribute {name!r} (not in cuflow nor in "
            f"{mod.__name__})") from None
    own = getattr(b.xp if sub is None else getattr(b.xp, sub, None), name, None)
    # (array-api-compat's random is NumPy's own module: its classes are no wrappers)
    if (mod is compat and own is not obj and callable(own) and callable(obj)
            and not isinstance(obj, type)):
        obj = _by_form(obj, own, _BACKEND_FORM.get((sub or "", name)))
    if mod is compat and b.name == "cupy" and (sub or "", name) in _EMPTY_BY_NUMPY:
        obj = _empty_by_numpy(obj, sub, name)
    if sub == "random" and not b.is_gpu and name in _RANDOM_DTYPE and callable(obj):
        obj = _random_dtype(obj, name, *_RANDOM_DTYPE[name])
    if callable(obj) and not isinstance(obj, type) and not isinstance(obj, types.ModuleType):
        obj = _wrap_function(obj, name if sub is None else f"{sub}.{name}")
    elif sub is None and name in _INDEX_TRICKS:
        obj = _IndexTrick(obj, name)
    _cache[key] = obj
    return obj


class ForwardModule(types.ModuleType):
    """A cuflow submodule that forwards to the backend's submodule of the same name."""

    def __init__(self, name: str, sub: str, own: types.ModuleType | None = None) -> None:
        super().__init__(name, f"cuflow's drop-in view of the backend's {sub!r} submodule")
        self._sub = sub
        for n in getattr(own, "__all__", ()):  # cuflow's own versions come first
            setattr(self, n, getattr(own, n))

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return forward(attr, self._sub, self.__name__)

    def __dir__(self):
        return sorted(set(dir(getattr(get_backend().xp, self._sub))))


def install_submodules(pkg: str, subs: dict[str, types.ModuleType | None]
                       ) -> dict[str, ForwardModule]:
    """``pkg.<sub>`` for each ``sub``: its module's ``__all__``, then the backend's names."""
    mods = {}
    for n, own in subs.items():
        m = ForwardModule(f"{pkg}.{n}", n, own)
        sys.modules[f"{pkg}.{n}"] = m
        mods[n] = m
    return mods
