"""Issue 14, call 150: an L2 hint for the GDN streaming kernel's state rows as soon as its slot is known
(``gated_delta_rule.STREAM_PREFETCH``, ``kernels.common.prefetch_rows_l2``): the state's DRAM fetch overlaps q/k's
round trip (without PDL, as after the torch ops before the GDN layer's kernel) or the previous kernel's tail (under
PDL). bf16 state, one token, against vLLM's packed decode. Variants: "base"; "pf1" plain hint from 16 sequences;
"pf2" L2::evict_last; "pf1p" plain under PDL; "pf1-9" plain, the streaming kernel from 9 sequences. Both harnesses.
Not taken: the switch exists at e492aa7 only, so run the script there.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call150-gdn-prefetch.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

import ab_sweep  # noqa: E402
from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-prefetch")
STREAM = dict(gdn.STREAM)
RULES = {"base": {}, "pf1": {2: (1, 1, 1 << 30, False)}, "pf2": {2: (2, 1, 1 << 30, False)},
         "pf1p": {2: (1, 1, 1 << 30, True)}, "pf1-9": {2: (1, 1, 1 << 30, False)}}


def setv(v):
    gdn.STREAM_PREFETCH = RULES[v]
    gdn.STREAM = {**STREAM, 2: STREAM[2][:3] + (9, STREAM[2][4])} if v == "pf1-9" else STREAM


CASES = [("bf16", a, c) for a, c in ((8, 8), (9, 9), (9, 16), (16, 16), (17, 32), (32, 32), (57, 64), (64, 64),
                                     (128, 128), (256, 256), (257, 272), (512, 512))]
for part in parts("gdn-nb,gdn"):
    ab_sweep.NEIGHBOUR[0] = part.endswith("-nb")
    SWEEP.run(part, CASES, {v: i for i, v in enumerate(RULES)}, setv,
              lambda k: GDNCase(k[1], k[2], D[k[0]], D["bf16"], True, "cloned", 1))
print("all done", flush=True)
