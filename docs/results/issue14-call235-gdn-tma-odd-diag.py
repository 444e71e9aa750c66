"""Issue 14, call 235 (H200): where the 2.8 us at 64 between the GDN bf16's TMA kernel in the floor's fastest shape
(call 233's "r16o": one warp, 16 rows, the odd row blocks' state after PDL's wait) and the token floor in that shape
(call 234) go. The bench's back-to-back launches of that shape doing less than the decode
(``issue14-call235-gdn-tma-odd-diag.cu``: "nomath", "nomath_tok", "notoken", "regs"), beside r16o, the tree ("base")
and the floor (a slot copy of 2048 elements on one warp, its stores waiting on a token, the odd blocks after the
wait), and vLLM's packed decode. The diagnostic variants' results are wrong on purpose (their agreement gate fails);
only their time is read.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call235-gdn-tma-odd-diag.py
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


class Odd(tma.TmaShape):
    """Call 233's one-warp CTAs, the odd row blocks' state after PDL's wait."""
    __slots__ = ()

    @property
    def entry(self) -> str:
        return f"gdn_tma_r{self.rows}_w1_odd"


T = tma.TmaShape
DIAG = {"nomath": T(16, 1, True, False, 1, 0, 81), "nomath_tok": T(16, 1, True, False, 1, 0, 82),
        "notoken": T(16, 1, True, False, 1, 0, 83), "regs": T(16, 1, True, False, 1, 0, 84)}
R16O = Odd(16, 1, True, False, 1, 0, -1)
tma.SOURCE = Path(__file__).resolve().with_suffix(".cu")
tma.SHAPES = tma.SHAPES + (T(16, 1, True, False, 1), R16O, Odd(32, 1, True, False, 1, 0, -1)) + tuple(DIAG.values())
SHAPES = {"base": None, "r16o": R16O, **DIAG}
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
Sweep("ab-gdn-tma-odd-diag").run_parts(parts("gdn"), CASES, tuple(SHAPES), setv, make)
floors = []
for key in CASES:
    case = make(key)
    v = copy_floor.SlotCopyVariant(2048, 1, True, True, True)
    us = min(copy_floor.floor_times(case, BUDGET, [v])["slot"] for _ in range(2))
    floors.append(dict(key=key, variant=v.name, us=us))
    print(f"floor {key}: slot {v.name} {us:7.2f}", flush=True)
    del case
    torch.cuda.empty_cache()
with open(os.path.join(os.environ.get("OUT", "."), "ab-gdn-tma-odd-diag-floor.json"), "w") as f:
    json.dump(floors, f, indent=0)
print("all done", flush=True)
