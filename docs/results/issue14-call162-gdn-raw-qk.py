"""Issue 14, call 162: the GDN streaming kernel's one-token step with ``q``/``k`` left as loaded (``RAW_QK``): the
state's reductions ``h @ k`` and ``h @ q`` start as soon as ``q``/``k`` arrive, and the norms (and the scale) are
applied to the reductions' results and to the update's ``vn``, not to the vectors first. The local sm_90 compile: bf16
1,848 -> 1,808 SASS instructions at 128 registers; fp32 72 -> 64 registers. Variants (a launch wrapper sets
``RAW_QK`` on every streaming launch): "base", "raw". GDN bf16 and fp32 state (bf16 and fp32 activations) in both
harnesses (the bench's; after a torch kernel), then layer pairs (a torch kernel, the conv with its trigger, the packed
decode; the torch kernel subtracted).

Runs at the commit that adds ``RAW_QK`` (no rule uses it).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call162-gdn-raw-qk.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

import ab_sweep  # noqa: E402
from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402
from mambalab.lab import sanitizer  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
RAW = [False]
_launch = sanitizer.launch


def _with_raw(kernel, grid, *args, **kwargs):
    if RAW[0] and kernel is gdn._gdn_stream_kernel:
        kwargs["RAW_QK"] = True
    return _launch(kernel, grid, *args, **kwargs)


sanitizer.launch = _with_raw
VARIANTS = ("base", "raw")


def setv(v):
    RAW[0] = v == "raw"


CASES = ([("bf16", "bf16") + s for s in ((9, 16), (16, 16), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256))]
         + [("fp32", "bf16") + s for s in ((8, 8), (9, 9), (9, 16), (16, 16), (32, 32))]
         + [("fp32", "fp32") + s for s in ((9, 9), (16, 16), (32, 32))])
PARTS = parts("gdn,gdn-nb,pairs")
SWEEP = Sweep("ab-raw-qk")
for part in [p for p in PARTS if p != "pairs"]:
    ab_sweep.NEIGHBOUR[0] = part.endswith("-nb")
    SWEEP.run(part, CASES, {v: i for i, v in enumerate(VARIANTS)}, setv,
              lambda k: GDNCase(k[2], k[3], D[k[0]], D[k[1]], True, "cloned", 1))
if "pairs" in PARTS:
    for state, shapes in (("bf16", ((16, 16), (32, 32), (64, 64), (128, 128))), ("fp32", ((8, 8), (16, 16), (32, 32)))):
        pair_sweep(f"conv+gdn {state}", shapes,
                   lambda a, c, st=state: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                                           GDNCase(a, c, D[st], D["bf16"], True, "cloned", 1)),
                   VARIANTS, setv, f"raw-qk-pairs-{state}.json")
print("all done", flush=True)
