"""bench/soak.py, a short run: every frame counted, the pool flat after warm-up."""

import importlib.util
import json
from pathlib import Path

SOAK = Path(__file__).resolve().parents[1] / "bench" / "soak.py"


def test_a_short_soak_counts_every_frame(tmp_path):
    spec = importlib.util.spec_from_file_location("soak", SOAK)
    soak = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(soak)
    out = tmp_path / "soak.json"
    rc = soak.main(["--seconds", "2", "--height", "48", "--width", "80", "--size", "24",
                    "--json", str(out)])
    r = json.loads(out.read_text())
    assert rc == 0 and r["frames_exact"] and r["reserved_flat_after_warmup"]
    assert r["frames_in"] == r["frames_out"] > 0 and r["rounds"] >= 10
