"""Issue 14, call 142: the GDN's bf16 one-token rows around 16 against vLLM's packed decode (call 141: 9 -> 16 0.956x
in the bench's harness, 0.947x after a torch kernel). Variants of ours at this tree (the 2-sequence rule of 4 rows
taken): "base"; "gen16" the general kernel up to 16 sequences (the streaming kernel from 17); "zz16" the streaming
kernel's sequences zigzagged (``ZIGZAG_STREAM``, padded rows among the live ones). Both harnesses.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call142-gdn-padded16.py
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
SWEEP = Sweep("ab-padded16")
STREAM = dict(gdn.STREAM)


def setv(v):
    gdn.STREAM = {**STREAM, 2: STREAM[2][:3] + (17, STREAM[2][4])} if v == "gen16" else STREAM
    gdn.ZIGZAG_STREAM = v == "zz16"


CASES = [("bf16", a, c) for a, c in ((2, 2), (8, 8), (9, 16), (16, 16), (17, 32), (32, 32), (57, 64), (64, 64),
                                     (257, 272))] + [("fp32", 2, 2), ("fp32", 9, 16)]
for part in parts("gdn-nb,gdn"):
    ab_sweep.NEIGHBOUR[0] = part.endswith("-nb")
    SWEEP.run(part, CASES, {"base": 0, "gen16": 1, "zz16": 2}, setv,
              lambda k: GDNCase(k[1], k[2], D[k[0]], D["bf16"], True, "cloned", 1))
print("all done", flush=True)
