"""Issue 14, call 74: (1) the padded batch with fp32 activations under the heads-first grid (call 73's recording: fp32
state and activations, 9 -> 16, 1.038 -> 0.871x): "base" this tree, "nohf" the requests-first grid, "a16" 16-row
tiles for fp32 activations (8 shipped); (2) the fp32 small tile at batch 2-6 ("base" 8 rows, "s16" 16), beside vLLM.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call74-padding.py

The switches it sets (``BLOCK_M_TIED_FP32_ACTIVATIONS``, which 16 rows replaced) were A/B knobs of the tree it ran
on (docs/benchmarks.md, "Heads before requests"), so the script runs as it was only at the tree of its call.
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-padding")
A16, SMALL = ms.BLOCK_M_TIED_FP32_ACTIVATIONS, dict(ms.BLOCK_M_TIED_SMALL)


def setp(v):
    ms.HEADS_FIRST_GRID = v != "nohf"
    ms.BLOCK_M_TIED_FP32_ACTIVATIONS = 16 if v == "a16" else A16


def sets(v):
    ms.BLOCK_M_TIED_SMALL = {**SMALL, 4: 16} if v == "s16" else SMALL


P = parts("pad,small")
if "pad" in P:
    cases = [("fp32", a, c) for a, c in ((9, 16), (57, 64), (257, 272), (8, 8), (16, 16), (64, 64))] + [
        ("bf16", a, c) for a, c in ((9, 16), (57, 64))]
    SWEEP.run("pad", cases, {"base": 0, "nohf": 1, "a16": 2}, setp,
              lambda k: SSUCase(k[1], k[2], D["fp32"], D[k[0]], False, "cloned", 1, "head"))
if "small" in P:
    cases = [(a, z, b) for a, z in (("bf16", False), ("fp32", False), ("bf16", True)) for b in (2, 3, 4, 6)]
    SWEEP.run("small", cases, {"base": 0, "s16": 1}, sets,
              lambda k: SSUCase(k[2], k[2], D["fp32"], D[k[0]], k[1], "cloned", 1, "head"))
