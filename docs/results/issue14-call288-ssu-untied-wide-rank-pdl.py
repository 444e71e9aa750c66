"""Issue 14, call 288 (H200): two SSU questions the model-shapes recording (call 284) left.

1. ``A``/``dt`` per element at a 256-wide state (Falcon-H1), never timed: the untied launch's tile (UNTIED_BLOCK_M,
   its tiny-batch rows) is halved there as the per-head one is (``mamba_ssm_kernels.WIDE_STATE_DIV`` 1, "base")
   against the table's rows ("div0"), fp32 / bf16 state, bf16 activations, gated beside vLLM, in the bench and after
   a torch kernel ("-nb").
2. A tensor-parallel rank's small launches after a torch kernel (call 284: NemotronH-8B TP 2-8 at 1-16 requests down
   to 0.80x): PDL as committed ("base") against none for the SSU ("nopdl": the Triton kernel's and the CUDA kernel's
   ``use_pdl`` false), in the bench, after a torch kernel, and as a layer runs it (the conv with a bf16 state, then
   the SSU), the only place the SSU follows a kernel in a model.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call288-ssu-untied-wide-rank-pdl.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, SSUCase  # noqa: E402
from mambalab.gpu.model_shapes import conv_shape, ssu_shape  # noqa: E402
from mambalab.kernels import mamba_ssm, mamba_ssm_kernels, mamba_ssm_tma  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
DIV, PDL = mamba_ssm_kernels.WIDE_STATE_DIV, (mamba_ssm.use_pdl, mamba_ssm_tma.use_pdl)
BATCHES = ((1, 1), (8, 8), (9, 16), (64, 64), (256, 256))


def set_div(v):
    mamba_ssm_kernels.WIDE_STATE_DIV = 0 if v == "div0" else DIV


def set_pdl(v):
    mamba_ssm.use_pdl, mamba_ssm_tma.use_pdl = ((lambda device: False),) * 2 if v == "nopdl" else PDL


def untied(k):  # (model, state, (active, captured))
    return SSUCase(*k[2], D[k[1]], D["bf16"], False, "cloned", 1, dt="element", shape=ssu_shape(k[0], 1))


def rank(k):  # (tp, state, (active, captured))
    return SSUCase(*k[2], D[k[1]], D["bf16"], False, "cloned", 1, shape=ssu_shape("NemotronH-8B", k[0]))


todo = parts("untied,untied-nb,rank,rank-nb,pairs")


def harness(prefix):  # the bench's ("ssu") or after a torch kernel ("ssu-nb") for the parts named prefix[-nb]
    return [("ssu-nb" if p.endswith("-nb") else "ssu") for p in todo if p.split("-")[0] == prefix]


if harness("untied"):
    keys = [(m, s, b) for m in ("Falcon-H1-1.5B", "Falcon-H1-7B") for s in ("fp32", "bf16") for b in BATCHES]
    Sweep("ab-untied-wide").run_parts(harness("untied"), keys, ("base", "div0"), set_div, untied)
if harness("rank"):
    keys = [(tp, s, b) for tp in (2, 4, 8) for s in ("fp32", "bf16") for b in BATCHES[:3]]
    Sweep("ab-rank-pdl").run_parts(harness("rank"), keys, ("base", "nopdl"), set_pdl, rank)
if "pairs" in todo:
    for tp in (2, 4, 8):
        for s in ("fp32", "bf16"):
            pair_sweep(f"conv+ssu NemotronH-8B tp{tp} {s}", BATCHES[:3],
                       lambda a, c, tp=tp, s=s: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1,
                                                          shape=conv_shape("NemotronH-8B", tp)),
                                                 SSUCase(a, c, D[s], D["bf16"], False, "cloned", 1,
                                                         shape=ssu_shape("NemotronH-8B", tp))),
                       ("base", "nopdl"), set_pdl, f"rank-pdl-pairs-tp{tp}-{s}.json")
print("all done", flush=True)
