"""Issue 14, call 193 (H100): call 191's A/B (``issue14-call191-ssu-hint-range.py``) on an H100, whose batch 9-16
took the hint from 1 when the H100 was last recorded (call 182). The tree's hint now starts at 17 x 128 request x
heads, so "base" is call 191's "from17" and "from1" is the old rule; "from33" as in call 191. Up to batch 8 the
H100's rule reads the state early (``mamba_ssm_devices``), so no hint applies there.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call193-ssu-hint-range-h100.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ssu  # noqa: E402

D, BF = bench.DTYPES, bench.DTYPES["bf16"]
print("device", torch.cuda.get_device_name(), flush=True)
HINT = ssu.PREFETCH_STATE[2]
FEWEST = {"from1": 1, "base": HINT[1], "from33": 33 * 128}


def setv(v):
    ssu.PREFETCH_STATE[2] = (HINT[0], FEWEST[v], HINT[2])


VARIANTS = tuple(FEWEST)
# (active, captured, z, pools)
SHAPES = [(b, b, False, "cloned") for b in (1, 2, 4, 8, 9, 16, 32, 64)] + [(9, 16, False, "cloned"),
                                                                         (8, 8, True, "cloned"), (8, 8, False, "fresh")]
PARTS = parts("pairs,ssu,ssu-nb")
if "pairs" in PARTS:
    for z, pools in ((False, "cloned"), (True, "cloned"), (False, "fresh")):
        shapes = tuple((a, c) for a, c, zz, pp in SHAPES if (zz, pp) == (z, pools))
        pair_sweep(f"conv+ssu bf16 z={z} {pools}", shapes,
                   lambda a, c, z=z, pools=pools: (ConvCase(a, c, BF, BF, z, pools, 1),
                                                    SSUCase(a, c, BF, BF, z, pools, 1)),
                   VARIANTS, setv, f"hint-range-h100-pairs-{int(z)}-{pools}.json")
Sweep("ab-hint-range-h100").run_parts(PARTS, SHAPES, VARIANTS, setv, lambda k: SSUCase(k[0], k[1], BF, BF, k[2], k[3], 1))
print("all done", flush=True)
