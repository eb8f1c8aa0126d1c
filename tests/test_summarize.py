"""bench/summarize.py: the small evidence file of a GPU run, from its headline and traces JSON."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUMMARIZE = ROOT / "bench" / "summarize.py"


def test_it_keeps_the_figures_and_leaves_the_counters_out(tmp_path):
    headline = {"info": {"device_name": "GPU X", "driver_version": "13.0", "cupy": "14.2.0"},
                "rows": [
                    {"group": "op zoo", "case": "x * 2", "us": 4.971234, "cupy_us": 12.69,
                     "vs_cupy": 0.39, "vs": "cupy x * 2", "delta_us": -7.7},
                    {"group": "op zoo", "case": "-x", "us": 4.82, "ops": 2000},
                    {"group": "allocation", "case": "pool used bytes", "bytes": 0},
                ]}
    traces = [{"trace": "R0", "allocator": "cuflow", "host_us_per_op": 1.62, "footprint": 1.214,
               "cache_hits": 10979, "host_us_per_op_all": [1.6, 1.7], "ratio_vs_cupy_pool": 1.171}]
    h, t, out = tmp_path / "h.json", tmp_path / "t.json", tmp_path / "s.json"
    h.write_text(json.dumps(headline))
    t.write_text(json.dumps(traces))
    r = subprocess.run([sys.executable, str(SUMMARIZE), str(h), "--traces", str(t),
                        "--commit", "abc1234", "--date", "2026-01-02", "--note", "n1",
                        "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    s = json.loads(out.read_text())
    assert (s["gpu"], s["commit"], s["date"], s["notes"]) == ("GPU X", "abc1234", "2026-01-02",
                                                              ["n1"])
    assert s["bench"]["op zoo"] == {"x * 2": {"us": 4.971, "cupy_us": 12.69, "vs_cupy": 0.39},
                                    "-x": {"us": 4.82}}
    assert s["bench"]["allocation"] == {"pool used bytes": {"bytes": 0}}
    assert s["traces"]["rows"] == {"R0": {"cuflow": {"host_us_per_op": 1.62, "footprint": 1.214,
                                                     "ratio_vs_cupy_pool": 1.171}}}


def test_the_committed_summaries_are_json_with_their_gpu_and_date():
    paths = sorted((ROOT / "bench" / "results").glob("*-summary.json"))
    if not paths:
        pytest.skip("no bench/results here (an sdist carries none)")
    for p in paths:
        s = json.loads(p.read_text())
        assert s.get("gpu") and s.get("date") and s.get("commit"), p.name


def test_its_mistakes_are_one_line_usage_errors(tmp_path):
    headline = tmp_path / "h.json"
    headline.write_text(json.dumps({"info": {}, "rows": []}))
    rows = tmp_path / "t.json"
    rows.write_text(json.dumps([]))
    base = ["--commit", "abc", "--date", "2026-01-02"]
    for args, words in (
            ([str(tmp_path / "none.json"), *base, "--out", str(tmp_path / "s.json")],
             "No such file"),
            ([str(rows), *base, "--out", str(tmp_path / "s.json")], "not a headline run's"),
            ([str(headline), "--traces", str(headline), *base, "--out", str(tmp_path / "s.json")],
             "not bench traces' rows"),
            ([str(headline), *base, "--out", str(tmp_path / "gone" / "s.json")], "--out")):
        r = subprocess.run([sys.executable, str(SUMMARIZE), *args], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
