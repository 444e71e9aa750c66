"""Issue 14, call 130, three parts beside vLLM:

* ``gdn``: call 129's "pdl" (``gated_delta_rule.STREAM_EARLY_STATE``: the streaming kernel's two blocks read with
  the slot, before PDL's wait) confirmed against the rule ("base") over the streaming kernel's range, padded
  batches included.
* ``conv``: the window kernel without its barrier between the last load and the first in-place store
  (``causal_conv1d.WINDOW_BARRIER``; each element is loaded and stored by one thread), "nobar", speculative rows.
  The switch was in the tree this ran on and was not kept (no row moved beyond the spread): today "nobar" is "base".
* ``ssu``: the fp32 one-token kernel capped at 128 registers (``ab_sweep.register_cap``), "c128": at batch 4 its
  2,048 sixteen-row programs then fit one wave (16 an SM x 132; at 159 registers 12, 1.3 waves).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call130-confirm-barrier-cap.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import ALL, Sweep, parts, register_cap  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase, SSUCase  # noqa: E402
from mambalab.kernels import causal_conv1d as cv  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

D = bench.DTYPES
CAP = register_cap((ms._ssu_kernel,))
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-confirm-barrier-cap")
todo = parts("gdn,conv,ssu")


def setv(v):
    gdn.STREAM_EARLY_STATE = {2: (*ALL, False), 4: (*ALL, False)} if v == "pdl" else {}
    cv.WINDOW_BARRIER = v != "nobar"
    CAP[0] = 128 if v == "c128" else 0


if "gdn" in todo:
    shapes = [("bf16", a, c) for a, c in ((9, 16), (16, 16), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256),
                                          (257, 272), (512, 512))]
    shapes += [("fp32", a, c) for a, c in ((8, 8), (9, 16), (16, 16), (32, 32))]
    SWEEP.run("gdn", shapes, {"base": 0, "pdl": 1}, setv,
              lambda k: GDNCase(k[1], k[2], D[k[0]], D["bf16"], True, "cloned", 1))
if "conv" in todo:
    cases = [(s, T, b) for s in ("fp32", "bf16") for T in (2, 3, 4) for b in (1, 8, 64, 256)]
    SWEEP.run("conv", cases, {"base": 0, "nobar": 1}, setv,
              lambda k: ConvCase(k[2], k[2], D[k[0]], D[k[0]], True, "cloned", k[1]))
if "ssu" in todo:
    cases = [(a, b) for a in ("bf16", "fp32") for b in (2, 4, 8)]
    SWEEP.run("ssu", cases, {"base": 0, "c128": 1}, setv,
              lambda k: SSUCase(k[1], k[1], D["fp32"], D[k[0]], False, "cloned", 1, "head"))
