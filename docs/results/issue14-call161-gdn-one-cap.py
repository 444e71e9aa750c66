"""Issue 14, call 161: ptxas' register cap of the GDN's bf16 streaming launches with ``EARLY_ONE``
(``gated_delta_rule.STREAM_ONE_MAXNREG``, 128 at 3eea9f2). The local sm_90 compile spills nothing at any cap down to 80
(1,848 SASS instructions at 128, 1,952 at 112, 2,096 at 96, 2,304 at 80), and one-warp programs an SM go 16 -> 18 ->
21 -> 25. Variants: "base" (128), "cap112", "cap96", "cap80". The GDN alone in both harnesses (the bench's; after a
torch kernel), then layer pairs (a torch kernel, the conv with its trigger, the packed decode; the torch kernel
subtracted).

Runs at the commit that adds it (the rule as at 3eea9f2).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call161-gdn-one-cap.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

import ab_sweep  # noqa: E402
from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
CAPS = {"base": gdn.STREAM_ONE_MAXNREG, "cap112": 112, "cap96": 96, "cap80": 80}
VARIANTS = tuple(CAPS)


def setv(v):
    gdn.STREAM_ONE_MAXNREG = CAPS[v]


SHAPES = ((9, 16), (16, 16), (17, 32), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256), (512, 512))
PARTS = parts("gdn,gdn-nb,pairs")
SWEEP = Sweep("ab-one-cap")
for part in [p for p in PARTS if p != "pairs"]:
    ab_sweep.NEIGHBOUR[0] = part.endswith("-nb")
    SWEEP.run(part, [("bf16",) + s for s in SHAPES], {v: i for i, v in enumerate(VARIANTS)}, setv,
              lambda k: GDNCase(k[1], k[2], D[k[0]], D["bf16"], True, "cloned", 1))
if "pairs" in PARTS:
    pair_sweep("conv+gdn bf16", ((9, 16), (16, 16), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256)),
               lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                             GDNCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1)),
               VARIANTS, setv, "one-cap-pairs.json")
print("all done", flush=True)
