"""Issue 14, call 202 (H200): the SSU bf16 one token at 10-16 requests, the two shapes call 197 left unmeasured.
The tree (``mamba_ssm_devices``, the H200's rule): 32-row tiles on 4 warps without the early load from 8 to 15 x 128
request x heads (call 197 measured 8 and 9 only), the heads-first grid with the table's 16-row tile from 16 x 128.
Variants rewrite the H200's rule: "s16" the 32-row tile up to 16 x 128 as well (at 16 with the heads-first grid: the
two rules together), "table" no small tile (the table's 16-row, one-warp tile at 8-15, as before call 197).

SSU bf16 state and activations, ``z=None``, pools cloned, in both harnesses (the bench's; after a torch kernel), then
layer pairs (a torch kernel, the conv with its trigger, the SSU; the torch kernel subtracted).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call202-ssu-bf16-16.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm_devices as devs  # noqa: E402

BF = bench.DTYPES["bf16"]
NAME = torch.cuda.get_device_name()
print("device", NAME, flush=True)
TREE = devs.SSU_DEVICE_RULES[NAME][2]
RULES = {"base": TREE, "s16": TREE._replace(small_max=16 * 128), "table": TREE._replace(small_min=1 << 30)}


def setv(v):
    devs.SSU_DEVICE_RULES[NAME][2] = RULES[v]


VARIANTS = tuple(RULES)
SHAPES = [(8, 8, "cloned"), (10, 10, "cloned"), (12, 12, "cloned"), (15, 15, "cloned"), (16, 16, "cloned"),
          (9, 16, "cloned"), (16, 16, "fresh")]
PARTS = parts("pairs,ssu,ssu-nb")
if "pairs" in PARTS:
    pair_sweep("conv+ssu bf16", ((8, 8), (12, 12), (15, 15), (16, 16)),
               lambda a, c: (ConvCase(a, c, BF, BF, False, "cloned", 1), SSUCase(a, c, BF, BF, False, "cloned", 1)),
               VARIANTS, setv, "ssu-bf16-16-pairs.json")
Sweep("ab-ssu-bf16-16").run_parts(PARTS, SHAPES, VARIANTS, setv,
                                  lambda k: SSUCase(k[0], k[1], BF, BF, False, k[2], 1))
print("all done", flush=True)
