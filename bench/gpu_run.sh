#!/usr/bin/env bash
# One GPU session: info, the whole test suite (gpu-marked tests included), the
# pytest-benchmark suite and the headline table. Writes everything under $OUT.
# Usage (on the GPU machine, from the repository root): OUT=/some/dir bash bench/gpu_run.sh
set -uo pipefail
OUT=${OUT:-bench/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
python3 -m cuflow info | tee "$OUT/info.txt"
python3 -m pytest tests -q -p no:cacheprovider -rs 2>&1 | tee "$OUT/tests.log" | tail -25
python3 -m pytest bench -q -p no:cacheprovider --benchmark-enable \
  --benchmark-json "$OUT/bench.json" --benchmark-columns=median,iqr,rounds \
  --benchmark-sort=name 2>&1 | tee "$OUT/bench.log" | tail -40
python3 -m cuflow bench --json "$OUT/headline.json" | tee "$OUT/headline.txt"
