"""Issue 14, call 82: the GDN streaming kernel (one token a sequence) with the q / k normalisation and ``k . q``
computed inside the block loop ("late": ``NORM_LATE``, the same operations, so the same bytes), so nothing waits on
the q / k loads before the loop's first state loads are issued, against before the loop ("base"), beside vLLM.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call82-gdn-norm-late.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-gdn-norm-late")


def setv(v):
    gdn._NL = v == "late"


cases = [("bf16", a, c) for a, c in ((16, 16), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256), (512, 512))] + [
    ("fp32", a, c) for a, c in ((8, 8), (16, 16), (32, 32))]
SWEEP.run("gdn", cases, {"base": 0, "late": 1}, setv,
          lambda k: GDNCase(k[1], k[2], D[k[0]], D["bf16"], True, "cloned", 1))
