"""Issue 14, call 65: the early store-slot rules as taken after call 64 (an H100) against them off, beside vLLM, on the
device the call gets (the recorded runs are an H200's): SSU up to 8 x 128 request-heads, GDN bf16 up to 64 sequences,
fp32 up to 8.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call65-early-dst-rule.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase, SSUCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdr  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-early-dst-rule")
RULES = (ms.SPEC_EARLY_DST_MAX, dict(gdr.SPEC_EARLY_DST))


def setv(v):
    ms.SPEC_EARLY_DST_MAX, gdr.SPEC_EARLY_DST = (RULES[0], dict(RULES[1])) if v == "rule" else (0, {})


cases = [("bf16", T, b) for T in (2, 3, 4) for b in (1, 8, 64)] + [("fp32", T, b) for T in (3, 4) for b in (1, 8)]
SWEEP.run("ssu", [c for c in cases if c[2] <= 8], {"base": 0, "rule": 1}, setv,
          lambda k: SSUCase(k[2], k[2], D[k[0]], D["bf16"], False, "cloned", k[1]))
SWEEP.run("gdn", cases, {"base": 0, "rule": 1}, setv,
          lambda k: GDNCase(k[2], k[2], D[k[0]], D["bf16"], True, "cloned", k[1]))
