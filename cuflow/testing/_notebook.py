"""Run a Jupyter notebook's code cells in one namespace, without Jupyter.

CI executes ``examples/*.ipynb`` with this on the NumPy backend (no kernel,
no ``nbclient``), and the GPU run records real outputs into the notebook with
``python -m cuflow run-notebook PATH --write``.  Each code cell runs in order;
its stdout becomes a ``stream`` output and the value of a final bare
expression an ``execute_result`` (as IPython shows it).  IPython magics are
not supported: a cell that starts with ``%`` or ``!`` is an error.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import sys
from typing import Any

__all__ = ["NotebookError", "output_text", "run_notebook"]


class NotebookError(RuntimeError):
    """A notebook cell raised; the message names the cell and shows its source."""


def _source(cell: dict[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def output_text(outputs: list[dict[str, Any]]) -> str:
    """The text of one cell's outputs (stdout, then the final expression's repr)."""
    return "".join("".join(o.get("text") or o.get("data", {}).get("text/plain", []))
                   for o in outputs)


def run_notebook(path: str | os.PathLike, *, write: bool = False) -> list[list[dict[str, Any]]]:
    """Execute the code cells of the notebook at ``path``; returns each code cell's outputs.

    With ``write=True`` the outputs (and execution counts) are stored back into
    the file.  The working directory is the notebook's folder while it runs.
    Raises :class:`NotebookError` from the first failing cell.
    """
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    ns: dict[str, Any] = {"__name__": "__main__"}
    results = []
    count = 0
    cwd = os.getcwd()
    os.chdir(os.path.dirname(os.path.abspath(path)))
    try:
        for idx, cell in enumerate(nb["cells"]):
            if cell.get("cell_type") != "code":
                continue
            count += 1
            src = _source(cell)
            if src.lstrip().startswith(("%", "!")):
                raise NotebookError(f"{path}: cell {idx} uses an IPython magic, which "
                                    f"run_notebook does not support:\n{src}")
            tree = ast.parse(src, filename=f"<cell {idx}>")
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    exec(compile(tree, f"<cell {idx}>", "exec"), ns)  # noqa: S102
                    value = (eval(compile(last, f"<cell {idx}>", "eval"), ns)  # noqa: S307
                             if last is not None else None)
            except Exception as e:
                sys.stdout.write(out.getvalue())
                raise NotebookError(f"{path}: cell {idx} raised {type(e).__name__}: {e}\n"
                                    f"--- cell source ---\n{src}") from e
            outputs: list[dict[str, Any]] = []
            if out.getvalue():
                outputs.append({"output_type": "stream", "name": "stdout",
                                "text": _lines(out.getvalue())})
            if value is not None:
                outputs.append({"output_type": "execute_result", "execution_count": count,
                                "metadata": {}, "data": {"text/plain": _lines(repr(value))}})
            cell["outputs"] = outputs
            cell["execution_count"] = count
            results.append(outputs)
    finally:
        os.chdir(cwd)
    if write:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(nb, f, indent=1, ensure_ascii=False)
            f.write("\n")
    return results
