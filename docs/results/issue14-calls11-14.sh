# ---- .whl/ab/call11.sh
#!/usr/bin/env bash
# Issue 14, call 11 (nvidia-h200): the A/B + chooser (.whl/ab/ab15.py), then the recorded stages from the chosen
# files, then Nsight Compute on the rows still short. Everything lands in /tmp/r, tarred into $OUT.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl .whl/ipy/*.whl
export PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site PYTHONUNBUFFERED=1
R=/tmp/r; mkdir -p $R; T0=$(date +%s)
OUT=$R AB_LIMIT=${AB_LIMIT:-250} timeout 290 python3 .whl/ab/ab15.py 2>&1 | tee $R/ab15.txt | grep -E "==|CHOSEN|GATE|NOTE|done|rror"
cp lib/mambalab/kernels/gated_delta_rule.py lib/mambalab/kernels/mamba_ssm.py $R/
echo "[$(( $(date +%s) - T0 )) s] ab done"
BENCH_TIMEOUT=200 STAGES="check tests bench" scripts/gpu_measure.sh $R
echo "[$(( $(date +%s) - T0 )) s] bench done"
NCU_CASES="gdn bf16 64 mambalab act=bf16,z=none,pools=cloned
gdn bf16 64 vllm act=bf16,z=none,pools=cloned
ssu bf16 64 mambalab act=bf16,z=none,pools=cloned,dt=element
ssu bf16 64 vllm act=bf16,z=none,pools=cloned,dt=element" STAGES=ncu timeout $(( 585 - ($(date +%s) - T0) )) scripts/gpu_measure.sh $R
echo "[$(( $(date +%s) - T0 )) s] ncu done"
tar czf $OUT/r.tgz -C /tmp r; cp $R/ab15.txt $R/bench.md $OUT/ 2>/dev/null
# ---- .whl/ab/call12.sh
#!/usr/bin/env bash
# Issue 14, call 12 (nvidia-h200): the A/B + chooser (.whl/ab/ab16.py), then the recorded stages from the chosen
# files, then Nsight Compute on the rows still short. Everything lands in /tmp/r, tarred into $OUT.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl .whl/ipy/*.whl
export PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site PYTHONUNBUFFERED=1
R=/tmp/r; mkdir -p $R; T0=$(date +%s)
OUT=$R AB_LIMIT=${AB_LIMIT:-250} timeout 290 python3 .whl/ab/ab16.py 2>&1 | tee $R/ab16.txt | grep -E "==|CHOSEN|GATE|NOTE|done|rror"
cp lib/mambalab/kernels/gated_delta_rule.py lib/mambalab/kernels/gated_delta_rule_kernels.py $R/
echo "[$(( $(date +%s) - T0 )) s] ab done"
BENCH_TIMEOUT=200 STAGES="check tests bench" scripts/gpu_measure.sh $R
echo "[$(( $(date +%s) - T0 )) s] bench done"
NCU_CASES="gdn bf16 64 mambalab act=bf16,z=none,pools=cloned
gdn bf16 64 vllm act=bf16,z=none,pools=cloned
gdn fp32 64 mambalab act=bf16,z=none,pools=cloned
gdn fp32 64 vllm act=bf16,z=none,pools=cloned
ssu fp32 1 mambalab act=bf16,z=none,pools=cloned
ssu fp32 1 vllm act=bf16,z=none,pools=cloned
conv fp32 256 mambalab tokens=4
conv fp32 256 vllm tokens=4" STAGES=ncu timeout $(( 585 - ($(date +%s) - T0) )) scripts/gpu_measure.sh $R
echo "[$(( $(date +%s) - T0 )) s] ncu done"
tar czf $OUT/r.tgz -C /tmp r; cp $R/ab16.txt $R/bench.md $OUT/ 2>/dev/null
# ---- .whl/ab/call13.sh
#!/usr/bin/env bash
# Issue 14, call 13 (nvidia-h200): the A/B + chooser (.whl/ab/ab17.py), then the recorded stages from the chosen
# files, then Nsight Compute on the rows still short. Everything lands in /tmp/r, tarred into $OUT.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl .whl/ipy/*.whl
export PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site PYTHONUNBUFFERED=1
R=/tmp/r; mkdir -p $R; T0=$(date +%s)
OUT=$R AB_LIMIT=${AB_LIMIT:-100} timeout 140 python3 .whl/ab/ab17.py 2>&1 | tee $R/ab17.txt | grep -E "==|CHOSEN|GATE|NOTE|done|rror"
cp lib/mambalab/kernels/gated_delta_rule.py lib/mambalab/kernels/gated_delta_rule_kernels.py $R/
echo "[$(( $(date +%s) - T0 )) s] ab done"
BENCH_TIMEOUT=200 STAGES="check tests bench" scripts/gpu_measure.sh $R
echo "[$(( $(date +%s) - T0 )) s] bench done"
NCU_CASES="gdn bf16 64 mambalab act=bf16,z=none,pools=cloned
gdn bf16 256 mambalab act=bf16,z=none,pools=cloned
gdn bf16 256 vllm act=bf16,z=none,pools=cloned" STAGES=ncu timeout $(( 585 - ($(date +%s) - T0) )) scripts/gpu_measure.sh $R
echo "[$(( $(date +%s) - T0 )) s] ncu done"
tar czf $OUT/r.tgz -C /tmp r; cp $R/ab17.txt $R/bench.md $OUT/ 2>/dev/null
# ---- .whl/ab/call14.sh
#!/usr/bin/env bash
# Issue 14, call 14 (nvidia-h200): the recorded bench of the final rule (GDN streaming kernel bf16 from batch 16,
# fp32 batch 8-32; the kernels themselves as in call 13, whose CUDA kernel tests passed).
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl .whl/ipy/*.whl
export PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site PYTHONUNBUFFERED=1
R=/tmp/r; mkdir -p $R
grep -n "^STREAM" lib/mambalab/kernels/gated_delta_rule.py
BENCH_TIMEOUT=200 STAGES="check bench" scripts/gpu_measure.sh $R
tar czf $OUT/r.tgz -C /tmp r; cp $R/bench.md $OUT/
