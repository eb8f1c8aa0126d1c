"""examples/dask_preprocess.py runs on a CPU LocalCluster and agrees with one Pipeline."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

pytest.importorskip("distributed", reason="the example needs dask.distributed "
                                          "(pip install cuflow[dask])")

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "dask_preprocess.py"


def test_example_on_a_cpu_cluster(monkeypatch, tmp_path):
    monkeypatch.setenv("CUFLOW_BACKEND", "numpy")
    spec = importlib.util.spec_from_file_location("dask_preprocess", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "r.json"
    r = mod.main(["--cpu", "--frames", "24", "--height", "40", "--width", "56", "--size", "16",
                  "--batch", "4", "--workers", "2", "--repeat", "1", "--compare",
                  "--json", str(out)])
    run = r["runs"]["dask_2"]
    assert run["same_result"] and run["worker_backends"] == ["numpy", "numpy"]
    assert run["fps"] > 0 and r["runs"]["single_process"]["fps"] > 0
    assert out.read_text().startswith("{")
