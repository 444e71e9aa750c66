"""Issue 14, call 308 (H200): the GDN bf16 streaming kernel under EARLY_ONE with ptxas' register cap at 120, not 128.
At 128 registers a thread a one-warp program leaves 16 resident an SM (2,112 on the H200), so 32 sequences (4,096
programs) take 1.94 waves and 64 take 3.9; at 120, 17 an SM (2,244): 1.83 and 3.65. The local sm_90 compile (Triton
3.9) spills nothing at 120 (2000 SASS instructions against 1984); call 161 measured 112 / 96 / 80 (1.15-3.0x the
time), not 120. Variants: "base" (``gated_delta_rule.STREAM_ONE_MAXNREG = 128``), "c124", "c120". GDN one token,
bf16 state, packed decode: the bench, after a torch kernel ("-nb"), as a layer runs it; the agreement gate on each.
No library file changes: the cap is a module constant the launch reads.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call308-gdn-cap120.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
VARIANTS = ("base", "c124", "c120")


def setv(v):
    gdn.STREAM_ONE_MAXNREG = 128 if v == "base" else int(v[1:])


def case(k, pools="cloned"):
    return GDNCase(k[0], k[1], D["bf16"], D["bf16"], True, pools, 1)


sw = Sweep("ab-gdn-cap120")
for part in parts("g,g-nb,pairs"):
    if part == "g":
        sw.run_parts([part], [(16, 16), (9, 16), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256)],
                     VARIANTS, setv, case)
    elif part == "g-nb":
        sw.run_parts([part], [(16, 16), (32, 32), (64, 64)], VARIANTS, setv, case)
    elif part == "pairs":
        pair_sweep("conv+gdn bf16", ((16, 16), (32, 32), (64, 64), (128, 128)),
                   lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1), case((a, c))),
                   VARIANTS, setv, "gdn-cap120-pairs.json")
print("all done", flush=True)
