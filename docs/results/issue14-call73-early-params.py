"""Issue 14, call 73: the SSU's early state load (under ``early_state_load``'s promise, PDL) extended: "ep" the
per-head parameters (``A``, ``dt_bias``, ``D``: weights no kernel writes) read before the wait too (``EARLY_STATE``
2); "eu" the early load for ``A``/``dt`` per element up to 4 x 128 request-heads (it was per head only); "eup"
both; against "base" (this tree: heads first, z with x, the per-element tiny tiles of call 72), beside vLLM.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call73-early-params.py

The switches it sets (``_EP`` and ``_EU``) were A/B knobs of the tree it ran on; the winners shipped as rules
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
SWEEP = Sweep("ab-early-params")


def setv(v):
    ms._EP = v in ("ep", "eup")
    ms._EU = 4 * 128 if v in ("eu", "eup") else 0


# (state, z, batch, T, dt)
cases = [(s, False, b, 1, "element") for s in ("fp32", "bf16") for b in (1, 2, 4)] + [
    (s, z, b, 1, "head") for s in ("fp32", "bf16") for z in (False, True) for b in (1, 2, 4)] + [
    (s, False, b, T, "head") for s in ("fp32", "bf16") for T in (2, 4) for b in (1, 8)]
SWEEP.run("ssu", cases, {"base": 0, "ep": 1, "eu": 2, "eup": 3}, setv,
          lambda k: SSUCase(k[2], k[2], D[k[0]], D["bf16"], k[1], "cloned", k[3], k[4]))
