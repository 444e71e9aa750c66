"""Issue 14, call 287 (H200): the conv's fp32 decode at 48-96 requests of NemotronH-8B's and Nemotron Nano 2's
channels (10240 / 12288; call 284: 1.066 / 1.065x at 64, vLLM at 69-73% of copy, 1.1x asked). Ours reads 73-74% of
copy there, as at 64 requests of 8192 (5.37 us, call 267) and 12-14 points under DECODE_DEEP's 4-row programs at
112-128 of 8192. One-warp programs of 2 requests x 64 channels: 8192 x 64 is 4096 programs, one wave of 32 a
streaming multiprocessor on 132 (4224); 10240 x 64 is 5120 (1.21 waves), 12288 x 64 6144 (1.45). Variants: as
committed ("base"); DECODE_DEEP's 4 rows and PDL from 64 of the rules' batch ("r4"); 4 rows without PDL at every
batch but DECODE_DEEP's ("r4n", DECODE_ROWS 4); 512 bytes of a column a program, 2 rows ("c512"). The bench, after a
torch kernel ("-nb"), and as a layer runs it (the conv, then the SSU with an fp32 state and bf16 activations).
8192 channels (Qwen3-Next, the main recording's conv) as the control. Runs at the commit that adds it.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call287-conv-waves.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, SSUCase  # noqa: E402
from mambalab.gpu.model_shapes import conv_shape, ssu_shape  # noqa: E402
from mambalab.kernels import causal_conv1d  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
VARIANTS = ("base", "r4", "r4n", "c512")
BASE = dict(deep=dict(causal_conv1d.DECODE_DEEP), rows=causal_conv1d.DECODE_ROWS,
            col=causal_conv1d.DECODE_COLUMN_BYTES)


def setc(v):
    causal_conv1d.DECODE_DEEP = dict(BASE["deep"])
    causal_conv1d.DECODE_ROWS, causal_conv1d.DECODE_COLUMN_BYTES = BASE["rows"], BASE["col"]
    if v == "r4":
        causal_conv1d.DECODE_DEEP[4] = (4, 64, BASE["deep"][4][2])
    elif v == "r4n":
        causal_conv1d.DECODE_ROWS = 4
    elif v == "c512":
        causal_conv1d.DECODE_COLUMN_BYTES = 512


def conv(k):  # (model, tp, batch)
    return ConvCase(k[2], k[2], D["fp32"], D["fp32"], True, "cloned", 1, shape=conv_shape(k[0], k[1]))


KEYS = ([("NemotronH-8B", 1, b) for b in (48, 64, 80)] + [("Nemotron-Nano-9B-v2", 1, b) for b in (48, 64, 80)]
        + [("Qwen3-Next-80B-A3B", 1, b) for b in (64, 80, 96)])
sw = Sweep("ab-conv-waves")
for part in parts("conv,conv-nb,pairs"):
    if part in ("conv", "conv-nb"):
        sw.run_parts([part], KEYS, VARIANTS, setc, conv)
    elif part == "pairs":
        for model in ("NemotronH-8B", "Nemotron-Nano-9B-v2"):
            pair_sweep(f"conv+ssu {model} fp32", ((48, 48), (64, 64), (80, 80)),
                       lambda a, c, m=model: (ConvCase(a, c, D["fp32"], D["fp32"], True, "cloned", 1,
                                                       shape=conv_shape(m, 1)),
                                              SSUCase(a, c, D["fp32"], D["bf16"], False, "cloned", 1,
                                                      shape=ssu_shape(m, 1))),
                       VARIANTS, setc, f"conv-waves-pairs-{model}.json")
print("all done", flush=True)
