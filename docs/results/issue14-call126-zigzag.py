"""Issue 14, call 126: the request rows zigzagged over the grid (``common.program_row``: ``0, n-1, 1, n-2, ...``;
``mamba_ssm.ZIGZAG_ROWS`` for the SSU's heads-first kernel, ``gated_delta_rule.ZIGZAG_ROWS`` for the GDN's general
and streaming kernels), "zz", against rows in order ("base"), beside vLLM. Where the rows are the grid's slowest
axis a CUDA graph's padding rows (the batch's end) run as a tail after every live row: GDN fp32 57 -> 64 takes 2.4%
longer than 64 x 57 / 64 would, the SSU fp32 9 -> 16 4.4% longer than batch 9. Padded batches and unpadded controls.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT PARTS=ssu,gdn python3 docs/results/issue14-call126-zigzag.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase, SSUCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-zigzag")


def setv(v):
    ms.ZIGZAG_ROWS = gdn.ZIGZAG_ROWS = v == "zz"


# (state, act, active, captured)
shapes = [(9, 16), (57, 64), (257, 272), (8, 8), (16, 16), (64, 64), (256, 256)]
todo = parts("ssu,gdn")
if "ssu" in todo:
    cases = [(s, a, b, c) for s, a in (("fp32", "bf16"), ("fp32", "fp32")) for b, c in shapes]
    SWEEP.run("ssu", cases, {"base": 0, "zz": 1}, setv,
              lambda k: SSUCase(k[2], k[3], D[k[0]], D[k[1]], False, "cloned", 1, "head"))
if "gdn" in todo:
    cases = [(s, a, b, c) for s, a in (("fp32", "bf16"), ("fp32", "fp32"), ("bf16", "bf16")) for b, c in shapes]
    SWEEP.run("gdn", cases, {"base": 0, "zz": 1}, setv,
              lambda k: GDNCase(k[2], k[3], D[k[0]], D[k[1]], True, "cloned", 1))
