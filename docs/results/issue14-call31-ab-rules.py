"""Issue 14 A/B, call 31: launch rules for the near-threshold rows beside vLLM, one process (scripts/ab_sweep.py:
variants interleaved twice, the best of each). Rule switches only (module-level tables), no kernel source change.

    spec: GDN bf16 state, bf16 activations, T = 3 / 4 at batch 64 / 128: rows a program (MULTI_TOKEN_BV), warps,
          the pipelined token loop (SPEC_TOKEN_STAGES from every batch), the early state load off.
    g57:  GDN fp32 state, one token, 57 / 57 -> 64 / 64: rows a program of the general kernel (4 / 8 / 16, 1-2
          warps), the early state load off, the streaming kernel (rows x blocks x stages).
    dec:  conv fp32 decode at 64 / 128 / 256: bytes a column (256 / 512), PDL on.
    win:  conv fp32 window kernel, T = 3 / 4 at 64 / 256: channels and warps a program, PDL mode, and its new
          BARRIER switch off (the one kernel change of this call: a constexpr, on by default).
    wino: the window kernel's other launches (bf16, fp32 T = 2, small batches) with and without the barrier.

As it ran: the BARRIER switch (causal_conv1d.WINDOW_WIDE_BARRIER / WINDOW_BARRIER and the kernel's constexpr) was
not taken and is gone from the tree, so parts win and wino need that call's tree.
"""
import sys
sys.path[:0] = ["lib", "scripts"]
from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase  # noqa: E402
from mambalab.kernels import causal_conv1d as cv  # noqa: E402
from mambalab.kernels import gated_delta_rule as gd  # noqa: E402

PARTS = parts("spec,g57,dec,win,wino")
SWEEP = Sweep("ab-rules")
D = bench.DTYPES
G0 = dict(bv=dict(gd.MULTI_TOKEN_BV), nw=gd._NUM_WARPS, ts=dict(gd.SPEC_TOKEN_STAGES), tsn=gd.SPEC_TOKEN_STAGES_MIN_N,
          early=gd.EARLY_STATE_MAX_SEQ_HEADS, sb=dict(gd._STATE_BYTES_BY_ELEMENT_SIZE), stream=dict(gd.STREAM))


def g_reset():
    gd.MULTI_TOKEN_BV, gd._NUM_WARPS = dict(G0["bv"]), G0["nw"]
    gd.SPEC_TOKEN_STAGES, gd.SPEC_TOKEN_STAGES_MIN_N = dict(G0["ts"]), G0["tsn"]
    gd.EARLY_STATE_MAX_SEQ_HEADS, gd._STATE_BYTES_BY_ELEMENT_SIZE = G0["early"], dict(G0["sb"])
    gd.STREAM = dict(G0["stream"])


if "spec" in PARTS:
    # (bf16 rows a program, warps, token-loop stages from batch 1, early state load)
    V = {"base": None, "ts3": (16, 1, 3, 1), "ts2": (16, 1, 2, 1), "bv8": (8, 1, 0, 1), "bv8ts3": (8, 1, 3, 1),
         "bv4": (4, 1, 0, 1), "bv16w2": (16, 2, 0, 1), "bv32w2": (32, 2, 0, 1), "noE": (16, 1, 0, 0)}

    def setv(v):
        g_reset()
        if V[v] is None:
            return
        bv, nw, ts, early = V[v]
        gd.MULTI_TOKEN_BV = {**G0["bv"], 2: bv}
        gd._NUM_WARPS = nw
        gd.SPEC_TOKEN_STAGES, gd.SPEC_TOKEN_STAGES_MIN_N = {2: ts}, 1
        gd.EARLY_STATE_MAX_SEQ_HEADS = G0["early"] if early else 0
    cases = [(T, b) for T in (3, 4) for b in (64, 128)]
    SWEEP.run("spec", cases, V, setv, lambda k: GDNCase(k[1], k[1], D["bf16"], D["bf16"], False, "cloned", k[0]))
    g_reset()
