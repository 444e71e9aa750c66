"""Issue 14 A/B: streaming kernels (pipelined state blocks) for the SSU (one token, speculative) and the GDN
(speculative) beside vLLM, one process. Variants interleaved twice (A B ... then reversed); the best of each."""
# Run as it ran, with the harness since factored into scripts/ab_sweep.py (the same steps).
import sys
sys.path[:0] = ["lib", "scripts"]
from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gd  # noqa: E402

PARTS = parts("gdn")
SWEEP = Sweep("ab-tokstages")
D = bench.DTYPES
V = {"base": 0, "ts2": 2, "ts3": 3}
def setv(v):
    gd.SPEC_TOKEN_STAGES = {2: V[v], 4: V[v]}
cases = [(st, T, b) for st in ("bf16", "fp32") for T in (2, 3, 4) for b in (8, 64, 256)]
SWEEP.run("gdn", cases, V, setv, lambda k: GDNCase(k[2], k[2], D[k[0]], D["bf16"], False, "cloned", k[1]))
