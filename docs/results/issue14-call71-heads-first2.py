"""Issue 14, call 71: call 70's heads-first grid again where it lost or nearly (bf16 with ``z``, bf16 speculative
T = 3 / 4 from batch 64, fp32 at batch 1) and the fp32 small tile under it (below 8 requests: "hf" 4 rows as
shipped, "hf8" 8, "hf16" 16; "base" the shipped order and tile), beside vLLM.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call71-heads-first2.py

The switches it sets (``HEADS_FIRST_GRID``'s first form) were A/B knobs of the tree it ran on; the winners shipped
as rules (docs/benchmarks.md, "Heads before requests"), so the script runs as it was only at the tree of its call.
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
SWEEP = Sweep("ab-heads-first2")
SMALL = dict(ms.BLOCK_M_TIED_SMALL)


def setv(v):
    ms.HEADS_FIRST_GRID = v != "base"
    ms.BLOCK_M_TIED_SMALL = {**SMALL, 4: int(v[2:])} if v in ("hf8", "hf16") else SMALL


# (state, act, z, batch, T, pools)
cases = [(s, "bf16", True, b, 1, "cloned") for s in ("bf16", "fp32") for b in (8, 16, 64, 256)] + [
    ("bf16", "bf16", True, 64, 1, "fresh"), ("bf16", "bf16", False, 64, 1, "fresh")] + [
    ("bf16", "bf16", False, b, T, "cloned") for T in (3, 4) for b in (16, 64, 256)] + [
    ("fp32", a, z, b, 1, "cloned") for a, z in (("bf16", False), ("fp32", False), ("bf16", True)) for b in (1, 2, 4)] + [
    ("fp32", "bf16", False, b, 1, "fresh") for b in (1, 2, 4)]
SWEEP.run("ssu", cases, {"base": 0, "hf": 1, "hf8": 2, "hf16": 3}, setv,
          lambda k: SSUCase(k[3], k[3], D[k[0]], D[k[1]], k[2], k[5], k[4], "head"))