if "g57" in PARTS:
    # ("gen", fp32 bytes a program, warps, early) or ("st", rows a block, blocks, stages)
    V = {"base": None, "bv4": ("gen", 2048, 1, 1), "bv16": ("gen", 8192, 1, 1), "bv16w2": ("gen", 8192, 2, 1),
         "noE": ("gen", 4096, 1, 0), "s823": ("st", 8, 2, 3), "s843": ("st", 8, 4, 3), "s444": ("st", 4, 4, 4),
         "s442": ("st", 4, 4, 2)}

    def setv(v):
        g_reset()
        if V[v] is None:
            return
        kind, a, b, c = V[v]
        if kind == "gen":
            gd._STATE_BYTES_BY_ELEMENT_SIZE = {**G0["sb"], 4: a}
            gd._NUM_WARPS = b
            gd.EARLY_STATE_MAX_SEQ_HEADS = G0["early"] if c else 0
        else:
            gd.STREAM = {**G0["stream"], 4: (a, b, c, 1, 1 << 30)}
    cases = [("bf16", 57, 57), ("bf16", 57, 64), ("bf16", 64, 64), ("fp32", 57, 57), ("fp32", 57, 64),
             ("fp32", 64, 64)]
    SWEEP.run("g57", cases, V, setv, lambda k: GDNCase(k[1], k[2], D["fp32"], D[k[0]], False, "cloned", 1))
    g_reset()
C0 = dict(col=cv.DECODE_COLUMN_BYTES, rows=cv.DECODE_ROWS, pdl=dict(cv.PDL_MAX_BATCH_DECODE), wn=cv.WINDOW_WIDE_BLOCK_N,
          ww=cv.WINDOW_WARPS, wpm=cv.WINDOW_PDL_MODE, wpb=cv.WINDOW_PDL_MAX_BATCH, wbar=cv.WINDOW_WIDE_BARRIER,
          bar=cv.WINDOW_BARRIER)


def c_reset():
    cv.DECODE_COLUMN_BYTES, cv.DECODE_ROWS, cv.PDL_MAX_BATCH_DECODE = C0["col"], C0["rows"], dict(C0["pdl"])
    cv.WINDOW_WIDE_BLOCK_N, cv.WINDOW_WARPS = C0["wn"], C0["ww"]
    cv.WINDOW_PDL_MODE, cv.WINDOW_PDL_MAX_BATCH = C0["wpm"], C0["wpb"]
    cv.WINDOW_WIDE_BARRIER, cv.WINDOW_BARRIER = C0["wbar"], C0["bar"]


if "dec" in PARTS:
    V = {"base": None, "b512": (512, 2, 0), "pdl": (256, 2, 1), "b512pdl": (512, 2, 1), "r4pdl": (256, 4, 1)}

    def setv(v):
        c_reset()
        if V[v] is not None:
            cv.DECODE_COLUMN_BYTES, cv.DECODE_ROWS = V[v][:2]
            if V[v][2]:
                cv.PDL_MAX_BATCH_DECODE = {**C0["pdl"], 4: 1 << 30}
    cases = [("fp32", b) for b in (64, 128, 256)]
    SWEEP.run("dec", cases, V, setv, lambda k: ConvCase(k[1], k[1], D[k[0]], D[k[0]], False, "cloned", 1))
    c_reset()
if "win" in PARTS:
    # (channels, warps, PDL mode; 0: off, barrier)
    V = {"base": None, "nobar": (512, 4, 2, 0), "n1024w4": (1024, 4, 2, 1), "n1024w8": (1024, 8, 2, 1),
         "n512w2": (512, 2, 2, 1), "n512w2nb": (512, 2, 2, 0), "n256w1": (256, 1, 2, 1), "n128w1": (128, 1, 2, 1),
         "pdl1": (512, 4, 1, 1), "nopdl": (512, 4, 0, 1)}

    def setv(v):
        c_reset()
        if V[v] is not None:
            cv.WINDOW_WIDE_BLOCK_N, cv.WINDOW_WARPS = V[v][:2]
            cv.WINDOW_WIDE_BARRIER = bool(V[v][3])
            if V[v][2]:
                cv.WINDOW_PDL_MODE = V[v][2]
            else:
                cv.WINDOW_PDL_MAX_BATCH = 0
    cases = [("fp32", T, b) for T in (3, 4) for b in (64, 256)]
    SWEEP.run("win", cases, V, setv, lambda k: ConvCase(k[2], k[2], D[k[0]], D[k[0]], False, "cloned", k[1]))
    c_reset()
if "wino" in PARTS:
    V = {"base": True, "nobar": False}

    def setv(v):
        c_reset()
        cv.WINDOW_BARRIER = V[v]
    cases = [("bf16", T, b) for T in (2, 3, 4) for b in (64, 256)] + [("fp32", 2, 64), ("fp32", 2, 256), ("fp32", 4, 8)]
    SWEEP.run("wino", cases, V, setv, lambda k: ConvCase(k[2], k[2], D[k[0]], D[k[0]], False, "cloned", k[1]))
    c_reset()
