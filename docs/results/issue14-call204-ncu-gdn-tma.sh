python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl .whl/ipy/*.whl || exit 1
export PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site PYTHONUNBUFFERED=1
# Issue 14, call 204 (H200): the GDN bf16 one-token packed decode alone under Nsight Compute at 32 and 64 requests:
# the Triton tree, the CUDA kernel with TMA (calls 199-201: one-warp 32-row CTAs with plain stores, and its
# persistent ring of 2), vLLM 0.33's. Why does the copy engine's load lose to the Triton kernel's register blocks?
export NCU_CASES="gdn bf16 64 mambalab act=bf16,pools=cloned
gdn bf16 64 mambalab-tma=32,1,1,0,1,0 act=bf16,pools=cloned
gdn bf16 64 mambalab-tma=32,1,1,0,1,2 act=bf16,pools=cloned
gdn bf16 64 vllm act=bf16,pools=cloned
gdn bf16 32 mambalab act=bf16,pools=cloned
gdn bf16 32 mambalab-tma=32,1,1,0,1,0 act=bf16,pools=cloned
gdn bf16 32 vllm act=bf16,pools=cloned"
STAGES="check ncu" timeout 400 scripts/gpu_measure.sh $OUT/ncu
grep -E "===|time_duration|dram_throughput|registers_per|warps_active|issue_active|inst_executed|ctas_launched|stalled|bytes_(read|write)" \
  $OUT/ncu/ncu.txt | awk '{print $1, $2, $3, $4, $5, $6, $NF}' | tee $OUT/summary.txt
