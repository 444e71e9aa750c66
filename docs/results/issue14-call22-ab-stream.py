"""Issue 14 A/B: streaming kernels (pipelined state blocks) for the SSU (one token, speculative) and the GDN
(speculative) beside vLLM, one process. Variants interleaved twice (A B ... then reversed); the best of each."""
# Run as it ran, with the harness since factored into scripts/ab_sweep.py (the same steps).
import sys
sys.path[:0] = ["lib", "scripts"]
from ab_sweep import ALL, Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase, SSUCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gd  # noqa: E402
from mambalab.kernels import mamba_ssm as ssu  # noqa: E402

PARTS = parts("gdn,ssu1,ssuT")
SWEEP = Sweep("ab-stream")
D = bench.DTYPES
if "gdn" in PARTS:
    V = {"base": None, "8x2x2": (8, 2, 2), "8x4x3": (8, 4, 3), "4x4x3": (4, 4, 3), "4x8x4": (4, 8, 4),
         "16x2x2": (16, 2, 2), "2x8x4": (2, 8, 4)}
    def setv(v):
        gd.SPEC_STREAM = {} if V[v] is None else {2: V[v] + ALL, 4: V[v] + ALL}
    cases = [(st, T, b) for st in ("bf16", "fp32") for T in (2, 3, 4) for b in (8, 64, 256)]
    SWEEP.run("gdn", cases, V, setv, lambda k: GDNCase(k[2], k[2], D[k[0]], D["bf16"], False, "cloned", k[1]))
if "ssu1" in PARTS:
    V = {"base": None, "4x2x2": (4, 2, 2, False), "4x4x3": (4, 4, 3, False), "2x4x3": (2, 4, 3, False),
         "4x4x3p": (4, 4, 3, True), "8x2x2": (8, 2, 2, False), "8x4x3": (8, 4, 3, False), "16x2x2": (16, 2, 2, False)}
    def setv(v):
        ssu.SSU_STREAM = {} if V[v] is None else {(s, False): V[v][:3] + ALL + V[v][3:] for s in (2, 4)}
    cases = [(st, act, c, b) for st, act in (("fp32", "bf16"), ("fp32", "fp32"), ("bf16", "bf16"))
             for b, c in ((2, 2), (4, 4), (8, 8), (9, 16), (16, 16), (32, 32), (64, 64))]
    SWEEP.run("ssu1", cases, V, setv, lambda k: SSUCase(k[3], k[2], D[k[0]], D[k[1]], False, "cloned", 1))
if "ssuT" in PARTS:
    V = {"base": None, "8x2x2": (8, 2, 2, False), "16x2x2": (16, 2, 2, False), "8x4x3": (8, 4, 3, False),
         "4x4x3": (4, 4, 3, False), "16x4x3": (16, 4, 3, False)}
    def setv(v):
        ssu.SSU_STREAM = {} if V[v] is None else {(s, True): V[v][:3] + ALL + V[v][3:] for s in (2, 4)}
    cases = [(st, T, b) for st in ("bf16", "fp32") for T in (2, 3, 4) for b in (1, 8, 64, 256)]
    SWEEP.run("ssuT", cases, V, setv, lambda k: SSUCase(k[2], k[2], D[k[0]], D["bf16"], False, "cloned", k[1]))
