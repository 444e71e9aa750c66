"""Issue 14, call 113: the SSU's speculative step with its tokens unrolled and the loads ahead
(``mamba_ssm_kernels.SPEC_UNROLL``, ``mamba_ssm_spec.py``) against the token loop ("base"), beside vLLM, on the speculative
rows that missed 1.1x in call 108's recording and a few that met it. "a1": token t + 1's loads before token t's
update; "a3": every token's loads first; "a1r8": "a1" on 8-row tiles for a bf16 state (16 in the others: fewer
registers for the loads held ahead).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call113-spec-unroll.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import ALL, Sweep  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402
from mambalab.kernels import mamba_ssm_kernels as mk  # noqa: E402

D = bench.DTYPES
mk.MAXNREG = {}  # as run: before the register caps of calls 117-119
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-spec-unroll")
ROWS = (dict(ms.BLOCK_M_MULTI_TOKEN), dict(ms.BLOCK_M_MULTI_TOKEN_SMALL))


def setv(v):
    ahead = {"base": 0, "a1": 1, "a3": 3, "a1r8": 1}[v]
    mk.SPEC_UNROLL = {4: (*ALL, ahead), 2: (*ALL, ahead)} if ahead else {}
    ms.BLOCK_M_MULTI_TOKEN, ms.BLOCK_M_MULTI_TOKEN_SMALL = ({4: 8, 2: 8}, {4: 8, 2: 8}) if v == "a1r8" else ROWS


# (state, act, batch, T): call 108's misses, then controls
cases = [("bf16", "bf16", b, T) for T, b in ((3, 8), (3, 64), (3, 256), (4, 64), (4, 256))] + [
    ("fp32", "bf16", 8, T) for T in (2, 3, 4)] + [
    ("bf16", "bf16", 8, 4), ("bf16", "bf16", 1, 4), ("fp32", "bf16", 64, 3), ("fp32", "bf16", 256, 4),
    ("fp32", "fp32", 8, 3), ("bf16", "bf16", 16, 3)]
SWEEP.run("ssu", cases, {"base": 0, "a1": 1, "a3": 2, "a1r8": 3}, setv,
          lambda k: SSUCase(k[2], k[2], D[k[0]], D[k[1]], False, "cloned", k[3], "head"))
