#!/usr/bin/env bash
# One GPU run: info, the whole test suite (gpu-marked tests included), the
# kernel tests under compute-sanitizer, the pytest-benchmark suite and the
# headline table.
# Usage (on the GPU machine, from the repository root):
#   OUT=/some/dir GPU_KIND=h200 bash bench/gpu_run.sh [all|tests|bench|quick]
# "tests" and "bench" split the run in two commands of a few minutes each; "quick" is the
# tests and the headline table's quick form (no pytest-benchmark suite, no notebook).
# It exits 1 when any step failed (tests, fuzz, sanitizers, benchmarks, the headline), 2
# when it cannot run (a bad mode, no GPU, missing extras).
#
# Every file is written as $OUT/<gpu-kind>-<what> (default OUT: bench/results), with no
# date or run number in its name: a run replaces the previous evidence for its GPU kind,
# and the date is inside <gpu-kind>-headline.json. Commit only the small files
# (<gpu-kind>-summary.json, which bench/summarize.py makes from the headline JSON, and
# <gpu-kind>-tests-summary.log) to bench/results.
set -uo pipefail
OUT=${OUT:-bench/results}
MODE=${1:-all}
case "$MODE" in
  all|tests|bench|quick) ;;
  *) echo "usage: OUT=DIR GPU_KIND=KIND bash bench/gpu_run.sh [all|tests|bench|quick]" \
       "(got '$MODE')"; exit 2;;
esac
nvidia-smi -L > /dev/null 2>&1 || { echo "gpu_run.sh: needs a GPU (nvidia-smi finds none)"; exit 2; }
FAILED=""  # the steps that failed, for the exit status
failed() { FAILED="$FAILED $1"; }
# the GPU kind: GPU_KIND, else the model in the first GPU's name ("NVIDIA H200" -> h200)
KIND=${GPU_KIND:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 \
  | grep -o -i -E '\b[A-Z]+[0-9]+[A-Z]*\b' | head -1 | tr '[:upper:]' '[:lower:]')}
KIND=${KIND:-unknown-gpu}
P="$OUT/$KIND"
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# the dependencies and test extras the suite needs: without them whole test modules skip
# (array-api-strict) or the namespace loses names (array-api-compat), and the run would
# still look green
python3 -c "import array_api_compat, array_api_strict, hypothesis, pytest_benchmark" || {
  echo "gpu_run.sh: install the test extras first: pip install -e '.[test]'"; exit 2; }
if [ "$MODE" != tests ]; then  # (the headline's figure)
  python3 -c "import matplotlib" || {
    echo "gpu_run.sh: the headline's --plot needs matplotlib: pip install -e '.[plot]'"; exit 2; }
fi
# the compiled paths (the pool's hot path, the elementwise launcher), built for this Python
python3 setup.py -q build_ext --inplace > "$P-build.log" 2>&1 || {
  cat "$P-build.log"; echo "gpu_run.sh: the C extensions did not build"; exit 2; }
