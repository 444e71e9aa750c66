"""Issue 14, call 123, two questions on rows still under 1.1x after call 122.

``ssu1``: one token a request at batch 8-16, where the SSU's early state load (``mamba_ssm.EARLY_STATE_MAX_REQUEST_HEADS``,
4 x 128 request-heads since call 15, before the kernels of calls 69-119) stops: "e16" the early load to 16 x 128,
"e16c112" with it the bf16 kernel capped at 112 registers (call 119: +1-2% alone), against the rule ("base").

``spec``: the fp32-state speculative loop at batch 8 (95 registers, 21 programs an SM) capped at 80 or 64
(``mamba_ssm_kernels.MAXNREG[(4, True)]``), against none.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT PARTS=ssu1,spec python3 docs/results/issue14-call123-early-caps.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402
from mambalab.kernels import mamba_ssm_kernels as mk  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-early-caps")
EARLY, CAPS = ms.EARLY_STATE_MAX_REQUEST_HEADS, dict(mk.MAXNREG)


def set_ssu1(v):
    ms.EARLY_STATE_MAX_REQUEST_HEADS = 16 * 128 if v.startswith("e16") else EARLY
    mk.MAXNREG = {**CAPS, (2, False): 112} if v.endswith("c112") else CAPS


def set_spec(v):
    mk.MAXNREG = CAPS if v == "base" else {**CAPS, (4, True): int(v[1:])}


# (state, act, active, captured, T, z, pools)
todo = parts("ssu1,spec")
if "ssu1" in todo:
    cases = [(s, "bf16", a, c, 1, False, "cloned") for s in ("bf16", "fp32") for a, c in ((8, 8), (9, 9), (9, 16),
                                                                                         (16, 16))] + [
        ("bf16", "bf16", 8, 8, 1, True, "cloned"), ("bf16", "bf16", 8, 8, 1, False, "fresh"),
        ("fp32", "fp32", 8, 8, 1, False, "cloned"), ("fp32", "fp32", 9, 16, 1, False, "cloned"),
        ("bf16", "bf16", 32, 32, 1, False, "cloned")]
    SWEEP.run("ssu1", cases, {"base": 0, "e16": 1, "e16c112": 2}, set_ssu1,
              lambda k: SSUCase(k[2], k[3], D[k[0]], D[k[1]], k[5], k[6], k[4], "head"))
if "spec" in todo:
    cases = [(a, b, T) for a in ("bf16", "fp32") for b in (8, 64) for T in (2, 3, 4)]
    SWEEP.run("spec", cases, {"base": 0, "c80": 1, "c64": 2}, set_spec,
              lambda k: SSUCase(k[1], k[1], D["fp32"], D[k[0]], False, "cloned", k[2], "head"))
