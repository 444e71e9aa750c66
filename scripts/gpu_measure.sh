#!/usr/bin/env bash
# The GPU chapter's measurements, on a CUDA machine, into one folder (default ./gpu-results):
#   bench.json / bench.md   python -m mambalab bench (cold-cache CUDA graphs, both null-row modes, fla-core)
#   ncu.txt                 Nsight Compute counters of one launch per kernel and state dtype, batch 64 and 256
#   memcheck-*.txt          compute-sanitizer memcheck on bug #35431 (lib/mambalab/gpu/pad_minus_one.py)
# Usage: PYTHONPATH=lib scripts/gpu_measure.sh [OUTDIR]   (fla-core importable for its baseline)
set -u
out=${1:-gpu-results}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)"
  python3 -c "import fla; print('fla-core', fla.__version__)" 2>&1 | tail -1
  date -u +%Y-%m-%dT%H:%MZ; } > "$out/env.txt" 2>&1

timeout 300 python3 -m mambalab bench --json "$out/bench.json" --markdown "$out/bench.md" > "$out/bench.log" 2>&1
echo "bench rc=$?" >> "$out/env.txt"

metrics=gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,launch__registers_per_thread
metrics=$metrics,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
metrics=$metrics,launch__occupancy_limit_registers,launch__grid_size
for batch in 64 256; do
  for k in "ssu fp32" "ssu bf16" "gdn fp32" "gdn bf16" "conv fp32" "conv bf16"; do
    echo "=== $k $batch"
    # shellcheck disable=SC2086
    timeout 60 ncu --clock-control none --kernel-name regex:'ssu|gdn|conv' --launch-skip 1 --launch-count 1 \
      --metrics "$metrics" python3 scripts/profile_kernel.py $k $batch 2>&1 | grep -E "__|rror"
  done
done > "$out/ncu.txt"

for mode in bug fixed; do
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 120 compute-sanitizer --tool memcheck \
    python3 -m mambalab.gpu.pad_minus_one --$mode > "$out/memcheck-$mode.txt" 2>&1
  echo "exit code $?" >> "$out/memcheck-$mode.txt"
done
exit 0
