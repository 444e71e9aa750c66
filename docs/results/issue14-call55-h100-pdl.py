"""Issue 14, call 55 (an H100, warm after call 54): call 54 found vLLM's 4-row H100 tile slower than our 16 rows for the
SSU's fp32 state (0.972-0.983x against 0.990-0.999x at batch 57-128), so the gap is not the tile. Here, at the same
rows: PDL off (``MAMBALAB_PDL=0``, read at each launch), and the early state load (indices and state before PDL's
wait) at every batch instead of up to 4 x 128 request x heads.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call55-h100-pdl.py
"""
import os
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-h100-pdl")
EARLY = ms.EARLY_STATE_MAX_REQUEST_HEADS


def setv(v):
    os.environ["MAMBALAB_PDL"] = "0" if v == "nopdl" else "1"
    ms.EARLY_STATE_MAX_REQUEST_HEADS = (1 << 30) if v == "early" else EARLY


cases = [(st, act, b) for st, act in (("fp32", "bf16"), ("fp32", "fp32"), ("bf16", "bf16")) for b in (32, 57, 64, 128, 256)]
SWEEP.run("pdl", cases, {"base": 0, "nopdl": 1, "early": 2}, setv,
          lambda k: SSUCase(k[2], k[2], D[k[0]], D[k[1]], False, "cloned", 1))
