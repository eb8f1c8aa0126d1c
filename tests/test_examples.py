"""The examples run as users run them: the notebooks through Jupyter's own machinery
(nbclient and an IPython kernel), the scripts as scripts.

The notebooks run here on the active backend's machine with ``CUFLOW_BACKEND`` set by the
parameter (NumPy in CI, both on a GPU machine). The committed outputs are the GPU's:
running never writes the file (``jupyter execute --inplace`` records them on a GPU; see
CONTRIBUTING.md).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import types

import pytest


@pytest.fixture
def jupyter() -> types.SimpleNamespace:
    """nbformat and nbclient (the test extra; a machine set up with CuPy alone skips)."""
    why = 'needs nbclient, nbformat and ipykernel (pip install -e ".[test]")'
    pytest.importorskip("ipykernel", reason=why)
    return types.SimpleNamespace(nbformat=pytest.importorskip("nbformat", reason=why),
                                 nbclient=pytest.importorskip("nbclient", reason=why))


ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))


def execute(jupyter, path: pathlib.Path, backend: str, monkeypatch):
    """Run the notebook at ``path`` in a fresh IPython kernel; the executed copy is returned."""
    nb = jupyter.nbformat.read(path, as_version=4)
    monkeypatch.setenv("CUFLOW_BACKEND", backend)  # the kernel inherits this environment
    client = jupyter.nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    return client.execute()


def _text(cell) -> str:
    return "".join(o.get("text", "") or o.get("data", {}).get("text/plain", "")
                   for o in cell.get("outputs", []))


@pytest.mark.parametrize("backend", ["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def test_tour_notebook_runs_in_a_kernel(jupyter, backend, monkeypatch):
    src = EXAMPLES / "tour.ipynb"
    before = src.read_bytes()
    nb = execute(jupyter, src, backend, monkeypatch)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1))
    assert not any(o.output_type == "error" for c in code for o in c.outputs)
    text = [_text(c) for c in code]
    assert text[0].startswith(backend)
    assert "refused: cuflow.add: dst.shape must equal" in text[1]
    assert "Letterbox(scale=" in text[2]
    assert "4 True" in text[3] and "nothing was appended" in text[3]
    assert "frames/s" in text[4]
    assert "graph replay" in text[5]
    assert src.read_bytes() == before


def test_a_failing_cell_fails_the_run(jupyter, tmp_path, monkeypatch):
    v4 = jupyter.nbformat.v4
    nb = v4.new_notebook(cells=[v4.new_code_cell("%time x = 1"), v4.new_code_cell("1 / x0")])
    path = tmp_path / "bad.ipynb"
    jupyter.nbformat.write(nb, path)
    with pytest.raises(jupyter.nbclient.client.CellExecutionError, match="NameError"):
        execute(jupyter, path, "numpy", monkeypatch)


def test_committed_notebooks_carry_gpu_outputs(jupyter):
    assert NOTEBOOKS
    for path in NOTEBOOKS:
        nb = jupyter.nbformat.read(path, as_version=4)
        jupyter.nbformat.validate(nb)
        first = next(c for c in nb.cells if c.cell_type == "code")
        assert _text(first).startswith("cupy "), f"{path.name}: outputs not recorded on a GPU"


def test_pipeline_torch_says_in_one_line_that_it_needs_a_gpu():
    env = dict(os.environ, CUFLOW_BACKEND="numpy")
    r = subprocess.run([sys.executable, str(EXAMPLES / "pipeline_torch.py"), "--frames", "16"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pipeline_torch.py needs a CUDA GPU"), r.stderr


@pytest.mark.gpu
def test_pipeline_torch_runs_on_a_gpu():
    pytest.importorskip("torch", reason="needs PyTorch (pip install \"cuflow[torch]\")")
    r = subprocess.run([sys.executable, str(EXAMPLES / "pipeline_torch.py"), "--frames", "32"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "32 frames in" in r.stdout and "frames/s" in r.stdout
