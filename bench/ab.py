"""Same-machine A/B of two cuflow trees: host time of ``add(a, b, dst=c)``, device time of an
8x1080p ``image.normalize``, and the pool's hit.

Each measurement runs in its own process per tree, the trees alternating, three rounds;
the table gives the medians and the ratio new / old.

Usage (on the GPU machine): ``python3 bench/ab.py OLD_TREE NEW_TREE``
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

PROBE = r"""
import json, sys
import cupy, numpy
import cuflow as cf
from cuflow.testing import device_time_us, host_time_us
rng = numpy.random.default_rng(0)
a = cf.asarray(rng.standard_normal((100, 100), dtype=numpy.float32))
b = cf.asarray(rng.standard_normal((100, 100), dtype=numpy.float32))
c = cf.empty_like(a)
frames = cf.asarray(rng.integers(0, 256, (8, 1080, 1920, 3), dtype=numpy.uint8))
out = cf.empty((8, 3, 1080, 1920), dtype=numpy.float32)
norm = lambda: cf.image.normalize(frames, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
                                  dst=out)
def hit():
    x = cupy.empty(1 << 20, dtype=numpy.uint8)
    del x
r = {"add_dst_host_us": host_time_us(lambda: cf.add(a, b, dst=c), number=4000).median_us,
     "normalize_8x1080p_device_us": device_time_us(norm, number=20, repeat=15).median_us,
     "pool_hit_1MiB_host_us": host_time_us(hit, number=4000).median_us}
print(json.dumps(r))
"""


def run(tree: str) -> dict:
    env = {**os.environ, "PYTHONPATH": tree}
    p = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd="/tmp", capture_output=True,
                       text=True)
    if p.returncode:
        raise SystemExit(f"{tree}: the probe failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    old, new = sys.argv[1], sys.argv[2]
    rows: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    for _ in range(3):
        for name, tree in (("old", old), ("new", new)):
            for k, v in run(tree).items():
                rows[name].setdefault(k, []).append(v)
    result = {}
    for k in rows["new"]:
        o, n = statistics.median(rows["old"][k]), statistics.median(rows["new"][k])
        result[k] = {"old": round(o, 3), "new": round(n, 3), "new_over_old": round(n / o, 4)}
        print(f"{k:32s} old {o:9.3f}  new {n:9.3f}  new/old {n / o:.3f}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
