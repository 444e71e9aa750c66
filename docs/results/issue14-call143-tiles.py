"""Issue 14, call 143: launch shapes, in the bench's harness and after a torch kernel that does not trigger PDL
("-nb"). SSU one token (call 140 found 8 rows on 2 warps faster for the fp32 state at batch 4 in both harnesses):
``mamba_ssm.launch_config_override`` tiles of 8 / 16 / 32 rows on 2 warps and 16 / 32 on 4, beside the rule ("base").
GDN bf16 one token against vLLM's packed decode (call 142: 9 -> 16 and 17 -> 32 0.955-0.97x): the streaming kernel's
bf16 shape (rows a block, blocks, stages) as vLLM's one tile of 32 rows ("s32x1"), unpipelined ("s16x2s1"), 8-row
blocks ("s8x4").

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call143-tiles.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

import ab_sweep  # noqa: E402
from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase, SSUCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-tiles")
STREAM = dict(gdn.STREAM)
SSU_V = {k: 0 for k in ("base", "m08w2", "m16w2", "m32w2", "m16w4", "m32w4")}
GDN_V = {"base": None, "s32x1": (32, 1, 1), "s16x2s1": (16, 2, 1), "s8x4": (8, 4, 2)}


def set_ssu(v):
    ms._override = None if v == "base" else ms.LaunchConfig(int(v[1:3]), int(v[-1]))


def set_gdn(v):
    shape = GDN_V[v]
    gdn.STREAM = STREAM if shape is None else {**STREAM, 2: shape + STREAM[2][3:]}


SSU_CASES = [(s, a, c, act, z) for s in ("fp32", "bf16") for a, c in ((2, 2), (4, 4), (8, 8), (9, 16), (16, 16),
                                                                       (32, 32)) for act, z in (("bf16", False),)] + [
    ("fp32", 4, 4, "fp32", False), ("fp32", 8, 8, "bf16", True), ("bf16", 8, 8, "bf16", True)]
GDN_CASES = [(a, c) for a, c in ((9, 16), (16, 16), (17, 32), (32, 32), (64, 64), (128, 128), (257, 272))]
for part in parts("ssu,ssu-nb,gdn,gdn-nb"):
    ab_sweep.NEIGHBOUR[0] = part.endswith("-nb")
    if part.startswith("ssu"):
        SWEEP.run(part, SSU_CASES, SSU_V, set_ssu,
                  lambda k: SSUCase(k[1], k[2], D[k[0]], D[k[3]], k[4], "cloned", 1, "head"))
    else:
        SWEEP.run(part, GDN_CASES, GDN_V, set_gdn,
                  lambda k: GDNCase(k[0], k[1], D["bf16"], D["bf16"], True, "cloned", 1))
print("all done", flush=True)
