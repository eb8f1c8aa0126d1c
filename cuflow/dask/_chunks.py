"""darray as a Dask array chunk type: dispatch registrations, meta, host <-> device.

``dask.array`` looks some operations up per chunk type (``concatenate_lookup`` &
co.).  darray subclasses ``cupy.ndarray`` / ``numpy.ndarray``, so without
:func:`register` Dask would use CuPy's (or NumPy's) functions and hand back the
base type; registered, concatenation (and so rechunking and the join of the chunks
in ``compute()``), ``tensordot`` and ``einsum`` give darrays.  Registration is per
process: the workers do it in :class:`~cuflow.dask.CuflowPool`'s setup and when
they run a graph built by :func:`from_host` or with :func:`meta`; without it a
worker still computes correctly, with the base type's functions.

Dask ops that make their chunks without these lookups give what the functions they
call return, whatever ``meta`` they declare:

* ``zeros_like``, ``ones_like``, ``full_like`` and ``empty_like`` (and ``zeros``,
  ``ones``, ``full`` and ``empty`` given a darray ``meta``) go through Dask's
  array-creation backend, which the ``array.backend`` setting picks, not the chunk
  type.  It broadcasts a ``*_like`` of the meta with ``numpy.broadcast_to``, which
  gives a ``numpy.ndarray`` (``subok=False``) and, on the GPU, a ``cupy.ndarray``
  (CuPy's ``*_like`` and ``broadcast_to`` build the base type).
* A 1-d ``percentile`` merges the chunks' percentiles with NumPy functions
  (``numpy.interp`` and indexing), which CuPy runs on the GPU, and gives the base
  type on both backends.  (It needs Dask's own CuPy registrations, for ``empty`` and
  ``percentile``, which Dask makes only at a lookup of a ``cupy.ndarray`` in
  ``concatenate`` & co.: :func:`register` makes that lookup.)
* ``vindex`` merges each output chunk's points into ``numpy.empty_like`` of a chunk,
  which keeps a NumPy subclass (a darray on the NumPy backend) and, on the GPU, gives a
  ``cupy.ndarray`` (CuPy's ``empty_like`` builds the base type).

``y.map_blocks(cuflow.asarray, dtype=y.dtype, meta=meta(y.dtype, y.ndim))`` makes
darrays of such chunks, and :func:`cuflow.asarray` of a computed result (on the GPU
neither copies).  docs/scaling.md lists the other Dask ops seen to give NumPy
arrays on the NumPy backend.
"""

from __future__ import annotations

import numbers
from typing import Any

import dask.array as da
import numpy
from dask.array import dispatch
from dask.array.core import normalize_chunks
from distributed.protocol import cuda_deserialize, dask_deserialize

from .._checks import is_integer
from .._errors import ArgumentError, ArgumentTypeError
from ..core import asarray, asnumpy, concatenate, empty, runtime
from ..core._contract import check_dtype

__all__ = ["register", "meta", "from_host", "to_host"]

_REGISTERED: set[type] = set()


