"""Issue 14, call 216 (H200): the SSU with an fp32 state, speculative rows (T = 2-4) at 8 requests, the bench's three
rows under 1.1x (1.058-1.067x in call 208; the copy floor 1.13-1.16x, call 53). Calls 113-123 tried 4- and 16-row
tiles then; since, the kernel changed (early store slots, the heads-first grid, the zigzag), and call 213 found one
of the conv's early rules stale. Variants: "oRwW" the tile pinned through ``mamba_ssm.launch_config_override`` (R
rows on W warps; the tree's at 8 is 8 rows on one warp), "noearly" the early state load off from 8 (on to 4 x 128
request-heads), "nodst" the early store slots off. Bench, then as a layer runs it (the conv, then the SSU).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call216-ssu-spec8.py
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
PINNED = {"base": None, "o4w1": (4, 1), "o8w2": (8, 2), "o16w1": (16, 1), "o16w2": (16, 2), "o32w2": (32, 2),
          "o32w4": (32, 4), "noearly": None, "nodst": None}
_early, _dst = ssu.EARLY_STATE_MAX_REQUEST_HEADS_MULTI_TOKEN, ssu.SPEC_EARLY_DST_MAX


def setv(v):
    ssu._override = None if PINNED[v] is None else ssu.LaunchConfig(*PINNED[v])
    ssu.EARLY_STATE_MAX_REQUEST_HEADS_MULTI_TOKEN = 4 * 128 if v == "noearly" else _early
    ssu.SPEC_EARLY_DST_MAX = 0 if v == "nodst" else _dst


VARIANTS = tuple(PINNED)
PARTS = parts("pairs,ssu")
if "pairs" in PARTS:
    for T in (2, 4):
        pair_sweep(f"conv+ssu fp32 T={T}", ((8, 8),),
                   lambda a, c, T=T: (ConvCase(a, c, D["bf16"], D["bf16"], False, "cloned", T),
                                      SSUCase(a, c, D["fp32"], D["bf16"], False, "cloned", T)),
                   VARIANTS, setv, f"ssu-spec8-pairs-t{T}.json")
CASES = [(2, 8), (3, 8), (4, 8), (4, 4), (4, 16)]
Sweep("ab-ssu-spec8").run_parts([p for p in PARTS if p != "pairs"], CASES, VARIANTS, setv,
                                lambda k: SSUCase(k[1], k[1], D["fp32"], D["bf16"], False, "cloned", k[0]))
print("all done", flush=True)
