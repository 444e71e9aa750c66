"""Issue 14, call 124: the GDN's bf16 streaming kernel in its new shape (16-row blocks x 2, 2 stages; calls 114-115)
takes 128 registers a thread (16 programs an SM; the old 8 x 4 took 80, 24), by the local compile
(``scripts/kernel_resources.py``, no spill at any cap down to 80). Variants against the rule ("base"): capped at
112 / 96 / 80 (``ab_sweep.register_cap``), and more warps a program: 16 x 2 on 2 warps ("w2"), 16 x 4 x 3
on 2, 32 x 2 x 2 and 32 x 4 x 3 on 4 (rows a block x blocks x stages), beside vLLM.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call124-gdn-stream16.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, register_cap  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402

D = bench.DTYPES
CAP = register_cap((gdn._gdn_stream_kernel,))  # it ran as gated_delta_rule.STREAM_MAXNREG, since folded in
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-gdn-stream16")
STREAM, CONFIG, WARPS = dict(gdn.STREAM), gdn.launch_config, [0]
gdn.launch_config = lambda *a, **k: (*CONFIG(*a, **k)[:2], WARPS[0]) if WARPS[0] else CONFIG(*a, **k)


def setv(v):
    CAP[0] = int(v[1:]) if v.startswith("c") else 0
    shape, warps = {"w2": ("16x2x2", 2), "s16x4x3w2": ("16x4x3", 2), "s32x2x2w4": ("32x2x2", 4),
                    "s32x4x3w4": ("32x4x3", 4)}.get(v, (None, 0))
    gdn.STREAM = STREAM if shape is None else {**STREAM, 2: (*map(int, shape.split("x")), 16, 1 << 30)}
    WARPS[0] = warps


cases = [(a, c) for a, c in ((16, 16), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256), (512, 512))]
SWEEP.run("gdn", cases, {"base": 0, "c112": 1, "c96": 2, "c80": 3, "w2": 4, "s16x4x3w2": 5, "s32x2x2w4": 6,
                         "s32x4x3w4": 7}, setv,
          lambda k: GDNCase(k[0], k[1], D["bf16"], D["bf16"], True, "cloned", 1))
