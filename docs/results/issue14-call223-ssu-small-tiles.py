"""Issue 14, call 223 (H200): the SSU's tile at batch 1-4, where mambalab trails vLLM after a torch kernel (call 222:
with PDL off most of those rows are level, but fp32 state at batch 1 stays 0.69x and at 1-2 with fp32 activations
0.97-0.98x, bf16 with z at 1 0.94x, bf16 at 4 0.97x: there the kernel itself is slower than vLLM's when its start
does not overlap the launch before). The tiles were chosen in the bench (calls 71, 74, 143, 179, 197), where the
early state load overlaps the previous launch. Variants: "oRwW" the tile pinned through ``mamba_ssm._override`` (R
rows of the head dim on W warps; the tree at 1 is 8 rows on 1 warp for an fp32 state, 16 on 1 for bf16). After a
torch kernel ("-nb"), the bench, and as a layer runs it (the conv, then the SSU). A tile is worth taking only where it
is not behind in any of the three.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call223-ssu-small-tiles.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ssu  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
PINNED = {"base": None, "o4w1": (4, 1), "o8w1": (8, 1), "o16w1": (16, 1), "o16w2": (16, 2), "o32w2": (32, 2),
          "o32w4": (32, 4), "o64w4": (64, 4)}


def setv(v):
    ssu._override = None if PINNED[v] is None else ssu.LaunchConfig(*PINNED[v])


VARIANTS = tuple(PINNED)
PARTS = parts("ssu-nb,ssu,pairs")
# (state, act, z, batch): the one-token rows call 222 left behind vLLM after a torch kernel with PDL off, and beside
ROWS = [("fp32", "bf16", False, 1), ("fp32", "bf16", False, 2), ("fp32", "bf16", True, 1), ("fp32", "fp32", False, 1),
        ("fp32", "fp32", False, 2), ("bf16", "bf16", False, 1), ("bf16", "bf16", True, 1), ("bf16", "bf16", False, 4)]
Sweep("ab-ssu-small-tiles").run_parts([p for p in PARTS if p != "pairs"], ROWS, VARIANTS, setv,
                                      lambda k: SSUCase(k[3], k[3], D[k[0]], D[k[1]], k[2], "cloned", 1))
if "pairs" in PARTS:
    for state in ("fp32", "bf16"):
        pair_sweep(f"conv+ssu {state}", ((1, 1), (2, 2), (4, 4)),
                   lambda a, c, s=state: (ConvCase(a, c, D["bf16"], D["bf16"], False, "cloned", 1),
                                          SSUCase(a, c, D[s], D["bf16"], False, "cloned", 1)),
                   VARIANTS, setv, f"ssu-small-tiles-pairs-{state}.json")
print("all done", flush=True)