def register() -> type:
    """Register the active backend's darray type with ``dask.array``; returns that type.

    Idempotent.  Called by :func:`from_host`, :func:`meta` and the worker
    plugin, so calling it yourself is needed only for graphs built by hand
    from darray chunks.
    """
    rt = runtime()
    t = rt.darray
    if t in _REGISTERED:
        return t
    xp = rt.xp

    def _concatenate(arrays, axis=0):
        if all(a.dtype.kind in "biufc" for a in arrays):
            return concatenate([asarray(a) for a in arrays], axis=axis)
        # Dask's own intermediates (argmax's structured (vals, arg) chunks), of no dtype
        # cuflow computes with: the backend joins them
        base = [a.view(rt.ndarray) if isinstance(a, rt.ndarray) else a for a in arrays]
        return rt.wrap(xp.concatenate(base, axis=axis))

    def _tensordot(a, b, axes=2):
        return rt.wrap(xp.tensordot(a, b, axes=axes))

    def _einsum(subscripts, *operands, **kwargs):
        if xp is numpy:
            return rt.wrap(xp.einsum(subscripts, *operands, **kwargs))
        # CuPy takes neither casting nor order: the casting rule (NumPy's default 'safe') is
        # checked here; order is only the result's layout
        casting = kwargs.pop("casting", "safe")
        kwargs.pop("order", None)
        dtype = kwargs.get("dtype")
        if dtype is not None:
            for op in operands:
                if not numpy.can_cast(op.dtype, dtype, casting=casting):
                    raise ArgumentTypeError(
                        f"cuflow.dask: einsum cannot cast an operand of dtype {op.dtype} to "
                        f"dtype={numpy.dtype(dtype)} under casting={casting!r}; give a "
                        f"casting rule that allows it, such as casting='same_kind'")
        return rt.wrap(xp.einsum(subscripts, *operands, **kwargs))

    def _take(a, indices, axis=None):
        return rt.wrap(xp.take(a, indices, axis=axis))

    def _empty(shape, dtype=float, **kwargs):
        return empty(shape, dtype=dtype)

    def _to_numpy(data, **kwargs):
        return asnumpy(data)

    dispatch.concatenate_lookup.register(t, _concatenate)
    dispatch.tensordot_lookup.register(t, _tensordot)
    dispatch.einsum_lookup.register(t, _einsum)
    dispatch.take_lookup.register(t, _take)
    dispatch.empty_lookup.register(t, _empty)
    dispatch.to_numpy_dispatch.register(t, _to_numpy)
    _deserialize_as_darray(t, rt.ndarray)
    # Dask's functions for the base type, which darray falls back to along its MRO (percentile's
    # lookup) and which a 1-d percentile looks up for its q (a base array: empty): Dask makes
    # CuPy's at the first cupy.ndarray lookup of concatenate & co. only, never of empty or
    # percentile, so without this a percentile fails on the GPU until some such lookup ran
    dispatch.concatenate_lookup.dispatch(rt.ndarray)
    _REGISTERED.add(t)
    return t


def _deserialize_as_darray(t: type, base: type) -> None:
    """Chunks that travel between processes arrive as darrays, not as the base type.

    ``distributed`` serializes a darray with its base class's serializer (found
    along the MRO), and that deserializer builds the base type.
    """
    for family in (dask_deserialize, cuda_deserialize):
        try:
            of_base = family.dispatch(base)
        except TypeError:  # no serializer of this family for the backend (cuda on NumPy)
            continue

        def deserialize(header, frames, of_base=of_base):
            return runtime().as_darray(of_base(header, frames))

        family.register(t, deserialize)


# A process that imported this module registers darray at the first lookup of a
# cuflow chunk type (Dask's lazy registration, keyed by the class's top-level module).
for _lookup in (dispatch.concatenate_lookup, dispatch.tensordot_lookup, dispatch.einsum_lookup,
                dispatch.take_lookup, dispatch.empty_lookup, dispatch.to_numpy_dispatch,
                dask_deserialize, cuda_deserialize):
    _lookup.register_lazy("cuflow", register)


def _to_device(block: Any) -> Any:
    register()  # this worker concatenates and ships darray chunks as darrays
    return asarray(block)


def _native(dtype: numpy.dtype) -> numpy.dtype:
    """``dtype`` in the machine's byte order: the order of the chunks on the device."""
    return dtype if dtype.isnative else dtype.newbyteorder("=")


# {backend name: the most dimensions its arrays take}, found at the first meta call
_MAX_NDIM: dict[str, int] = {}


def _max_ndim() -> int:
    """The most dimensions an array of the active backend takes.

    That is NumPy's ``NPY_MAXDIMS``, 64 from NumPy 2 on and 32 before; CuPy's ``MAX_NDIM``
    follows it (32, and 64 in the releases that match NumPy 2).  Neither library exposes the
    number to Python, so a 64-dimensional empty array (no bytes) is tried once per backend.
    """
    rt = runtime()
    n = _MAX_NDIM.get(rt.name)
    if n is None:
        try:
            rt.xp.empty((0,) * 64, dtype=numpy.int8)
            n = 64
        except ValueError:  # "maximum supported dimension for an ndarray is 32, found 64"
            n = 32
        _MAX_NDIM[rt.name] = n
    return n


