#!/usr/bin/env bash
# Python array API conformance (data-apis/array-api-tests) against cuflow.
# Usage, from the repository root:
#   ARRAY_API_TESTS_DIR=/path/to/array-api-tests bash bench/array_api.sh [pytest args...]
# Env: ARRAY_API_TESTS_MODULE (default cuflow; e.g. array_api_compat.numpy for a
# reference run), CUFLOW_BACKEND (default numpy), MAX_EXAMPLES (default 100, the
# suite's own default), OUT_LOG (default stdout), PYTHON (default python3),
# MEM_LIMIT_KB (NumPy backend only, default 4000000).
# Extra args go to pytest; test paths written array_api_tests/... are taken inside
# ARRAY_API_TESTS_DIR, and without any the whole suite runs. Give option values
# with '=' (--junitxml=FILE). --fast selects the CPU-CI subset below, e.g.
#   bash bench/array_api.sh --fast --junitxml=/tmp/aapi.xml
# Run from the repository root, `python3 -m pytest` imports this checkout's cuflow.
set -uo pipefail

# CPU-CI subset: the static checks (names, signatures, namespace info, dtype
# functions, constants) and the property tests that exercise cuflow's own
# wrappers of spec functions (sorting, std/var, searchsorted, from_dlpack,
# fftfreq, eig, clip) rather than plain forwarding to the backend.
FAST=(
  array_api_tests/test_has_names.py
  array_api_tests/test_signatures.py
  array_api_tests/test_inspection_functions.py
  array_api_tests/test_data_type_functions.py
  array_api_tests/test_constants.py
  array_api_tests/test_sorting_functions.py
  array_api_tests/test_statistical_functions.py::test_std
  array_api_tests/test_statistical_functions.py::test_var
  array_api_tests/test_searching_functions.py::test_searchsorted
  array_api_tests/test_searching_functions.py::test_searchsorted_with_scalars
  array_api_tests/test_dlpack.py::test_from_dlpack
  array_api_tests/test_fft.py::test_fftfreq
  array_api_tests/test_fft.py::test_rfftfreq
  array_api_tests/test_linalg.py::test_eig
  array_api_tests/test_linalg.py::test_eigvals
  array_api_tests/test_operators_and_elementwise_functions.py::test_clip
)

DIR=${ARRAY_API_TESTS_DIR:-}
if [ -z "$DIR" ] || [ ! -d "$DIR/array_api_tests" ]; then
  cat >&2 <<'EOF'
array-api-tests not found: set ARRAY_API_TESTS_DIR to a checkout with its spec submodule:
  git clone --recurse-submodules https://github.com/data-apis/array-api-tests
  pip install -r array-api-tests/requirements.txt array-api-compat
EOF
  exit 2
fi
# the suite reads the spec signatures from the submodule; without it collection fails
if [ ! -d "$DIR/array-api/src/array_api_stubs" ]; then
  echo "$DIR/array-api (submodule) is missing: git -C $DIR submodule update --init" >&2
  exit 2
fi
DIR=$(cd "$DIR" && pwd)

export ARRAY_API_TESTS_MODULE=${ARRAY_API_TESTS_MODULE:-cuflow}
# pin the spec version: the suite would otherwise follow xp.__array_api_version__,
# which differs between the modules compared (and cuflow may not define it)
export ARRAY_API_TESTS_VERSION=2025.12
export CUFLOW_BACKEND=${CUFLOW_BACKEND:-numpy}
# On the NumPy backend a runaway allocation must fail as MemoryError inside one test,
# not OOM-kill the machine: the suite's arange/linspace draws reach billions of
# elements when an implementation mishandles an argument. The cap is per process
# (each xdist worker has its own); not on CuPy, whose CUDA context reserves far more
# virtual memory than it uses. MEM_LIMIT_KB=unlimited lifts it.
if [ "$CUFLOW_BACKEND" = numpy ]; then ulimit -v "${MEM_LIMIT_KB:-4000000}"; fi
# a fresh Hypothesis example database: saved failures from an earlier run would be
# replayed first and make runs differ; and nothing lands in ./.hypothesis
if [ -z "${HYPOTHESIS_STORAGE_DIRECTORY:-}" ]; then
  HYPOTHESIS_STORAGE_DIRECTORY=$(mktemp -d)
  trap 'rm -rf "$HYPOTHESIS_STORAGE_DIRECTORY"' EXIT
fi
export HYPOTHESIS_STORAGE_DIRECTORY

# With no selection run the whole suite; relative selections are taken as paths
# inside the suite so the command reads the same from any checkout location.
args=()
have_sel=0
for a in "$@"; do
  if [[ $a == --fast ]]; then
    for f in "${FAST[@]}"; do args+=("$DIR/$f"); done; have_sel=1
  elif [[ $a == array_api_tests* ]]; then args+=("$DIR/$a"); have_sel=1
  else args+=("$a"); fi
done
[ $have_sel = 1 ] || args=("$DIR/array_api_tests" "${args[@]}")

[ -n "${OUT_LOG:-}" ] && exec > "$OUT_LOG" 2>&1
# --rootdir/-c: the suite's pytest.ini and conftest.py (its options, e.g. --max-examples),
#   never this repository's pytest settings;
# -p no:cacheprovider: writes nothing into either tree;
# --hypothesis-seed=0: the same examples on every run, so runs are comparable;
# --continue-on-collection-errors: a module that fails at import (e.g. one that calls
#   xp.__array_namespace_info__() at collection) must not abort the whole run;
# on the GPU, no Hypothesis deadline: the first call of each kernel compiles it (NVRTC),
#   which takes longer than the suite's 800 ms per example and says nothing of conformance.
deadline=()
[ "$CUFLOW_BACKEND" = cupy ] && deadline=(--hypothesis-disable-deadline)
"${PYTHON:-python3}" -m pytest -c "$DIR/pytest.ini" --rootdir "$DIR" -p no:cacheprovider \
  --max-examples="${MAX_EXAMPLES:-100}" --hypothesis-seed=0 --continue-on-collection-errors \
  "${deadline[@]}" -q -rfE \
  "${args[@]}"
