"""Issue 14, calls 168-170: the GDN one-token rules at batch 64-512 beside vLLM 0.33's packed decode, on the card the call
gets (the `nvidia-h200` kind gave an H100 in calls 166-167; there, at 8bbd42f's kernels, the recording put the GDN
0.2-1.5% behind vLLM in 14 rows at 128-512, bf16 and fp32 state). Variants, by state element size:

* bf16: "base" (the streaming kernel, its first block read before PDL's wait, at every batch from 16); "gen128" (the
  general kernel from 128 sequences: ``STREAM[2]``'s most 127); "noearly128" (the streaming kernel without the early
  block from 128: ``STREAM_EARLY_STATE[2]``'s most 127).
* fp32: "base" (the general kernel, its slot loaded with cu_seqlens' from 33: ``EARLY_INDEX[4]``); "noidx128" (not
  from 128).

Call 169 (``PARTS=wide``): the general kernel from 128 (bf16 as "gen128") with 2 or 4 warps a program
(``_NUM_WARPS``) and twice the state a program (``_STATE_BYTES_BY_ELEMENT_SIZE``), bf16 and fp32.

Call 170 (``PARTS=bf16-gen``): bf16's general kernel from 128 with half the state a program ("gen128h"), its rows
in one piece (``SPLIT_BY_ELEMENT_SIZE``: "gen128s1"; two by default; the kernel takes one or two, so four, tried
first, did not compile).

Runs at the tree of calls 166-167 (the kernels of 8bbd42f); no rule changes.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call168-h100-gdn.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
BASE = dict(STREAM=dict(gdn.STREAM), STREAM_EARLY_STATE=dict(gdn.STREAM_EARLY_STATE), EARLY_INDEX=dict(gdn.EARLY_INDEX),
            _STATE_BYTES_BY_ELEMENT_SIZE=dict(gdn._STATE_BYTES_BY_ELEMENT_SIZE),
            SPLIT_BY_ELEMENT_SIZE=dict(gdn.SPLIT_BY_ELEMENT_SIZE))


def setv(v):
    for name, value in BASE.items():
        setattr(gdn, name, dict(value))
    gdn._NUM_WARPS = 1
    if v in ("gen128h", "gen128s1"):
        gdn.STREAM[2] = gdn.STREAM[2][:4] + (127,)
        if v == "gen128h":
            gdn._STATE_BYTES_BY_ELEMENT_SIZE = {4: 4096, 2: 4096}
        else:
            gdn.SPLIT_BY_ELEMENT_SIZE = {2: int(v[-1])}
    elif v.startswith("gen128") and v != "gen128":  # gen128w2 / gen128w4 / gen128x2 (twice the bytes) / gen128x2w2
        gdn.STREAM[2] = gdn.STREAM[2][:4] + (127,)
        gdn._NUM_WARPS = int(v[-1]) if "w" in v else 1
        if "x2" in v:
            gdn._STATE_BYTES_BY_ELEMENT_SIZE = {k: 2 * b for k, b in BASE["_STATE_BYTES_BY_ELEMENT_SIZE"].items()}
    elif v == "gen128":
        gdn.STREAM[2] = gdn.STREAM[2][:4] + (127,)
    elif v == "noearly128":
        gdn.STREAM_EARLY_STATE[2] = (gdn.STREAM_EARLY_STATE[2][0], 127) + gdn.STREAM_EARLY_STATE[2][2:]
    elif v == "noidx128":
        gdn.EARLY_INDEX[4] = (gdn.EARLY_INDEX[4][0], 127)


SWEEP = Sweep("ab-h100-gdn")
make = lambda k: GDNCase(k[2], k[3], D[k[0]], D[k[1]], True, "cloned", 1)  # noqa: E731
PARTS = parts("bf16,fp32")
if "bf16" in PARTS:
    SWEEP.run("bf16", [("bf16", "bf16", b, b) for b in (64, 128, 256, 512)],
              {v: i for i, v in enumerate(("base", "gen128", "noearly128"))}, setv, make)
if "fp32" in PARTS:
    SWEEP.run("fp32", [("fp32", "bf16", b, b) for b in (128, 256, 512)],
              {v: i for i, v in enumerate(("base", "noidx128"))}, setv, make)
if "wide" in PARTS:  # the general kernel (fp32 takes it from 33 already; gen128's STREAM change is bf16's only)
    SWEEP.run("wide", [(st, "bf16", b, b) for st in ("bf16", "fp32") for b in (128, 256, 512)],
              {v: i for i, v in enumerate(("base", "gen128", "gen128w2", "gen128w4", "gen128x2", "gen128x2w2"))},
              setv, make)
if "bf16-gen" in PARTS:
    SWEEP.run("bf16-gen", [("bf16", "bf16", b, b) for b in (128, 256, 512)],
              {v: i for i, v in enumerate(("base", "gen128", "gen128h", "gen128s1"))}, setv, make)
print("all done", flush=True)
