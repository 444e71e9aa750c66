"""Issue 14, call 244 (H200): the SSU's CUDA kernel at 8-16 requests with a bf16 state, its register count capped so
that more CTAs are resident (``issue14-call244-ssu-tma-regs.cu``: "mb28" 72 registers, "mb32" 64 with a few spilled),
against the shipped 32-row entry forced ("r32") and the tree ("base": the Triton kernel). Bench and after a torch
kernel ("-nb"); the agreement gate on each variant.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call244-ssu-tma-regs.py
"""
import sys
from pathlib import Path

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm_tma as tma  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
tma.SOURCE = Path(__file__).resolve().with_suffix(".cu")
CAPS = {"r32mb28": (32, "_mb28"), "r32mb32": (32, "_mb32"), "r16mb32": (16, "_mb32")}
tma.ENTRIES = tma.ENTRIES + tuple(f"ssu_tma_bb_r{r}_z{z}{s}" for r, s in CAPS.values() for z in (0, 1))
_entry, SUFFIX = tma.entry, [""]
tma.entry = lambda *a: _entry(*a) + SUFFIX[0]


def setv(v):
    tma.FORCE, SUFFIX[0] = {"base": (None, ""), "r32": (32, "")}.get(v) or CAPS[v]
    tma.RULES = {}


VARIANTS = ("base", "r32", *CAPS)
Sweep("ab-ssu-tma-regs").run_parts(parts("bf16,bf16-nb"), [(8, 8), (9, 9), (12, 12), (13, 13), (15, 15), (16, 16),
                                                           (9, 16)], VARIANTS, setv,
                                   lambda k: SSUCase(k[0], k[1], D["bf16"], D["bf16"], False, "cloned", 1))
print("all done", flush=True)
