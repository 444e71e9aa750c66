python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl .whl/ipy/*.whl || exit 1
export PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site PYTHONUNBUFFERED=1
# The SSU bf16 one token alone under Nsight Compute, ours with PDL (the tree) and without (MAMBALAB_PDL=0), and vLLM's:
# is call 188's gap at 8 (12.19 against 10.62 us) the kernel's or PDL's under ncu?
export NCU_CASES="ssu bf16 8 mambalab act=bf16,z=none,pools=cloned
ssu bf16 8 vllm act=bf16,z=none,pools=cloned
ssu bf16 16 mambalab act=bf16,z=none,pools=cloned
ssu bf16 16 vllm act=bf16,z=none,pools=cloned
ssu bf16 64 mambalab act=bf16,z=none,pools=cloned
ssu bf16 64 vllm act=bf16,z=none,pools=cloned"
STAGES="check ncu" timeout 200 scripts/gpu_measure.sh $OUT/pdl
export NCU_CASES="ssu bf16 8 mambalab act=bf16,z=none,pools=cloned
ssu bf16 16 mambalab act=bf16,z=none,pools=cloned
ssu bf16 64 mambalab act=bf16,z=none,pools=cloned"
MAMBALAB_PDL=0 STAGES="ncu" timeout 120 scripts/gpu_measure.sh $OUT/nopdl
for d in pdl nopdl; do echo "## $d"; grep -E "===|time_duration|dram_throughput|registers_per|warps_active|long_scoreboard|issue_active|bytes_(read|write)" $OUT/$d/ncu.txt | awk '{print $1, $2, $3, $4, $5, $6, $NF}'; done | tee $OUT/summary.txt
