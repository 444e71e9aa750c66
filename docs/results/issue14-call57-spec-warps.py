"""Issue 14, call 57: the speculative bf16 rows' tiles and warps. Nsight Compute (call 56,
issue14-call56-ncu-spec-h100.txt, an H100) has the SSU's multi-token kernel at batch 64, T = 4 on 147 registers a
thread in one-warp programs: 12 programs an SM, 17.6% of warps active, stalled on memory (long scoreboard 6.2 per
issue), where vLLM's runs two-warp programs on 96 registers (29.9% active); the GDN's general kernel at T = 4 on 128
registers (23.7% active). Here: rows a program and warps a program for both, beside vLLM, A/B interleaved.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call57-spec-warps.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase, SSUCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdr  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-spec-warps")
TODO = parts("ssu,gdn")

if "ssu" in TODO:
    base = (dict(ms.BLOCK_M_MULTI_TOKEN), dict(ms.BLOCK_M_MULTI_TOKEN_SMALL), ms.NUM_WARPS)
    shapes = {"base": None, "m8w1": (8, 1), "m16w2": (16, 2), "m32w2": (32, 2), "m32w4": (32, 4)}

    def set_ssu(v):
        ms.BLOCK_M_MULTI_TOKEN, ms.BLOCK_M_MULTI_TOKEN_SMALL, ms.NUM_WARPS = dict(base[0]), dict(base[1]), base[2]
        if shapes[v]:
            m, w = shapes[v]
            ms.BLOCK_M_MULTI_TOKEN[2] = ms.BLOCK_M_MULTI_TOKEN_SMALL[2] = m
            ms.NUM_WARPS = w

    cases = [(T, b) for T in (3, 4) for b in (8, 64, 256)] + [(2, 8)]
    SWEEP.run("ssu", cases, shapes, set_ssu,
              lambda k: SSUCase(k[1], k[1], D["bf16"], D["bf16"], False, "cloned", k[0]))
    set_ssu("base")

if "gdn" in TODO:
    gbase = (dict(gdr.MULTI_TOKEN_BV), gdr._NUM_WARPS)
    gshapes = {"base": None, "bv8w1": (8, 1), "bv16w2": (16, 2), "bv32w2": (32, 2), "bv32w4": (32, 4)}

    def set_gdn(v):
        gdr.MULTI_TOKEN_BV, gdr._NUM_WARPS = dict(gbase[0]), gbase[1]
        if gshapes[v]:
            gdr.MULTI_TOKEN_BV[2], gdr._NUM_WARPS = gshapes[v]

    cases = [(T, b) for T in (3, 4) for b in (8, 64, 256)]
    SWEEP.run("gdn", cases, gshapes, set_gdn,
              lambda k: GDNCase(k[1], k[1], D["bf16"], D["bf16"], True, "cloned", k[0]))
