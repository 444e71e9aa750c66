"""Issue 14, call 121, two questions after the register cap of calls 117-119 (the bf16 token loop at 128 registers).

``t2``: two tokens a request, bf16 state, batch 16-256: the streaming kernel (``mamba_ssm.SSU_STREAM``, from 32 x 128
request x heads, uncapped: "base") against the capped token loop at every batch ("loop").

``fp32``: several tokens, fp32 state (95 registers, 8-row tiles, 21 programs an SM) at batch 8 and 64, T = 2-4:
4-row tiles ("r4") and 16-row tiles ("r16") against the rule's 8 ("base").

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT PARTS=t2,fp32 python3 docs/results/issue14-call121-spec-tiles.py
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
SWEEP = Sweep("ab-spec-tiles")
STREAM, ROWS = dict(ms.SSU_STREAM), (dict(ms.BLOCK_M_MULTI_TOKEN), dict(ms.BLOCK_M_MULTI_TOKEN_SMALL))


def set_t2(v):
    ms.SSU_STREAM = STREAM if v == "base" else {}


def set_fp32(v):
    rows = {"base": None, "r4": 4, "r16": 16}[v]
    ms.BLOCK_M_MULTI_TOKEN, ms.BLOCK_M_MULTI_TOKEN_SMALL = ROWS if rows is None else (
        {**ROWS[0], 4: rows}, {**ROWS[1], 4: rows})


todo = parts("t2,fp32")
if "t2" in todo:
    SWEEP.run("t2", [16, 32, 64, 128, 256], {"base": 0, "loop": 1}, set_t2,
              lambda b: SSUCase(b, b, D["bf16"], D["bf16"], False, "cloned", 2, "head"))
if "fp32" in todo:
    cases = [(act, b, T) for act in ("bf16", "fp32") for b in (8, 64) for T in (2, 3, 4)]
    SWEEP.run("fp32", cases, {"base": 0, "r4": 1, "r16": 2}, set_fp32,
              lambda k: SSUCase(k[1], k[1], D["fp32"], D[k[0]], False, "cloned", k[2], "head"))
