"""bench/ab.py and bench/new_result_cost.py where no GPU is usable: one line saying it needs
one, and a failing status."""

import os
import subprocess
import sys
from pathlib import Path

AB = Path(__file__).resolve().parents[1] / "bench" / "ab.py"
NEW_RESULT = AB.parent / "new_result_cost.py"


def test_without_a_gpu_it_says_it_needs_one():
    # no device visible: CuPy (where installed) counts none, as on a machine without a GPU
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, str(AB), str(AB.parents[1])], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 1
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench/ab.py needs a GPU"), r.stderr


def test_new_result_cost_without_a_gpu_says_it_needs_one():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, str(NEW_RESULT), "--rounds", "1"], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 1 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench/new_result_cost.py needs a GPU"), r.stderr


def test_new_result_cost_refuses_a_round_count_below_one():
    r = subprocess.run([sys.executable, str(NEW_RESULT), "--rounds", "0"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "--rounds and --number must be >= 1, got 0 and 3000" in r.stderr


def test_ab_checks_its_arguments_before_anything_runs(tmp_path):
    root = str(AB.parents[1])
    for args, words in (([str(tmp_path)], "is not a cuflow checkout"),
                        ([root, "--rounds", "1"], "--rounds must be at least 2"),
                        ([root, "--json", str(tmp_path / "gone" / "r.json")], "does not exist"),
                        ([root, "--traces", "nosuchtrace"], "no trace named nosuchtrace")):
        r = subprocess.run([sys.executable, str(AB), *args], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
