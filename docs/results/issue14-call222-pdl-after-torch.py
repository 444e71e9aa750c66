"""Issue 14, call 222 (H200): the after-torch rows where mambalab trails vLLM (call 215's recording: 17 SSU rows at
batch 1-9, 0.90-0.997x, and the GDN bf16 T = 2 / 3 at 1), each with programmatic dependent launch on (the tree) and
off ("nopdl", ``MAMBALAB_PDL=0``: the same kernels launched without the attribute, their early state loads in program
order). Is the gap the PDL launch's after a kernel that does not trigger it? After a torch kernel ("-nb"), the bench,
and as a layer runs it (the conv, then the SSU; "nopdl" there takes PDL off both).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call222-pdl-after-torch.py
"""
import os
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase, SSUCase  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)


def setv(v):
    os.environ["MAMBALAB_PDL"] = "0" if v == "nopdl" else "1"


VARIANTS = ("base", "nopdl")
PARTS = parts("ssu-nb,ssu,gdn-nb,gdn,pairs")
# (state, act, z, batch, tokens): the after-torch rows behind vLLM in call 215's recording
SSU_ROWS = [("fp32", "bf16", False, n, 1) for n in (1, 2, 4, 8)] + [("fp32", "bf16", True, 1, 1),
            ("fp32", "bf16", False, 1, 3)] + [("bf16", "bf16", False, n, 1) for n in (1, 2, 4, 8, 9)] + [
            ("bf16", "bf16", True, n, 1) for n in (1, 8)] + [("fp32", "fp32", False, n, 1) for n in (1, 2, 4, 8)]
sweep = Sweep("ab-pdl-after-torch")
sweep.run_parts([p for p in PARTS if p.startswith("ssu")], SSU_ROWS, VARIANTS, setv,
                lambda k: SSUCase(k[3], k[3], D[k[0]], D[k[1]], k[2], "cloned", k[4]))
sweep.run_parts([p for p in PARTS if p.startswith("gdn")], [2, 3], VARIANTS, setv,
                lambda T: GDNCase(1, 1, D["bf16"], D["bf16"], True, "cloned", T))
if "pairs" in PARTS:
    for state in ("fp32", "bf16"):
        pair_sweep(f"conv+ssu {state}", ((1, 1), (2, 2), (4, 4), (8, 8)),
                   lambda a, c, s=state: (ConvCase(a, c, D["bf16"], D["bf16"], False, "cloned", 1),
                                          SSUCase(a, c, D[s], D["bf16"], False, "cloned", 1)),
                   VARIANTS, setv, f"pdl-after-torch-pairs-{state}.json")
print("all done", flush=True)
