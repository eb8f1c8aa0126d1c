"""The array API inspection namespace: ``cuflow.__array_namespace_info__()``."""

from __future__ import annotations

from typing import Any

import numpy

from .._errors import ArgumentError, ArgumentTypeError
from ._contract import as_dtype, parse_dtype
from ._runtime import Device, runtime

__all__ = ["Info", "__array_namespace_info__", "isdtype", "finfo", "iinfo", "result_type",
           "can_cast", "check_device"]

_KINDS = {
    "bool": ("bool",),
    "signed integer": ("int8", "int16", "int32", "int64"),
    "unsigned integer": ("uint8", "uint16", "uint32", "uint64"),
    "integral": ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"),
    "real floating": ("float32", "float64"),
    "complex floating": ("complex64", "complex128"),
    "numeric": ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float32", "float64", "complex64", "complex128"),
}
_ALL = ("bool", *_KINDS["numeric"])
_KIND_CHARS = {"bool": "b", "signed integer": "i", "unsigned integer": "u", "integral": "iu",
               "real floating": "f", "complex floating": "c", "numeric": "iufc"}


class Info:
    """What cuflow supports on the active backend (array API inspection functions)."""

    __module__ = "cuflow"

    def capabilities(self) -> dict[str, Any]:
        """``boolean indexing`` and ``data-dependent shapes`` are supported; ``max dimensions`` is
        CuPy's and NumPy's limit, 64."""
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": 64}

    def default_device(self) -> Any:
        """The current device: a ``cupy.cuda.Device``; on the NumPy backend ``"cpu"``, or
        the current emulated :class:`cuflow.Device` (``CUFLOW_NUMPY_DEVICES``)."""
        rt = runtime()
        if rt.is_gpu:
            return rt.xp.cuda.Device()
        return Device(rt.current_device()) if rt.multi else "cpu"

    def devices(self) -> tuple[Any, ...]:
        """Every device arrays can be made on (those ``x.device`` gives)."""
        rt = runtime()
        if rt.is_gpu:
            return tuple(rt.xp.cuda.Device(i) for i in range(rt.device_count))
        return tuple(Device(i) for i in range(rt.device_count)) if rt.multi else ("cpu",)

    def default_dtypes(self, *, device: Any = None) -> dict[str, numpy.dtype]:
        """float64, complex128, int64 (the index dtype too), as NumPy and CuPy."""
        self._check(device)
        return {"real floating": numpy.dtype(numpy.float64),
                "complex floating": numpy.dtype(numpy.complex128),
                "integral": numpy.dtype(numpy.int64), "indexing": numpy.dtype(numpy.int64)}

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, numpy.dtype]:
        """The array API dtypes of ``kind`` (a kind name, or a tuple of them; None: all)."""
        self._check(device)
        if kind is None:
            names: tuple[str, ...] = _ALL
        else:
            names = ()
            for k in kind if isinstance(kind, tuple) else (kind,):
                if k not in _KINDS:
                    raise ArgumentError(f"dtypes(kind=): kind must be one of {sorted(_KINDS)} "
                                      f"or a tuple of them, got {k!r}")
                names += tuple(n for n in _KINDS[k] if n not in names)
        return {n: numpy.dtype(n) for n in names}

    def _check(self, device: Any) -> None:
        if device is not None and device not in self.devices():
            raise ArgumentError(f"device must be one of {self.devices()}, got {device!r}")


def __array_namespace_info__() -> Info:  # noqa: N807
    """The array API inspection namespace."""
    return Info()


def isdtype(dtype: Any, kind: Any) -> bool:
    """True when ``dtype`` is of ``kind``: a dtype, a kind name, or a tuple of them (array API).

    Parameters
    ----------
    dtype : dtype
        The dtype tested (a dtype object or a scalar type, not a name or an array).
    kind : dtype, str or tuple
        A dtype; one of the array API's kind names ``"bool"``, ``"signed integer"``,
        ``"unsigned integer"``, ``"integral"``, ``"real floating"``, ``"complex floating"``,
        ``"numeric"``; or a tuple of those, any of which matches.

    Returns
    -------
    bool

    Raises
    ------
    ArgumentTypeError
        ``dtype`` is not a dtype.
    ArgumentError
        A kind name outside the list above.
    """
    if not isinstance(dtype, numpy.dtype | type):  # (the array API: a dtype, not its name)
        raise ArgumentTypeError(f"cuflow.isdtype: dtype must be a dtype, got {dtype!r}")
    dtype = as_dtype("isdtype", dtype)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for k in kinds:  # every kind checked, not only those before a match
        if isinstance(k, str) and k not in _KIND_CHARS:
            raise ArgumentError(f"cuflow.isdtype: kind must be a dtype, one of "
                                f"{sorted(_KINDS)}, or a tuple of them, got {kind!r}")
        if not isinstance(k, str):
            as_dtype("isdtype", k)
    return any(dtype.kind in _KIND_CHARS[k] if isinstance(k, str)  # float16 is real floating
               else dtype == numpy.dtype(k) for k in kinds)


def _dt(x: Any) -> Any:
    return x.dtype if hasattr(x, "dtype") and not isinstance(x, numpy.dtype | type) else x


