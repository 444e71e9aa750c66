set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl .whl/ipy/*.whl || exit 1
export PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site PYTHONUNBUFFERED=1
# Issue 14, call 224 (H200): the SSU one token at batch 1 alone under Nsight Compute, mambalab and vLLM 0.33: after a
# torch kernel ours trails by 0.3-1.4 us at batch 1 whatever its tile or PDL (calls 222-223). Is the kernel's own
# duration longer, or is it the launch?
export NCU_CASES="ssu fp32 1 mambalab act=bf16,z=none,pools=cloned
ssu fp32 1 vllm act=bf16,z=none,pools=cloned
ssu bf16 1 mambalab act=bf16,z=none,pools=cloned
ssu bf16 1 vllm act=bf16,z=none,pools=cloned
ssu fp32 2 mambalab act=bf16,z=none,pools=cloned
ssu fp32 2 vllm act=bf16,z=none,pools=cloned"
STAGES="ncu" timeout 300 scripts/gpu_measure.sh $OUT/ncu
grep -E "===|time_duration|dram_throughput|registers_per|warps_active|issue_active|inst_executed|ctas_launched|grid_size|block_size|stalled_(long|wait|short|drain|barrier)|bytes_(read|write)" \
  $OUT/ncu/ncu.txt | awk '{print $1, $2, $3, $NF}' | tee $OUT/summary.txt
