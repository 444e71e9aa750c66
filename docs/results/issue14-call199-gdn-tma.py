"""Issue 14, call 199 (H200): the GDN packed decode on a CUDA kernel that owns its shared memory and barriers
(``mambalab.kernels.gated_delta_rule_tma``: the state of a warp's rows brought in by one bulk copy, TMA's
one-dimensional form, counted by an mbarrier, before PDL's wait; eight lanes a row), beside the tree's Triton
streaming kernel and vLLM 0.33's packed decode. Variants force every packed decode onto one of the kernel's launch
shapes (``gated_delta_rule_tma.FORCE``): "rR wW" R rows a CTA on W warps, "late" the state read after the wait,
"st" the new rows stored through shared memory by one bulk store a warp. "base" is the tree (Triton).

GDN bf16 state and activations in both harnesses (the bench's; after a torch kernel), then layer pairs (a torch
kernel, the conv with its trigger, the packed decode; the torch kernel subtracted).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call199-gdn-tma.py
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
SHAPES = {"base": None, "r128w4": T(128, 4, True, False), "r128w4st": T(128, 4, True, True),
          "r128w4late": T(128, 4, False, False), "r64w2": T(64, 2, True, False), "r64w2st": T(64, 2, True, True),
          "r32w1": T(32, 1, True, False), "r128w8": T(128, 8, True, False)}


def setv(v):
    tma.FORCE = SHAPES[v]


VARIANTS = tuple(SHAPES)
CASES = [(a, c) for a, c in ((1, 1), (8, 8), (9, 16), (16, 16), (32, 32), (57, 64), (64, 64), (128, 128),
                             (256, 256), (512, 512))]
PARTS = parts("gdn,gdn-nb,pairs")
Sweep("ab-gdn-tma").run_parts(PARTS, CASES, VARIANTS, setv,
                              lambda k: GDNCase(k[0], k[1], D["bf16"], D["bf16"], True, "cloned", 1))
if "pairs" in PARTS:
    pair_sweep("conv+gdn bf16", ((16, 16), (32, 32), (64, 64), (128, 128)),
               lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                             GDNCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1)),
               VARIANTS, setv, "gdn-tma-pairs.json")
print("all done", flush=True)
