"""Issue 14, call 61 (H200, warm after call 60): the SSU's fp32 per-element small tile at 4 rows (call 60: batch 1 / 2 /
4 0.910 / 0.909 / 0.914 -> 0.964 / 0.965 / 0.987x of vLLM), now with the several-requests kernel at batch 8 (8
requests a program on the small tile): 2 rows (shipped) against 4 rows, with 8 or 4 requests a program.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call61-untied-small.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402
from mambalab.kernels import mamba_ssm_untied as mu  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-untied-small")
BASE = (dict(ms.UNTIED_BLOCK_M_SMALL), {k: list(v) for k, v in mu.UNTIED_REQS.items()})
V = {"base": (2, 8), "m4r8": (4, 8), "m4r4": (4, 4), "m4r2": (4, 2)}


def setv(v):
    rows, reqs = V[v]
    ms.UNTIED_BLOCK_M_SMALL = {**BASE[0], 4: rows}
    mu.UNTIED_REQS = {**BASE[1], 4: [(reqs, 8 * 128, 16 * 128 - 1)]}


cases = [("fp32", b) for b in (1, 4, 8, 9)]
SWEEP.run("ssu", cases, V, setv, lambda k: SSUCase(k[1], k[1], D[k[0]], D["bf16"], False, "cloned", 1, "element"))
