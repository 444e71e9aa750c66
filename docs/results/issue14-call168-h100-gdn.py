"""Issue 14, call 168: the GDN one-token rules at batch 64-512 beside vLLM 0.33's packed decode, on the card the call
gets (the `nvidia-h200` kind gave an H100 in calls 166-167; there, at 8bbd42f's kernels, the recording put the GDN
0.2-1.5% behind vLLM in 14 rows at 128-512, bf16 and fp32 state). Variants, by state element size:

* bf16: "base" (the streaming kernel, its first block read before PDL's wait, at every batch from 16); "gen128" (the
  general kernel from 128 sequences: ``STREAM[2]``'s most 127); "noearly128" (the streaming kernel without the early
  block from 128: ``STREAM_EARLY_STATE[2]``'s most 127).
* fp32: "base" (the general kernel, its slot loaded with cu_seqlens' from 33: ``EARLY_INDEX[4]``); "noidx128" (not
  from 128).

Runs at the tree of calls 166-167 (the kernels of 8bbd42f); no rule changes.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call168-h100-gdn.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
BASE = dict(STREAM=dict(gdn.STREAM), STREAM_EARLY_STATE=dict(gdn.STREAM_EARLY_STATE), EARLY_INDEX=dict(gdn.EARLY_INDEX))


def setv(v):
    for name, value in BASE.items():
        setattr(gdn, name, dict(value))
    if v == "gen128":
        gdn.STREAM[2] = gdn.STREAM[2][:4] + (127,)
    elif v == "noearly128":
        gdn.STREAM_EARLY_STATE[2] = (gdn.STREAM_EARLY_STATE[2][0], 127) + gdn.STREAM_EARLY_STATE[2][2:]
    elif v == "noidx128":
        gdn.EARLY_INDEX[4] = (gdn.EARLY_INDEX[4][0], 127)


SWEEP = Sweep("ab-h100-gdn")
make = lambda k: GDNCase(k[2], k[3], D[k[0]], D[k[1]], True, "cloned", 1)  # noqa: E731
SWEEP.run("bf16", [("bf16", "bf16", b, b) for b in (64, 128, 256, 512)],
          {v: i for i, v in enumerate(("base", "gen128", "noearly128"))}, setv, make)
SWEEP.run("fp32", [("fp32", "bf16", b, b) for b in (128, 256, 512)],
          {v: i for i, v in enumerate(("base", "noidx128"))}, setv, make)
print("all done", flush=True)
