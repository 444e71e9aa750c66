#!/usr/bin/env bash
# The GPU chapter's correctness runs, on a CUDA machine, into one folder (default ./gpu-results):
#   cuda-tests.txt   the CUDA-marked tests: kernels (fp32, bf16, fp16), every replay and the hunter
#                    against the CPU's verdicts (tests/test_cuda_verdicts.py), the report module
#   replays.txt      python -m mambalab replay BUG [--fixed] --device cuda for every scenario
# Usage: PYTHONPATH=lib scripts/gpu_verdicts.sh [OUTDIR] [PYTEST_WORKERS]
set -u
out=${1:-gpu-results}
workers=${2:-12}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
bugs=$(python3 -c "from mambalab.lab.scenarios import valid_bug_ids; print(' '.join(valid_bug_ids()))")
mkdir -p "$out/replays"
for bug in $bugs; do
  for mode in pre-fix fixed; do
    while [ "$(jobs -r | wc -l)" -ge 8 ]; do sleep 0.5; done
    f="$out/replays/$(echo "${bug}_$mode" | tr / _).txt"
    flag=""; [ "$mode" = fixed ] && flag=--fixed
    ( timeout 300 python3 -m mambalab replay "$bug" $flag --device cuda > "$f" 2> "$f.err"; rc=$?
      echo "  exit=$rc" >> "$f"
      if [ $rc -gt 1 ]; then tail -5 "$f.err" | sed 's/^/  stderr: /' >> "$f"; fi ) &
  done
done
wait
for bug in $bugs; do
  for mode in pre-fix fixed; do cat "$out/replays/$(echo "${bug}_$mode" | tr / _).txt"; done
done > "$out/replays.txt"
rm -rf "$out/replays"

MAMBALAB_DEVICE=cuda timeout ${PYTEST_TIMEOUT:-480} python3 -m pytest -q -n "$workers" -p no:cacheprovider -rA \
  tests/test_cuda_verdicts.py tests/test_kernel_selective_state_update.py tests/test_kernel_gated_delta_rule.py \
  tests/test_kernel_causal_conv1d.py tests/test_kernel_zero_accepted.py tests/test_sanitizer.py \
  tests/test_gpu_report.py tests/test_cudagraph.py > "$out/cuda-tests.txt" 2>&1
echo "pytest exit code $?" >> "$out/cuda-tests.txt"

exit 0
