"""Issue 14, call 206 (H200): calls 199-201's A/B of the TMA kernel for the GDN packed decode again, now under PDL.
Until 2026-11-28 11:10 UTC the kernel's launch attribute was written through ``ctypes.memmove`` into a bytes copy, not
into the attribute, so calls 199-201 launched it without programmatic dependent launch (its griddepcontrol
instructions no-ops); call 205 measured it with PDL for the first time (one-warp 32-row CTAs: 1.075 / 1.046x at 32 /
64 where the Triton tree reads 1.092 / 1.057x). Here every shape of call 201 and two of call 200 with PDL, in both
harnesses and as a layer runs them. "base" is the tree (Triton).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call206-gdn-tma-pdl2.py
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
SHAPES = {"base": None, "r32w1": T(32, 1, True, False, 1), "r32w1-p8": T(32, 1, True, False, 8),
          "r128w8": T(128, 8, True, False, 1), "r32w1st": T(32, 1, True, True, 1),
          "r64w2st-p4": T(64, 2, True, True, 4), "persist2": T(32, 1, True, False, 1, 2)}


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
               VARIANTS, setv, "gdn-tma-pdl2-pairs.json")
Sweep("ab-gdn-tma-pdl2").run_parts(PARTS, CASES, VARIANTS, setv,
                              lambda k: GDNCase(k[0], k[1], D["bf16"], D["bf16"], True, "cloned", 1))
print("all done", flush=True)
