"""Issue 14, call 114, two parts.

``ssu``: the SSU's speculative step unrolled with the loads ahead (``mamba_ssm_kernels.SPEC_UNROLL``) at small batches,
where call 113 found it faster (batch 1, T = 4: 1.22 -> 1.52x of vLLM) while it lost from batch 8 up: "a1" token
t + 1's loads before token t's update, "a3" every token's loads first, against the token loop ("base").

``gdn``: the GDN's one-token streaming kernel at programs of 16 rows (``gated_delta_rule.STREAM``: rows a block x
blocks x stages; the rule's 8 x 4 x 4 is "base"), twice the programs of 32 rows for the partial last wave at batch
64 (8,192 programs against 3,168 resident), and 16-row blocks in pairs, bf16 state, beside vLLM.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT PARTS=ssu,gdn python3 docs/results/issue14-call114-small-spec-gdn-shapes.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import ALL, Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase, SSUCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402
from mambalab.kernels import mamba_ssm_kernels as mk  # noqa: E402

D = bench.DTYPES
mk.MAXNREG = {}  # as run: before the register caps of calls 117-119
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-small-spec-gdn-shapes")
STREAM = dict(gdn.STREAM)


def set_ssu(v):
    ahead = {"base": 0, "a1": 1, "a3": 3}[v]
    mk.SPEC_UNROLL = {4: (*ALL, ahead), 2: (*ALL, ahead)} if ahead else {}


def set_gdn(v):
    gdn.STREAM = STREAM if v == "base" else {**STREAM, 2: (*map(int, v[1:].split("x")), 16, 1 << 30)}


if "ssu" in parts("ssu,gdn"):
    cases = [(s, b, T) for s in ("bf16", "fp32") for b in (1, 2, 4) for T in (2, 3, 4)]
    SWEEP.run("ssu", cases, {"base": 0, "a1": 1, "a3": 2}, set_ssu,
              lambda k: SSUCase(k[1], k[1], D[k[0]], D["bf16"], False, "cloned", k[2], "head"))
if "gdn" in parts("ssu,gdn"):
    cases = [(a, c) for a, c in ((32, 32), (57, 64), (64, 64), (128, 128), (256, 256))]
    SWEEP.run("gdn", cases, {"base": 0, "s8x2x2": 1, "s4x4x4": 2, "s16x2x2": 3}, set_gdn,
              lambda k: GDNCase(k[0], k[1], D["bf16"], D["bf16"], True, "cloned", 1))
