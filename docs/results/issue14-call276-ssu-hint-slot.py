"""Issue 14, call 276 (H200): under the SSU's L2 hint before PDL's wait (``PREFETCH``: bf16 one token from 17 x 128
request x heads, several tokens from 1, per-element ``dt`` up to 8 x 128) the program reads its source slot before the
wait for the hint, then again after the wait for the state. "reuse" (``mamba_ssm_kernels.PREFETCH_SLOT_REUSE``: the
launch takes ``EARLY_SLOT`` too, so the first read is the one used; the local sm_90 compile shows the index's
``LDG`` after ``ACQBULK`` gone, and under speculation ``num_accepted_tokens``' too) against the table ("base").
Beside it, the GDN's fp32 one-token launch at 32 sequences on the general kernel ("gen": ``STREAM``'s fp32 range to
31) against the streaming kernel. Reference checks first; then the bench, after a torch kernel ("-nb"), and as a
layer runs it (the conv, then the SSU); the agreement gate on each.

Runs at the commit with the switch (``mamba_ssm_kernels.PREFETCH_SLOT_REUSE``).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call276-ssu-hint-slot.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts, ssu_reference_checks  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase, SSUCase  # noqa: E402
from mambalab.kernels import gated_delta_rule, mamba_ssm_kernels  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
VARIANTS = ("base", "reuse")
STREAM_FP32 = gated_delta_rule.STREAM[4]


def setv(v):
    mamba_ssm_kernels.PREFETCH_SLOT_REUSE = v == "reuse"


def setg(v):
    gated_delta_rule.STREAM[4] = STREAM_FP32 if v == "base" else STREAM_FP32[:4] + (31,)


ssu_reference_checks(VARIANTS, setv, ((D["bf16"], D["bf16"]), (D["fp32"], D["bf16"])),
                     batches=((17, 17), (64, 57), (32, 32)))
ONE_B = [(17, 17), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256), (257, 272), (512, 512)]
sw = Sweep("ab-ssu-hint-slot")
for part in parts("b,bz,be,spec,spec-nb,f,gdn,pairs"):
    if part == "b":
        sw.run_parts([part], ONE_B, VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["bf16"], D["bf16"], False, "cloned", 1))
    elif part == "bz":
        sw.run_parts([part], [(64, 64), (256, 256)], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["bf16"], D["bf16"], True, "cloned", 1))
    elif part == "be":
        sw.run_parts([part], [(1, 1), (8, 8)], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["bf16"], D["bf16"], False, "cloned", 1, dt="element"))
    elif part.startswith("spec"):
        keys = [(1, 2), (8, 2), (8, 4), (64, 3), (256, 2), (256, 4)]
        sw.run_parts([part], keys if part == "spec" else keys[:3], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[0], D["bf16"], D["bf16"], False, "cloned", k[1]))
    elif part == "f":  # a control: no hint with an fp32 state
        sw.run_parts([part], [(64, 64)], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["fp32"], D["bf16"], False, "cloned", 1))
    elif part == "gdn":
        sw.run_parts([part], [(32, 32, "bf16"), (32, 32, "fp32"), (16, 16, "bf16")], VARIANTS, setg,
                     lambda k: GDNCase(k[0], k[1], D["fp32"], D[k[2]], True, "cloned", 1))
    elif part == "pairs":
        pair_sweep("conv+ssu bb", ((32, 32), (64, 64), (256, 256)),
                   lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                                 SSUCase(a, c, D["bf16"], D["bf16"], False, "cloned", 1)),
                   VARIANTS, setv, "ssu-hint-slot-pairs.json")
print("all done", flush=True)
