#!/usr/bin/env bash
# The GPU chapter's measurements, on a CUDA machine, into one folder (default ./gpu-results).
# Stages (STAGES, default all but sanitizer):
#   check     vLLM's extracted kernels import (scripts/vllm_baseline.py --check), versions -> env.txt
#   tests     the kernel tests on CUDA (fp32 and bf16 cases, MAMBALAB_DEVICE=cuda)  -> tests.txt
#   sweep     SSU launch sweep in the issue-14 set-ups, beside vLLM's kernel (optional) -> sweep.txt
#   ncu       Nsight Compute, mambalab and vLLM side by side (NCU_CASES, one per line) -> ncu.txt
#   bench     python -m mambalab bench (every configuration, vLLM + fla-core, gate)   -> bench.json / .md / .log
#   sanitizer compute-sanitizer memcheck on bug #35431                                -> memcheck-*.txt
# Usage: PYTHONPATH=lib:.vllm [STAGES="check bench"] scripts/gpu_measure.sh [OUTDIR]
#   (fla-core importable for its baseline; .vllm/ made by scripts/vllm_baseline.py)
set -u
out=${1:-gpu-results}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
stages=" ${STAGES:-check tests bench ncu} "
has() { [[ "$stages" == *" $1 "* ]]; }
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }

if has check; then
  { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
    python3 -c "import torch, triton, platform; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda, 'python', platform.python_version())"
    python3 -c "import fla; print('fla-core', fla.__version__)" 2>&1 | tail -1
    python3 scripts/vllm_baseline.py --check 2>&1 | tail -3
    date -u +%Y-%m-%dT%H:%MZ; } > "$out/env.txt" 2>&1
  stamp check; cat "$out/env.txt"
fi

if has tests; then
  # the kernel tests are parametrised over fp32 / bf16 (/ fp16) themselves
  MAMBALAB_DEVICE=cuda timeout 240 python3 -m pytest -q -p no:cacheprovider -n 8 -rfE \
    tests/test_kernel_*.py > "$out/tests.txt" 2>&1
  stamp tests; tail -5 "$out/tests.txt"
fi

if has sweep; then
  timeout 200 python3 scripts/tune_launch.py --kernels ssu --dtypes fp32,bf16 --batches 8,64,256 \
    --block-m ${SWEEP_BLOCK_M:-2,4,8,16} --warps ${SWEEP_WARPS:-1,2} --vllm \
    --setups 'act=bf16,z=none,pools=cloned;act=same,z=z,pools=fresh' > "$out/sweep.txt" 2>&1
  stamp sweep; grep -E "BEST|vllm|rror" "$out/sweep.txt" | head -40
fi

if has ncu; then
  metrics=gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,launch__registers_per_thread
  metrics=$metrics,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
  metrics=$metrics,launch__occupancy_limit_registers,launch__grid_size,launch__block_size,sm__maximum_warps_per_active_cycle_pct
  metrics=$metrics,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio
  metrics=$metrics,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio
  metrics=$metrics,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio
  metrics=$metrics,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio
  metrics=$metrics,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio
  metrics=$metrics,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio
  metrics=$metrics,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio
  metrics=$metrics,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio
  metrics=$metrics,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio
  metrics=$metrics,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio
  metrics=$metrics,smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio
  metrics=$metrics,smsp__inst_executed.sum,sm__ctas_launched.sum
  metrics=$metrics,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct
  # one case a line: kernel state batch impl set-up (the bench's Case keywords)
  cases=${NCU_CASES:-"ssu fp32 64 mambalab act=bf16,z=none,pools=cloned
ssu fp32 64 vllm act=bf16,z=none,pools=cloned
ssu fp32 64 mambalab act=fp32,z=z,pools=fresh
ssu fp32 64 vllm act=fp32,z=z,pools=fresh
ssu fp32 64 mambalab act=bf16,z=none,pools=cloned,dt=element
ssu fp32 64 vllm act=bf16,z=none,pools=cloned,dt=element
conv fp32 64 mambalab tokens=4
conv fp32 64 vllm tokens=4"}
  while read -r k dt b impl su; do
    [ -z "$k" ] && continue
    echo "=== $k $dt $b $impl $su"
    timeout 60 ncu --clock-control none --kernel-name regex:'ssu|selective_scan_update|_gdn|gdn_tma|fused_recurrent|conv1d' \
      --launch-skip 1 --launch-count 1 --metrics "$metrics" \
      python3 scripts/profile_kernel.py "$k" "$dt" "$b" "$impl" "$su" < /dev/null 2>&1 | grep -E "__|rror|==PROF"
  done <<< "$cases" > "$out/ncu.txt" 2>&1
  stamp ncu
fi

if has bench; then
  timeout ${BENCH_TIMEOUT:-400} python3 -m mambalab bench ${BENCH_ARGS:-} --json "$out/bench.json" \
    --markdown "$out/bench.md" > "$out/bench.log" 2>&1
  echo "bench rc=$?" >> "$out/bench.log"
  stamp bench; grep -E "GATE|rror|rc=" "$out/bench.log" | head -20
fi

if has sanitizer; then
  for mode in bug fixed; do
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 120 compute-sanitizer --tool memcheck --show-backtrace no \
      python3 -m mambalab.gpu.pad_minus_one --$mode > "$out/memcheck-$mode.txt" 2>&1
    echo "exit code $?" >> "$out/memcheck-$mode.txt"
  done
fi
exit 0
