"""Issue 14, call 115: the rules of calls 113-114 confirmed, beside vLLM.

``ssu``: the speculative step unrolled with every load first (``mamba_ssm_kernels.SPEC_UNROLL`` as committed: bf16 up to
4 x 128 request x heads, fp32 up to 2 x 128), "rule", against the token loop ("base"), at batch 1-8 (8: outside the
rule, a control).

``gdn``: the one-token streaming kernel's shape for a bf16 state, "base" the rule's 8 rows x 4 blocks x 4 stages,
"s16x2x2" 16 x 2 x 2 (call 114: batch 32-128 +0.4-9%), "s16x2x3" the same with 3 stages, from batch 9 -> 16 to 512.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call115-confirm.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase, SSUCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402
from mambalab.kernels import mamba_ssm_kernels as mk  # noqa: E402

D = bench.DTYPES
mk.MAXNREG = {}  # as run: before the register caps of calls 117-119
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-confirm")
RULE, STREAM = dict(mk.SPEC_UNROLL), dict(gdn.STREAM)


def set_ssu(v):
    mk.SPEC_UNROLL = RULE if v == "rule" else {}


def set_gdn(v):
    gdn.STREAM = STREAM if v == "base" else {**STREAM, 2: (*map(int, v[1:].split("x")), 16, 1 << 30)}


if "ssu" in parts("ssu,gdn"):
    cases = [(s, a, b, T) for s, a in (("bf16", "bf16"), ("fp32", "bf16"), ("fp32", "fp32")) for b in (1, 2, 4, 8)
             for T in (2, 3, 4)]
    SWEEP.run("ssu", cases, {"base": 0, "rule": 1}, set_ssu,
              lambda k: SSUCase(k[2], k[2], D[k[0]], D[k[1]], False, "cloned", k[3], "head"))
if "gdn" in parts("ssu,gdn"):
    cases = [(a, c) for a, c in ((16, 16), (9, 16), (24, 24), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256),
                                 (512, 512))]
    SWEEP.run("gdn", cases, {"base": 0, "s16x2x2": 1, "s16x2x3": 2}, set_gdn,
              lambda k: GDNCase(k[0], k[1], D["bf16"], D["bf16"], True, "cloned", 1))
