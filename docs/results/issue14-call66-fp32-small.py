"""Issue 14, call 66: the SSU with an fp32 state, one token, batch 8-16, where it is 0.4-1.3% behind vLLM (call 65's
recording) and vLLM runs at 93-94% of the copy floor. The small tile (4 rows, one warp, without PDL) against taller
tiles, two warps and PDL (on an H100, call 62: 8-16 rows in 2 warps 2.5% faster at batch 8).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call66-fp32-small.py
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
SWEEP = Sweep("ab-fp32-small")
BASE = (dict(ms.BLOCK_M_TIED_SMALL), ms.NUM_WARPS, ms.PDL_FP32_NO_PDL_BLOCK_M)
V = {"base": None, "4x1pdl": (4, 1, 0), "8x1": (8, 1, 4), "8x2": (8, 2, 4), "16x2": (16, 2, 4), "16x1": (16, 1, 4)}


def setv(v):
    ms.BLOCK_M_TIED_SMALL, ms.NUM_WARPS, ms.PDL_FP32_NO_PDL_BLOCK_M = dict(BASE[0]), BASE[1], BASE[2]
    if V[v]:
        rows, warps, nopdl = V[v]
        ms.BLOCK_M_TIED_SMALL = {**BASE[0], 4: rows}
        ms.NUM_WARPS, ms.PDL_FP32_NO_PDL_BLOCK_M = warps, nopdl


cases = [(act, z, b) for act, z in (("bf16", False), ("fp32", False), ("bf16", True)) for b in (8, 9, 12)]
SWEEP.run("ssu", cases, V, setv, lambda k: SSUCase(k[2], k[2], D["fp32"], D[k[0]], k[1], "cloned", 1))
