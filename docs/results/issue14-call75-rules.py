"""Issue 14, call 75: the SSU's rules re-measured under the heads-first grid (this tree), beside vLLM:
(1) ``A``/``dt`` per element, bf16 state, several requests a program (``UNTIED_REQS``): "base" shipped (4 requests to
batch 64, 2 above), "r4" 4 everywhere, "r2" 2 everywhere, "r2x16" 2 on 16-row tiles; fp32 "f4" 4 requests at batch 8;
(2) bf16 one token at batch 8-16: "nopf" without the L2 hint (``PREFETCH_STATE``), "s8" 8-row tiles;
(3) fp32 one token at batch 3-6: "e2" the early state load only up to 2 x 128 request-heads (4 x 128 shipped).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call75-rules.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402
from mambalab.kernels import mamba_ssm_untied as mu  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-rules")
REQS, PF, TIED, EMAX = dict(mu.UNTIED_REQS), dict(ms.PREFETCH_STATE), dict(ms.BLOCK_M_TIED), ms.EARLY_STATE_MAX_REQUEST_HEADS
ALL = 1 << 30


def setv(v):
    mu.UNTIED_REQS = {"r4": {**REQS, 2: [(4, 8 * 128, ALL, 0)]}, "r2": {**REQS, 2: [(2, 8 * 128, ALL, 0)]},
                      "r2x16": {**REQS, 2: [(2, 8 * 128, ALL, 16)]},
                      "f4": {**REQS, 4: [(4, 8 * 128, 16 * 128 - 1, 4)]}}.get(v, REQS)
    ms.PREFETCH_STATE = {} if v == "nopf" else PF
    ms.BLOCK_M_TIED = {**TIED, 2: 8} if v == "s8" else TIED
    ms.EARLY_STATE_MAX_REQUEST_HEADS = 2 * 128 if v == "e2" else EMAX


P = parts("untied,bf16,fp32")
if "untied" in P:
    cases = [("bf16", b) for b in (8, 16, 64, 256, 512)] + [("fp32", 8)]
    SWEEP.run("untied", cases, {"base": 0, "r4": 1, "r2": 2, "r2x16": 3, "f4": 4}, setv,
              lambda k: SSUCase(k[1], k[1], D[k[0]], D["bf16"], False, "cloned", 1, "element"))
if "bf16" in P:
    cases = [(z, b) for z in (False, True) for b in (8, 9, 16)]
    SWEEP.run("bf16", cases, {"base": 0, "nopf": 1, "s8": 2}, setv,
              lambda k: SSUCase(k[1], k[1], D["bf16"], D["bf16"], k[0], "cloned", 1, "head"))
if "fp32" in P:
    cases = [(a, z, b) for a, z in (("bf16", False), ("fp32", False), ("bf16", True)) for b in (3, 4, 6)]
    SWEEP.run("fp32", cases, {"base": 0, "e2": 1}, setv,
              lambda k: SSUCase(k[2], k[2], D["fp32"], D[k[0]], k[1], "cloned", 1, "head"))
