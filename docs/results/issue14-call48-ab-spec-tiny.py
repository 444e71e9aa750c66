"""Issue 14 A/B, call 48: the tree's tile for speculative decoding at batch 1 (BLOCK_M_MULTI_TOKEN_TINY: 4 rows up
to MULTI_TOKEN_TINY request x heads; chosen in call 47, on an H100) against the earlier rule ("base": 8 rows fp32, 16
bf16), beside vLLM in one process (scripts/ab_sweep.py: variants interleaved twice, the best of each).
"""
import sys
sys.path[:0] = ["lib", "scripts"]
from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

SWEEP = Sweep("ab-spec-tiny")
D = bench.DTYPES
NEW = ms.MULTI_TOKEN_TINY


def setv(v):
    ms.MULTI_TOKEN_TINY = 0 if v == "base" else NEW


cases = [(st, T, b) for st in ("fp32", "bf16") for T in (2, 3, 4) for b in (1, 2)]
SWEEP.run("spec", cases, {"base": 0, "new": 1}, setv,
          lambda k: SSUCase(k[2], k[2], D[k[0]], D["bf16"], False, "cloned", k[1]))
setv("new")
