"""Issue 14, call 274 (H200), call 272's script with two more forms (the variants below). Call 272 found the fence
after the state 1-5% slower in the bench, though alone under Nsight Compute (call 273) it was 1-2% faster. The guess tested: the
first wave after PDL's wait issues 8 KiB a program at once, and dt's round trip, issued after that burst, waits behind it.
"f4": A, dt_bias and dt (one a head) loaded first, then a fence, then ptxas' order; "f5": those first, a fence, the
state's 16 loads, a fence (FENCE 4 / 5). Call 272's header follows.

Call 272 (H200): the SSU's one-token loads in the order ptxas issues them. Compiled for sm_90
(scripts/kernel_resources.py, Triton 3.9), the fp32 state's 16-row tile (every fp32 launch from 9 requests) issues 4 of
its 16 128-bit state loads after PDL's wait, then the softplus, which waits on dt's round trip, then the other 12; the
bf16 state's one-warp tile from 17 x 128 request x heads splits 6 / 2 alike, the per-element fp32 tile interleaves its
loads with the softplus' MUFUs. A scheduling fence (``tl.debug_barrier``: a ``BAR.SYNC`` of one warp) after the state's
load keeps all its loads ahead of the arithmetic. Variants (``mamba_ssm_kernels.FENCE``, the kernel's FENCE, on every
one-token ``_ssu_kernel`` launch): "f1" the fence after the state's loads; "f3" and another after the token's.
Reference checks first; then the bench, after a torch kernel ("-nb"), and as a layer runs it (the conv, then the
SSU); the agreement gate on each.

Runs at 0e1d7c1, the commit with the switch (mamba_ssm_kernels.FENCE); the next commit takes it out (not taken).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call274-ssu-fence2.py
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
VARIANTS = ("base", "f4", "f5")


def setv(v):
    mamba_ssm_kernels.FENCE = {} if v == "base" else {2: int(v[1:]), 4: int(v[1:])}


ssu_reference_checks(VARIANTS, setv, ((D["fp32"], D["bf16"]), (D["bf16"], D["bf16"]), (D["fp32"], D["fp32"])),
                     batches=((9, 7), (16, 11), (64, 61)))
F = [(9, 9), (9, 16), (16, 16), (32, 32), (64, 64), (128, 128), (256, 256)]
SMALL = [(9, 9), (9, 16), (16, 16), (32, 32)]
sw = Sweep("ab-ssu-fence2")
for part in parts("f,f-nb,ff,ff-nb,b,b-nb,fz,pairs"):
    if part in ("f", "f-nb"):
        sw.run_parts([part], F if part == "f" else SMALL, VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["fp32"], D["bf16"], False, "cloned", 1))
    elif part.startswith("ff"):
        sw.run_parts([part], SMALL + ([(64, 64)] if part == "ff" else []), VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["fp32"], D["fp32"], False, "cloned", 1))
    elif part in ("b", "b-nb"):
        sw.run_parts([part], [(16, 16), (32, 32), (64, 64), (256, 256)][:4 if part == "b" else 3], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["bf16"], D["bf16"], False, "cloned", 1))
    elif part in ("fe", "be"):
        st = D["fp32"] if part == "fe" else D["bf16"]
        sw.run_parts([part], [(8, 8), (64, 64), (256, 256)], VARIANTS, setv,
                     lambda k, st=st: SSUCase(k[0], k[1], st, D["bf16"], False, "cloned", 1, dt="element"))
    elif part == "fz":
        sw.run_parts([part], [(16, 16), (64, 64)], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["fp32"], D["bf16"], True, "cloned", 1))
    elif part == "pairs":
        pair_sweep("conv+ssu fb", ((9, 16), (16, 16), (64, 64)),
                   lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                                 SSUCase(a, c, D["fp32"], D["bf16"], False, "cloned", 1)),
                   VARIANTS, setv, "ssu-fence2-pairs.json")
        pair_sweep("conv+ssu bb", ((64, 64),),
                   lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                                 SSUCase(a, c, D["bf16"], D["bf16"], False, "cloned", 1)),
                   VARIANTS, setv, "ssu-fence2-pairs-bf16.json")
print("all done", flush=True)
