"""Issue 14, call 200 (H200): call 199's TMA kernel for the GDN packed decode, its second form. Call 199 (every shape
at 0.80-0.99x of vLLM where the Triton tree reads 1.05x at 64) stored the new rows with each lane writing half of
a 32-byte sector an instruction; here the eight lanes of a row cover 128 contiguous bytes an instruction (two runs
of eight columns a lane), and a warp's rows may come in several bulk copies, each with its own mbarrier, so its first
rows are worked on while the rest arrive. Variants force the packed decode onto one launch shape
(``gated_delta_rule_tma.FORCE``): "rR wW" R rows a CTA on W warps, "st" the new rows stored by one bulk store a warp
(else plain stores), "pP" P bulk copies a warp, "late" the state read after PDL's wait. "base" is the tree (Triton).

GDN bf16 state and activations in both harnesses (the bench's; after a torch kernel), then layer pairs (a torch
kernel, the conv with its trigger, the packed decode; the torch kernel subtracted).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call200-gdn-tma2.py
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
SHAPES = {"base": None, "r32w1": T(32, 1, True, False, 1), "r32w1st": T(32, 1, True, True, 1),
          "r32w1st-p8": T(32, 1, True, True, 8), "r32w1-p8": T(32, 1, True, False, 8),
          "r64w2st": T(64, 2, True, True, 1), "r64w2st-p4": T(64, 2, True, True, 4),
          "r128w4st": T(128, 4, True, True, 1), "r128w8st": T(128, 8, True, True, 1),
          "r128w8": T(128, 8, True, False, 1), "r128w4st-late": T(128, 4, False, True, 1)}


def setv(v):
    tma.FORCE = SHAPES[v]


VARIANTS = tuple(SHAPES)
CASES = [(a, c) for a, c in ((1, 1), (8, 8), (9, 16), (16, 16), (32, 32), (57, 64), (64, 64), (128, 128),
                             (256, 256), (512, 512))]
PARTS = parts("gdn,gdn-nb,pairs")
Sweep("ab-gdn-tma2").run_parts(PARTS, CASES, VARIANTS, setv,
                              lambda k: GDNCase(k[0], k[1], D["bf16"], D["bf16"], True, "cloned", 1))
if "pairs" in PARTS:
    pair_sweep("conv+gdn bf16", ((16, 16), (32, 32), (64, 64), (128, 128)),
               lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                             GDNCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1)),
               VARIANTS, setv, "gdn-tma2-pairs.json")
print("all done", flush=True)
