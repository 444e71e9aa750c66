"""Issue 14, call 184: the GDN streaming kernel's bf16 one-token launch (both harnesses' 16-256 sequences, read early
under PDL) with more warps a program, so that more of the state is read before PDL's wait on an SM than one-warp
programs at ptxas' cap of 128 registers allow. The tree: 32 rows a program on 1 warp, the first 16-row block read
early (``EARLY_ONE``), 128 registers: 16 programs an SM, 64 KiB read early an SM. Variants (a launch wrapper rewrites
the streaming kernel's bf16 launches; registers from a local sm_90 compile, Triton 3.9):

* "w2b": 2 warps, both blocks early (103 registers, 9 programs an SM, 72 KiB early);
* "w4b": 4 warps, both blocks early (72 registers, 7 programs, 56 KiB);
* "w4b64": 64 rows a program (blocks of 32), 4 warps, both early (96 registers, 5 programs, 80 KiB);
* "w2o": 2 warps, the first block early (96 registers, 10 programs, 40 KiB).

GDN bf16 state and activations in both harnesses (the bench's; after a torch kernel), then layer pairs (a torch
kernel, the conv with its trigger, the packed decode; the torch kernel subtracted). Runs at the tree of d80f63f.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call184-gdn-warps.py
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
print("device", torch.cuda.get_device_name(), "triton", __import__("triton").__version__, flush=True)
# variant -> (warps, first block only, rows a block)
SHAPES = {"base": None, "w2b": (2, False, 16), "w4b": (4, False, 16), "w4b64": (4, False, 32), "w2o": (2, True, 16)}
CUR = ["base"]
REGS = {}
_launch = sanitizer.launch


def _warps(kernel, grid, *args, **kwargs):
    shape = SHAPES[CUR[0]]
    if shape and kernel is gdn._gdn_stream_kernel and kwargs.get("EARLY_ONE"):
        warps, one, rb = shape
        kwargs = dict(kwargs, num_warps=warps, EARLY_ONE=one, RB=rb)
        kwargs.pop("maxnreg", None)
        grid = (-(-kwargs["V"] // (rb * kwargs["NB"])),) + tuple(grid[1:])
        compiled = _launch(kernel, grid, *args, **kwargs)
        REGS.setdefault(CUR[0], (getattr(compiled, "n_regs", "?"), getattr(compiled, "n_spills", "?")))
        return compiled
    return _launch(kernel, grid, *args, **kwargs)


sanitizer.launch = _warps


def setv(v):
    CUR[0] = v


VARIANTS = tuple(SHAPES)
CASES = [("bf16", "bf16") + s for s in ((9, 16), (16, 16), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256))]
PARTS = parts("gdn,gdn-nb,pairs")
SWEEP = Sweep("ab-warps")
for part in [p for p in PARTS if p != "pairs"]:
    ab_sweep.NEIGHBOUR[0] = part.endswith("-nb")
    SWEEP.run(part, CASES, {v: i for i, v in enumerate(VARIANTS)}, setv,
              lambda k: GDNCase(k[2], k[3], D[k[0]], D[k[1]], True, "cloned", 1))
    print("registers, spills", REGS, flush=True)
if "pairs" in PARTS:
    pair_sweep("conv+gdn bf16", ((16, 16), (32, 32), (64, 64), (128, 128)),
               lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                             GDNCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1)),
               VARIANTS, setv, "warps-pairs-bf16.json")
print("all done", flush=True)
