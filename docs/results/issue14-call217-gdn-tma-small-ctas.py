"""Issue 14, call 217 (H200): the GDN bf16 packed decode on the TMA kernel in smaller CTAs
(``issue14-call217-gdn-tma-small-ctas.cu``), toward the copy floor's program shape (call 211: 4-warp programs of 4
KiB move these bytes fastest). "rRwW": R value rows a CTA on W warps (R / W rows a warp, one bulk copy each, read
before PDL's wait, plain stores). "base" is the tree (the Triton kernel from 17 requests, r32w1 from 4 to 16); "r32w1"
the shipped TMA shape forced at every batch. Bench, after a torch kernel ("-nb"), and as a layer runs it.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call217-gdn-tma-small-ctas.py
"""
import sys
from pathlib import Path

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule_tma as tma  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
T = tma.TmaShape
NEW = {f"r{r}w{w}": T(r, w, True, False, 1) for r, w in ((16, 1), (16, 2), (16, 4), (32, 2), (32, 4), (32, 8))}
tma.SOURCE = Path(__file__).resolve().with_suffix(".cu")
tma.SHAPES = tma.SHAPES + tuple(NEW.values())
SHAPES = {"base": None, "r32w1": T(32, 1, True, False, 1), **NEW}
dev = torch.device("cuda", torch.cuda.current_device())
drv = tma._get_driver()
for name, shape in SHAPES.items():
    if shape is not None:
        fn = drv.function(dev, shape.entry)
        print(f"{name}: {drv.blocks_per_sm(fn, 32 * shape.warps, tma.shape_smem(shape))} CTAs an SM", flush=True)


def setv(v):
    tma.FORCE = SHAPES[v]


VARIANTS = tuple(SHAPES)
CASES = [(8, 8), (16, 16), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256)]
PARTS = parts("pairs,gdn,gdn-nb")
if "pairs" in PARTS:
    pair_sweep("conv+gdn bf16", ((8, 8), (16, 16), (32, 32), (64, 64), (128, 128)),
               lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                             GDNCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1)),
               VARIANTS, setv, "gdn-tma-small-ctas-pairs.json")
Sweep("ab-gdn-tma-small-ctas").run_parts(PARTS, CASES, VARIANTS, setv,
                                         lambda k: GDNCase(k[0], k[1], D["bf16"], D["bf16"], True, "cloned", 1))
print("all done", flush=True)
