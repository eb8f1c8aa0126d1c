"""The numpydoc sections the namespace's functions share, written once.

Each function's own docstring gives its summary (and any notes of its own); :func:`complete`,
called at the end of each module, appends the Parameters and Returns sections, built from the
function's signature, and the Stream semantics note, so ``help(cuflow.add)`` and the API
reference show the whole contract without a copy of it in each of the 87 elementwise
functions, 11 reductions and 12 creation functions.  The other functions (``reshape``,
``astype``, ``sort`` ...) describe the parameters particular to them and get the common ones
(``a``, ``dst``, ``out``, ``stream`` ...) from one table (:func:`with_common_parameters`).
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Iterable
from typing import Any

from .._errors import CuflowError

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
_ARG_AXIS = ("axis : int, optional\n"
             "    The axis reduced; an index into the flattened array when omitted.")
_ARG_DTYPE = ("dtype : integer dtype, optional\n"
              "    The index's dtype (CuPy's ``dtype=``); not with ``dst``.")

_REDUCTION_RETURNS = ("Returns\n-------\ndarray\n    ``dst`` when given, else a new array; a full "
                      "reduction is a 0-d darray.")
_REDUCTION_STREAM = ("Stream semantics: asynchronous; queued on ``stream`` or the current stream.\n"
                     "Reading the value on the host (``float(r)``, ``r.to_numpy()``) waits for it.")


def _whole(fn: Any, sections: list[str]) -> str:
    """``fn``'s own docstring (its summary and notes of its own), then ``sections``."""
    return inspect.cleandoc(fn.__doc__ or fn.__name__) + "\n\n" + "\n".join(sections) + "\n"


def reduction_sections(fn: Any) -> str:
    """The docstring of the reduction ``fn``, with its Parameters, Returns and Notes."""
    names = inspect.signature(fn).parameters
    arg = fn.__name__.startswith("arg")
    params = [_ARG_DTYPE if arg and n == "dtype" else _ARG_AXIS if arg and n == "axis" else
              _REDUCTION[n] for n in names]
    return _whole(fn, ["Parameters\n----------", *params, "", _REDUCTION_RETURNS, "",
                       "Notes\n-----", _REDUCTION_STREAM])


_CREATION = {
    "shape": ("shape : int or sequence of ints\n    The new array's shape, of ints >= 0 (a 0-d "
              "integer array is an int; a bool or a\n    float is not)."),
    "a": ("a : darray or array_like\n    The prototype whose shape and dtype the result takes "
          "(numbers, not text or objects)."),
    "fill_value": ("fill_value : number or darray\n    The value every element takes: a number "
                   "the dtype holds, or an array that\n    broadcasts to the shape and casts as "
                   "``astype`` does."),
    "dtype": ("dtype : dtype, optional\n    The result's dtype; when omitted, float64, or "
              "for ``full``, ``arange`` and\n    ``linspace``, NumPy's choice from the values."),
    "order": ("order : {\"C\", \"F\"}, optional\n    Memory layout (for ``*_like``, also "
              "``\"K\"`` and ``\"A\"``: the prototype's, NumPy's rule)."),
    "subok": ("subok : bool, optional\n"
              "    NumPy's argument, passed to the backend; the result is a darray."),
    "start": "start : number, optional\n    The first value.",
    "stop": "stop : number\n    The end of the range.",
    "step": "step : number, default 1\n    The spacing, non-zero.",
    "num": "num : int, default 50\n    How many values.",
    "endpoint": "endpoint : bool, default True\n    Whether ``stop`` is the last value.",
    "retstep": "retstep : bool, default False\n    Also return the spacing.",
    "axis": ("axis : int, default 0\n"
             "    The axis of the values when ``start`` or ``stop`` is an array."),
    "N": "N : int\n    Rows (the array API's ``n_rows``).",
    "M": "M : int, optional\n    Columns (``n_cols``); ``N`` when omitted.",
    "k": "k : int, default 0\n    The diagonal: 0 the main one, above it > 0, below it < 0.",
    "n": "n : int\n    Rows and columns.",
    "device": ("device : optional\n    The array API's device: None or the current device (move "
               "arrays with ``to_device``)."),
    "stream": _STREAM_PARAM,
}
_CREATION_DTYPE_LIKE = ("dtype : dtype, optional\n"
                        "    The result's dtype; the prototype's when omitted.")
_CREATION_SHAPE_LIKE = ("shape : int or sequence of ints, optional\n"
                        "    The result's shape; the prototype's when omitted.")
_CREATION_RETURNS = "Returns\n-------\ndarray\n    The new array."
_CREATION_STREAM = ("Stream semantics: asynchronous; any initialization (zeros, ones, a fill, a "
                    "range) is\nqueued on ``stream`` or the current stream.  A shape given as a "
                    "device array is read\nfirst: the host waits for its value.")


