"""Issue 14 A/B: streaming kernels (pipelined state blocks) for the SSU (one token, speculative) and the GDN
(speculative) beside vLLM, one process. Variants interleaved twice (A B ... then reversed); the best of each."""
# Run as it ran, with the harness since factored into scripts/ab_sweep.py (the same steps).
import sys
sys.path[:0] = ["lib", "scripts"]
from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase  # noqa: E402
from mambalab.kernels import causal_conv1d as cv  # noqa: E402
from mambalab.kernels import gated_delta_rule as gd  # noqa: E402

PARTS = parts("dec,win,g57")
SWEEP = Sweep("ab-conv")
D = bench.DTYPES
if "dec" in PARTS:
    V = {"base": (256, 2), "r4": (256, 4), "b512": (512, 2), "b512r4": (512, 4), "b128r4": (128, 4), "r1": (256, 1)}
    def setv(v):
        cv.DECODE_COLUMN_BYTES, cv.DECODE_ROWS = V[v]
    cases = [(st, b) for st in ("fp32", "bf16") for b in (64, 128, 256, 512)]
    SWEEP.run("dec", cases, V, setv, lambda k: ConvCase(k[1], k[1], D[k[0]], D[k[0]], False, "cloned", 1))
if "win2" in PARTS:
    V = {"base": (256, 4), "n512w4": (512, 4)}
    def setv(v):
        cv.WINDOW_BLOCK_N, cv.WINDOW_WARPS = V[v]
    cases = [("fp32", T, b) for T in (2, 3, 4) for b in (1, 8, 64, 256)]
    SWEEP.run("win2", cases, V, setv, lambda k: ConvCase(k[2], k[2], D[k[0]], D[k[0]], False, "cloned", k[1]))
if "win" in PARTS:
    V = {"base": (256, 4), "n512w4": (512, 4), "n512w8": (512, 8), "n128w4": (128, 4), "n256w8": (256, 8), "n128w2": (128, 2)}
    def setv(v):
        cv.WINDOW_BLOCK_N, cv.WINDOW_WARPS = V[v]
    cases = [(st, T, b) for st in ("fp32", "bf16") for T in (3, 4) for b in (64, 256)]
    SWEEP.run("win", cases, V, setv, lambda k: ConvCase(k[2], k[2], D[k[0]], D[k[0]], False, "cloned", k[1]))
if "g57" in PARTS:
    V = {"base": None, "s422": (4, 2, 2), "s822": (8, 2, 2), "s443": (4, 4, 3), "s823": (8, 2, 3)}
    base_stream = dict(gd.STREAM)
    def setv(v):
        gd.STREAM = dict(base_stream) if V[v] is None else {**base_stream, 4: V[v] + (1, 1 << 30)}
    cases = [("bf16", 57, 57), ("bf16", 57, 64), ("bf16", 64, 64), ("fp32", 57, 64), ("fp32", 57, 57)]
    SWEEP.run("g57", cases, V, setv, lambda k: GDNCase(k[1], k[2], D["fp32"], D[k[0]], False, "cloned", 1))
