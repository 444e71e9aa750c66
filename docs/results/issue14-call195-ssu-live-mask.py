"""Issue 14, call 195 (H200): the SSU's one-token launch with the null-slot test as a mask (``LIVE_MASK``), not an
early return. A local sm_90 compile of the bf16 launch at batch 8 (16 rows, one warp, vLLM's H200 config there too)
showed the early return's branch on the loaded index holding every other load back: the index's round trip first,
then dt, B, C, x and only 5 of the 8 state loads, the last 3 after dt's arrival. vLLM's kernel masks the state with
the index test, so its inputs go out with the index. Alone under Nsight Compute (call 188) ours took 12.19 µs
there against vLLM's 10.62. Variants: "base" (the tree), "mask" (``mamba_ssm.LIVE_MASK_ONE_TOKEN``, the switch at
74f58cf, removed after this call: bf16 +0.6-1.7% at 8-16 in the bench, padded rows -3.7%, fp32 state up to -11%;
not under the early state load, batch <= 4 here).

SSU, ``A``/``dt`` per head, one token, bf16 activations; bf16 and fp32 state: the bench, after a torch kernel, and
layer pairs (the conv, then the SSU).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call195-ssu-live-mask.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ssu  # noqa: E402

D, BF = bench.DTYPES, bench.DTYPES["bf16"]
print("device", torch.cuda.get_device_name(), flush=True)


def setv(v):
    ssu.LIVE_MASK_ONE_TOKEN = v == "mask"


VARIANTS = ("base", "mask")
# (active, captured, state dtype)
SHAPES = [(b, b, s) for s in ("bf16", "fp32") for b in (8, 9, 16, 32, 64, 256)] + [
    (9, 16, "bf16"), (57, 64, "bf16"), (9, 16, "fp32")]
PARTS = parts("pairs,ssu,ssu-nb")
if "pairs" in PARTS:
    for s in ("bf16", "fp32"):
        shapes = tuple((a, c) for a, c, ss in SHAPES if ss == s and a in (8, 16, 64, 9))
        pair_sweep(f"conv+ssu {s}", shapes,
                   lambda a, c, s=s: (ConvCase(a, c, D[s], BF, False, "cloned", 1),
                                      SSUCase(a, c, D[s], BF, False, "cloned", 1)),
                   VARIANTS, setv, f"live-mask-pairs-{s}.json")
Sweep("ab-live-mask").run_parts(PARTS, SHAPES, VARIANTS, setv,
                                lambda k: SSUCase(k[0], k[1], D[k[2]], BF, False, "cloned", 1))
print("all done", flush=True)
