"""Issue 14, call 67: SMALL_EFFECTIVE_BATCH 16 x 128 ("base") against 8 x 128 ("rule", taken after call 66): the SSU with
an fp32 state, one token, batch 4-16, A/dt per head (bf16 / fp32 activations, z), and per element (whose small tables
are the big ones' values), beside vLLM.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call67-small-rule.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-small-rule")
RULE = ms.SMALL_EFFECTIVE_BATCH


def setv(v):
    ms.SMALL_EFFECTIVE_BATCH = RULE if v == "rule" else 16 * 128


cases = [(act, z, b, "head") for act, z in (("bf16", False), ("fp32", False), ("bf16", True)) for b in (4, 8, 9, 15)] + [
    ("bf16", False, b, "element") for b in (8, 9)]
SWEEP.run("ssu", cases, {"base": 0, "rule": 1}, setv,
          lambda k: SSUCase(k[2], k[2], D["fp32"], D[k[0]], k[1], "cloned", 1, k[3]))
