"""Issue 14 A/B, call 33: the rules taken from calls 31-32 against HEAD's (a28d3cd), beside vLLM in one process
(scripts/ab_sweep.py: variants interleaved twice, the best of each), on every row they touch and their neighbours.

    gdn:  "base" HEAD's rules (no EARLY_INDEX, SPEC_TOKEN_STAGES from 256); "new" the tree's (EARLY_INDEX fp32 from
          33 sequences, bf16 from 128; SPEC_TOKEN_STAGES from 128); "eiall" EARLY_INDEX at every batch (a probe of
          the small batches and bf16 T = 3 / 4 at 64).
    dec:  conv fp32 decode: "new" DECODE_DEEP at 128 only; "deep97" at 97-144 (a probe of the range's edges).
    win:  conv fp32 window kernel: "new" PDL mode 1 for the wide launches from 128 requests.
"""
import sys
sys.path[:0] = ["lib", "scripts"]
from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase  # noqa: E402
from mambalab.kernels import causal_conv1d as cv  # noqa: E402
from mambalab.kernels import gated_delta_rule as gd  # noqa: E402

PARTS = parts("gdn,dec,win")
SWEEP = Sweep("ab-confirm")
D = bench.DTYPES
NEW = dict(ei=dict(gd.EARLY_INDEX), tsn=gd.SPEC_TOKEN_STAGES_MIN_N, deep=dict(cv.DECODE_DEEP),
           pdl1=cv.WINDOW_WIDE_PDL1_MIN_BATCH)
BASE = dict(ei={}, tsn=256, deep={}, pdl1=1 << 30)
EIALL = dict(NEW, ei={2: (1, 1 << 30), 4: (1, 1 << 30)})
DEEP97 = dict(NEW, deep={4: (4, 97, 144)})


def setv_from(table):
    def setv(v):
        r = table[v]
        gd.EARLY_INDEX, gd.SPEC_TOKEN_STAGES_MIN_N = dict(r["ei"]), r["tsn"]
        cv.DECODE_DEEP, cv.WINDOW_WIDE_PDL1_MIN_BATCH = dict(r["deep"]), r["pdl1"]
    return setv


if "gdn" in PARTS:
    V = {"base": BASE, "new": NEW, "eiall": EIALL}
    one = [("fp32", "bf16", a, c) for a, c in ((57, 57), (57, 64), (64, 64), (128, 128), (256, 256), (257, 272),
                                               (512, 512), (1, 1), (2, 2), (4, 4))]
    one += [("fp32", "fp32", a, c) for a, c in ((57, 57), (57, 64), (64, 64), (256, 256))]
    one += [("bf16", "bf16", a, c) for a, c in ((1, 1), (2, 2), (4, 4), (8, 8), (9, 9))]
    spec = [("fp32", T, b) for T in (2, 3, 4) for b in (64, 256)]
    spec += [("bf16", T, b) for T in (3, 4) for b in (64, 128, 256)] + [("bf16", 3, 8), ("bf16", 2, 8)]
    cases = [("one",) + k for k in one] + [("spec",) + k for k in spec]

    def make(k):
        if k[0] == "one":
            return GDNCase(k[3], k[4], D[k[1]], D[k[2]], False, "cloned", 1)
        return GDNCase(k[3], k[3], D[k[1]], D["bf16"], False, "cloned", k[2])
    SWEEP.run("gdn", cases, V, setv_from(V), make)
    setv_from({"new": NEW})("new")
if "dec" in PARTS:
    V = {"base": BASE, "new": NEW, "deep97": DEEP97}
    cases = [("fp32", b) for b in (64, 112, 120, 128, 136, 144, 256)] + [("bf16", 128)]
    SWEEP.run("dec", cases, V, setv_from(V), lambda k: ConvCase(k[1], k[1], D[k[0]], D[k[0]], False, "cloned", 1))
    setv_from({"new": NEW})("new")
if "win" in PARTS:
    V = {"base": BASE, "new": NEW}
    cases = [(T, b) for T in (3, 4) for b in (64, 128, 256, 512)] + [(2, 256)]
    SWEEP.run("win", cases, V, setv_from(V), lambda k: ConvCase(k[1], k[1], D["fp32"], D["fp32"], False, "cloned", k[0]))
    setv_from({"new": NEW})("new")
