"""Issue 14, call 214 (H200): call 213's finding checked wider before a rule changes. Call 213: the conv's window
kernel for an fp32 state with rows of 3-4 tokens ran faster from 128 requests with the narrow block (256 channels a
program on 4 warps, "b256") than with the wide one the rule gives there (512 channels, "base"): T = 4 at 128 / 256 /
512 1.201 / 1.093 / 1.109 -> 1.256 / 1.134 / 1.128x, T = 3 1.239 / 1.160 / 1.164 -> 1.350 / 1.198 / 1.184x. Here
"b256" against "base", "w8" (512 channels on 8 warps), "b256m2" (256 channels, the trigger after the state's stores
from 128 too), in the bench at 64-512 and 257 -> 272, and as a layer runs them: the conv, then the SSU or the GDN
with the same speculative rows (fp32 state, bf16 activations), where the conv's trigger lets its follower start.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call214-conv-wide2.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase, SSUCase  # noqa: E402
from mambalab.kernels import causal_conv1d as cv  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
_config, _mode = cv.window_launch_config, cv.window_pdl_mode
V = {"base": None, "b256": (256, 4, None), "w8": (512, 8, None), "b256m2": (256, 4, 2)}


def setv(v):
    pick = V[v]
    if pick is None:
        cv.window_launch_config, cv.window_pdl_mode = _config, _mode
        return

    def config(dim, batch, max_t, es):
        if cv._window_wide(batch, max_t, es):
            return min(pick[0], 1 << (dim - 1).bit_length()), pick[1]
        return _config(dim, batch, max_t, es)

    def mode(batch, max_t, es):
        if pick[2] is not None and cv._window_wide(batch, max_t, es):
            return pick[2]
        return _mode(batch, max_t, es)

    cv.window_launch_config, cv.window_pdl_mode = config, mode


VARIANTS = tuple(V)
PARTS = parts("pairs,win")
if "pairs" in PARTS:
    for T in (3, 4):
        for name, follower in (("ssu", SSUCase), ("gdn", GDNCase)):
            pair_sweep(f"conv+{name} fp32 T={T}", ((64, 64), (128, 128), (256, 256)),
                       lambda a, c, T=T, f=follower: (ConvCase(a, c, D["fp32"], D["fp32"], False, "cloned", T),
                                                      f(a, c, D["fp32"], D["bf16"], False, "cloned", T)),
                       VARIANTS, setv, f"conv-wide2-pairs-{name}-t{T}.json")
CASES = [(T, a, c) for T in (3, 4) for a, c in ((64, 64), (96, 96), (128, 128), (256, 256), (257, 272),
                                                 (512, 512))]
Sweep("ab-conv-wide2").run_parts([p for p in PARTS if p != "pairs"], CASES, VARIANTS, setv,
                                 lambda k: ConvCase(k[1], k[2], D["fp32"], D["fp32"], False, "cloned", k[0]))
print("all done", flush=True)
