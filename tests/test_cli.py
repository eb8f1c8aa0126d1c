"""``python -m cuflow bench``: every argument refused before anything runs (exit code 2, one
line), and a write that fails after the run said in one line (exit code 1).  Nothing here runs
a benchmark beyond ``--quick`` on the NumPy backend."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

import cuflow.__main__ as cli
from cuflow.bench import _realtraces, _traces

SAVED = {"info": {"backend": "numpy", "numpy": "2"},
         "rows": [{"group": "g", "case": "cuflow x", "us": 1.0},
                  {"group": "g", "case": "cupy x", "us": 2.0}]}


@pytest.fixture
def saved(tmp_path):
    f = tmp_path / "saved.json"
    f.write_text(json.dumps(SAVED))
    return f


@pytest.fixture
def nothing_runs(monkeypatch):
    def ran(*args, **kwargs):
        raise AssertionError("a refused command ran")

    for name in ("run_headline", "plot", "bench_traces"):
        monkeypatch.setattr(cli, name, ran)


def usage_error(argv, capsys):
    """The last line of the usage error ``python -m cuflow`` gives for ``argv``."""
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_plot_may_not_overwrite_the_json(saved, tmp_path, capsys, nothing_runs):
    link = tmp_path / "link.png"
    link.symlink_to(saved)
    for argv, opt in ((["--from-json", str(saved), "--plot", str(saved)], "--from-json"),
                      (["--from-json", str(saved), "--plot", str(link)], "--from-json"),
                      (["--json", str(saved), "--plot", f"{tmp_path}/./saved.json"], "--json")):
        err = usage_error(["bench", *argv], capsys)
        assert f"is the {opt} file" in err and "would overwrite the JSON" in err, err
    assert json.loads(saved.read_text()) == SAVED


@pytest.mark.parametrize("opt", ["--json", "--plot", "--from-json"])
def test_an_empty_path_is_refused(opt, capsys, nothing_runs):
    err = usage_error(["bench", opt, ""], capsys)
    assert f"{opt} takes a file path, got an empty one: ''" in err


@pytest.mark.parametrize("argv, words", [
    (["bench", "--rounds", "5"], "go with the traces section"),
    (["bench", "traces", "--rounds", "0"], "--rounds must be at least 1"),
    (["bench", "traces", "--rounds", "5", "--quick"], "got 5 with --quick")])
def test_rounds_are_the_traces_and_at_least_one(argv, words, capsys, nothing_runs):
    assert words in usage_error(argv, capsys)


@pytest.mark.parametrize("extra", [["--json", "copy.json"], ["--quick"]])
def test_from_json_takes_plot_only(saved, tmp_path, extra, capsys, nothing_runs):
    if extra[0] == "--json":
        extra = ["--json", str(tmp_path / extra[1])]
    err = usage_error(["bench", "--from-json", str(saved), "--plot", str(tmp_path / "p.png"),
                       *extra], capsys)
    assert "--from-json redraws a saved run: it takes --plot only" in err
    assert not (tmp_path / "copy.json").exists()


@pytest.mark.parametrize(("doc", "words"), [
    ({"rows": [1, 2]}, "row 0 must be an object, got 1"),
    ({"rows": [{"case": "x", "us": 1}]}, "row 0 must have a string \"group\", got {'case': 'x'"),
    ({"rows": [{"group": "g", "case": 5, "us": 1}]}, "row 0 must have a string \"case\""),
    ({"rows": [{"group": "g", "case": "x", "us": 1}, {"group": "g", "case": "y", "us": "abc"}]},
     "row 1: \"us\" must be a number, got 'abc'"),
    ({"rows": [{"group": "g", "case": "x", "ms": True}]},
     "row 0: \"ms\" must be a number, got True"),
    ({"info": None, "rows": []}, "\"info\" must be an object, got None"),
])
def test_from_json_names_the_first_bad_row(tmp_path, doc, words, capsys, nothing_runs):
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(doc))
    err = usage_error(["bench", "--from-json", str(f), "--plot", str(tmp_path / "p.png")],
                      capsys)
    assert f"--from-json: {f}: {words}" in err, err


def test_record_needs_a_source_checkout(tmp_path, monkeypatch, capsys, nothing_runs):
    """An installed package would write its traces beside site-packages."""
    monkeypatch.setattr(_realtraces, "TRACE_DIR", tmp_path / "bench" / "traces")
    err = usage_error(["bench", "traces", "--record"], capsys)
    assert "source checkout's bench/traces/" in err and f"{tmp_path} has no pyproject.toml" in err
    assert not (tmp_path / "bench").exists()


def test_record_names_what_to_install(monkeypatch, capsys, nothing_runs):
    # (a checkout, which the installed wheel CI tests is not)
    monkeypatch.setattr(_realtraces, "in_checkout", lambda: True)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torchvision" else find_spec(name, *a))
    err = usage_error(["bench", "traces", "--record"], capsys)
    assert "need" in err and "python3 -m pip install" in err and err.endswith("torchvision")


def test_a_json_write_that_fails_after_the_run_keeps_the_table(tmp_path):
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "gone" / "out.json")  # passes the checks, fails at open()
    r = subprocess.run([sys.executable, "-m", "cuflow", "bench", "--quick", "--json", str(link)],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "CUFLOW_BACKEND": "numpy"})
    assert r.returncode == 1 and "cuflow c = a + b" in r.stdout, (r.stdout, r.stderr)
    err = [line for line in r.stderr.splitlines() if "Warning" not in line and
           not line.startswith("  ")]
    assert err == [f"python -m cuflow bench: cannot write --json {link}: [Errno 2] No such "
                   f"file or directory: '{link}'"], r.stderr


def test_a_plot_write_that_fails_is_one_line(saved, tmp_path, monkeypatch, capsys):
    def full(result, path):
        raise OSError(28, "No space left on device")

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: True if name == "matplotlib" else find_spec(name, *a))
    monkeypatch.setattr(cli, "plot", full)
    png = tmp_path / "p.png"
    assert cli.main(["bench", "--from-json", str(saved), "--plot", str(png)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"python -m cuflow bench: cannot write --plot {png}: [Errno 28] No space left on device"]


def test_a_traces_json_write_that_fails_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(_traces, "compare", lambda *a, **k: [])
    # (recorded traces present, as in a checkout: an installed package's note is another line)
    monkeypatch.setattr(_traces._realtraces, "saved", lambda *a: {"real:any": None})
    out = tmp_path / "gone" / "rows.json"
    assert _traces.bench_traces(quick=True, json_path=str(out)) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"python -m cuflow bench traces: cannot write --json {out}: [Errno 2] No such file or "
        f"directory: '{out}'"]


def test_bench_traces_says_when_it_has_no_recorded_traces(monkeypatch, capsys):
    monkeypatch.setattr(_traces, "compare", lambda *a, **k: [])
    monkeypatch.setattr(_traces._realtraces, "saved", lambda *a: {})
    assert _traces.bench_traces(quick=True) == 0
    assert "no recorded real-model traces" in capsys.readouterr().err


def test_info_names_a_malformed_memory_limit_in_one_line():
    env = {k: v for k, v in os.environ.items() if k != "CUFLOW_MEMORY_LIMIT"}
    env["CUFLOW_MEMORY_LIMIT"] = "plenty"
    r = subprocess.run([sys.executable, "-m", "cuflow", "info"], env=env, capture_output=True,
                       text=True)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("python -m cuflow info: MemoryValueError: "
                           "CUFLOW_MEMORY_LIMIT='plenty': expected bytes")
    assert "memory_limit         CUFLOW_MEMORY_LIMIT='plenty', refused" in r.stdout


@pytest.mark.parametrize("value, shown", [
    ("0", "none (CUFLOW_MEMORY_LIMIT='0')"), (" ", "none (CUFLOW_MEMORY_LIMIT=' ')"),
    (" 80% ", "80%"), (None, "none (CUFLOW_MEMORY_LIMIT unset)")])
def test_info_shows_what_the_memory_limit_means(value, shown):
    env = {k: v for k, v in os.environ.items() if k != "CUFLOW_MEMORY_LIMIT"}
    if value is not None:
        env["CUFLOW_MEMORY_LIMIT"] = value
    r = subprocess.run([sys.executable, "-m", "cuflow", "info"], env=env, capture_output=True,
                       text=True)
    assert r.returncode == 0
    assert f"memory_limit         {shown}" in r.stdout.splitlines()
