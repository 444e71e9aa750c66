"""Issue 14, call 72: (1) the SSU's gate ``z`` loaded with ``x`` ("zf": ``Z_FIRST``, ``HAS_Z`` 2) against after the
output ("base"), and with it the heads-first grid for bf16 with ``z`` too ("zfhf"), on the bench's ``z`` rows;
(2) the fp32 / bf16 small tile with ``A``/``dt`` per element (``UNTIED_BLOCK_M_SMALL``: "u4", "u8", "u16" rows;
shipped fp32 4, bf16 8) at batch 1-4; beside vLLM, the heads-first grid on (call 71's rule).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call72-z-first.py

The switches it sets (``Z_FIRST`` and ``_HF_Z``) were A/B knobs of the tree it ran on; the winners shipped as rules
(docs/benchmarks.md, "Heads before requests"), so the script runs as it was only at the tree of its call.
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-z-first")
USMALL = dict(ms.UNTIED_BLOCK_M_SMALL)


def setz(v):
    ms.Z_FIRST = v != "base"
    ms._HF_Z = v == "zfhf"


def setu(v):
    ms.UNTIED_BLOCK_M_SMALL = USMALL if v == "base" else {4: int(v[1:]), 2: int(v[1:])}


P = parts("z,untied")
if "z" in P:
    cases = [(s, b) for s in ("bf16", "fp32") for b in (1, 2, 8, 16, 64, 256)]
    SWEEP.run("z", cases, {"base": 0, "zf": 1, "zfhf": 2}, setz,
              lambda k: SSUCase(k[1], k[1], D[k[0]], D["bf16"], True, "cloned", 1, "head"))
if "untied" in P:
    cases = [(s, b) for s in ("fp32", "bf16") for b in (1, 2, 4)]
    SWEEP.run("untied", cases, {"base": 0, "u4": 1, "u8": 2, "u16": 3}, setu,
              lambda k: SSUCase(k[1], k[1], D[k[0]], D["bf16"], False, "cloned", 1, "element"))
