"""Issue 14 A/B, call 47: the SSU's tile height for speculative decoding at small batches (T = 2..4 at batch 1-8,
where the early state load is on and the SSU is behind or short of 1.1x), beside vLLM in one process
(scripts/ab_sweep.py: variants interleaved twice, the best of each). Rule switches only: "base" the tree's
(BLOCK_M_MULTI_TOKEN_SMALL: fp32 8 rows, bf16 16); "m2" / "m4" / "m8" / "m16" that many rows a program, one warp
(mamba_ssm._override, as launch_config_override pins it; the early state load and PDL as the tree decides).
"""
import sys
sys.path[:0] = ["lib", "scripts"]
from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

PARTS = parts("spec")
SWEEP = Sweep("ab-spec-small")
D = bench.DTYPES
V = {"base": None, "m2": 2, "m4": 4, "m8": 8, "m16": 16}


def setv(v):
    ms._override = None if V[v] is None else ms.LaunchConfig(block_m=V[v], num_warps=1)


if "spec" in PARTS:
    cases = [(st, T, b) for st in ("fp32", "bf16") for T in (2, 3, 4) for b in (1, 2, 4, 8)]
    try:
        SWEEP.run("spec", cases, V, setv, lambda k: SSUCase(k[2], k[2], D[k[0]], D["bf16"], False, "cloned", k[1]))
    except Exception as e:
        print("# PART FAILED spec", repr(e), flush=True)
    setv("base")