def creation_sections(fn: Any) -> str:
    """The docstring of the creation function ``fn``, with its Parameters, Returns and Notes."""
    names = inspect.signature(fn).parameters
    like = fn.__name__.endswith("_like")
    params = [_CREATION_DTYPE_LIKE if like and n == "dtype" else
              _CREATION_SHAPE_LIKE if like and n == "shape" else _CREATION[n] for n in names]
    # (``start`` is optional for ``arange`` only: what has no default is not optional)
    params = [p.replace(", optional\n", "\n", 1)
              if names[n].default is inspect.Parameter.empty else p for n, p in zip(names, params)]
    returns = _CREATION_RETURNS
    if "retstep" in names:
        returns += "\ntuple of (darray, float)\n    With ``retstep``: the array and the spacing."
    return _whole(fn, ["Parameters\n----------", *params, "", returns, "", "Notes\n-----",
                       _CREATION_STREAM])


def sections(fn: Any) -> str:
    """The docstring of the elementwise function ``fn``, with its Parameters, Returns and
    Notes."""
    params = inspect.signature(fn).parameters
    pair = "dst_pair" in params
    nin = ("src" in params) + ("other" in params)
    return _whole(fn, ["Parameters\n----------", _INPUTS[nin], _PAIR if pair else _OUTPUT, "",
                       _RETURNS[pair], "", "Notes\n-----", _STREAM])


_COMMON = {
    "a": "a : darray\n    The input.",
    "dst": ("dst : darray, optional\n    Where the result is written, of exactly its shape and a "
            "dtype it casts to; an\n    input that overlaps it is read from a private copy."),
    "out": "out : darray, optional\n    NumPy's name for ``dst``; give one of the two.",
    "dtype": "dtype : dtype, optional\n    The result's dtype (NumPy's ``dtype=``).",
    "casting": ('casting : {"no", "equiv", "safe", "same_kind", "unsafe"}, default "same_kind"\n'
                "    How the inputs may be cast to the result's dtype (NumPy's rule)."),
    "order": ('order : {"C", "F", "A", "K"}, optional\n    Memory layout of the result '
              "(NumPy's rule)."),
    "axis": ("axis : int, optional\n    The axis the operation runs along; the flattened array "
             "when omitted."),
    "copy": ("copy : bool, optional\n    True always copies, False refuses where a copy is "
             "needed, None copies\n    only where needed."),
    "device": _CREATION["device"],
    "stream": _STREAM_PARAM,
}
_COMMON_RETURNS = "Returns\n-------\ndarray\n    ``dst`` when given, else a new array."


def _split(doc: str) -> tuple[str, dict[str, str]]:
    """A numpydoc docstring's text before its first section, and its sections by title."""
    parts = re.split(r"\n(?=[A-Z][A-Za-z ]*\n-{3,}\n)", doc)
    head, sections = parts[0].rstrip("\n"), {}
    for part in parts[1:]:
        title, _, text = part.partition("\n")
        sections[title] = text.partition("\n")[2].rstrip("\n")
    return head, sections


def with_common_parameters(fn: Any, like: Any = None) -> str:
    """``fn``'s docstring with its Parameters section completed: the parameters its own
    section (or that of ``like``, a function of the same parameters) describes, those
    particular to it, and the common ones (``a``, ``dst``, ``out``, ``stream`` ...) in
    signature order; a Returns section where it has none."""
    head, secs = _split(inspect.cleandoc(fn.__doc__ or ""))
    body = secs.pop("Parameters", "")
    if like is not None:
        body = _split(inspect.cleandoc(like.__doc__))[1]["Parameters"]
    own: dict[str, str] = {}
    for line in body.split("\n") if body else []:
        if line and not line.startswith(" "):
            name = line.split(" : ")[0]
            own[name] = line
        elif own:
            own[name] += "\n" + line
    entries = []
    for name in inspect.signature(fn).parameters:
        if name == "self":  # (a method's)
            continue
        key = next((k for k in own if name in [n.strip("*") for n in k.split(", ")]), None)
        if key is not None:
            if own[key] not in entries:
                entries.append(own[key])
        elif name in _COMMON:
            entries.append(_COMMON[name])
        else:
            raise CuflowError(f"cuflow.{fn.__name__}: its parameter {name!r} is described "
                              "neither in its docstring nor in the common table (core/_docs.py)")
    returns = secs.pop("Returns", None)
    out = [head, "Parameters\n----------\n" + "\n".join(entries),
           _COMMON_RETURNS if returns is None else "Returns\n-------\n" + returns]
    out += [f"{title}\n{'-' * len(title)}\n{text}" for title, text in secs.items()]
    return "\n\n".join(out) + "\n"


def complete(namespace: dict[str, Any], names: Iterable[str], make: Any = sections) -> None:
    """Give each function in ``names`` the docstring ``make(fn)`` builds: :func:`sections` for
    elementwise functions, :func:`reduction_sections` for reductions,
    :func:`creation_sections` for creation functions, :func:`with_common_parameters` for the
    others (aliases, the same object under another name, are completed once)."""
    if sys.flags.optimize >= 2:  # (python -OO: the docstrings are stripped)
        return
    done: set[int] = set()
    for name in names:
        fn = namespace[name]
        if id(fn) not in done and callable(fn):
            done.add(id(fn))
            fn.__doc__ = make(fn)
