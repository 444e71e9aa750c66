"""Issue 14, call 269 (H200): call 266's A/B again at HEAD's rule, on the rows it was taken for, two passes: the
H200's ``mamba_ssm_devices.SSU_EARLY_SLOT`` ("slot", as shipped) against the table without it ("base"). fp32 state,
one token (bf16 and fp32 activations) at 9 / 9 -> 16 / 16 and T = 2 at 16; bench, after a torch kernel ("-nb"), and
as a layer runs it (the conv, then the SSU); the agreement gate on each.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call269-ssu-early-slot-confirm.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm_devices  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SHIPPED = dict(mamba_ssm_devices.SSU_EARLY_SLOT)
VARIANTS = ("base", "slot")


def setv(v):
    mamba_ssm_devices.SSU_EARLY_SLOT = {} if v == "base" else SHIPPED


KEYS = [(9, 9, 1), (9, 16, 1), (16, 16, 1), (16, 16, 2)]
sw = Sweep("ab-ssu-early-slot-confirm")
for rnd in (1, 2):
    print("pass", rnd, flush=True)
    for part in parts("f,f-nb,ff,ff-nb,pairs"):
        if part.startswith("f") and not part.startswith("ff"):
            sw.run_parts([part], KEYS, VARIANTS, setv,
                         lambda k: SSUCase(k[0], k[1], D["fp32"], D["bf16"], False, "cloned", k[2]))
        elif part.startswith("ff"):
            sw.run_parts([part], KEYS[:3], VARIANTS, setv,
                         lambda k: SSUCase(k[0], k[1], D["fp32"], D["fp32"], False, "cloned", 1))
        elif part == "pairs":
            pair_sweep("conv+ssu fb", ((9, 16), (16, 16)),
                       lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                                     SSUCase(a, c, D["fp32"], D["bf16"], False, "cloned", 1)),
                       VARIANTS, setv, f"ssu-early-slot-confirm-pairs{rnd}.json")
print("all done", flush=True)
