"""Issue 14 A/B, call 32, beside vLLM in one process (scripts/ab_sweep.py: variants interleaved twice, the best of
each). New switches, off by default (their kernels' PTX unchanged):

    spec: the GDN general kernel's prologue: EARLY_INDEX (the slot's loads issued with cu_seqlens', one memory
          round trip fewer before the state load) and SPEC_DST_PRELOAD (a speculative row's destination slots
          loaded once, not one round trip before each token's store), alone, together, and with the pipelined
          token loop (SPEC_TOKEN_STAGES from every batch); bf16 T = 3 / 4 at 8-256, fp32 T = 3 / 4 at 64.
    one:  EARLY_INDEX for one token a sequence (the general kernel: fp32 state from 33 sequences, any state
          below the streaming kernel's batches).
    dec:  conv fp32 decode: DECODE_DEEP (4 requests a program with PDL) at 57-256, and 4 rows without PDL.
    win:  conv fp32 window kernel, wide launches (T = 3 / 4): PDL mode 1 (WINDOW_WIDE_PDL1_MIN_BATCH) at 64-512.

As it ran: SPEC_DST_PRELOAD (the kernel's DST_COLS) was not taken and is gone from the tree, and the rules' defaults
have since changed (call 33 compares them with HEAD's), so this script needs that call's tree.
"""
import sys
sys.path[:0] = ["lib", "scripts"]
from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase  # noqa: E402
from mambalab.kernels import causal_conv1d as cv  # noqa: E402
from mambalab.kernels import gated_delta_rule as gd  # noqa: E402

PARTS = parts("spec,one,dec,win")
SWEEP = Sweep("ab-prologue")
D = bench.DTYPES
ALL = {2: (1, 1 << 30), 4: (1, 1 << 30)}
G0 = dict(ei=dict(gd.EARLY_INDEX), dst=dict(gd.SPEC_DST_PRELOAD), ts=dict(gd.SPEC_TOKEN_STAGES),
          tsn=gd.SPEC_TOKEN_STAGES_MIN_N)


def g_set(ei=False, dst=False, ts=None):
    gd.EARLY_INDEX = dict(ALL) if ei else dict(G0["ei"])
    gd.SPEC_DST_PRELOAD = dict(ALL) if dst else dict(G0["dst"])
    gd.SPEC_TOKEN_STAGES, gd.SPEC_TOKEN_STAGES_MIN_N = ({2: ts, 4: 0}, 1) if ts else (dict(G0["ts"]), G0["tsn"])


if "spec" in PARTS:
    V = {"base": {}, "ei": dict(ei=True), "dst": dict(dst=True), "eidst": dict(ei=True, dst=True),
         "ts3": dict(ts=3), "eidstts3": dict(ei=True, dst=True, ts=3)}
    cases = ([("bf16", T, b) for T in (3, 4) for b in (8, 64, 128, 256)] + [("fp32", 3, 64), ("fp32", 4, 64)])
    SWEEP.run("spec", cases, V, lambda v: g_set(**V[v]),
              lambda k: GDNCase(k[2], k[2], D[k[0]], D["bf16"], False, "cloned", k[1]))
    g_set()
if "one" in PARTS:
    V = {"base": {}, "ei": dict(ei=True)}
    cases = [("fp32", "bf16", a, c) for a, c in ((57, 57), (57, 64), (64, 64), (128, 128), (1, 1), (4, 4))]
    cases += [("fp32", "fp32", a, c) for a, c in ((57, 57), (57, 64), (64, 64))]
    cases += [("bf16", "bf16", a, c) for a, c in ((1, 1), (4, 4), (8, 8), (9, 16))]
    SWEEP.run("one", cases, V, lambda v: g_set(**V[v]),
              lambda k: GDNCase(k[2], k[3], D[k[0]], D[k[1]], False, "cloned", 1))
    g_set()
C0 = dict(deep=dict(cv.DECODE_DEEP), rows=cv.DECODE_ROWS, pdl1=cv.WINDOW_WIDE_PDL1_MIN_BATCH)


def c_reset():
    cv.DECODE_DEEP, cv.DECODE_ROWS, cv.WINDOW_WIDE_PDL1_MIN_BATCH = dict(C0["deep"]), C0["rows"], C0["pdl1"]


if "dec" in PARTS:
    V = {"base": None, "r4pdl": "deep", "r4": "rows"}

    def setv(v):
        c_reset()
        if V[v] == "deep":
            cv.DECODE_DEEP = {4: (4, 1, 1 << 30)}
        elif V[v] == "rows":
            cv.DECODE_ROWS = 4
    cases = [(57, 57), (57, 64), (64, 64), (96, 96), (128, 128), (160, 160), (192, 192), (256, 256)]
    SWEEP.run("dec", cases, V, setv, lambda k: ConvCase(k[0], k[1], D["fp32"], D["fp32"], False, "cloned", 1))
    c_reset()
if "win" in PARTS:
    V = {"base": None, "pdl1": 1}

    def setv(v):
        c_reset()
        if V[v]:
            cv.WINDOW_WIDE_PDL1_MIN_BATCH = 1
    cases = [(T, b) for T in (3, 4) for b in (64, 128, 192, 256, 512)]
    SWEEP.run("win", cases, V, setv, lambda k: ConvCase(k[1], k[1], D["fp32"], D["fp32"], False, "cloned", k[0]))
    c_reset()
