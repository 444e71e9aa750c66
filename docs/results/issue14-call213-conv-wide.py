"""Issue 14, call 213 (H200): the conv's window kernel for an fp32 state with rows of 3-4 tokens at 64-512 requests
(the "wide" launches, 512 channels a program on 4 warps, PDL's trigger first from 128), where the bench's fp32 T = 4
at 256 sits on its 1.1x line (1.0997x in call 208; the copy floor 1.18x, call 53). Variants of the wide launch only:
"w8" 512 channels on 8 warps, "b1024" 1024 channels on 4 warps, "b1024w8" on 8, "b256" the narrow launch (256
channels, 4 warps), "m2" 512 on 4 with the trigger after the state's stores (mode 2). "base" is the tree.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call213-conv-wide.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase  # noqa: E402
from mambalab.kernels import causal_conv1d as cv  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
_config, _mode = cv.window_launch_config, cv.window_pdl_mode
V = {"base": None, "w8": (512, 8, None), "b1024": (1024, 4, None), "b1024w8": (1024, 8, None),
     "b256": (256, 4, None), "m2": (512, 4, 2)}


def setv(v):
    pick = V[v]
    if pick is None:
        cv.window_launch_config, cv.window_pdl_mode = _config, _mode
        return

    def config(dim, batch, max_t, es):
        if cv._window_wide(batch, max_t, es):
            return min(pick[0], 1 << (dim - 1).bit_length()), pick[1]
        return _config(dim, batch, max_t, es)

    def mode(batch, max_t, es):
        if pick[2] is not None and cv._window_wide(batch, max_t, es):
            return pick[2]
        return _mode(batch, max_t, es)

    cv.window_launch_config, cv.window_pdl_mode = config, mode


CASES = [(4, 64), (4, 128), (4, 256), (4, 512), (3, 128), (3, 256), (3, 512)]
Sweep("ab-conv-wide").run_parts(parts("win"), CASES, tuple(V), setv,
                                lambda k: ConvCase(k[1], k[1], D["fp32"], D["fp32"], False, "cloned", k[0]))
print("all done", flush=True)
