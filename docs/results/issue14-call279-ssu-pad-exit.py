"""Issue 14, call 279 (H200): a CUDA graph's padded rows under PDL. Where the SSU's source slot may be read before
PDL's wait (one token from 9 x 128 request x heads with an fp32 state, bf16 from 13 requests, several tokens from
9 x 128), a padded row's programs each wait, then zero their rows of the output and leave; at 9 -> 16 they are 7 of
every 16 requests' programs, resident and waiting while the live ones wait too. "pad"
(``mamba_ssm_kernels.PAD_EXIT``: the launch takes ``EARLY_SLOT`` 2) reads the slot before the wait on every such
launch, and a padded row's programs but its first leave before the wait; the first zeroes the whole head's
outputs after it. The table ("base") against it. Reference checks first (padded rows among them); then the bench,
after a torch kernel ("-nb"), and as a layer runs it (the conv, then the SSU); the agreement gate on each.

Runs at the commit with the switch (``mamba_ssm_kernels.PAD_EXIT``).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call279-ssu-pad-exit.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts, ssu_reference_checks  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm_kernels  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
VARIANTS = ("base", "pad")


def setv(v):
    mamba_ssm_kernels.PAD_EXIT = v == "pad"


ssu_reference_checks(VARIANTS, setv, ((D["fp32"], D["bf16"]), (D["bf16"], D["bf16"]), (D["fp32"], D["fp32"])),
                     batches=((16, 9), (64, 57), (16, 16)))
PADDED = [(9, 16), (57, 64), (257, 272)]
sw = Sweep("ab-ssu-pad-exit")
for part in parts("f,f-nb,ff,ff-nb,b,b-nb,pairs"):
    if part in ("f", "f-nb"):
        sw.run_parts([part], PADDED + [(16, 16), (64, 64)] if part == "f" else [(9, 16), (16, 16)], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["fp32"], D["bf16"], False, "cloned", 1))
    elif part in ("ff", "ff-nb"):
        sw.run_parts([part], [(9, 16), (57, 64)] if part == "ff" else [(9, 16)], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["fp32"], D["fp32"], False, "cloned", 1))
    elif part in ("b", "b-nb"):
        sw.run_parts([part], PADDED + [(16, 16), (64, 64)] if part == "b" else [(9, 16), (16, 16)], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["bf16"], D["bf16"], False, "cloned", 1))
    elif part == "pairs":
        pair_sweep("conv+ssu fb", ((9, 16), (57, 64)),
                   lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                                 SSUCase(a, c, D["fp32"], D["bf16"], False, "cloned", 1)),
                   VARIANTS, setv, "ssu-pad-exit-pairs.json")
        pair_sweep("conv+ssu bb", ((9, 16), (57, 64)),
                   lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                                 SSUCase(a, c, D["bf16"], D["bf16"], False, "cloned", 1)),
                   VARIANTS, setv, "ssu-pad-exit-pairs-bf16.json")
print("all done", flush=True)
