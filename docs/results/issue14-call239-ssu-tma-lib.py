"""Issue 14, call 239 (H200): the SSU's CUDA kernel as shipped (``lib/mambalab/kernels/cuda/ssu_decode_tma.cu``,
routed by ``mamba_ssm_tma.RULES``) against the Triton kernel ("base": the rule off) and vLLM 0.33's, at the rule's
batches and just outside them. The shipped source is call 237's kernel without the warp, piece and early-piece
generality (one warp a CTA, one bulk copy, all before the wait): less code, so it is measured again here.
Bench, after a torch kernel ("-nb"), and as a layer runs it (the conv, then the SSU); the agreement gate on each.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call239-ssu-tma-lib.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm_tma as tma  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SHIPPED = tma.RULES


def setv(v):
    tma.RULES = SHIPPED if v == "rule" else {}


VARIANTS = ("base", "rule")
PARTS = parts("bf16,bf16-nb,fp32,fp32-nb,z,z-nb,pairs")
sw = Sweep("ab-ssu-tma-lib")
for part in PARTS:
    kind = part.removesuffix("-nb")
    if kind == "bf16":
        sw.run_parts([part], [(n, n) for n in (1, 2, 4, 5, 6, 7, 8, 9, 12, 13, 16)] + [(9, 16)], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["bf16"], D["bf16"], False, "cloned", 1))
    elif kind == "fp32":
        sw.run_parts([part], [(1, 1), (2, 2)], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["fp32"], D["bf16"], False, "cloned", 1))
        sw.run_parts([part.replace("fp32", "ff")], [(1, 1), (2, 2)], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["fp32"], D["fp32"], False, "cloned", 1))
    elif kind == "z":
        sw.run_parts([part], [(1, 1), (8, 8)], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["bf16"], D["bf16"], True, "cloned", 1))
        sw.run_parts([part.replace("z", "zf")], [(1, 1)], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["fp32"], D["bf16"], True, "cloned", 1))
if "pairs" in PARTS:
    for st, shapes in ((D["bf16"], ((1, 1), (4, 4), (8, 8), (12, 12))), (D["fp32"], ((1, 1),))):
        tag = "b" if st == D["bf16"] else "f"
        pair_sweep(f"conv+ssu {tag}b", shapes,
                   lambda a, c, st=st: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                                        SSUCase(a, c, st, D["bf16"], False, "cloned", 1)),
                   VARIANTS, setv, f"ssu-tma-lib-pairs-{tag}.json")
print("all done", flush=True)
