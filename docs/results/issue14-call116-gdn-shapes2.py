"""Issue 14, call 116: more streaming shapes for the GDN after call 115's bf16 finding (32 rows a program in 2 blocks
of 16 rows, not 4 of 8), beside vLLM.

``fp32``: the one-token streaming kernel for an fp32 state (``gated_delta_rule.STREAM[4]``, the rule's 4 x 2 x 2 at
batch 8-32; "base" is the rule: the general kernel from 33) opened to every batch, at 4 x 2 x 2, 8 x 2 x 2 and
16 x 2 x 2 (rows a block x blocks x stages), fp32 and bf16 activations, around the 57 -> 64 row that misses 1.1x.

``spec2``: the speculative streaming kernel (``SPEC_STREAM``, two tokens, bf16 state) at 16 x 2 x 2 against the
rule's 8 x 4 x 3.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call116-gdn-shapes2.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-gdn-shapes2")
STREAM, SPEC = dict(gdn.STREAM), dict(gdn.SPEC_STREAM)


def set_fp32(v):
    gdn.STREAM = STREAM if v == "base" else {**STREAM, 4: (*map(int, v[1:].split("x")), 8, 1 << 30)}


def set_spec(v):
    gdn.SPEC_STREAM = SPEC if v == "base" else {**SPEC, 2: (*map(int, v[1:].split("x")), 64, 1 << 30, 1)}


if "fp32" in parts("fp32,spec2"):
    cases = [(act, a, c) for act in ("bf16", "fp32") for a, c in ((32, 32), (57, 64), (64, 64), (128, 128))]
    SWEEP.run("fp32", cases, {"base": 0, "f4x2x2": 1, "f8x2x2": 2, "f16x2x2": 3}, set_fp32,
              lambda k: GDNCase(k[1], k[2], D["fp32"], D[k[0]], True, "cloned", 1))
if "spec2" in parts("fp32,spec2"):
    cases = [64, 128, 256]
    SWEEP.run("spec2", cases, {"base": 0, "s16x2x2": 1, "s16x2x3": 2}, set_spec,
              lambda k: GDNCase(k, k, D["bf16"], D["bf16"], True, "cloned", 2))
