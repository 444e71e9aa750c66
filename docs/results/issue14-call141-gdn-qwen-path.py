"""Issue 14, call 141: the GDN rows against the kernels vLLM 0.33's Qwen3-Next layer runs (call 140 found its
``fused_recurrent_gated_delta_rule_packed_decode`` 1.03-2.8x faster than the ``fused_recurrent_gated_delta_rule`` the
bench had compared against): ``bench_cases.GDNCase`` now calls the packed decode (one token) and
``fused_sigmoid_gating_delta_rule_update`` (speculative), ours and vLLM's, the gates computed in the kernel.
Variants of ours: "base" as at this tree (the streaming kernels with the gates in them); "bv4" the general kernel at
4 rows a program for 1-2 sequences (call 140: bf16 / fp32 at 2 +8-33%); "nopdl" no PDL; "early16" the streaming
kernel's early blocks for a bf16 state too. In the bench's harness and after a torch kernel that does not trigger
PDL ("-nb", ``ab_sweep.NEIGHBOUR``).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call141-gdn-qwen-path.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

import ab_sweep  # noqa: E402
from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-qwen-path")
PDL, LAUNCH, EARLY = gdn.use_pdl, gdn.launch_config, dict(gdn.STREAM_EARLY_STATE)


def small_bv(K, V, HV, N, es, num_sms=132, multi_token=False):
    bk, bv, nw = LAUNCH(K, V, HV, N, es, num_sms, multi_token=multi_token)
    return (bk, 4, nw) if N <= 2 and not multi_token else (bk, bv, nw)


def setv(v):
    gdn.use_pdl = PDL if v != "nopdl" else (lambda device: False)
    gdn.launch_config = small_bv if v == "bv4" else LAUNCH
    gdn.STREAM_EARLY_STATE = {**EARLY, **({2: (1, 1 << 30, False)} if v == "early16" else {})}


CASES = [(s, a, c, 1) for s in ("bf16", "fp32") for a, c in (
    (1, 1), (2, 2), (4, 4), (8, 8), (9, 16), (16, 16), (32, 32), (57, 64), (64, 64), (128, 128), (512, 512))] + [
    (s, b, b, T) for s in ("bf16", "fp32") for b in (1, 8, 64) for T in (2, 4)]
for part in parts("gdn-nb,gdn"):
    ab_sweep.NEIGHBOUR[0] = part.endswith("-nb")
    SWEEP.run(part, CASES, {"base": 0, "bv4": 1, "nopdl": 2, "early16": 3}, setv,
              lambda k: GDNCase(k[1], k[2], D[k[0]], D["bf16"], True, "cloned", k[3]))
print("all done", flush=True)
