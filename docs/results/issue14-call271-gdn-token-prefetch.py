"""Issue 14, call 271 (H200): the GDN streaming kernel's token after PDL's wait. Compiled for sm_90 (scripts/
kernel_resources.py), ptxas issues v's load (fp32 and bf16 state) only after the gates' exp or the q norm: the early
state's loads hold most of the warp's six scoreboards, so v, issued once one frees, costs a second round trip before
the first store. Variants, on every streaming launch with the early blocks:
  "vp":   v's rows and the gates' a / b asked of L1 (``prefetch.global.L1``) right after the wait
          (``gated_delta_rule.STREAM_V_PREFETCH``, the kernel's V_PREFETCH);
  "pe":   A_log and dt_bias (weights) read before the wait (``STREAM_PARAMS_EARLY``, the kernel's PARAMS_EARLY);
  "vppe": both.
GDN one token, packed decode as the layer calls it, in the bench's harness, after a torch kernel ("-nb"), then
layer pairs (the conv with its trigger, then the GDN); the agreement gate on each.

Runs at 019756c, the commit with the switches (STREAM_V_PREFETCH / STREAM_PARAMS_EARLY); the next commit takes them out (not taken).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call271-gdn-token-prefetch.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
VARIANTS = ("base", "vp", "pe", "vppe")


def setv(v):
    gdn.STREAM_V_PREFETCH = frozenset({2, 4}) if "vp" in v else frozenset()
    gdn.STREAM_PARAMS_EARLY = frozenset({2, 4}) if "pe" in v else frozenset()


BF = [("bf16", "bf16") + s for s in ((9, 16), (16, 16), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256),
                                    (512, 512))]
FP = [("fp32", "bf16") + s for s in ((8, 8), (9, 16), (16, 16), (32, 32))] + [("fp32", "fp32") + s for s in
                                                                              ((16, 16), (32, 32))]
sw = Sweep("ab-gdn-token-prefetch")
for part in parts("gdn,gdn-nb,pairs"):
    if part in ("gdn", "gdn-nb"):
        cases = BF + FP if part == "gdn" else [c for c in BF + FP if c[3] <= 64]
        sw.run_parts([part], cases, VARIANTS, setv,
                     lambda k: GDNCase(k[2], k[3], D[k[0]], D[k[1]], True, "cloned", 1))
    elif part == "pairs":
        for state, shapes in (("bf16", ((16, 16), (32, 32), (64, 64), (128, 128))), ("fp32", ((16, 16), (32, 32)))):
            pair_sweep(f"conv+gdn {state}", shapes,
                       lambda a, c, st=state: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                                               GDNCase(a, c, D[st], D["bf16"], True, "cloned", 1)),
                       VARIANTS, setv, f"gdn-token-prefetch-pairs-{state}.json")
print("all done", flush=True)
