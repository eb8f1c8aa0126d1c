#!/usr/bin/env bash
# The multi-GPU run: device tests on every GPU, peer copies, the Dask example from one
# worker to one worker per GPU, and the headline benchmarks on each GPU.
# Usage (on the GPU machine, from the repository root; WHEELS: a folder of the dask,
# distributed and dask-cuda wheels and their missing dependencies, for a machine with no
# network):
#   OUT=/some/dir bash bench/multi_gpu.sh [WHEELS] [all|quick]
# Writes $OUT/multi-gpu-*.{log,json,txt}; "quick" leaves out the per-GPU benchmarks.
set -uo pipefail
OUT=${OUT:-bench/results}
WHEELS=${1:-}
MODE=${2:-all}
case "$WHEELS" in all|quick|-h|--help)
  echo "usage: OUT=DIR bash bench/multi_gpu.sh [WHEELS] [all|quick] (WHEELS is a folder;" \
    "give it, or '', before the mode)"; exit 2;;
esac
case "$MODE" in all|quick) ;; *)
  echo "usage: OUT=DIR bash bench/multi_gpu.sh [WHEELS] [all|quick] (got mode '$MODE')"; exit 2;;
esac
nvidia-smi -L > /dev/null 2>&1 || { echo "multi_gpu.sh: needs GPUs (nvidia-smi finds none)"; exit 2; }
mkdir -p "$OUT"
# NVLink multicast stays off (a program that uses it can take the host's GPUs down)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ -n "$WHEELS" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$WHEELS"/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
python3 setup.py -q build_ext --inplace > "$OUT/multi-gpu-build.log" 2>&1 || cat "$OUT/multi-gpu-build.log"
NGPU=$(python3 -c "import cupy; print(cupy.cuda.runtime.getDeviceCount())") || {
  echo "multi_gpu.sh: CuPy cannot count the GPUs (pip install -e '.[cuda13]')"; exit 2; }
nvidia-smi topo -m > "$OUT/multi-gpu-topology.txt" 2>&1
echo "GPUs: $NGPU"

# 1. multi-device semantics and the Dask chunk type, on every GPU
python3 -m pytest -q -p no:cacheprovider -rfEs tests/core/test_devices.py \
  tests/core/test_devices_memory.py tests/dask > "$OUT/multi-gpu-tests.log" 2>&1
{ grep -a -E "^(FAILED|ERROR)" "$OUT/multi-gpu-tests.log"; tail -3 "$OUT/multi-gpu-tests.log"; }

# 2. peer copies between every pair of GPUs
python3 bench/peer_copy.py --json "$OUT/multi-gpu-peer-copy.json"

# 3. the Dask example: one worker, one worker per GPU, and one Pipeline in this process
WORKERS=1; [ "$NGPU" -gt 1 ] && WORKERS="1 $NGPU"
python3 examples/dask_preprocess.py --workers $WORKERS --compare \
  --json "$OUT/multi-gpu-dask.json" 2>&1 | grep -v -E "^(20[0-9]{2}-|INFO|\s+- distributed)"

# 4. the headline benchmarks (pool and image sections among them) on each GPU, each GPU
#    seen alone as device 0 of its process
if [ "$MODE" = all ]; then
  for d in $(seq 0 $((NGPU - 1))); do
    CUDA_VISIBLE_DEVICES=$d python3 -m cuflow bench --quick \
      --json "$OUT/multi-gpu-bench-gpu$d.json" > "$OUT/multi-gpu-bench-gpu$d.log" 2>&1
    echo "GPU $d: bench exit $?"
  done
fi
