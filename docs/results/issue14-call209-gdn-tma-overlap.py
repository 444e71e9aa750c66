"""Issue 14, call 209 (H200): the GDN bf16 packed decode at 16-128 requests, the TMA kernel's two levers left for how
a launch overlaps the one before (call 204: alone it is level with the Triton tree at 64 and 3.7% faster at 32; in
the bench under PDL 1-2% behind there, call 206). "pPepE": a warp's rows in P bulk copies of which only the first E
are issued before PDL's wait, as the Triton kernel reads only its first 16-row block early; "capN": one-warp 32-row
CTAs launched with N KiB of shared memory (8 used), so fewer are resident an SM and the next launch's fit beside the
last wave (call 209's first run stopped at the launch: the loader sets a function's dynamic shared-memory limit to
what it uses, so this script raises it for the cap variants). "base" is the tree (the Triton kernel from 17 requests, the TMA kernel's r32w1 from 4 to 16).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call209-gdn-tma-overlap.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule_tma as tma  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
T = tma.TmaShape
R32 = T(32, 1, True, False, 1)
SHAPES = {"base": (None, 0), "r32w1": (R32, 0), "p2ep1": (T(32, 1, True, False, 2, 0, 1), 0),
          "p4ep2": (T(32, 1, True, False, 4, 0, 2), 0), "cap12": (R32, 12), "cap16": (R32, 16)}
_smem = tma.shape_smem
# the loader raised R32's dynamic shared-memory limit to the 8 KiB it uses; the cap variants launch it with more
_drv = tma._get_driver()
_fn = _drv.function(torch.device("cuda", torch.cuda.current_device()), R32.entry)
_drv.check(_drv.lib.cuFuncSetAttribute(_fn, tma._MAX_DYNAMIC_SHARED_SIZE_BYTES, 16 * 1024), "cuFuncSetAttribute")


def setv(v):
    shape, kib = SHAPES[v]
    tma.FORCE = shape
    tma.shape_smem = (lambda s, kib=kib: kib * 1024) if kib else _smem


VARIANTS = tuple(SHAPES)
CASES = [(16, 16), (32, 32), (57, 64), (64, 64), (128, 128)]
PARTS = parts("pairs,gdn")
if "pairs" in PARTS:
    pair_sweep("conv+gdn bf16", ((32, 32), (64, 64)),
               lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                             GDNCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1)),
               VARIANTS, setv, "gdn-tma-overlap-pairs.json")
Sweep("ab-gdn-tma-overlap").run_parts(PARTS, CASES, VARIANTS, setv,
                                      lambda k: GDNCase(k[0], k[1], D["bf16"], D["bf16"], True, "cloned", 1))
print("all done", flush=True)
