"""Issue 14, call 283 (H200): the conv's fp32 PDL range in work units. Call 282 found the decode rules better asked
with the batch of 8192 channels with the same work (``causal_conv1d_kernels.CONV_RULE_DIM`` 8192), except NemotronH-8B
(10240 channels) at 16 requests, which that asks as 20, above ``PDL_MAX_BATCH_DECODE``'s fp32 16, and which ran 11%
faster with PDL. Variants: the batch as it is ("base", as committed), the scaled batch with PDL for fp32 up to 16 /
24 / 32 of it ("s16", "s24", "s32"), at fp32 states whose scaled batch spans 16-48; the bench, after a torch kernel
("-nb"), and as a layer runs it (the conv, then the GDN with an fp32 state). Runs at the commit of call 282's switch.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call283-conv-pdl-work.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase  # noqa: E402
from mambalab.gpu.model_shapes import conv_shape, gdn_shape  # noqa: E402
from mambalab.kernels import causal_conv1d, causal_conv1d_kernels  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
QWEN = "Qwen3-Next-80B-A3B"
VARIANTS = ("base", "s16", "s24", "s32")
PDL_FP32 = causal_conv1d.PDL_MAX_BATCH_DECODE[4]


def setc(v):
    causal_conv1d_kernels.CONV_RULE_DIM = 0 if v == "base" else 8192
    causal_conv1d.PDL_MAX_BATCH_DECODE[4] = PDL_FP32 if v == "base" else int(v[1:])


def conv(k):  # (model, tp, batch)
    return ConvCase(k[2], k[2], D["fp32"], D["fp32"], True, "cloned", 1, shape=conv_shape(k[0], k[1]))


KEYS = ([(QWEN, 1, b) for b in (16, 20, 24, 32)] + [("NemotronH-8B", 1, b) for b in (16, 24, 32)]
        + [("Nemotron-Nano-9B-v2", 1, b) for b in (16, 24)] + [("Falcon-H1-7B", 1, b) for b in (32, 48, 64, 96)]
        + [(QWEN, 4, b) for b in (64, 96, 128)])
sw = Sweep("ab-conv-pdl-work")
for part in parts("conv,conv-nb,pairs"):
    if part in ("conv", "conv-nb"):
        sw.run_parts([part], KEYS, VARIANTS, setc, conv)
    elif part == "pairs":
        for tp, shapes in ((1, ((16, 16), (24, 24), (32, 32))), (4, ((64, 64), (96, 96), (128, 128)))):
            pair_sweep(f"conv+gdn tp{tp} fp32", shapes,
                       lambda a, c, tp=tp: (ConvCase(a, c, D["fp32"], D["fp32"], True, "cloned", 1,
                                                     shape=conv_shape(QWEN, tp)),
                                            GDNCase(a, c, D["fp32"], D["bf16"], True, "cloned", 1,
                                                    shape=gdn_shape(QWEN, tp))),
                       VARIANTS, setc, f"conv-pdl-work-pairs-tp{tp}.json")
print("all done", flush=True)
