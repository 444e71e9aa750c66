"""Issue 14, call 211 (H200): where the GDN bf16 decode's last points at 32-128 go. The bench's back-to-back
launches of the TMA kernel's one-warp 32-row shape doing less than the decode (``issue14-call211-gdn-tma-diag.cu``:
"nomath" the state in by one bulk copy and back unchanged, "nomath_tok" that with the token's loads, "notoken" the
whole update on a constant token), the shipped shape held to 24 resident CTAs an SM by its registers ("minb24"), the
tree ("base": the Triton kernel from 17 requests) and the slot-copy floor in two shapes, beside vLLM's packed
decode. The diagnostic variants' results are wrong on purpose: their agreement gate fails; only their time is read.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call211-gdn-tma-diag.py
"""
import json
import os
import sys
from pathlib import Path

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import BUDGET, Sweep, parts  # noqa: E402
from mambalab.gpu import bench, copy_floor  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule_tma as tma  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
T = tma.TmaShape
DIAG = {"nomath": T(32, 1, True, False, 1, 0, 91), "nomath_tok": T(32, 1, True, False, 1, 0, 92),
        "notoken": T(32, 1, True, False, 1, 0, 93), "minb24": T(32, 1, True, False, 1, 0, 94)}
tma.SOURCE = Path(__file__).resolve().with_suffix(".cu")
tma.SHAPES = tma.SHAPES + tuple(DIAG.values())
SHAPES = {"base": None, "r32w1": T(32, 1, True, False, 1), **DIAG}
dev = torch.device("cuda", torch.cuda.current_device())
drv = tma._get_driver()
for name, shape in SHAPES.items():
    if shape is not None:
        fn = drv.function(dev, shape.entry)
        print(f"{name}: {drv.blocks_per_sm(fn, 32, tma.shape_smem(shape))} CTAs an SM", flush=True)


def setv(v):
    tma.FORCE = SHAPES[v]


CASES = [(32, 32), (64, 64), (128, 128)]
make = lambda k: GDNCase(k[0], k[1], D["bf16"], D["bf16"], True, "cloned", 1)  # noqa: E731
Sweep("ab-gdn-tma-diag").run_parts(parts("gdn"), CASES, tuple(SHAPES), setv, make)
floors = []
for key in CASES:
    case = make(key)
    for v in (copy_floor.SlotCopyVariant(4096, 1, True), copy_floor.SlotCopyVariant(2048, 4, True)):
        us = min(copy_floor.floor_times(case, BUDGET, [v])["slot"] for _ in range(2))
        floors.append(dict(key=key, variant=f"{v.block}x{v.num_warps}w-pdl", us=us))
        print(f"floor {key}: slot {v.block}x{v.num_warps}w-pdl {us:7.2f}", flush=True)
    del case
    torch.cuda.empty_cache()
with open(os.path.join(os.environ.get("OUT", "."), "ab-gdn-tma-diag-floor.json"), "w") as f:
    json.dump(floors, f, indent=0)
print("all done", flush=True)
