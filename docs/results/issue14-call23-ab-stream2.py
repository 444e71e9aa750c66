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

PARTS = parts("gdn,ssuT,ssu1")
SWEEP = Sweep("ab-stream2")
D = bench.DTYPES
from mambalab.kernels.mamba_ssm import LaunchConfig
if "gdn" in PARTS:
    V = {"base": None, "8x4x3": (8, 4, 3, 1), "8x4x3w2": (8, 4, 3, 2), "16x2x3w2": (16, 2, 3, 2),
         "16x4x3w4": (16, 4, 3, 4), "32x2x2w4": (32, 2, 2, 4), "8x2x2w2": (8, 2, 2, 2)}
    def setv(v):
        gd.SPEC_STREAM = {} if V[v] is None else {2: V[v][:3] + ALL + V[v][3:]}
    cases = [("bf16", T, b) for T in (3, 4) for b in (64, 256)]
    SWEEP.run("gdnT34", cases, V, setv, lambda k: GDNCase(k[2], k[2], D[k[0]], D["bf16"], False, "cloned", k[1]))
    V2 = {k: V[k] for k in ("base", "8x4x3", "8x4x3w2")}
    cases = [("bf16", 2, b) for b in (16, 32, 64, 128, 256)]
    SWEEP.run("gdnT2", cases, V2, setv, lambda k: GDNCase(k[2], k[2], D[k[0]], D["bf16"], False, "cloned", k[1]))
if "ssuT" in PARTS:
    V = {"base": None, "8x4x3": (8, 4, 3, False, 1), "8x4x3w2": (8, 4, 3, False, 2), "16x2x3w2": (16, 2, 3, False, 2),
         "16x4x3w4": (16, 4, 3, False, 4), "32x2x2w4": (32, 2, 2, False, 4), "8x2x2w2": (8, 2, 2, False, 2)}
    def setv(v):
        ssu.SSU_STREAM = {} if V[v] is None else {(2, True): V[v][:3] + ALL + V[v][3:]}
    cases = [("bf16", T, b) for T in (3, 4) for b in (64, 256)]
    SWEEP.run("ssuT34", cases, V, setv, lambda k: SSUCase(k[2], k[2], D[k[0]], D["bf16"], False, "cloned", k[1]))
    V2 = {k: V[k] for k in ("base", "8x4x3", "8x4x3w2")}
    cases = [("bf16", 2, b) for b in (16, 32, 64, 128, 256)]
    SWEEP.run("ssuT2", cases, V2, setv, lambda k: SSUCase(k[2], k[2], D[k[0]], D["bf16"], False, "cloned", k[1]))
if "ssu1" in PARTS:
    V = {"base": None, "bm8": LaunchConfig(8, 1), "bm16w2": LaunchConfig(16, 2), "bm32w2": LaunchConfig(32, 2),
         "bm4": LaunchConfig(4, 1), "bm32w4": LaunchConfig(32, 4)}
    def setv(v):
        ssu._override = V[v]
    cases = [("bf16", "bf16", c, b) for b, c in ((8, 8), (9, 16), (16, 16), (32, 32))]
    SWEEP.run("ssu1bf16", cases, V, setv, lambda k: SSUCase(k[3], k[2], D[k[0]], D[k[1]], False, "cloned", 1))
