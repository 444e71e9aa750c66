"""Issue 14, call 191 (H200): plan item 1 of docs/benchmarks.md ("What is missed, and the plan", at d0a2420). Calls
189-190 found the SSU's bf16 L2 hint before PDL's wait (``mamba_ssm.PREFETCH_STATE``) losing in the layer (the conv,
then the SSU) at 8-16 request x 128 heads and gaining from 64, and the bf16 early state load mixed at 1-4. Variants
(``PREFETCH_STATE`` is data: (mode, fewest, most request x heads)):

* "base": the tree (the hint from 1, the early load up to 4 x 128);
* "from17": the hint from 17 x 128 request x heads;
* "from33": the hint from 33 x 128;
* "from17-noearly": "from17", and no bf16 early state load.

SSU, ``A``/``dt`` per head, one token, bf16 state and activations: layer pairs first (what a model runs), then the
bench and after a torch kernel, with ``z`` and fresh pools at 8, and the padded 9 -> 16 of a CUDA graph.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call191-ssu-hint-range.py
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
FEWEST = {"base": HINT[1], "from17": 17 * 128, "from33": 33 * 128, "from17-noearly": 17 * 128}


def setv(v):
    ssu.PREFETCH_STATE[2] = (HINT[0], FEWEST[v], HINT[2])
    ssu.EARLY_STATE_LOAD = v != "from17-noearly"  # the fp32 cases below are not run: bf16 only


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
                   VARIANTS, setv, f"hint-range-pairs-{int(z)}-{pools}.json")
Sweep("ab-hint-range").run_parts(PARTS, SHAPES, VARIANTS, setv, lambda k: SSUCase(k[0], k[1], BF, BF, k[2], k[3], 1))
print("all done", flush=True)
