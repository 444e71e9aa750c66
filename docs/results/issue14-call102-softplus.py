"""Issue 14, call 102: the SSU's softplus of ``dt`` on the approximate ``exp2`` / ``lg2`` ("fast",
``mamba_ssm_kernels.FAST_SOFTPLUS``: one ``MUFU`` instruction each, for libdevice's ``logf`` polynomial) against
libdevice's form ("base"), beside vLLM, on the rows that missed 1.1x in call 83's recording and a few that met it.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call102-softplus.py

Call 106 ran it again with ``SWITCH=HPG_CONSTEXPR``: the same rows, "base" with the group ratio as the runtime
argument, "fast" with it a compile-time constant (``mamba_ssm_kernels.HPG_CONSTEXPR``), the fast softplus on in both;
its output prefix is ``ab-hpg``. Call 110 with ``SWITCH=FAST_SOFTPLUS_TIED_ONE_TOKEN ROWS=tied``: the fast softplus
for one token with ``A``/``dt`` per head too (call 102 found it slower there, before ``HPG``), on those rows only;
prefix ``ab-tied-softplus``.
"""
import os
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm_kernels as mk  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWITCH = os.environ.get("SWITCH", "FAST_SOFTPLUS")
SWEEP = Sweep({"FAST_SOFTPLUS": "ab-softplus", "HPG_CONSTEXPR": "ab-hpg"}.get(SWITCH, "ab-tied-softplus"))


def setv(v):
    setattr(mk, SWITCH, v == "fast")


# (state, act, z, active, captured, T, dt, pools): call 83's misses, then controls
cases = [("bf16", "bf16", False, b, b, 1, "element", "cloned") for b in (64, 256, 512)] + [
    ("bf16", "bf16", False, b, b, 1, "head", "cloned") for b in (8, 9, 16)] + [
    ("bf16", "bf16", False, 8, 8, 1, "head", "fresh"), ("bf16", "bf16", True, 8, 8, 1, "head", "cloned")] + [
    ("bf16", "bf16", False, b, b, T, "head", "cloned") for T, b in ((2, 64), (3, 8), (3, 64), (3, 256), (4, 64),
                                                                  (4, 256))] + [
    ("fp32", "bf16", False, 8, 8, 1, "element", "cloned")] + [
    ("fp32", "bf16", False, a, c, 1, "head", "cloned") for a, c in ((4, 4), (8, 8), (9, 16))] + [
    ("fp32", "bf16", False, 8, 8, T, "head", "cloned") for T in (2, 3, 4)] + [
    ("fp32", "bf16", False, 8, 8, 1, "head", "fresh"), ("fp32", "bf16", True, 8, 8, 1, "head", "cloned")] + [
    ("fp32", "fp32", False, a, c, 1, "head", "cloned") for a, c in ((4, 4), (8, 8), (9, 9), (9, 16))] + [
    # controls (met in call 83)
    ("bf16", "bf16", False, 8, 8, 1, "element", "cloned"), ("fp32", "bf16", False, 1, 1, 1, "element", "cloned"),
    ("fp32", "bf16", False, 64, 64, 1, "element", "cloned"), ("bf16", "bf16", False, 64, 64, 1, "head", "cloned"),
    ("fp32", "bf16", False, 64, 64, 1, "head", "cloned"), ("bf16", "bf16", False, 1, 1, 4, "head", "cloned")]
if os.environ.get("ROWS") == "tied":  # one token, A/dt per head
    cases = [c for c in cases if c[5] == 1 and c[6] == "head"]
SWEEP.run("ssu", cases, {"base": 0, "fast": 1}, setv,
          lambda k: SSUCase(k[3], k[4], D[k[0]], D[k[1]], k[2], k[7], k[5], k[6]))
