"""Issue 14 A/B, call 44: the SSU's L2 hint (calls 41-43) where A/dt are per element ("untied": no early state
load, so the hint's path takes every bf16 one-token launch under PDL), beside vLLM in one process
(scripts/ab_sweep.py: variants interleaved twice, the best of each): "base" the tree's; "off" no hint for one
token; and a check of the tree's several-token rule against none ("spec": "base" / "off").
"""
import sys
sys.path[:0] = ["lib", "scripts"]
from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

PARTS = parts("untied,spec")
SWEEP = Sweep("ab-untied-hint")
D = bench.DTYPES
S = dict(one=dict(ms.PREFETCH_STATE), multi=dict(ms.PREFETCH_STATE_MULTI_TOKEN))


def setv_for(table):
    def setv(v):
        ms.PREFETCH_STATE, ms.PREFETCH_STATE_MULTI_TOKEN = dict(S["one"]), dict(S["multi"])
        if v == "off":
            setattr(ms, table, {})
    return setv


V = {"base": 0, "off": 1}
if "untied" in PARTS:
    try:
        SWEEP.run("untied", [1, 8, 16, 64, 256, 512], V, setv_for("PREFETCH_STATE"),
                  lambda b: SSUCase(b, b, D["bf16"], D["bf16"], False, "cloned", 1, dt="element"))
    except Exception as e:  # one part's failure must not cost the other
        print("# PART FAILED untied", repr(e), flush=True)
if "spec" in PARTS:
    try:
        SWEEP.run("spec", [(3, 64), (4, 256), (2, 16)], V, setv_for("PREFETCH_STATE_MULTI_TOKEN"),
                  lambda k: SSUCase(k[1], k[1], D["bf16"], D["bf16"], False, "cloned", k[0]))
    except Exception as e:
        print("# PART FAILED spec", repr(e), flush=True)
