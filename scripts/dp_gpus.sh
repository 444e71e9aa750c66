#!/usr/bin/env bash
# The DP launcher on two GPUs (issue 15), on a machine with >= 2 CUDA GPUs, into one folder
# (default ./dp-results):
#   dp-env.txt     nvidia-smi -L, torch's GPU count, the NCCL variables as the machine sets them
#   dp-cli.txt     python -m mambalab replay {stale-rows,move-row-stale-source} --dp-procs --device cuda
#                  and a random DP-2 workload (run --dp 2 --dp-procs --device cuda), each with its exit code
#                  and seconds (CLI_TIMEOUT each, default 80 s; PYTEST_TIMEOUT for the tests, default 330 s)
#   dp-pytest.txt  tests/test_dp_gpus.py (marked multi_gpu): the scenarios on 3 seeds pre-fix and fixed,
#                  10 random DP-2 workloads with every fix on (over NCCL against the in-process engine
#                  on the CPU), a kernel fault planted on rank 1, the run after it
#   dp-check.json, dp-check.txt   what that test run measured (mambalab.gpu.dp_check)
# NVLink multicast stays off: NCCL_NVLS_ENABLE is left as the machine sets it (0 where unset).
# Usage: PYTHONPATH=lib scripts/dp_gpus.sh [OUTDIR]
set -u
out=${1:-dp-results}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
py=${PYTHON:-python3}
{ date -u; cat COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null; nvidia-smi -L
  $py -c 'import torch; print("torch", torch.__version__, "sees", torch.cuda.device_count(), "GPUs")'
  env | grep -E '^(NCCL_|TORCH_NCCL|TORCH_SYMM|NVSHMEM)' | sort; } > "$out/dp-env.txt" 2>&1
cat "$out/dp-env.txt"

# the CLI first (it also fills Triton's cache for the ranks that follow)
: > "$out/dp-cli.txt"
for cmd in "replay stale-rows" "replay move-row-stale-source" "run --dp 2 --requests 8 --seed 7 --cache-mode all"; do
  s0=$SECONDS
  { echo "\$ python -m mambalab $cmd --dp-procs --device cuda"
    timeout ${CLI_TIMEOUT:-80} $py -m mambalab $cmd --dp-procs --device cuda 2>&1; rc=$?
    echo "  exit=$rc ($((SECONDS - s0)) s)"; } >> "$out/dp-cli.txt" 2>&1
done
cat "$out/dp-cli.txt"

MAMBALAB_DP_RECORD="$out" timeout ${PYTEST_TIMEOUT:-330} $py -m pytest -v -s -rA -p no:cacheprovider \
  tests/test_dp_gpus.py > "$out/dp-pytest.txt" 2>&1
echo "pytest exit code $?" >> "$out/dp-pytest.txt"
tail -30 "$out/dp-pytest.txt"
exit 0
