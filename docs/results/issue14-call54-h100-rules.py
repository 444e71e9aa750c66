"""Issue 14, call 54 (an H100): the SSU's launch rules on the H100, where the recorded command (call 52) read the fp32
state 0.992-0.998x of vLLM from batch 57 (vLLM's H100 table: 4 rows, 1 warp; ours 16 rows, chosen on the H200) and
A/dt per element 0.97-0.99x from batch 64. A/B beside vLLM in one process (scripts/ab_sweep.py: variants interleaved
twice, the best of each).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call54-h100-rules.py

Parts: ``tile`` (one token, A/dt per head, fp32 state: BLOCK_M_TIED[4] 16 / 8 / 4, and the fp32-activation tile
capped the same), ``untied`` (A/dt per element from batch 64: UNTIED_BLOCK_M and UNTIED_NUM_WARPS by state size).
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

D = bench.DTYPES
NAME = torch.cuda.get_device_name()
print("device", NAME, flush=True)
SWEEP = Sweep("ab-h100-rules")
TODO = parts("tile,untied")

if "tile" in TODO:
    base = (dict(ms.BLOCK_M_TIED), ms.BLOCK_M_TIED_FP32_ACTIVATIONS)
    rows = {"base": None, "r8": 8, "r4": 4}

    def set_tile(v):
        ms.BLOCK_M_TIED = dict(base[0])
        ms.BLOCK_M_TIED_FP32_ACTIVATIONS = base[1]
        if rows[v]:
            ms.BLOCK_M_TIED[4] = rows[v]
            ms.BLOCK_M_TIED_FP32_ACTIVATIONS = min(base[1], rows[v])

    cases = [(act, z, b) for act, z in (("bf16", False), ("fp32", False), ("bf16", True))
             for b in (16, 32, 57, 64, 128, 256, 512) if not (z and b not in (64, 256))]
    SWEEP.run("tile", cases, rows, set_tile,
              lambda k: SSUCase(k[2], k[2], D["fp32"], D[k[0]], k[1], "cloned", 1))

if "untied" in TODO:
    ubase = (dict(ms.UNTIED_BLOCK_M), dict(ms.UNTIED_NUM_WARPS))
    shapes = {"base": None, "half": (0.5, 1), "double": (2, 1), "w2": (1, 2), "double-w2": (2, 2)}

    def set_untied(v):
        ms.UNTIED_BLOCK_M, ms.UNTIED_NUM_WARPS = dict(ubase[0]), dict(ubase[1])
        if shapes[v]:
            f, w = shapes[v]
            ms.UNTIED_BLOCK_M = {s: max(1, int(m * f)) for s, m in ubase[0].items()}
            ms.UNTIED_NUM_WARPS = {s: w for s in ubase[1]}

    cases = [(st, b) for st in ("fp32", "bf16") for b in (64, 256, 512)]
    SWEEP.run("untied", cases, shapes, set_untied,
              lambda k: SSUCase(k[1], k[1], D[k[0]], D["bf16"], False, "cloned", 1, "element"))