def meta(dtype: Any = numpy.float32, ndim: int = 1) -> Any:
    """An empty darray of ``dtype`` and ``ndim``: the ``meta=`` of a Dask array of darray chunks.

    ``ndim`` is an int from 0 to the backend's maximum number of dimensions (64 with NumPy 2
    and the CuPy releases that follow it, 32 with NumPy 1 and older CuPy); ``dtype`` names a
    dtype that :func:`cuflow.empty` takes (in the machine's byte order, as the chunks are:
    ``'>f4'`` gives ``float32`` on x86).

    Parameters
    ----------
    dtype : dtype-like, default numpy.float32
        The chunks' dtype: bool, an integer, real or complex dtype, given in either byte
        order.  None is :func:`cuflow.empty`'s default, float64.
    ndim : int, default 1
        The Dask array's number of dimensions, an int (not a bool) in ``[0, 64]`` (``[0, 32]``
        where the backend's arrays take at most 32 dimensions).

    Returns
    -------
    darray
        An array of shape ``(0,) * ndim`` on the current device, in the machine's byte order.
        The darray type is registered with ``dask.array`` (:func:`register`) first.

    Raises
    ------
    cuflow.ArgumentTypeError
        ``ndim`` is not an int, or ``dtype`` names no dtype or a dtype of no numbers.
    cuflow.ArgumentError
        ``ndim`` is negative or above the backend's maximum number of dimensions.
    """
    top = _max_ndim()
    if not is_integer(ndim):
        raise ArgumentTypeError(f"cuflow.dask.meta: ndim must be an int in [0, {top}], "
                                f"got {ndim!r}")
    if not 0 <= ndim <= top:
        raise ArgumentError(f"cuflow.dask.meta: ndim must be in [0, {top}], got {ndim!r}")
    check_dtype("dask.meta", dtype)
    if dtype is not None:
        dtype = _native(numpy.dtype(dtype))
    register()
    return empty((0,) * int(ndim), dtype=dtype)


def _chunks_error(err: type, chunks: Any, shape: tuple, rule: str, found: str) -> Exception:
    return err(f"cuflow.dask.from_host: chunks must be 'auto', a chunk size, or chunk sizes per "
               f"axis (a tuple, or a dict {{axis: sizes}}) for x's shape {shape}, as dask.array "
               f"takes them, and {rule}; got chunks={chunks!r}, where {found}")


_SIZES_ARE_INTS = "sizes are ints, no bools or floats"
_A_CHUNK_SIZE = "a chunk size is an int >= 1 (-1 or None: the whole axis)"


def _sizes(chunks: Any) -> list[Any]:
    """The numbers ``chunks`` holds, at any depth (a dict's values, not its keys)."""
    if isinstance(chunks, numpy.ndarray):
        chunks = chunks.tolist()
    if isinstance(chunks, dict):
        chunks = list(chunks.values())
    if isinstance(chunks, tuple | list):
        return [n for c in chunks for n in _sizes(c)]
    return [chunks] if isinstance(chunks, numbers.Number | numpy.bool_) else []


def _check_chunks(chunks: Any, shape: tuple) -> None:
    # Dask reads True as a chunk size of 1 (a task per element)
    if any(isinstance(n, bool | numpy.bool_) for n in _sizes(chunks)):
        raise _chunks_error(ArgumentTypeError, chunks, shape, _SIZES_ARE_INTS, "a size is a bool")