class _Finfo:
    """NumPy's ``finfo`` with the array API's fields as Python floats."""

    __slots__ = ("_f", "bits", "eps", "max", "min", "smallest_normal", "dtype")

    def __init__(self, f: numpy.finfo) -> None:
        self._f = f
        self.bits = int(f.bits)
        self.eps, self.max, self.min = float(f.eps), float(f.max), float(f.min)
        self.smallest_normal = float(f.smallest_normal)
        self.dtype = f.dtype

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)  # tiny, resolution, precision ... as NumPy has them

    def __repr__(self) -> str:
        return repr(self._f)


def finfo(type: Any, /) -> Any:  # noqa: A002
    """Machine limits of a floating dtype, or of an array's dtype (array API ``finfo``).

    ``bits``, ``eps``, ``max``, ``min`` and ``smallest_normal`` are Python numbers, as
    the array API asks; NumPy's other fields are there too.  NumPy's and CuPy's ``finfo``
    give scalars of the dtype instead, and the two promote differently: a Python float is
    weak, so ``full(2, finfo(float32).min)`` is float64 and ``x + finfo(float32).eps`` of a
    float16 ``x`` is float16, eps rounded away.  Pass ``dtype=`` or take
    ``numpy.finfo(...)`` where the dtype's scalars are meant.

    Parameters
    ----------
    type : dtype or darray
        A floating or complex dtype, or an array of one.

    Returns
    -------
    finfo
        ``bits``, ``eps``, ``max``, ``min``, ``smallest_normal`` and ``dtype``.

    Raises
    ------
    ArgumentTypeError
        ``type`` is neither a dtype nor an array.
    ArgumentError
        The dtype is not floating or complex.
    """
    dt = _limits_dtype("finfo", type, "fc", "a floating or complex")
    return _Finfo(numpy.finfo(dt))


def iinfo(type: Any, /) -> numpy.iinfo:  # noqa: A002
    """Machine limits of an integer dtype, or of an array's dtype (array API ``iinfo``).

    Parameters
    ----------
    type : dtype or darray
        An integer dtype, or an array of one.

    Returns
    -------
    numpy.iinfo
        ``bits``, ``max``, ``min`` and ``dtype``.

    Raises
    ------
    ArgumentTypeError
        ``type`` is neither a dtype nor an array.
    ArgumentError
        The dtype is not an integer one.
    """
    return numpy.iinfo(_limits_dtype("iinfo", type, "iu", "an integer"))


def _limits_dtype(name: str, x: Any, kinds: str, what: str) -> numpy.dtype:
    dt = parse_dtype(_dt(x))
    if dt is None:
        raise ArgumentTypeError(f"cuflow.{name} takes a dtype or an array, got {x!r}")
    if dt.kind not in kinds:  # (NumPy's ValueError)
        raise ArgumentError(f"cuflow.{name} takes {what} dtype, got {dt}")
    return dt


def result_type(*arrays_and_dtypes: Any) -> numpy.dtype:
    """NumPy's type promotion of arrays (of any backend), dtypes and scalars.

    Parameters
    ----------
    *arrays_and_dtypes : darray, dtype or scalar
        At least one; Python scalars are weak, as in NumPy 2.

    Returns
    -------
    numpy.dtype

    Raises
    ------
    ArgumentError
        No argument.
    ArgumentTypeError
        An argument NumPy cannot promote.
    """
    if not arrays_and_dtypes:
        raise ArgumentError("cuflow.result_type needs at least one array or dtype")
    try:
        return numpy.result_type(*(_dt(x) for x in arrays_and_dtypes))
    except (TypeError, SyntaxError) as e:  # (NumPy parses a dtype string like "f4,," as Python)
        what = e if isinstance(e, TypeError) else f"a dtype string NumPy cannot parse ({e.msg})"
        raise ArgumentTypeError(f"cuflow.result_type: {what}") from e


def can_cast(from_: Any, to: Any, /, casting: str = "safe") -> bool:
    """Whether ``from_`` (a dtype or array) casts to ``to`` under ``casting``.

    Parameters
    ----------
    from_ : dtype or darray
        The source dtype, or an array of it (not a Python scalar, as in NumPy 2).
    to : dtype
        The target dtype.
    casting : {"no", "equiv", "safe", "same_kind", "unsafe"}, default "safe"
        The casting rule (NumPy's).

    Returns
    -------
    bool

    Raises
    ------
    ArgumentError
        ``casting`` outside the five rules.
    ArgumentTypeError
        ``from_`` is neither a dtype nor an array.
    """
    if casting not in ("no", "equiv", "safe", "same_kind", "unsafe"):
        raise ArgumentError(f"cuflow.can_cast: casting must be 'no', 'equiv', 'safe', "
                            f"'same_kind' or 'unsafe', got {casting!r}")
    src = _dt(from_)
    if not isinstance(src, numpy.dtype | type | str):  # (NumPy 2 refuses Python scalars)
        raise ArgumentTypeError(f"cuflow.can_cast: from_ must be a dtype or an array, got "
                                f"{type(from_).__name__} {from_!r}")
    return bool(numpy.can_cast(as_dtype("can_cast", src), as_dtype("can_cast", to),
                               casting))


def check_device(name: str, device: Any) -> None:
    """Refuse a ``device=`` other than the current one (arrays are made on the current device)."""
    rt = runtime()
    i = rt.current_device()
    if device == "cpu" and not rt.is_gpu:  # (the NumPy arrays' own device)
        return
    if isinstance(device, bool) or getattr(device, "id", device) != i:
        current = Info().default_device()
        raise ArgumentError(f"cuflow.{name}: device must be the current device {current!r} "
                            f"(use `with cuflow.Device(i):` to make arrays on another), "
                            f"got {device!r}")
