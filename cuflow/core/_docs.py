"""The numpydoc sections the elementwise functions and the reductions share, written once.

Each function's own docstring gives its summary (and any notes of its own); :func:`complete`
appends the Parameters and Returns sections, built from the function's signature, and the
Stream semantics note, so ``help(cuflow.add)`` and the API reference show the whole contract
without a copy of it in each of the 87 elementwise functions and 11 reductions.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

_INPUTS = {
    1: ("src : darray or scalar\n    The operand: a darray (or an array of the active backend), "
        "or a Python or\n    NumPy scalar."),
    2: ("src, other : darray or scalar\n    The operands, broadcast against each other; a Python "
        "scalar takes the\n    array's dtype where it fits (NumPy's promotion)."),
}

_STREAM_PARAM = """\
stream : cuflow.Stream, optional
    The stream the work is queued on; the current stream when omitted."""

_OUT_REST = """\
out : {what}, optional
    NumPy's name for ``dst``; give one of the two.
""" + _STREAM_PARAM + """
casting : {{"no", "equiv", "safe", "same_kind", "unsafe"}}, default "same_kind"
    How the result may be cast into ``dst`` (NumPy's rule).
dtype : dtype, optional
    The dtype the computation runs in (NumPy's ``dtype=``); the inputs are cast to it
    under ``casting``."""

_OUTPUT = """\
dst : darray, optional
    Where the result is written: of exactly the broadcast shape (an output is never
    broadcast), a dtype the result casts to under ``casting``; it may be an input
    (in place).  Positional after the inputs, as NumPy's ``out``.
""" + _OUT_REST.format(what="darray")

_PAIR = """\
*dst_pair : darray, optional
    The two outputs given positionally, NumPy's spelling of ``dst=(d1, d2)``.
dst : tuple of two darrays, optional
    Where the two results are written, each of exactly the broadcast shape, with dtypes
    the results cast to under ``casting``.
""" + _OUT_REST.format(what="tuple of two darrays")

_RETURNS = {
    False: ("Returns\n-------\ndarray\n    ``dst`` when given, else a new array (a 0-d darray for "
            "scalar operands)."),
    True: "Returns\n-------\ntuple of two darrays\n    ``dst`` when given, else two new arrays.",
}

_STREAM = ("Stream semantics: asynchronous; queued on ``stream`` or the current stream.\n"
           "Nothing here waits for the GPU.")


_REDUCTION = {
    "a": "a : darray\n    The input.",
    "axis": ("axis : int or tuple of ints, optional\n"
             "    The axes reduced; all of them when omitted."),
    "dtype": ("dtype : dtype, optional\n"
              "    The dtype the reduction accumulates in and returns (NumPy's ``dtype=``)."),
    "dst": ("dst : darray, optional\n    Where the result is written, of exactly the reduced "
            "shape; an input that\n    overlaps it is read from a private copy."),
    "ddof": ("ddof : int, default 0\n"
             "    NumPy's delta degrees of freedom: the divisor is ``N - ddof``."),
    "keepdims": ("keepdims : bool, default False\n"
                 "    Keep the reduced axes as axes of length 1."),
    "correction": ("correction : int or float, optional\n"
                   "    The array API's name for ``ddof``; give one of the two."),
    "out": "out : darray, optional\n    NumPy's name for ``dst``; give one of the two.",
    "stream": _STREAM_PARAM,
}
_ARG_DTYPE = ("dtype : integer dtype, optional\n"
              "    The index's dtype (CuPy's ``dtype=``); not with ``dst``.")

_REDUCTION_RETURNS = ("Returns\n-------\ndarray\n    ``dst`` when given, else a new array; a full "
                      "reduction is a 0-d darray.")
_REDUCTION_STREAM = ("Stream semantics: asynchronous; queued on ``stream`` or the current stream.\n"
                     "Reading the value on the host (``float(r)``, ``r.to_numpy()``) waits for it.")


def reduction_sections(fn: Any) -> str:
    """The Parameters, Returns and Notes sections of the reduction ``fn``."""
    names = inspect.signature(fn).parameters
    arg = fn.__name__.startswith("arg")
    params = [_ARG_DTYPE if arg and n == "dtype" else _REDUCTION[n] for n in names]
    return "\n".join(["Parameters\n----------", *params, "", _REDUCTION_RETURNS, "",
                      "Notes\n-----", _REDUCTION_STREAM])


def sections(fn: Any) -> str:
    """The Parameters, Returns and Notes sections of the elementwise function ``fn``."""
    params = inspect.signature(fn).parameters
    pair = "dst_pair" in params
    nin = ("src" in params) + ("other" in params)
    text = ["Parameters\n----------", _INPUTS[nin], _PAIR if pair else _OUTPUT, "",
            _RETURNS[pair], "", "Notes\n-----", _STREAM]
    return "\n".join(text)


def complete(namespace: dict[str, Any], names: Iterable[str], make: Any = sections) -> None:
    """Append the shared sections (``make(fn)``: :func:`sections` for elementwise functions,
    :func:`reduction_sections` for reductions) to the docstring of each function in ``names``
    (aliases, the same object under another name, are completed once)."""
    done: set[int] = set()
    for name in names:
        fn = namespace[name]
        if id(fn) in done or not callable(fn) or "Parameters\n" in (fn.__doc__ or ""):
            continue
        done.add(id(fn))
        summary = inspect.cleandoc(fn.__doc__ or name)
        fn.__doc__ = summary + "\n\n" + make(fn) + "\n"