def _normalize_chunks(chunks: Any, x: Any) -> tuple[tuple[int, ...], ...]:
    """``chunks`` for ``x`` (a NumPy or a Dask array) as sizes per axis, by one rule for both.

    ``dask.array.from_array`` and ``Array.rechunk`` read ``chunks`` differently (``(3, 3)``
    for a shape ``(8,)``, a dict's keys out of range, more axes than ``x`` has), so the
    value is read here by ``dask.array.core.normalize_chunks``, as ``from_array`` reads it,
    after the checks that function leaves out.
    """
    shape, ndim = tuple(x.shape), len(x.shape)
    dask_input = isinstance(x, da.Array)
    _check_chunks(chunks, shape)
    for n in _sizes(chunks):
        if not is_integer(n):  # (Dask takes 4.0 and 1e9 as sizes)
            raise _chunks_error(ArgumentTypeError, chunks, shape, _SIZES_ARE_INTS,
                                f"a size is a {type(n).__name__}, {n!r}")
        if n < -1:  # (Dask reads -2 as an empty tuple of sizes)
            raise _chunks_error(ArgumentError, chunks, shape, _A_CHUNK_SIZE,
                                f"a size is {n!r}")
    if dask_input and any(numpy.isnan(c) for c in shape):
        raise ArgumentError(f"cuflow.dask.from_host: x's chunk sizes are unknown (its shape is "
                            f"{shape}), so it cannot be rechunked to chunks={chunks!r}; give "
                            f"chunks='auto', or call x.compute_chunk_sizes() first")
    if isinstance(chunks, numpy.ndarray):
        chunks = chunks.tolist()
    if isinstance(chunks, dict):
        keys = f"a dict's keys are axes, ints in [{-ndim}, {ndim}), each axis once"
        axes: dict[int, Any] = {}
        for axis, c in chunks.items():
            if not is_integer(axis):
                raise _chunks_error(ArgumentTypeError, chunks, shape, keys,
                                    f"a key is a {type(axis).__name__}, {axis!r}")
            if not -ndim <= axis < ndim:
                raise _chunks_error(ArgumentError, chunks, shape, keys, f"a key is {axis!r}")
            if int(axis) % ndim in axes:
                raise _chunks_error(ArgumentError, chunks, shape, keys,
                                    f"axis {int(axis) % ndim} is given twice")
            axes[int(axis) % ndim] = c
        # the axes left out keep x's chunks: a Dask array's own, the whole axis of host data
        chunks = tuple(axes.get(i, x.chunks[i] if dask_input else -1) for i in range(ndim))
    try:
        out = normalize_chunks(chunks, shape, dtype=x.dtype,
                               previous_chunks=x.chunks if dask_input else None)
    except ZeroDivisionError as e:
        raise _chunks_error(ArgumentError, chunks, shape, _A_CHUNK_SIZE,
                            "a chunk size is 0 for an axis of nonzero length") from e
    except (ValueError, TypeError) as e:
        err = ArgumentTypeError if isinstance(e, TypeError) else ArgumentError
        raise _chunks_error(err, chunks, shape, "there is an entry per axis, whose explicit "
                            "sizes add up to its length", f"Dask says: {e}") from e
    for axis, sizes in enumerate(out):
        if any(c < 0 for c in sizes):  # (explicit sizes with a -1 that still add up)
            raise _chunks_error(ArgumentError, chunks, shape, "explicit sizes are ints >= 0 "
                                "that add up to their axis's length",
                                f"axis {axis} has sizes {sizes}")
    return out


