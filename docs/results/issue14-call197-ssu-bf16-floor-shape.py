"""Issue 14, call 197 (H200): the SSU bf16 one token at batch 8-16 in the copy floor's program shape. Call 179's
floor (``issue14-call179-floor-h200.txt``): a slot copy of the same bytes at 8 reaches 83.0% of copy with 8 KiB a
program on 8 warps, where ours (16 rows of 128 bf16, 4 KiB, on one warp) is at 74% and vLLM's (the same tile) at
70%; call 196 found ours level with vLLM's alone without PDL, so what is left at 8 is the shape. Variants pin the
tile through ``mamba_ssm.launch_config_override`` (for one token it changes nothing else below 16 x 128 on the
H200; at 16 it also drops the H200's heads-first grid): "base" the tree, "o16w1" the tree's tile pinned (the
control), "oRwW" R rows on W warps (32 rows: 8 KiB, 64: the whole head, 16 KiB). Not under the early state load
(batch <= 4), which the H100's 32-row tiles take and which lost on the H200 at 4 / 8 (call 179).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call197-ssu-bf16-floor-shape.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ssu  # noqa: E402

BF = bench.DTYPES["bf16"]
print("device", torch.cuda.get_device_name(), flush=True)
PINNED = {"base": None, "o16w1": (16, 1), "o32w2": (32, 2), "o32w4": (32, 4), "o32w8": (32, 8), "o64w8": (64, 8)}


def setv(v):
    ssu._override = None if PINNED[v] is None else ssu.LaunchConfig(*PINNED[v])


VARIANTS = tuple(PINNED)
# (active, captured, pools)
SHAPES = [(8, 8, "cloned"), (9, 9, "cloned"), (16, 16, "cloned"), (9, 16, "cloned"), (8, 8, "fresh")]
PARTS = parts("pairs,ssu")
if "pairs" in PARTS:
    pair_sweep("conv+ssu bf16", ((8, 8), (9, 9), (16, 16)),
               lambda a, c: (ConvCase(a, c, BF, BF, False, "cloned", 1), SSUCase(a, c, BF, BF, False, "cloned", 1)),
               VARIANTS, setv, "floor-shape-pairs.json")
Sweep("ab-floor-shape").run_parts(PARTS, SHAPES, VARIANTS, setv,
                                  lambda k: SSUCase(k[0], k[1], BF, BF, False, k[2], 1))
print("all done", flush=True)
