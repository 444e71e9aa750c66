"""Issue 14, call 112: PDL for the SSU's small fp32 tiles (``mamba_ssm.PDL_FP32_NO_PDL_BLOCK_M``: tiles of 4 rows or
fewer launch without it, a rule measured with ``A``/``dt`` per head) on the rows that take them since the fast
softplus: ``A``/``dt`` per element with an fp32 state (one request a program, 4-row tiles), and speculative steps at
batch 1 (4-row tiles); "pdl" lowers the threshold to 2 rows, against "base", beside vLLM.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call112-fp32-small-pdl.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-fp32-small-pdl")


def setv(v):
    ms.PDL_FP32_NO_PDL_BLOCK_M = 2 if v == "pdl" else 4


# (act, batch, T, dt)
cases = [("bf16", b, 1, "element") for b in (4, 8, 16, 64, 256)] + [("fp32", 8, 1, "element")] + [
    ("bf16", 1, T, "head") for T in (2, 3, 4)]
SWEEP.run("ssu", cases, {"base": 0, "pdl": 1}, setv,
          lambda k: SSUCase(k[1], k[1], D["fp32"], D[k[0]], False, "cloned", k[2], k[3]))
