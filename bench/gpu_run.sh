#!/usr/bin/env bash
# One GPU session: info, the whole test suite (gpu-marked tests included), the
# kernel tests under compute-sanitizer, the pytest-benchmark suite and the
# headline table. Writes everything under $OUT.
# Usage (on the GPU machine, from the repository root): OUT=/some/dir bash bench/gpu_run.sh [quick]
set -uo pipefail
OUT=${OUT:-bench/out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
python3 -m cuflow info | tee "$OUT/info.txt"
CUFLOW_POOL=on python3 -m pytest tests -q -p no:cacheprovider -rs 2>&1 | tee "$OUT/tests.log" | tail -25
if command -v compute-sanitizer >/dev/null; then
  # memcheck over cuflow's own kernels (CuPy's allocator would hide overruns inside its pool)
  compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
    python3 -m pytest tests/test_elementwise.py -q -p no:cacheprovider -x 2>&1 \
    | tee "$OUT/sanitizer.log" | tail -6
  echo "compute-sanitizer exit: ${PIPESTATUS[0]}" | tee -a "$OUT/sanitizer.log"
fi
if [ "${1:-}" != "quick" ]; then
  python3 -m pytest bench -q -p no:cacheprovider --benchmark-enable \
    --benchmark-json "$OUT/bench.json" --benchmark-columns=median,iqr,rounds \
    --benchmark-sort=name 2>&1 | tee "$OUT/bench.log" | tail -40
fi
python3 -m cuflow bench ${1:+--quick} --json "$OUT/headline.json" | tee "$OUT/headline.txt"
