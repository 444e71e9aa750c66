"""Issue 14, call 207 (H200): the GDN bf16 packed decode at 4-32 requests, the Triton tree against the CUDA kernel with
TMA under PDL (call 206: one-warp 32-row CTAs, "r32w1", lead the layer pairs at 8 / 9 -> 16 / 16 by 8 / 3.7 / 3.4%
and after a torch kernel by 10 / 8 / 3%, lose the bench at 8 / 16 / 32 by 8 / 1.2 / 2.4%; 128 rows on 8 warps,
"r128w8", lead the bench at 8 by 1.8%). The batches call 206 did not time (4, 9, 12, fresh pools), before a launch
rule for 8-16 is taken or not.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call207-gdn-tma-small.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule_tma as tma  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
T = tma.TmaShape
SHAPES = {"base": None, "r32w1": T(32, 1, True, False, 1), "r128w8": T(128, 8, True, False, 1)}


def setv(v):
    tma.FORCE = SHAPES[v]


VARIANTS = tuple(SHAPES)
CASES = [(4, 4, "cloned"), (8, 8, "cloned"), (9, 9, "cloned"), (12, 12, "cloned"), (16, 16, "cloned"),
         (9, 16, "cloned"), (8, 8, "fresh"), (16, 16, "fresh"), (32, 32, "cloned")]
PARTS = parts("pairs,gdn,gdn-nb")
if "pairs" in PARTS:
    pair_sweep("conv+gdn bf16", ((4, 4), (9, 9), (12, 12), (8, 8), (16, 16)),
               lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                             GDNCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1)),
               VARIANTS, setv, "gdn-tma-small-pairs.json")
Sweep("ab-gdn-tma-small").run_parts(PARTS, CASES, VARIANTS, setv,
                                    lambda k: GDNCase(k[0], k[1], D["bf16"], D["bf16"], True, k[2], 1))
print("all done", flush=True)
