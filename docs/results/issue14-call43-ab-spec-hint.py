"""Issue 14 A/B, call 43: the SSU's L2 hint (call 41-42, kernels.common.prefetch_rows_l2) for speculative decoding,
beside vLLM in one process (scripts/ab_sweep.py: variants interleaved twice, the best of each).

    spec: SSU bf16 state, T = 2..4 with 2-D indices and num_accepted_tokens, where _ssu_kernel takes the launch
          under PDL past the early state load (T = 2 below 32 x 128 request-heads: the streaming kernel above):
          "base" no hint for several tokens; "pm1" / "pm2" mamba_ssm.PREFETCH_STATE_MULTI_TOKEN mode 1 / 2.
    one:  SSU bf16 one token at batch 8 / 16 / 32: "base" the tree's (mode 2); "p1" mode 1.
"""
import sys
sys.path[:0] = ["lib", "scripts"]
from ab_sweep import ALL, Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

PARTS = parts("spec,one")
SWEEP = Sweep("ab-spec-hint")
D = bench.DTYPES
S = dict(one=dict(ms.PREFETCH_STATE), multi=dict(ms.PREFETCH_STATE_MULTI_TOKEN))


def reset():
    ms.PREFETCH_STATE, ms.PREFETCH_STATE_MULTI_TOKEN = dict(S["one"]), dict(S["multi"])


if "spec" in PARTS:
    V = {"base": {}, "pm1": {2: (1,) + ALL}, "pm2": {2: (2,) + ALL}}

    def setv(v):
        reset()
        ms.PREFETCH_STATE_MULTI_TOKEN = dict(V[v])
    cases = [(T, b) for T in (3, 4) for b in (16, 32, 64, 128, 256)] + [(2, 16), (2, 64)]
    try:
        SWEEP.run("spec", cases, V, setv, lambda k: SSUCase(k[1], k[1], D["bf16"], D["bf16"], False, "cloned", k[0]))
    except Exception as e:  # one part's failure must not cost the other
        print("# PART FAILED spec", repr(e), flush=True)
    reset()
if "one" in PARTS:
    V = {"base": None, "p1": {2: (1,) + ALL}}

    def setv(v):
        reset()
        if V[v] is not None:
            ms.PREFETCH_STATE = dict(V[v])
    try:
        SWEEP.run("one", [8, 16, 32], V, setv, lambda b: SSUCase(b, b, D["bf16"], D["bf16"], False, "cloned", 1))
    except Exception as e:
        print("# PART FAILED one", repr(e), flush=True)
    reset()
