"""The example notebooks run (on whichever backend is active: NumPy in CI), and the runner CI uses."""

from __future__ import annotations

import json
import pathlib

import pytest

from cuflow.testing import NotebookError, output_text, run_notebook

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def test_tour_notebook_runs(tmp_path):
    src = EXAMPLES / "tour.ipynb"
    nb = json.loads(src.read_text())
    n_code = sum(c["cell_type"] == "code" for c in nb["cells"])
    results = run_notebook(src)  # never writes: the committed outputs are the GPU's
    assert len(results) == n_code
    text = [output_text(o) for o in results]
    assert "refused: cuflow.add: dst.shape must equal" in text[1]
    assert "Letterbox(scale=" in text[2]
    assert "4 True" in text[3] and "nothing was appended" in text[3]
    assert "frames/s" in text[4]
    assert "graph replay" in text[5]
    assert json.loads(src.read_text()) == nb


def _nb(path, *sources):
    cells = [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
              "source": s} for s in sources]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 5}))
    return path


def test_runner_records_stdout_and_last_expression(tmp_path):
    p = _nb(tmp_path / "a.ipynb", "x = 2\nprint('hi', x)", "x * 21", "y = x")
    results = run_notebook(p, write=True)
    assert results[0] == [{"output_type": "stream", "name": "stdout", "text": ["hi 2\n"]}]
    assert results[1][0]["output_type"] == "execute_result"
    assert results[1][0]["data"]["text/plain"] == ["42"]
    assert results[2] == []
    stored = json.loads(p.read_text())
    assert [c["execution_count"] for c in stored["cells"]] == [1, 2, 3]
    assert stored["cells"][1]["outputs"] == results[1]


def test_runner_names_the_failing_cell_and_refuses_magics(tmp_path):
    p = _nb(tmp_path / "b.ipynb", "a = 1", "1 / 0")
    with pytest.raises(NotebookError, match=r"cell 1 raised ZeroDivisionError") as e:
        run_notebook(p)
    assert isinstance(e.value.__cause__, ZeroDivisionError)
    with pytest.raises(NotebookError, match="IPython magic"):
        run_notebook(_nb(tmp_path / "c.ipynb", "%timeit 1"))