def from_host(x: Any, chunks: Any = "auto") -> da.Array:
    """A Dask array of darray chunks from host data (a NumPy array or a Dask array of NumPy chunks).

    Each chunk is copied to the device of the worker that computes it, in the machine's
    byte order (a ``'>f4'`` array gives ``float32`` chunks on x86).  A device array (a
    darray or CuPy array) is chunked as it is, and each chunk copied to its worker's device.

    Parameters
    ----------
    x : array_like or dask.array.Array
        The data, of a bool, integer, real or complex dtype: a NumPy array or anything
        ``numpy.asarray`` reads as one, a Dask array of NumPy chunks, or (on the GPU backend)
        a darray or CuPy array.
    chunks : str, int, tuple or dict, default "auto"
        The chunking, read by one rule for host data and for a Dask array, that of
        ``dask.array.core.normalize_chunks`` (which ``dask.array.from_array`` uses) against
        ``x``'s shape: ``"auto"`` or a byte size such as ``"64MiB"``; a chunk size for every
        axis; a tuple (or list, or NumPy array) with one entry per axis, each a chunk size,
        ``"auto"``, ``-1`` or None (the whole axis) or the axis's explicit chunk sizes, which
        add up to its length (a 1-d ``x`` also takes its explicit sizes as a flat tuple,
        ``(4, 4)`` for a shape ``(8,)``); or a dict ``{axis: entry}`` whose keys are axes in
        ``[-ndim, ndim)``, each given once, where the axes left out keep ``x``'s chunks (a
        Dask array's own, the whole axis of host data).  A chunk size is an int >= 1 (0
        only for an axis of length 0); sizes are ints, never bools or floats.  With
        ``"auto"`` a Dask array keeps its chunks; any other value rechunks it.

    Returns
    -------
    dask.array.Array
        A lazy array of ``x``'s shape whose chunks are darrays, with ``x``'s dtype in the
        machine's byte order and :func:`meta` of that dtype as its ``meta``.

    Raises
    ------
    cuflow.ArgumentTypeError
        ``x`` is None or not of a dtype of numbers; ``chunks`` holds a bool or a float, a
        dict key that is not an int, or is of a type Dask refuses.
    cuflow.ArgumentError
        ``x`` cannot be read as an array (a ragged sequence); ``chunks`` breaks the rule
        above (a chunk size below 1, a dict key out of range or given twice, explicit
        sizes that do not add up to their axis's length, more or fewer entries than ``x``
        has axes); or ``x`` is a Dask array of unknown chunk sizes and ``chunks`` is not
        ``"auto"``.

    Notes
    -----
    Stream semantics: the call queues no device work.  Computing the result copies each
    chunk of host data to the device with :func:`cuflow.asarray`, queued on the current
    stream of the worker thread that computes it; the chunks of a device array are views
    of it, as Dask's chunks of a NumPy array are, so a task must not write into them.
    """
    if x is None:
        raise ArgumentTypeError("cuflow.dask.from_host: x must be an array of numbers (a NumPy "
                                "array, array-like, or a Dask array of NumPy chunks), got None")
    rt = runtime()
    register()
    # a device array (darray or CuPy) is chunked where it is: NumPy cannot read it
    if not isinstance(x, da.Array) and not (rt.is_gpu and isinstance(x, rt.ndarray)):
        try:
            x = numpy.asarray(x)
        except ValueError as e:  # ragged sequences
            raise ArgumentError(f"cuflow.dask.from_host: x must be an array of numbers, got a "
                                f"{type(x).__name__} that cannot be converted to an array: "
                                f"{e}") from e
    # before any chunking: Dask's auto-chunking of objects or text fails with its own words
    if x.dtype.kind not in "biufc":
        raise ArgumentTypeError(f"cuflow.dask.from_host: x must be an array of numbers (bool, "
                                f"integer, real or complex dtype), got an array of dtype "
                                f"{x.dtype}")
    if isinstance(chunks, str) and chunks == "auto" and isinstance(x, da.Array):
        pass  # a Dask array keeps its chunks
    else:
        chunks = _normalize_chunks(chunks, x)
        if not isinstance(x, da.Array):
            x = da.from_array(x, chunks=chunks)
        elif chunks != x.chunks:
            x = x.rechunk(chunks)
    dtype = _native(x.dtype)
    if dtype != x.dtype:  # on the host, so every backend's chunks have the declared dtype
        x = x.astype(dtype)
    return x.map_blocks(_to_device, dtype=dtype, meta=meta(dtype, x.ndim))


def to_host(x: da.Array) -> da.Array:
    """The same Dask array with NumPy chunks (each chunk copied to the host on its worker).

    ``to_host(x).compute()`` gives a ``numpy.ndarray`` on the client, which then
    needs no GPU.  ``x`` must be a Dask array; a darray goes to the host with
    :func:`cuflow.asnumpy`.

    Parameters
    ----------
    x : dask.array.Array
        A Dask array, typically of darray chunks (from :func:`from_host` or ``map_blocks``
        with cuflow ops).

    Returns
    -------
    dask.array.Array
        A lazy array of ``x``'s shape and dtype whose chunks are ``numpy.ndarray``.

    Raises
    ------
    cuflow.ArgumentTypeError
        ``x`` is not a ``dask.array.Array`` (a darray or a NumPy array is refused too).

    Notes
    -----
    Stream semantics: the call queues no device work.  Computing the result copies each
    chunk with :func:`cuflow.asnumpy`: the copy is queued on the current stream of the
    worker thread that computes it, after the work queued there, and waited for.
    """
    if not isinstance(x, da.Array):
        # (a NumPy array is refused too: the result is a Dask array, computed later)
        raise ArgumentTypeError(
            f"cuflow.dask.to_host: x must be a dask.array.Array, got {type(x).__module__}."
            f"{type(x).__qualname__}; for one array (darray or NumPy) use cuflow.asnumpy, "
            "and cuflow.dask.from_host to make a Dask array of host data")
    return x.map_blocks(asnumpy, dtype=x.dtype, meta=numpy.empty((0,) * x.ndim, x.dtype))
