#!/usr/bin/env bash
# One GPU session: info, the whole test suite (gpu-marked tests included), the
# kernel tests under compute-sanitizer, the pytest-benchmark suite and the
# headline table. Writes everything under $OUT.
# Usage (on the GPU machine, from the repository root):
#   OUT=/some/dir bash bench/gpu_run.sh [all|tests|bench|quick]
# "tests" and "bench" split the session in two commands of a few minutes each.
set -uo pipefail
OUT=${OUT:-bench/out}
MODE=${1:-all}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# the memory pool's compiled hot path, built here for this machine's Python
python3 setup.py -q build_ext --inplace > "$OUT/build.log" 2>&1 || cat "$OUT/build.log"
python3 -m cuflow info | tee "$OUT/info.txt"
if [ "$MODE" != bench ]; then
  # the full logs stay on the machine (too large to bring back); their summaries come back
  python3 -m pytest tests -q -p no:cacheprovider -rfEs > /tmp/cuflow-tests.log 2>&1
  { grep -a -E "^(FAILED|ERROR)" /tmp/cuflow-tests.log; tail -3 /tmp/cuflow-tests.log; } \
    | tee "$OUT/tests-summary.log"
  if command -v compute-sanitizer >/dev/null; then
    # memcheck over cuflow's own kernels (CuPy's allocator would hide overruns inside its pool)
    compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
      python3 -m pytest tests/test_elementwise.py tests/test_image.py -q -p no:cacheprovider -x \
      -k "not torchvision" > /tmp/cuflow-memcheck.log 2>&1
    echo "compute-sanitizer memcheck exit: $?" | tee -a "$OUT/sanitizer.log"
    tail -4 /tmp/cuflow-memcheck.log | tee -a "$OUT/sanitizer.log"
    # racecheck for the kernels that use shared memory: cf_normalize_vec stages tiles there,
    # cf_resize_lin its block's vertical taps
    compute-sanitizer --tool racecheck --error-exitcode 9 \
      python3 -m pytest tests/test_image.py -q -p no:cacheprovider -x \
      -k "vec or large_batch or resize or letterbox or nv12 or crop" 2>&1 \
      | tail -4 | tee -a "$OUT/sanitizer.log"
    echo "compute-sanitizer racecheck exit: ${PIPESTATUS[0]}" | tee -a "$OUT/sanitizer.log"
  fi
fi
if [ "$MODE" = all ] || [ "$MODE" = bench ]; then
  python3 -m pytest bench -q -p no:cacheprovider --benchmark-enable \
    --benchmark-json "$OUT/bench.json" --benchmark-columns=median,iqr,rounds \
    --benchmark-sort=name 2>&1 | tee "$OUT/bench.log" | tail -40
fi
if [ "$MODE" = all ]; then
  # the example notebook with its outputs recorded on this GPU
  python3 -m cuflow run-notebook examples/tour.ipynb --write | tee "$OUT/notebook.txt" \
    && cp examples/tour.ipynb "$OUT/tour.ipynb"
fi
if [ "$MODE" != tests ]; then
  python3 -m cuflow bench $([ "$MODE" = quick ] && echo --quick) --json "$OUT/headline.json" \
    --plot "$OUT/headline.png" | tee "$OUT/headline.txt"
  # the pipeline example with every cuflow op NVTX-annotated, and its CUPTI overlap check
  for mode in "" --pinned; do
    CUFLOW_NVTX=1 python3 examples/pipeline_torch.py --profile $mode 2>&1 | grep -v -i warn \
      | tee -a "$OUT/pipeline_example.txt"
  done
fi
