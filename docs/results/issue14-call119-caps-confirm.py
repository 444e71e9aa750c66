"""Issue 14, call 119: the SSU's register caps as committed (``mamba_ssm_kernels.MAXNREG``: bf16 token loop 128,
bf16 one token 112), "rule", against none ("base"), and neighbours of each cap, beside vLLM, over more batches than
call 118; ``ssu1`` one token a request, ``spec`` the speculative loop (T = 2 from batch 32 runs the streaming kernel,
uncapped: a control).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT PARTS=ssu1,spec python3 docs/results/issue14-call119-caps-confirm.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm_kernels as mk  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-caps-confirm")
RULE = dict(mk.MAXNREG)


def setter(key):
    def setv(v):
        mk.MAXNREG = {} if v == "base" else RULE if v == "rule" else {**RULE, key: int(v[1:])}
    return setv


def ssu(k):
    return SSUCase(k[1], k[2], D["bf16"], D["bf16"], k[4], k[5], k[3], "head")


# (state, active, captured, T, z, pools)
todo = parts("ssu1,spec")
if "ssu1" in todo:
    cases = [("bf16", a, c, 1, False, "cloned") for a, c in ((4, 4), (8, 8), (9, 9), (9, 16), (16, 16), (32, 32),
                                                             (64, 64), (128, 128), (256, 256), (512, 512))] + [
        ("bf16", 8, 8, 1, True, "cloned"), ("bf16", 8, 8, 1, False, "fresh")]
    SWEEP.run("ssu1", cases, {"base": 0, "rule": 1, "c120": 2, "c104": 3}, setter((2, False)), ssu)
if "spec" in todo:
    cases = [("bf16", b, b, T, False, "cloned") for T in (2, 3, 4) for b in (8, 16, 64, 256)] + [
        ("bf16", b, b, 3, False, "cloned") for b in (32, 128)]
    SWEEP.run("spec", cases, {"base": 0, "rule": 1, "c136": 2, "c120": 3}, setter((2, True)), ssu)
