"""Issue 14, call 282 (H200): the conv's decode rules (``PDL_MAX_BATCH_DECODE``, ``DECODE_TRIGGER``,
``DECODE_DEEP``, measured at Qwen3-Next's 8192 channels) asked with the batch as it is ("base") or with the batch of
8192 channels with the same work ("scaled": ``causal_conv1d_kernels.CONV_RULE_DIM`` 8192), at a tensor-parallel
rank's channels (``mambalab.gpu.model_shapes``; call 281 found Qwen3-Next TP 8, fp32, 64 requests behind vLLM,
0.834x). Beside vLLM 0.33 with the agreement gate: the bench, after a torch kernel ("-nb"), and as a layer runs it (the
conv, then the GDN). Then the SSU as shipped at Falcon-H1-7B (rows halved at dstate 256, "base") against the table's
rows ("table"). Runs at the commit that adds the conv's switch (off).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call282-conv-rule-dim.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase, SSUCase  # noqa: E402
from mambalab.gpu.model_shapes import conv_shape, gdn_shape, ssu_shape  # noqa: E402
from mambalab.kernels import causal_conv1d_kernels, mamba_ssm_kernels  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
QWEN = "Qwen3-Next-80B-A3B"
WIDE = mamba_ssm_kernels.WIDE_STATE_DIV


def setc(v):
    causal_conv1d_kernels.CONV_RULE_DIM = 8192 if v == "scaled" else 0


def sets(v):
    mamba_ssm_kernels.WIDE_STATE_DIV = 0 if v == "table" else WIDE


def conv(k):  # (model, tp, dtype, batch)
    return ConvCase(k[3], k[3], D[k[2]], D[k[2]], True, "cloned", 1, shape=conv_shape(k[0], k[1]))


todo = parts("conv,conv-nb,pairs,wide")
sw = Sweep("ab-conv-rule-dim")
MODELS = ((QWEN, 8), (QWEN, 4), (QWEN, 2), (QWEN, 1), ("NemotronH-8B", 4), ("NemotronH-8B", 1), ("Falcon-H1-1.5B", 1))
for part in todo:
    if part == "conv":
        keys = [(m, tp, t, b) for m, tp in MODELS for t in ("fp32", "bf16") for b in (1, 8, 16, 32, 64, 128, 256)]
        sw.run_parts([part], keys, ("base", "scaled"), setc, conv)
    elif part == "conv-nb":
        keys = [(m, tp, t, b) for m, tp in MODELS[:2] for t in ("fp32", "bf16") for b in (1, 8, 16, 32, 64)]
        sw.run_parts([part], keys, ("base", "scaled"), setc, conv)
    elif part == "pairs":
        for tp in (8, 4):
            for t in ("fp32", "bf16"):
                pair_sweep(f"conv+gdn tp{tp} {t}", ((16, 16), (64, 64), (128, 128)),
                           lambda a, c, tp=tp, t=t: (
                               ConvCase(a, c, D[t], D[t], True, "cloned", 1, shape=conv_shape(QWEN, tp)),
                               GDNCase(a, c, D[t], D["bf16"], True, "cloned", 1, shape=gdn_shape(QWEN, tp))),
                           ("base", "scaled"), setc, f"conv-rule-dim-pairs-tp{tp}-{t}.json")
    elif part == "wide":
        keys = [("Falcon-H1-7B", t, a, c) for t in ("fp32", "bf16") for a, c in ((1, 1), (8, 8), (9, 16), (64, 64))]
        sw.run_parts([part], keys, ("base", "table"), sets,
                     lambda k: SSUCase(k[2], k[3], D[k[1]], D["bf16"], False, "cloned", 1, shape=ssu_shape(k[0])))
print("all done", flush=True)
