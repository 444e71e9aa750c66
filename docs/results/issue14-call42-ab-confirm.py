"""Issue 14 A/B, call 42: the rules taken after call 41 (issue14-call41-ab-prefetch.txt) against the earlier tree's,
beside vLLM in one process (scripts/ab_sweep.py: variants interleaved twice, the best of each), and neighbours.

    gdn:  "base" the earlier rules (bf16 one token: the streaming kernel from 16 sequences, the early state load up
          to 64 x 32 sequence-heads); "new" the tree's (bf16 one token: the general kernel with the early state
          load at every batch, gated_delta_rule.EARLY_STATE_ONE_TOKEN_ANY_BATCH); "new4k" / "new16k" the same with
          4 / 16 KiB of bf16 state a program (16 / 64 rows; the tree's 8 KiB is 32 rows in halves); "fE32" the tree's
          and fp32 one token early at every batch too.
    ssu:  "base" no L2 hint; "new" the tree's (bf16: mamba_ssm.PREFETCH_STATE mode 2, L2::evict_last, every batch
          the hint's path takes: one token, indices, PDL, past the early state load); "b8" fp32 16 -> 8 rows.

As it ran (an H200): "new" for the SSU taken (the tree's PREFETCH_STATE); for the GDN the streaming kernel beat
every general-kernel variant from 16 sequences by 4-11% ("base"), so the tree keeps it and
EARLY_STATE_ONE_TOKEN_ANY_BATCH is not in the tree (part gdn needs that call's tree for all but "base").
"""
import sys
sys.path[:0] = ["lib", "scripts"]
from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase, SSUCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gd  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

PARTS = parts("gdn,ssu")
SWEEP = Sweep("ab-confirm2")
D = bench.DTYPES
G = dict(stream=dict(gd.STREAM), anyb=gd.EARLY_STATE_ONE_TOKEN_ANY_BATCH, sb=dict(gd._STATE_BYTES_BY_ELEMENT_SIZE))
S = dict(pf=dict(ms.PREFETCH_STATE), bm=dict(ms.BLOCK_M_TIED))

if "gdn" in PARTS:
    V = ["base", "new", "new4k", "new16k", "fE32"]

    def setv(v):
        gd.STREAM, gd.EARLY_STATE_ONE_TOKEN_ANY_BATCH = dict(G["stream"]), G["anyb"]
        gd._STATE_BYTES_BY_ELEMENT_SIZE = dict(G["sb"])
        if v == "base":
            gd.STREAM = {**G["stream"], 2: (8, 4, 4, 16, 1 << 30)}
            gd.EARLY_STATE_ONE_TOKEN_ANY_BATCH = frozenset()
        elif v in ("new4k", "new16k"):
            gd._STATE_BYTES_BY_ELEMENT_SIZE = {**G["sb"], 2: 4096 if v == "new4k" else 16384}
        elif v == "fE32":
            gd.EARLY_STATE_ONE_TOKEN_ANY_BATCH = frozenset({2, 4})
    cases = [("bf16", b) for b in (8, 16, 32, 57, 64, 128, 256, 512)] + [("fp32", b) for b in (57, 64, 128, 256, 512)]
    try:
        SWEEP.run("gdn", cases, {v: v for v in V}, setv,
                  lambda k: GDNCase(k[1], k[1], D[k[0]], D["bf16"], False, "cloned", 1))
    except Exception as e:  # one part's failure must not cost the other
        print("# PART FAILED gdn", repr(e), flush=True)
    setv("new")
if "ssu" in PARTS:
    V = ["base", "new", "b8"]

    def setv(v):
        ms.PREFETCH_STATE, ms.BLOCK_M_TIED = dict(S["pf"]), dict(S["bm"])
        if v == "base":
            ms.PREFETCH_STATE = {}
        elif v == "b8":
            ms.BLOCK_M_TIED = {**S["bm"], 4: 8}
    cases = [("bf16", False, b) for b in (8, 16, 32, 64, 128, 256, 512)] + [("bf16", True, b) for b in (64, 256)]
    cases += [("fp32", False, b) for b in (32, 64, 256, 512)]
    try:
        SWEEP.run("ssu", cases, {v: v for v in V}, setv,
                  lambda k: SSUCase(k[2], k[2], D[k[0]], D["bf16"], k[1], "cloned", 1))
    except Exception as e:
        print("# PART FAILED ssu", repr(e), flush=True)
    setv("new")
