"""Issue 14, call 205 (H200): the GDN bf16 packed decode, the Triton tree against the CUDA kernel with TMA
(one-warp 32-row CTAs, plain stores), each with and without programmatic dependent launch. Call 204 (Nsight Compute,
one launch alone) put the TMA kernel level or ahead (64 / 32: 35.39 / 19.26 us against 35.58 / 20.00), where the
bench (calls 200-201, launches back to back under PDL) puts it 3-7% behind: is the loss the overlap of one launch with
the next? "-nopdl" sets MAMBALAB_PDL=0 for its launches (``common.use_pdl`` reads it at each launch).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call205-gdn-tma-pdl.py
"""
import os
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule_tma as tma  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
R32 = tma.TmaShape(32, 1, True, False, 1)
VARIANTS = {"base": (None, "1"), "r32w1": (R32, "1"), "base-nopdl": (None, "0"), "r32w1-nopdl": (R32, "0")}


def setv(v):
    tma.FORCE, os.environ["MAMBALAB_PDL"] = VARIANTS[v]


CASES = [(8, 8), (16, 16), (32, 32), (64, 64), (128, 128)]
Sweep("ab-gdn-tma-pdl").run_parts(parts("gdn"), CASES, tuple(VARIANTS), setv,
                                  lambda k: GDNCase(k[0], k[1], D["bf16"], D["bf16"], True, "cloned", 1))
print("all done", flush=True)
