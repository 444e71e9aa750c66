"""Issue 14, call 103: with the fast softplus (call 102), the SSU's per-element kernel (``A``/``dt`` per element,
``mamba_ssm_untied``) re-measured over its shapes: requests a program (``r``) and rows of the head dim (``b``),
every variant a single rule for every batch, against "base" (the rule ``UNTIED_REQS`` as it stands), beside vLLM.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call103-untied-shapes.py

Call 104 ran it again with other variants and batches (``CALL=104``: 8 requests a program and 4-row tiles, the
confirmation of call 103's winners); its output prefix is ``ab-untied-confirm``.
"""
import os
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm_untied as mu  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
CALL = os.environ.get("CALL", "103")
SWEEP = Sweep("ab-untied-shapes" if CALL == "103" else "ab-untied-confirm")
BASE = {size: list(rules) for size, rules in mu.UNTIED_REQS.items()}
EVERY = (1, 1 << 30)


def setter(size):
    def setv(v):
        mu.UNTIED_REQS[size] = list(BASE[size])
        if v == "r1":
            mu.UNTIED_REQS[size] = []
        elif v != "base":
            reqs, rows = (int(n) for n in v[1:].split("b"))
            mu.UNTIED_REQS[size] = [(reqs, *EVERY, rows)]
    return setv


PLANS = {
    "103": ((2, "bf16", ("base", "r1", "r2b8", "r4b8", "r2b16", "r4b16", "r2b4"), (8, 16, 64, 256, 512)),
            (4, "fp32", ("base", "r1", "r8b2", "r8b4", "r4b2", "r4b4", "r2b4"), (8, 16, 64, 256))),
    "104": ((2, "bf16", ("base", "r4b8", "r8b8", "r8b4", "r4b4", "r16b4"), (8, 16, 64, 128, 256, 512)),
            (4, "fp32", ("base", "r1", "r4b2", "r2b2", "r2b4", "r4b1"), (8, 9, 16, 32))),
}
for size, name, variants, batches in PLANS[CALL]:
    SWEEP.run(name, [(name, b) for b in batches], {v: i for i, v in enumerate(variants)}, setter(size),
              lambda k: SSUCase(k[1], k[1], D[k[0]], D["bf16"], False, "cloned", 1, "element"))
    setter(size)("base")
