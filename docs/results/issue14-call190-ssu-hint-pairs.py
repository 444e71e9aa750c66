"""Issue 14, call 190: the SSU's bf16 L2 hint before PDL's wait (``PREFETCH_STATE``) at 16-512, with and without, in
the bench, after a torch kernel, and as layer pairs (a torch kernel, the conv with its trigger, the SSU; the torch
kernel subtracted): call 189 found it losing 2% in the layer at batch 8 while gaining 4% in the bench. Variants
"base", "nohint". SSU, ``A``/``dt`` per head, one token, ``z=None``, bf16 state and activations. Tree of call 189.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call190-ssu-hint-pairs.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

import ab_sweep  # noqa: E402
from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ssu  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
HINT = dict(ssu.PREFETCH_STATE)


def setv(v):
    ssu.PREFETCH_STATE.clear()
    if v == "base":
        ssu.PREFETCH_STATE.update(HINT)


VARIANTS = ("base", "nohint")
BATCHES = (16, 64, 256, 512)
PARTS = parts("pairs,ssu,ssu-nb")
if "pairs" in PARTS:
    pair_sweep("conv+ssu bf16", tuple((b, b) for b in BATCHES),
               lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], False, "cloned", 1),
                             SSUCase(a, c, D["bf16"], D["bf16"], False, "cloned", 1)),
               VARIANTS, setv, "ssu-hint-pairs.json")
SWEEP = Sweep("ab-ssu-hint")
for part in [p for p in PARTS if p != "pairs"]:
    ab_sweep.NEIGHBOUR[0] = part.endswith("-nb")
    SWEEP.run(part, BATCHES, {v: i for i, v in enumerate(VARIANTS)}, setv,
              lambda b: SSUCase(b, b, D["bf16"], D["bf16"], False, "cloned", 1))
print("all done", flush=True)
