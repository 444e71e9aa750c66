"""Issue 14, call 137: every early state load (the SSU's and the GDN general kernel's ``EARLY_STATE_LOAD`` rules, the
GDN streaming kernel's ``STREAM_EARLY_STATE``), "base" as shipped at this tree, against none of them ("off": every
launch waits for the previous kernel first), in the bench ("bench" parts: a launch's neighbour is the previous launch
of the same kernel, which triggers its dependents at once) and after a torch kernel that does not trigger them ("nb"
parts, ``ab_sweep.NEIGHBOUR``: as the GDN layer's kernel follows torch ops; the SSU follows the conv, which triggers
them at small batches). Call 136 found the GDN streaming kernel's bf16 gains only in the first.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call137-early-neighbour.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

import ab_sweep  # noqa: E402
from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase, SSUCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-early-neighbour")
STREAM_EARLY = dict(gdn.STREAM_EARLY_STATE)


def setv(v):
    ms.EARLY_STATE_LOAD = gdn.EARLY_STATE_LOAD = v == "base"
    gdn.STREAM_EARLY_STATE = STREAM_EARLY if v == "base" else {}


ssu = [(s, b, T) for s in ("bf16", "fp32") for b in (1, 2, 4) for T in (1,)] + [
    (s, b, T) for s in ("bf16", "fp32") for b in (1, 8) for T in (2, 4)]
gdn_cases = [(s, b, T) for s in ("bf16", "fp32") for b in (1, 2, 4, 8, 16, 32) for T in (1,)] + [
    (s, 8, T) for s in ("bf16", "fp32") for T in (2, 4)]
for part in parts("ssu,ssu-nb,gdn,gdn-nb"):
    ab_sweep.NEIGHBOUR[0] = part.endswith("-nb")
    if part.startswith("ssu"):
        SWEEP.run(part, ssu, {"base": 0, "off": 1}, setv,
                  lambda k: SSUCase(k[1], k[1], D[k[0]], D["bf16"], False, "cloned", k[2], "head"))
    else:
        SWEEP.run(part, gdn_cases, {"base": 0, "off": 1}, setv,
                  lambda k: GDNCase(k[1], k[1], D[k[0]], D["bf16"], True, "cloned", k[2]))
