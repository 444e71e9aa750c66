"""Issue 14, call 289 (H200): ``A``/``dt`` per element at Falcon-H1's 256-wide state, batch by batch. Call 288 found
the untied launch's rows halved there ("base", ``mamba_ssm_kernels.WIDE_STATE_DIV`` 1) faster at 8, 64 and 256 and in
every fp32 row, but the table's rows ("div0") faster for a bf16 state at 1 (2.56 -> 2.11 us) and at 9 -> 16 (16.32 ->
10.65 us). Both again at 1-64 requests, padded and not, bf16 and fp32 state with bf16 activations, gated beside vLLM,
in the bench and after a torch kernel ("-nb"), to find where each wins.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call289-ssu-untied-wide-batches.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.gpu.model_shapes import ssu_shape  # noqa: E402
from mambalab.kernels import mamba_ssm_kernels  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
DIV = mamba_ssm_kernels.WIDE_STATE_DIV
BATCHES = ((1, 1), (2, 2), (4, 4), (8, 8), (9, 9), (12, 12), (16, 16), (9, 16), (24, 24), (32, 32), (48, 48),
           (57, 64))


def set_div(v):
    mamba_ssm_kernels.WIDE_STATE_DIV = 0 if v == "div0" else DIV


def untied(k):  # (state, (active, captured))
    return SSUCase(*k[1], D[k[0]], D["bf16"], False, "cloned", 1, dt="element", shape=ssu_shape("Falcon-H1-1.5B", 1))


keys = [(s, b) for s in ("bf16", "fp32") for b in BATCHES]
Sweep("ab-untied-wide-batches").run_parts(parts("ssu,ssu-nb"), keys, ("base", "div0"), set_div, untied)
print("all done", flush=True)
