"""Issue 14, call 62: the SSU's one-token tiles at small batches with more warps a program. The copy floor (call 53)
leaves 1.14-1.20x above vLLM at fp32 batch 2 / 4 and 1.11-1.18x at bf16 batch 8-16, and its fastest variants moved
8-32 KiB a program in 4-8 warps, where the SSU's tiles are 2-4 KiB in one warp (earlier sweeps stopped at 2 warps).
Rows x warps a program against the shipped tile, beside vLLM (A/dt per head, z=None, pools cloned, bf16 activations).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call62-small-warps.py
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
SWEEP = Sweep("ab-small-warps")
BASE = (dict(ms.BLOCK_M_TIED_SMALL), dict(ms.BLOCK_M_TIED), ms.NUM_WARPS)
V = {"base": None, "8x2": (8, 2), "16x2": (16, 2), "16x4": (16, 4), "32x4": (32, 4), "64x8": (64, 8)}


def setv(v):
    ms.BLOCK_M_TIED_SMALL, ms.BLOCK_M_TIED, ms.NUM_WARPS = dict(BASE[0]), dict(BASE[1]), BASE[2]
    if V[v]:
        rows, warps = V[v]
        ms.BLOCK_M_TIED_SMALL = {4: rows, 2: rows}
        ms.BLOCK_M_TIED = {4: rows, 2: rows}
        ms.NUM_WARPS = warps


cases = [("fp32", b) for b in (1, 2, 4, 8)] + [("bf16", b) for b in (2, 4, 8, 9, 16)]
SWEEP.run("ssu", cases, V, setv, lambda k: SSUCase(k[1], k[1], D[k[0]], D["bf16"], False, "cloned", 1))
