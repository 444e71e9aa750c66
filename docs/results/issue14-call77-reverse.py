"""Issue 14, call 77: the SSU's requests walked from the last ("rev": ``REVERSE_ROWS``, so a CUDA graph's padded
rows, at the batch's end, run first instead of as a tail of short programs after the live ones) against the
shipped order ("base"), under the heads-first grid, padded and unpadded batches, beside vLLM.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call77-reverse.py

The switches it sets (``_REV`` and the kernel's ``REVERSE_ROWS``, not taken) were A/B knobs of the tree it ran on
(docs/benchmarks.md, "Heads before requests"), so the script runs as it was only at the tree of its call.
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
SWEEP = Sweep("ab-reverse")


def setv(v):
    ms._REV = v == "rev"


cases = [(s, a, act, cap) for s, act in (("fp32", "bf16"), ("fp32", "fp32"), ("bf16", "bf16"))
         for a, cap in ((9, 16), (57, 64), (257, 272), (9, 9), (64, 64))]
SWEEP.run("ssu", cases, {"base": 0, "rev": 1}, setv,
          lambda k: SSUCase(k[1], k[3], D[k[0]], D[k[2]], False, "cloned", 1, "head"))
