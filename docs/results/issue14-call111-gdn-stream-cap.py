"""Issue 14, call 111: a register cap on the GDN's one-token streaming kernel (ptxas ``maxnreg``, by
``ab_sweep.register_cap``; it ran as ``gated_delta_rule.STREAM_MAXNREG``, a switch since folded into it): bf16 at
80 registers holds 24 programs an SM; capped at 72 or 64 (no spill in the local compile,
``scripts/kernel_resources.py``) 28 or 32, against "base" (no cap), beside vLLM.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call111-gdn-stream-cap.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, register_cap  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402

D = bench.DTYPES
CAP = register_cap((gdn._gdn_stream_kernel,))
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-gdn-stream-cap")


def setv(v):
    CAP[0] = 0 if v == "base" else int(v[1:])


cases = [("bf16", a, c) for a, c in ((16, 16), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256), (512, 512))]
SWEEP.run("gdn", cases, {"base": 0, "r72": 1, "r64": 2}, setv,
          lambda k: GDNCase(k[1], k[2], D[k[0]], D["bf16"], True, "cloned", 1))
