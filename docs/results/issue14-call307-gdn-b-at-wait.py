"""Issue 14, call 307 (H200): where the GDN bf16 streaming kernel's second block is loaded. Under ``EARLY_ONE`` (bf16
from 16 sequences) a program reads its first 16-row block with its slot, before PDL's wait, and its second between
the first block's output and its state store (call 158: 1-4% over loading it after that store). Call 303 found that
the first wave's wait for its token is not a trip to memory; what it waits out is the chain after the wait (the
token's loads, norms, gates, reductions), while no state moves. Loading the second block at the wait puts that
block's fetch under the chain:
  "bw1": the second block's load written right after the wait (``gated_delta_rule.STREAM_B_AT_WAIT = {2: 1}``; ptxas
         places its loads among the first block's arithmetic: 1912 SASS instructions against 1984, 128 registers);
  "bw2": the same, then a fence (``tl.debug_barrier``, a one-warp ``BAR.SYNC``), so its 8 loads issue right after the
         wait, before the token's (1936 instructions, 128 registers, no spill; local sm_90 compile, Triton 3.9).
GDN one token, bf16 state, packed decode as the layer calls it: the bench, after a torch kernel ("-nb"), and as a
layer runs it (the conv, then the GDN); the agreement gate on each.

Runs at e8396ac, the commit with the switch (off by default).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call307-gdn-b-at-wait.py
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
VARIANTS = ("base", "bw1", "bw2")


def setv(v):
    gdn.STREAM_B_AT_WAIT = {2: int(v[2])} if v != "base" else {}


def case(k, pools="cloned"):
    return GDNCase(k[0], k[1], D["bf16"], D["bf16"], True, pools, 1)


sw = Sweep("ab-gdn-b-at-wait")
for part in parts("g,gfresh,g-nb,pairs"):
    if part == "g":
        sw.run_parts([part], [(16, 16), (9, 16), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256), (512, 512)],
                     VARIANTS, setv, case)
    elif part == "gfresh":
        sw.run_parts([part], [(64, 64)], VARIANTS, setv, lambda k: case(k, "fresh"))
    elif part == "g-nb":
        sw.run_parts([part], [(16, 16), (9, 16), (32, 32), (64, 64)], VARIANTS, setv, case)
    elif part == "pairs":
        pair_sweep("conv+gdn bf16", ((9, 16), (16, 16), (32, 32), (64, 64), (128, 128), (256, 256)),
                   lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1), case((a, c))),
                   VARIANTS, setv, "gdn-b-at-wait-pairs.json")
print("all done", flush=True)
