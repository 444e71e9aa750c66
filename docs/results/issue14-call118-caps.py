"""Issue 14, call 118: register caps (ptxas ``maxnreg``) on the one-head SSU kernel and the GDN's general kernel,
after call 117 found the SSU's speculative token loop at 128 registers (13 -> 16 programs an SM) 3-5% faster
(bf16 T = 3 / 4 at 8-256 1.08-1.11 -> 1.12-1.16x of vLLM). No spill at any cap down to 80 in the local compile
(``scripts/kernel_resources.py``, Triton 3.6): the allocator spreads into what it is given.

Parts: ``ssu1`` one token a request (fp32 state 159 registers, bf16 128), ``spec`` the speculative loop (bf16 148),
``gdn`` the GDN's general kernel (speculative bf16 T = 3 / 4, fp32 one token at 57 -> 64). "base" uncapped, "cN"
capped at N.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT PARTS=ssu1,spec,gdn python3 docs/results/issue14-call118-caps.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts, register_cap  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase, SSUCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402
from mambalab.kernels import mamba_ssm_kernels as mk  # noqa: E402

D = bench.DTYPES
mk.MAXNREG = {}  # as run: before the register caps of calls 117-119
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-caps")
CAP = register_cap((ms._ssu_kernel, gdn._gdn_decode_kernel))



def setv(v):
    CAP[0] = int(v[1:]) if v != "base" else 0


def ssu(k):
    return SSUCase(k[2], k[3], D[k[0]], D[k[1]], False, "cloned", k[4], "head")


caps = {"base": 0, "c128": 1, "c112": 2, "c96": 3, "c80": 4}
todo = parts("ssu1,spec,gdn")
if "ssu1" in todo:
    cases = [("bf16", "bf16", a, c, 1) for a, c in ((4, 4), (8, 8), (9, 9), (9, 16), (16, 16), (64, 64), (256, 256))] + [
        ("fp32", "bf16", a, c, 1) for a, c in ((4, 4), (8, 8), (9, 9), (9, 16), (64, 64), (256, 256))] + [
        ("fp32", "fp32", 8, 8, 1)]
    SWEEP.run("ssu1", cases, caps, setv, ssu)
if "spec" in todo:
    cases = [("bf16", "bf16", b, b, T) for T, b in ((3, 8), (3, 64), (3, 256), (4, 8), (4, 64), (4, 256), (2, 8))]
    SWEEP.run("spec", cases, caps, setv, ssu)
if "gdn" in todo:
    cases = [("bf16", "bf16", 64, 64, 3), ("bf16", "bf16", 64, 64, 4), ("fp32", "bf16", 57, 64, 1),
             ("fp32", "bf16", 64, 64, 1)]
    SWEEP.run("gdn", cases, {"base": 0, "c128": 1, "c96": 2, "c64": 3}, setv,
              lambda k: GDNCase(k[2], k[3], D[k[0]], D[k[1]], True, "cloned", k[4]))