python3 -m cuflow info | tee "$P-info.txt"
if [ "$MODE" != bench ]; then
  # the full logs stay on the machine (too large to bring back); their summaries come back
  python3 -m pytest tests -q -p no:cacheprovider -rfEs > /tmp/cuflow-tests.log 2>&1 \
    || failed tests
  { grep -a -E "^(FAILED|ERROR)" /tmp/cuflow-tests.log; tail -3 /tmp/cuflow-tests.log; } \
    | tee "$P-tests-summary.log"
  # the fuzz and property tests again at random (the suite's are derandomized), where they
  # find what CI's fixed examples do not
  echo "random fuzz and property tests, 400 examples each:" | tee -a "$P-tests-summary.log"
  CUFLOW_FUZZ_EXAMPLES=400 python3 -m pytest tests/test_fuzz.py tests/core -q \
    -p no:cacheprovider -k "cupy and (test_fuzz or call_matches)" > /tmp/cuflow-fuzz.log 2>&1 \
    || failed fuzz
  { grep -a -E "^(FAILED|ERROR)" /tmp/cuflow-fuzz.log; tail -1 /tmp/cuflow-fuzz.log; } \
    | tee -a "$P-tests-summary.log"
  if command -v compute-sanitizer >/dev/null; then
    # memcheck over cuflow's own kernels (CuPy's allocator would hide overruns inside its pool):
    # the elementwise tests (tests/core) and the image tests (tests/image), selected by name
    # (-k matches folder, file and test names)
    : > "$P-sanitizer.log"
    compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
      python3 -m pytest tests -q -p no:cacheprovider -x \
      -k "(elementwise or image) and not torchvision" > /tmp/cuflow-memcheck.log 2>&1
    rc=$?
    [ $rc = 0 ] || failed memcheck
    echo "compute-sanitizer memcheck exit: $rc" | tee -a "$P-sanitizer.log"
    tail -4 /tmp/cuflow-memcheck.log | tee -a "$P-sanitizer.log"
    # racecheck for the image kernels that use shared memory: cf_normalize_vec stages tiles
    # there, cf_resize_lin its block's vertical taps
    compute-sanitizer --tool racecheck --error-exitcode 9 \
      python3 -m pytest tests -q -p no:cacheprovider -x \
      -k "image and (vec or large_batch or resize or letterbox or nv12 or crop)" 2>&1 \
      | tail -4 | tee -a "$P-sanitizer.log"
    rc=${PIPESTATUS[0]}
    [ $rc = 0 ] || failed racecheck
    echo "compute-sanitizer racecheck exit: $rc" | tee -a "$P-sanitizer.log"
  fi
fi
if [ "$MODE" = all ] || [ "$MODE" = bench ]; then
  python3 -m pytest bench -q -p no:cacheprovider --benchmark-enable \
    --benchmark-json "$P-bench.json" --benchmark-columns=median,iqr,rounds \
    --benchmark-sort=name 2>&1 | tee "$P-bench.log" | tail -40
  [ "${PIPESTATUS[0]}" = 0 ] || failed benchmarks
fi
if [ "$MODE" = all ]; then
  # the example notebook with its outputs recorded on this GPU
  # (Jupyter's runner: pip install nbclient ipykernel, carried as wheels where offline)
  if jupyter execute --inplace --timeout=600 examples/tour.ipynb > "$P-notebook.txt" 2>&1; then
    cp examples/tour.ipynb "$P-tour.ipynb"
  else
    failed notebook
  fi
  cat "$P-notebook.txt"
fi
if [ "$MODE" != tests ]; then
  # an earlier run's files never pass for this run's
  rm -f "$P-headline.json" "$P-headline.png" "$P-headline.txt" "$P-summary.json"
  python3 -m cuflow bench $([ "$MODE" = quick ] && echo --quick) --json "$P-headline.json" \
    --plot "$P-headline.png" | tee "$P-headline.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || failed headline
  # the date and GPU kind of this evidence go inside the JSON, not into its name
  [ -s "$P-headline.json" ] && python3 - "$P-headline.json" "$KIND" <<'PY'
import datetime, json, sys
path, kind = sys.argv[1], sys.argv[2]
with open(path) as f:
    result = json.load(f)
result["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
result["gpu_kind"] = kind
with open(path, "w") as f:
    json.dump(result, f, indent=1)
PY
  [ -s "$P-headline.json" ] && python3 bench/summarize.py "$P-headline.json" \
    --commit "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    --date "$(date -u +%F)" --out "$P-summary.json"
  # the pipeline example with every cuflow op NVTX-annotated, and its CUPTI overlap check
  : > "$P-pipeline_example.txt"
  for mode in "" --pinned; do
    CUFLOW_NVTX=1 python3 examples/pipeline_torch.py --profile $mode 2>&1 | grep -v -i warn \
      | tee -a "$P-pipeline_example.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || failed "pipeline_example$mode"
  done
fi
if [ -n "$FAILED" ]; then
  echo "gpu_run.sh: failed:$FAILED"
  exit 1
fi
