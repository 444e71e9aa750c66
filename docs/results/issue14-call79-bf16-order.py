"""Issue 14, call 79: bf16 state, the grid's order for ``A``/``dt`` per element (one token) with padded batches:
"base" requests first (this tree: heads first only for fp32 and bf16's streaming kernel), "hf" heads first for
bf16 per element too (``_HF_UNTIED``, as calls 70-73 ran), unpadded and padded (9 -> 16, 57 -> 64, 257 -> 272), and
bf16 per head beside them; vLLM in the same process.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call79-bf16-order.py

The switch it sets (``_HF_UNTIED``) was an A/B knob of the tree it ran on; its "hf" shipped in the rule
(docs/benchmarks.md, "Heads before requests"), so the script runs as it was only at the tree of its call. It ran on
an H100 (the call asked for an H200).
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
SWEEP = Sweep("ab-bf16-order")


def setv(v):
    ms._HF_UNTIED = v == "hf"


cases = [("element", a, c) for a, c in ((9, 16), (57, 64), (257, 272), (8, 8), (64, 64), (256, 256), (512, 512))] + [
    ("head", a, c) for a, c in ((9, 16), (57, 64), (8, 8), (64, 64))]
SWEEP.run("ssu", cases, {"base": 0, "hf": 1}, setv,
          lambda k: SSUCase(k[1], k[2], D["bf16"], D["bf16"], False, "cloned", 1, k[0]))
