"""Issue 14, call 139: after a torch kernel that does not trigger PDL (``ab_sweep.NEIGHBOUR``, call 137), the small
batches with PDL as shipped ("base") against no PDL at all ("nopdl": ``use_pdl`` false in every kernel module, so no
launch carries the PDL attribute and no kernel waits on it), beside vLLM; and, for reference, the bench's own
harness ("bench" parts). Whether the 10 rows behind vLLM there (0.85-0.99x) pay for PDL itself.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call139-neighbour-nopdl.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

import ab_sweep  # noqa: E402
from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase, SSUCase  # noqa: E402
from mambalab.kernels import common  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-neighbour-nopdl")
PDL = common.use_pdl


def setv(v):
    fn = PDL if v == "base" else (lambda device: False)
    common.use_pdl = ms.use_pdl = gdn.use_pdl = fn


ssu = [(s, b) for s in ("bf16", "fp32") for b in (1, 2, 4, 8)]
gdn_cases = [(s, b) for s in ("bf16", "fp32") for b in (1, 2, 4, 8, 16)]
for part in parts("ssu-nb,gdn-nb,ssu,gdn"):
    ab_sweep.NEIGHBOUR[0] = part.endswith("-nb")
    if part.startswith("ssu"):
        SWEEP.run(part, ssu, {"base": 0, "nopdl": 1}, setv,
                  lambda k: SSUCase(k[1], k[1], D[k[0]], D["bf16"], False, "cloned", 1, "head"))
    else:
        SWEEP.run(part, gdn_cases, {"base": 0, "nopdl": 1}, setv,
                  lambda k: GDNCase(k[1], k[1], D[k[0]], D["bf16"], True, "cloned", 1))
