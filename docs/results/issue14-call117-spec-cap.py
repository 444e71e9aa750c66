"""Issue 14, call 117: the SSU's speculative rows at batch 8-256 (T = 3 / 4 bf16 miss 1.1x by 1-1.5%) with the
unrolled step of calls 113-115 under a register cap (ptxas ``maxnreg``; the unrolled step takes 199-214 registers, the
loop 148, and calls 113-114 found it slower from batch 8). No spill at any cap here in the local compile
(``scripts/kernel_resources.py``, Triton 3.6). Variants: "base" the loop as committed; "c128" the loop capped at 128;
"a1c152" / "a3c152" the unrolled step, one token / every token ahead, capped at 152 (13 programs an SM, as the loop);
"a1c128" capped at 128 (16 programs an SM).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call117-spec-cap.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import ALL, Sweep, register_cap  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402
from mambalab.kernels import mamba_ssm_kernels as mk  # noqa: E402

D = bench.DTYPES
mk.MAXNREG = {}  # as run: before the register caps of calls 117-119
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-spec-cap")
RULE, CAP = dict(mk.SPEC_UNROLL), register_cap((ms._ssu_kernel,))



def setv(v):
    ahead = {"a1": 1, "a3": 3}.get(v[:2], 0)
    mk.SPEC_UNROLL = {4: (*ALL, ahead), 2: (*ALL, ahead)} if ahead else RULE
    CAP[0] = int(v.split("c")[-1]) if "c" in v else 0


cases = [("bf16", "bf16", b, T) for T, b in ((3, 8), (3, 64), (3, 256), (4, 8), (4, 64), (4, 256), (2, 8))] + [
    ("fp32", "bf16", b, T) for T, b in ((3, 8), (4, 8), (3, 64))]
SWEEP.run("ssu", cases, {"base": 0, "c128": 1, "a1c152": 2, "a3c152": 3, "a1c128": 4}, setv,
          lambda k: SSUCase(k[2], k[2], D[k[0]], D[k[1]], False, "cloned", k[3], "head"))
