"""Issue 14, call 132: the GDN streaming kernel's early blocks as committed at a6de096 (``STREAM_EARLY_STATE``: bf16
in 2 blocks of 16 rows, fp32 4 x 2 zigzagged), "rule", against no early blocks ("none", the rule before) and, for
bf16, in 2 blocks of 8 rows ("8x2": 16 rows a program; call 131 read 64 +1.7%), over the streaming kernel's range.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call132-gdn-rule-8x2.py
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
SWEEP = Sweep("ab-gdn-rule-8x2")
STREAM, EARLY = dict(gdn.STREAM), dict(gdn.STREAM_EARLY_STATE)


def setv(v):
    gdn.STREAM_EARLY_STATE = {} if v == "none" else EARLY
    gdn.STREAM = {**STREAM, 2: (8, 2, 2, 16, 1 << 30)} if v == "8x2" else STREAM


cases = [("bf16", a, c) for a, c in ((9, 16), (16, 16), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256),
                                     (257, 272), (512, 512))]
SWEEP.run("bf16", cases, {"base": 0, "none": 1, "8x2": 2}, lambda v: setv("rule" if v == "base" else v),
          lambda k: GDNCase(k[1], k[2], D[k[0]], D["bf16"], True, "cloned", 1))
cases = [("fp32", a, c) for a, c in ((8, 8), (9, 16), (16, 16), (32, 32))]
SWEEP.run("fp32", cases, {"base": 0, "none": 1}, lambda v: setv("rule" if v == "base" else v),
          lambda k: GDNCase(k[1], k[2], D[k[0]], D["bf16"], True, "cloned", 1))
