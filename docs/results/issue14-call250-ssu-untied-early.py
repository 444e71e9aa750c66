"""Issue 14, call 250 (H200): the SSU with ``A``/``dt`` per element and an fp32 state (the one-request Triton kernel,
``A`` tile per program) read before PDL's wait at 2-16 requests, where the table stops at 2 x 128 request x heads
(``mamba_ssm.EARLY_STATE_MAX_UNTIED``, call 73): "early" (state and ``A`` tile before the wait) and "half" (as the tied
fp32 state at 5-8 x 128 since call 229: the even row blocks' state before the wait, the odd ones' after it, the ``A``
tile before it), against the table ("base"). The recording's row at 8 reads 1.043x, 1.1x asked (vLLM at 74% of copy).
Bench, after a torch kernel ("-nb"), and as a layer runs it (the conv, then the SSU); the agreement gate on each.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call250-ssu-untied-early.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
TABLE, HALF = dict(mamba_ssm.EARLY_STATE_MAX_UNTIED), mamba_ssm.ssu_early_half
ONE = mamba_ssm.EARLY_STATE_MAX_REQUEST_HEADS  # the one-token early range, every A/dt form (this sweep: per element)


def half_untied(device, size, tied, one_token, rh):
    return HALF(device, size, tied, one_token, rh) or (not tied and one_token and size == 4 and 5 * 128 <= rh <= 8 * 128)


def setv(v):
    mamba_ssm.EARLY_STATE_MAX_UNTIED = TABLE if v == "base" else {**TABLE, 4: 16 * 128}
    mamba_ssm.EARLY_STATE_MAX_REQUEST_HEADS = ONE if v == "base" else 16 * 128
    mamba_ssm.ssu_early_half = half_untied if v == "half" else HALF


VARIANTS = ("base", "early", "half")
sw = Sweep("ab-ssu-untied-early")
for part in parts("fp32,fp32-nb,ff,ff-nb,pairs"):
    if part.startswith("fp32"):
        sw.run_parts([part], [(2, 2), (4, 4), (6, 6), (8, 8), (9, 9), (16, 16), (9, 16)], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["fp32"], D["bf16"], False, "cloned", 1, dt="element"))
    elif part.startswith("ff"):
        sw.run_parts([part], [(4, 4), (8, 8)], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["fp32"], D["fp32"], False, "cloned", 1, dt="element"))
    elif part == "pairs":
        pair_sweep("conv+ssu fb dt=element", ((4, 4), (8, 8), (16, 16)),
                   lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                                 SSUCase(a, c, D["fp32"], D["bf16"], False, "cloned", 1, dt="element")),
                   VARIANTS, setv, "ssu-untied-early-pairs.json")
print("all done", flush=True)
