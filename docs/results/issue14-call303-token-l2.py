"""Issue 14, call 303 (H200): the token's lines asked of L2 before PDL's wait. In the bench each launch reads its
token (q / k / v / a / b for the GDN; x / dt / B / C / z for the SSU) from memory: between two launches the other
pools' state streams through L2 and evicts it. Calls 211 and 235 found that a launch's first wave, its state loaded
before the wait, then waits out the token's round trip while no state moves (about 1.1 µs at GDN bf16 64). A
``prefetch.global.L2`` of the token's lines before the wait is a hint, not a read: nothing is in a register before
the wait, and the loads after it read what the previous kernel wrote (L2 is where every SM's writes meet).
Variants: "base"; "tl2": the GDN streaming kernel's early launches (``gated_delta_rule.STREAM_TOKEN_L2``) and every
``_ssu_kernel`` launch under PDL (``mamba_ssm_kernels.TOKEN_L2``; varlen only with EARLY_STATE) ask for them.
Reference checks first (SSU); then the bench, after a torch kernel ("-nb"), and as a layer runs it (the conv, then
the SSU or GDN); the agreement gate on each.

Runs at c5663ad, the commit with the switches (both off by default); the next commit takes them out (not taken).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call303-token-l2.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts, ssu_reference_checks  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase, SSUCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn, mamba_ssm_kernels  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
VARIANTS = ("base", "tl2")


def setv(v):
    on = frozenset({2, 4}) if v == "tl2" else frozenset()
    gdn.STREAM_TOKEN_L2, mamba_ssm_kernels.TOKEN_L2 = on, on


ssu_reference_checks(VARIANTS, setv, ((D["fp32"], D["bf16"]), (D["bf16"], D["bf16"]), (D["fp32"], D["fp32"])),
                     batches=((4, 3), (9, 7), (16, 11)))


def ssu(st, act, z=False, tokens=1, dt="head"):
    return lambda k: SSUCase(k[0], k[1], D[st], D[act], z, "cloned", tokens, dt=dt)


def gdn_case(st):
    return lambda k: GDNCase(k[0], k[1], D[st], D["bf16"], True, "cloned", 1)


sw = Sweep("ab-token-l2")
for part in parts("g,f,b,fe,fs2,fs3,fs4,ff,g-nb,f-nb,pairs"):
    if part == "g":
        sw.run_parts([part], [(16, 16), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256)], VARIANTS, setv,
                     gdn_case("bf16"))
        sw.run_parts(["gf"], [(8, 8), (32, 32)], VARIANTS, setv, gdn_case("fp32"))
    elif part == "g-nb":
        sw.run_parts([part], [(16, 16), (32, 32), (64, 64)], VARIANTS, setv, gdn_case("bf16"))
        sw.run_parts(["gf-nb"], [(8, 8), (32, 32)], VARIANTS, setv, gdn_case("fp32"))
    elif part == "f":
        sw.run_parts([part], [(4, 4), (8, 8), (9, 16), (16, 16), (64, 64), (256, 256)], VARIANTS, setv,
                     ssu("fp32", "bf16"))
    elif part == "f-nb":
        sw.run_parts([part], [(4, 4), (8, 8), (9, 16), (16, 16)], VARIANTS, setv, ssu("fp32", "bf16"))
        sw.run_parts(["b-nb"], [(16, 16)], VARIANTS, setv, ssu("bf16", "bf16"))
    elif part == "ff":
        sw.run_parts([part], [(4, 4), (9, 16)], VARIANTS, setv, ssu("fp32", "fp32"))
    elif part == "b":
        sw.run_parts([part], [(16, 16), (32, 32), (64, 64)], VARIANTS, setv, ssu("bf16", "bf16"))
    elif part == "fe":
        sw.run_parts([part], [(8, 8), (9, 9), (64, 64)], VARIANTS, setv, ssu("fp32", "bf16", dt="element"))
    elif part.startswith("fs"):
        sw.run_parts([part], [(8, 8)] + ([(64, 64)] if part == "fs2" else []), VARIANTS, setv,
                     ssu("fp32", "bf16", tokens=int(part[2])))
    elif part == "pairs":
        pair_sweep("conv+gdn bf16", ((32, 32), (64, 64)),
                   lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                                 GDNCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1)),
                   VARIANTS, setv, "token-l2-pairs-gdn.json")
        pair_sweep("conv+ssu fb", ((8, 8), (16, 16), (64, 64)),
                   lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                                 SSUCase(a, c, D["fp32"], D["bf16"], False, "cloned", 1)),
                   VARIANTS, setv, "token-l2-pairs-ssu.json")
print("all done", flush=True)
