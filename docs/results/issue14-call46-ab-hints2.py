"""Issue 14 A/B, call 46: two more places for what calls 41-44 found (the SSU's L2 hint before PDL's wait), beside
vLLM in one process (scripts/ab_sweep.py: variants interleaved twice, the best of each).

    conv: the window kernel (speculative rows, T = 2..4) with an L2 hint for its history columns before PDL's wait
          (causal_conv1d_kernels._window_hint, causal_conv1d.WINDOW_HINT; the bench's conv now passes
          early_state_load=True, which only this hint reads): "base" none; "hint" at every batch.
    gdn:  the GDN streaming kernel (bf16 one token, from 16 sequences) under PDL, nothing read before the wait
          (gated_delta_rule.STREAM_PDL): "base" without; "pdl" with (H100, call 41: 0-1.5% faster at 32-64).

As it ran (an H100, though the nvidia-h200 kind was asked): the conv's hint 0.3-20% slower in 15 of 19 rows (fp32
T = 2 at 64 1.146 -> 0.943x), even or within 3% faster in the rest; the GDN under PDL 5% slower at 16, 1-2% faster
at 32-64, even from 128. Neither taken; the kernel constexprs (_window_hint / PREFETCH, the stream kernel's USE_PDL),
the rule tables, the conv's early_state_load argument and their two CUDA tests (557 kernel tests passed with them
in that call) are not in the tree, so this script needs that call's tree.
"""
import sys
sys.path[:0] = ["lib", "scripts"]
from ab_sweep import ALL, Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase  # noqa: E402
from mambalab.kernels import causal_conv1d as cv  # noqa: E402
from mambalab.kernels import gated_delta_rule as gd  # noqa: E402

PARTS = parts("conv,gdn")
SWEEP = Sweep("ab-hints2")
D = bench.DTYPES
C0, G0 = dict(cv.WINDOW_HINT), dict(gd.STREAM_PDL)

if "conv" in PARTS:
    V = {"base": {}, "hint": {4: ALL, 2: ALL}}

    def setv(v):
        cv.WINDOW_HINT = dict(V[v])
    cases = [(st, T, b) for st in ("fp32", "bf16") for T in (2, 3, 4) for b in (8, 64, 256)] + [("fp32", 4, 128)]
    try:
        SWEEP.run("conv", cases, V, setv, lambda k: ConvCase(k[2], k[2], D[k[0]], D[k[0]], False, "cloned", k[1]))
    except Exception as e:  # one part's failure must not cost the other
        print("# PART FAILED conv", repr(e), flush=True)
    cv.WINDOW_HINT = C0
if "gdn" in PARTS:
    V = {"base": {}, "pdl": {2: ALL}}

    def setv(v):
        gd.STREAM_PDL = dict(V[v])
    try:
        SWEEP.run("gdn", [16, 32, 57, 64, 128, 256, 512], V, setv,
                  lambda b: GDNCase(b, b, D["bf16"], D["bf16"], False, "cloned", 1))
    except Exception as e:
        print("# PART FAILED gdn", repr(e), flush=True)
    gd.STREAM_PDL = G0
