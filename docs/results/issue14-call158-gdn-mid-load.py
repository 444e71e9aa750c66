"""Issue 14, call 158: the GDN's bf16 streaming kernel with its second block's load issued between the first block's
arithmetic (its output stored) and the first block's state store (``MID_LOAD``), not after that store (``EARLY_ONE``
alone, the rule at 99b0949). The local sm_90 compile: 130 registers (128 with ``EARLY_ONE`` alone), so 15 programs an
SM not 16; under ptxas' cap of 128 no spill, 16 more instructions. Variants (passed by a launch wrapper to every
streaming launch with ``EARLY_ONE``): "base"; "mid"; "mid128" (``MID_LOAD`` and ``maxnreg=128``). The GDN alone in both
harnesses (the bench's; after a torch kernel), then layer pairs (a torch kernel, the conv with its trigger, the packed
decode; the torch kernel subtracted).

Runs at the commit that adds ``MID_LOAD`` (its parent: f9a3cd2).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call158-gdn-mid-load.py
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
bench._vllm_path()
MODE = ["base"]
_launch = sanitizer.launch


def _with_mid(kernel, grid, *args, **kwargs):
    if MODE[0] != "base" and kernel is gdn._gdn_stream_kernel and kwargs.get("EARLY_ONE"):
        kwargs["MID_LOAD"] = True
        if MODE[0] == "mid128":
            kwargs["maxnreg"] = 128
    return _launch(kernel, grid, *args, **kwargs)


sanitizer.launch = _with_mid
VARIANTS = ("base", "mid", "mid128")


def setv(v):
    MODE[0] = v


SHAPES = ((9, 16), (16, 16), (17, 32), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256), (512, 512))
PARTS = parts("gdn,gdn-nb,pairs")
SWEEP = Sweep("ab-mid-load")
for part in [p for p in PARTS if p != "pairs"]:
    ab_sweep.NEIGHBOUR[0] = part.endswith("-nb")
    SWEEP.run(part, [("bf16",) + s for s in SHAPES], {v: i for i, v in enumerate(VARIANTS)}, setv,
              lambda k: GDNCase(k[1], k[2], D[k[0]], D["bf16"], True, "cloned", 1))

if "pairs" in PARTS:
    pair_sweep("conv+gdn bf16", ((9, 16), (16, 16), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256)),
               lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                             GDNCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1)),
               VARIANTS, setv, "mid-load-pairs.json")
print("all done", flush=True)
