"""Issue 14, call 70: the SSU's grid with the heads before the requests ("hf": ``HEADS_FIRST_GRID``, grid (row
blocks, heads, requests), so the programs running together walk one slot's heads, as the best slot copy of call 69
walks a slot's blocks) against the shipped order ("base": (row blocks, requests, heads)), beside vLLM. "hf16": also
the fp32 small tile at 16 rows (below 8 requests). Every SSU set-up the bench varies, one token and speculative.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call70-heads-first.py

The switches it sets (``HEADS_FIRST_GRID``'s first form (on for every one-head launch)) were A/B knobs of the tree
it ran on; the winners shipped as rules (docs/benchmarks.md, "Heads before requests"), so the script runs as it was
only at the tree of its call.
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
SWEEP = Sweep("ab-heads-first")
SMALL = dict(ms.BLOCK_M_TIED_SMALL)


def setv(v):
    ms.HEADS_FIRST_GRID = v != "base"
    ms.BLOCK_M_TIED_SMALL = {**SMALL, 4: 16} if v == "hf16" else SMALL


# (state, act, z, batch, T, dt)
cases = [(s, "bf16", False, b, 1, "head") for s in ("fp32", "bf16") for b in (1, 2, 4, 8, 16, 64, 256)] + [
    ("fp32", "fp32", False, b, 1, "head") for b in (2, 8, 64)] + [("bf16", "bf16", True, b, 1, "head") for b in (8, 64)] + [
    (s, "bf16", False, b, 1, "element") for s in ("fp32", "bf16") for b in (1, 8, 64, 256)] + [
    (s, "bf16", False, b, T, "head") for s in ("fp32", "bf16") for T in (2, 4) for b in (8, 64)] + [
    ("bf16", "bf16", False, 256, 3, "head")]
SWEEP.run("ssu", cases, {"base": 0, "hf": 1, "hf16": 2}, setv,
          lambda k: SSUCase(k[3], k[3], D[k[0]], D[k[1]], k[2], "cloned", k[4], k[5]))
