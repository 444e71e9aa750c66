"""Issue 14, call 266 (H200): the SSU's source slot read before PDL's wait (``mamba_ssm.EARLY_SLOT``, the kernel's
``EARLY_SLOT``) where the launch runs under PDL without the early state (one token from 9 x 128 request x heads with
an fp32 state, 13-16 requests with a bf16 one; several tokens from 9 x 128): the wait is then followed at once by the
state's loads instead of the index's round trip. "slot" (every such launch) against the table ("base"). Reference
checks first; then the bench, after a torch kernel ("-nb"), and as a layer runs it (the conv, then the SSU); the
agreement gate on each.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call266-ssu-early-slot.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import ALL, Sweep, pair_sweep, parts, ssu_reference_checks  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
VARIANTS = ("base", "slot")


def setv(v):
    mamba_ssm.EARLY_SLOT = {} if v == "base" else {4: ALL, 2: ALL}


ssu_reference_checks(VARIANTS, setv, ((D["fp32"], D["bf16"]), (D["bf16"], D["bf16"]), (D["fp32"], D["fp32"])),
                     batches=((9, 7), (16, 11), (32, 29)))
ONE_F = [(9, 9), (9, 16), (16, 16), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256), (257, 272)]
SMALL = [(9, 9), (9, 16), (16, 16)]
sw = Sweep("ab-ssu-early-slot")
for part in parts("f,f-nb,fz,ff,ff-nb,b,b-nb,spec,spec-nb,pairs"):
    if part in ("f", "f-nb"):
        sw.run_parts([part], ONE_F if part == "f" else SMALL, VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["fp32"], D["bf16"], False, "cloned", 1))
    elif part == "fz":
        sw.run_parts([part], [(16, 16), (64, 64)], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["fp32"], D["bf16"], True, "cloned", 1))
    elif part.startswith("ff"):
        sw.run_parts([part], SMALL + ([(64, 64)] if part == "ff" else []), VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["fp32"], D["fp32"], False, "cloned", 1))
    elif part in ("b", "b-nb"):
        sw.run_parts([part], [(13, 13), (16, 16), (9, 16)], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["bf16"], D["bf16"], False, "cloned", 1))
    elif part.startswith("spec"):
        keys = [(16, 2, "fp32"), (16, 4, "fp32"), (64, 2, "fp32"), (16, 3, "bf16"), (64, 3, "bf16")]
        sw.run_parts([part], keys if part == "spec" else keys[:2] + keys[3:4], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[0], D[k[2]], D["bf16"], False, "cloned", k[1]))
    elif part == "pairs":
        pair_sweep("conv+ssu fb", ((9, 16), (16, 16), (64, 64)),
                   lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                                 SSUCase(a, c, D["fp32"], D["bf16"], False, "cloned", 1)),
                   VARIANTS, setv, "ssu-early-slot-pairs.json")
        pair_sweep("conv+ssu bb", ((16, 16),),
                   lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                                 SSUCase(a, c, D["bf16"], D["bf16"], False, "cloned", 1)),
                   VARIANTS, setv, "ssu-early-slot-pairs-bf16.json")
print("all done", flush=True)
# call 266 at a5f88fa's files + the EARLY_SLOT switch (its table then mamba_ssm.EARLY_SLOT, which this script sets)
