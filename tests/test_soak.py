"""bench/soak.py, a short run on every backend: every frame counted; on the GPU, the pool's
reserved bytes flat after warm-up."""

import importlib.util
import json
from pathlib import Path

SOAK = Path(__file__).resolve().parents[1] / "bench" / "soak.py"


def _frames_given(rounds, batches):
    """The frames soak.py gives in ``rounds`` rounds: 3 full batches and a partial one of
    1 to 5 frames, the batch size cycling through ``batches``."""
    return sum(3 * batches[k % len(batches)] + 1 + k % 5 for k in range(rounds))


def test_a_short_soak_counts_every_frame(cf, tmp_path):
    spec = importlib.util.spec_from_file_location("soak", SOAK)
    soak = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(soak)
    out = tmp_path / "soak.json"
    rc = soak.main(["--seconds", "2", "--height", "48", "--width", "80", "--size", "24",
                    "--json", str(out)])
    r = json.loads(out.read_text())
    assert rc == 0
    assert r["gpu"] == cf.get_backend().name
    assert r["frames_exact"] and r["miscounted_rounds"] == []
    assert r["frames_in"] == r["frames_out"] == _frames_given(r["rounds"], r["batch_sizes"])
    reserved = r["reserved_bytes_after_warmup"]
    if cf.get_backend().is_gpu:
        # the pipelines' buffers come from cuflow's pool: bytes are reserved, and the
        # rounds after warm-up reuse them without reserving more
        assert reserved["first"] > 0
        assert r["reserved_flat_after_warmup"] and reserved["max"] == reserved["first"]
    else:
        # the NumPy backend's pipelines take nothing from the (host) pool: its reserved
        # bytes stay whatever earlier code in the process left there
        assert reserved["first"] == reserved["max"] == reserved["last"]
