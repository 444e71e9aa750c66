"""Issue 14, call 212 (H200): the GDN bf16 packed decode with some of the TMA kernel's CTAs reading their state
after PDL's wait (``issue14-call212-gdn-tma-defer.cu``: "d4" a quarter of them, the row block i_v == 3; "d2" half,
i_v >= 2; "d8" an eighth, i_v == 3 of the odd heads), so the bytes move while the rest wait on their token (call
211: the token's loads after the wait cost about 1 µs at 32-128). "base" is the tree (the Triton kernel from 17
requests, r32w1 from 4 to 16); "r32w1" the TMA kernel's shipped shape forced at every batch. Bench, after a torch
kernel ("-nb"), and as a layer runs it (the conv, then the GDN).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call212-gdn-tma-defer.py
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
DEFER = {"d4": T(32, 1, True, False, 1, 0, 95), "d2": T(32, 1, True, False, 1, 0, 96),
         "d8": T(32, 1, True, False, 1, 0, 97)}
tma.SOURCE = Path(__file__).resolve().with_suffix(".cu")
tma.SHAPES = tma.SHAPES + tuple(DEFER.values())
SHAPES = {"base": None, "r32w1": T(32, 1, True, False, 1), **DEFER}


def setv(v):
    tma.FORCE = SHAPES[v]


VARIANTS = tuple(SHAPES)
CASES = [(4, 4), (8, 8), (9, 16), (16, 16), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256)]
PARTS = parts("pairs,gdn,gdn-nb")
if "pairs" in PARTS:
    pair_sweep("conv+gdn bf16", ((8, 8), (16, 16), (32, 32), (64, 64), (128, 128)),
               lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                             GDNCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1)),
               VARIANTS, setv, "gdn-tma-defer-pairs.json")
Sweep("ab-gdn-tma-defer").run_parts(PARTS, CASES, VARIANTS, setv,
                                    lambda k: GDNCase(k[0], k[1], D["bf16"], D["bf16"], True, "cloned", 1))
print("all done", flush=True)
