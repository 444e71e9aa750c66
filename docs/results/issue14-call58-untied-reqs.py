"""Issue 14, call 58: the SSU with A/dt per element, several requests a program (kernels/mamba_ssm_untied.py: the
fp32 A tile, dt_bias and D loaded once for REQS requests of one head, their state loads under masks), against the
one-request kernel ("base"), beside vLLM in one process (scripts/ab_sweep.py: interleaved twice, best of each).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call58-untied-reqs.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm_untied as mu  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-untied-reqs")
VARIANTS = {"base": {}, "r2": {4: (2, 1), 2: (2, 1)}, "r4": {4: (4, 1), 2: (4, 1)}, "r8": {4: (8, 1), 2: (8, 1)}}


def setv(v):
    mu.UNTIED_REQS = dict(VARIANTS[v])


cases = [(st, b) for st in ("fp32", "bf16") for b in (8, 16, 64, 256, 512)]
SWEEP.run("untied", cases, VARIANTS, setv,
          lambda k: SSUCase(k[1], k[1], D[k[0]], D["bf16"], False, "cloned", 1, "element"))
