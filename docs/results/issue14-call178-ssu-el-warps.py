"""Issue 14, calls 178 (an H200 came) and 181 (an H100): the SSU with ``A``/``dt`` per element, fp32 state, bf16
activations, at 16-512 (outputs: ``issue14-call178-ssu-el-warps-h200.*``, ``issue14-call181-ssu-el-warps-h100.*``).

Call 173's recording read it behind vLLM at 256 / 512 (0.998 / 0.990x); call 174 tried 8 / 16 rows and 2 / 4
requests a program (8 rows on 2 warps +0.6-1.2%, 512 still 0.997x). Not tried there: more warps on the table's 4-row
tile. One-warp programs are capped by the SM's 32 resident blocks at 32 warps (half the H100's 64), while vLLM's
launch for this shape is 4 rows on 4 warps. Beside the table ("base": 4 rows, 1 warp, heads first, no PDL):
``launch_config_override`` 4 rows on 1 / 2 / 4 warps ("m04w1" is the table's shape through the override, the
control), 8 rows on 2 / 4 warps, 2 rows on 1 warp, the table without the heads-first grid ("nohf"), and 4 rows on
2 warps with PDL ("p04w2").

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call178-ssu-el-warps.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-el")
PDL_MIN, HF = ms.PDL_FP32_NO_PDL_BLOCK_M, ms.HEADS_FIRST_GRID
V = ["base", "nohf", "m04w1", "m04w2", "m04w4", "m08w2", "m08w4", "m02w1", "p04w2"]


def set_v(v):
    ms.PDL_FP32_NO_PDL_BLOCK_M = 2 if v.startswith("p") else PDL_MIN
    ms.HEADS_FIRST_GRID = HF if v != "nohf" else False
    ms._override = ms.LaunchConfig(int(v[1:3]), int(v[-1])) if v[0] in "mp" else None


SWEEP.run("ssu-el", [(b, b) for b in (16, 64, 128, 256, 512)], V, set_v,
          lambda k: SSUCase(k[0], k[1], D["fp32"], D["bf16"], False, "cloned", 1, "element"))
print("all done", flush=True)
