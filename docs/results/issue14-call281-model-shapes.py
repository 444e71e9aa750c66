"""Issue 14, call 281 (H200): the three kernels at the shapes of models people serve, one tensor-parallel rank's share
(``mambalab.gpu.model_shapes``), beside vLLM 0.33 with the agreement gate: NemotronH-8B at TP 2 / 4 / 8, Nemotron
Nano 2 (head dim 80) at TP 1 / 2, Falcon-H1 1.5B and 7B (dstate 256), Qwen3-Next at TP 2 / 4 / 8 (GDN and its conv).
The launch rules were measured at NemotronH-8B's and Qwen3-Next's whole shapes (the bench's).

For dstate 256 three SSU tilings ("wide" parts): the table's rows ("base"), halved ("half") and quartered
("quarter"): ``mamba_ssm_kernels.WIDE_STATE_DIV`` 0 / 1 / 2. Reference checks first (each variant against the torch
reference at Falcon-H1's heads, Nemotron Nano 2's too). Runs at the commit that adds the switch (off).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call281-model-shapes.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts, ssu_reference_checks  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase, SSUCase  # noqa: E402
from mambalab.gpu.model_shapes import conv_shape, gdn_shape, ssu_shape  # noqa: E402
from mambalab.kernels import mamba_ssm_kernels  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
WIDE = {"base": 0, "half": 1, "quarter": 2}
FALCON = ("Falcon-H1-1.5B", "Falcon-H1-7B")
BATCHES = [(1, 1), (8, 8), (9, 16), (64, 64), (256, 256)]
TYPES = [("fp32", "bf16"), ("bf16", "bf16")]


def setv(v):
    mamba_ssm_kernels.WIDE_STATE_DIV = WIDE.get(v, 0)


def ssu(k):  # (model, tp, state, act, active, captured)
    return SSUCase(k[4], k[5], D[k[2]], D[k[3]], False, "cloned", 1, shape=ssu_shape(k[0], k[1]))


def gdn(k):
    return GDNCase(k[4], k[5], D[k[2]], D[k[3]], True, "cloned", 1, shape=gdn_shape(k[0], k[1]))


def conv(k):
    return ConvCase(k[4], k[5], D[k[2]], D[k[3]], True, "cloned", 1, shape=conv_shape(k[0], k[1]))


todo = parts("check,wide,wide-nb,gdn,ssu,conv")
if "check" in todo:
    for model in FALCON + ("Nemotron-Nano-9B-v2",):
        s = ssu_shape(model)
        ssu_reference_checks(tuple(WIDE) if model in FALCON else ("base",), setv,
                             ((D["fp32"], D["bf16"]), (D["bf16"], D["bf16"])), has_z=(False,),
                             batches=((1, 1), (8, 8), (9, 7), (64, 60)), nheads=s["nheads"], dim=s["headdim"],
                             dstate=s["dstate"])
sw = Sweep("ab-model-shapes")
for part in todo:
    if part == "wide":
        keys = [(m, 1, st, act, a, c) for m in FALCON for st, act in TYPES for a, c in BATCHES]
        sw.run_parts([part], keys, tuple(WIDE), setv, ssu)
    elif part == "wide-nb":  # after a torch kernel that does not trigger PDL
        keys = [(m, 1, st, act, a, c) for m in FALCON for st, act in TYPES for a, c in BATCHES[:2]]
        sw.run_parts([part], keys, tuple(WIDE), setv, ssu)
    elif part == "gdn":
        keys = [("Qwen3-Next-80B-A3B", tp, st, act, a, c) for tp in (2, 4, 8)
                for st, act in (("bf16", "bf16"), ("fp32", "bf16")) for a, c in BATCHES]
        sw.run_parts([part], keys, ("base",), setv, gdn)
    elif part == "ssu":
        keys = [(m, tp, st, act, a, c) for m, tp in (("NemotronH-8B", 2), ("NemotronH-8B", 4), ("NemotronH-8B", 8),
                                                     ("Nemotron-Nano-9B-v2", 1), ("Nemotron-Nano-9B-v2", 2))
                for st, act in TYPES for a, c in BATCHES]
        sw.run_parts([part], keys, ("base",), setv, ssu)
    elif part == "conv":
        models = (("Qwen3-Next-80B-A3B", 2), ("Qwen3-Next-80B-A3B", 4), ("Qwen3-Next-80B-A3B", 8),
                  ("NemotronH-8B", 1), ("Nemotron-Nano-9B-v2", 1), ("Falcon-H1-7B", 1))
        keys = [(m, tp, t, t, a, a) for m, tp in models for t in ("bf16", "fp32") for a in (1, 8, 64, 256)]
        sw.run_parts([part], keys, ("base",), setv, conv)
print("all done", flush=True)
