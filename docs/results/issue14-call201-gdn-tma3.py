"""Issue 14, call 201 (H200): the TMA kernel for the GDN packed decode, third form. Call 200 brought its plain stores
to whole sectors (one-warp CTAs of 32 rows, "r32w1": 1.025x of vLLM at 64 where the Triton tree reads 1.050x;
after a torch kernel at 8 / 9 -> 16 / 16 1.110 / 1.118 / 1.140x where the tree reads 0.966 / 1.005 / 1.070x). New
here: a persistent kernel ("persistS": one-warp CTAs, as many as are resident on the GPU, each walking 32-row items
with a ring of S buffers, so the next items' state is in flight while one is worked on). And the layer pairs, which
call 199 and 200 could not reach: ``import vllm...causal_conv1d`` raised "source code string cannot contain null
bytes" there after the GDN part had run (checked first here, with its traceback).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call201-gdn-tma3.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule_tma as tma  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), "triton", __import__("triton").__version__, flush=True)
T = tma.TmaShape
SHAPES = {"base": None, "r32w1": T(32, 1, True, False, 1), "r128w8": T(128, 8, True, False, 1),
          "r32w1st": T(32, 1, True, True, 1), "persist2": T(32, 1, True, False, 1, 2),
          "persist3": T(32, 1, True, False, 1, 3)}


def setv(v):
    tma.FORCE = SHAPES[v]


VARIANTS = tuple(SHAPES)
CASES = [(a, c) for a, c in ((1, 1), (8, 8), (9, 16), (16, 16), (32, 32), (57, 64), (64, 64), (128, 128),
                             (256, 256), (512, 512))]
PARTS = parts("pairs,gdn,gdn-nb")
if "pairs" in PARTS:
    pair_sweep("conv+gdn bf16", ((4, 4), (8, 8), (9, 16), (16, 16), (32, 32), (64, 64), (128, 128)),
               lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                             GDNCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1)),
               VARIANTS, setv, "gdn-tma3-pairs.json")
Sweep("ab-gdn-tma3").run_parts(PARTS, CASES, VARIANTS, setv,
                              lambda k: GDNCase(k[0], k[1], D["bf16"], D["bf16"], True, "cloned", 1))
print("all done", flush=True)
