"""Issue 14, call 76: the SSU's one-token tile (rows of the head dim, warps) re-measured under the heads-first grid,
``A``/``dt`` per head, beside vLLM: "base" the rule (16 rows, 1 warp; fp32 batch 1 8 rows), "m32w1", "m32w2",
"m64w2", "m64w4", "m16w2" pinned with ``launch_config_override`` (which leaves the grid order, PDL and the early
state load to the rule).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call76-tiles.py
"""
import contextlib
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-tiles")
VARIANTS = {"base": None, "m32w1": (32, 1), "m32w2": (32, 2), "m64w2": (64, 2), "m64w4": (64, 4), "m16w2": (16, 2)}
_stack = contextlib.ExitStack()


def setv(v):
    _stack.close()
    if VARIANTS[v]:
        _stack.enter_context(ms.launch_config_override(ms.LaunchConfig(*VARIANTS[v])))


cases = [(s, z, b) for s in ("fp32", "bf16") for z in (False,) for b in (4, 8, 9, 16, 64)] + [
    ("fp32", True, 8), ("bf16", True, 8)]
SWEEP.run("ssu", cases, {v: i for i, v in enumerate(VARIANTS)}, setv,
          lambda k: SSUCase(k[2], k[2], D[k[0]], D["bf16"], k[1], "cloned", 1, "head"))
