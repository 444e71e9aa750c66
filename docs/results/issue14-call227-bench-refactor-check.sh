set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl .whl/ipy/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site MAMBALAB_DEVICE=cuda
# the refactored bench harness (capture_graph, after_torch) on CUDA: its tests, then one row timed both ways
timeout 200 python3 -m pytest -q -p no:randomly tests/test_bench_gate.py tests/test_gpu_report.py 2>&1 | tail -3 | tee $OUT/check.txt
timeout 200 python3 - <<'PY' 2>&1 | grep -v WARNING | tee -a $OUT/check.txt
import sys; sys.path[:0] = ["lib", "scripts"]
from ab_sweep import BUDGET, FIX
from mambalab.gpu import bench
from mambalab.gpu.bench_cases import SSUCase
bench._vllm_path()
case = SSUCase(8, 8, bench.DTYPES["fp32"], bench.DTYPES["bf16"], False, "cloned", 1)
for impl in ("mambalab", "vllm"):
    calls = bench._timed_calls(case, impl, BUDGET, FIX if impl == "mambalab" else None)
    print(impl, "bench", round(bench.time_graph(calls), 2), "after torch", round(bench.time_graph_after_torch(calls), 2))
PY
