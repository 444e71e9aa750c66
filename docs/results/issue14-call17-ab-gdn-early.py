"""Issue 14, call 17 A/B: the GDN general kernel's early state load under PDL beside vLLM, one process.
Variants: base (no PDL, as recorded), early (PDL + indices/state before gdc_wait; the limits lifted so every
general-kernel row takes it). Two interleaved passes; the best of each."""
import json, os, sys, time
import torch
sys.path.insert(0, "lib")
from mambalab.gpu import bench
from mambalab.gpu.bench_cases import GDNCase, agreement
from mambalab.kernels import gated_delta_rule as gd
from mambalab.lab.bugs import BugConfig
bench._vllm_path()
REP, BUDGET, FIX = 40, 8 * 2**30, BugConfig.fixed()
OUT = os.environ.get("OUT", ".")
copy = bench.copy_bandwidth(); print(f"copy {copy:.0f} GB/s", flush=True)
VARIANTS = {"base": False, "early": True}
def setv(v):
    gd.EARLY_STATE_LOAD = VARIANTS[v]
    gd.EARLY_STATE_MAX_SEQ_HEADS = gd.EARLY_STATE_MAX_SEQ_HEADS_MULTI_TOKEN = 1 << 30
def t(case, impl):
    calls = bench._timed_calls(case, impl, BUDGET, FIX if impl == "mambalab" else None)
    us = bench.time_graph(calls, REP); del calls; return us
cases = [(st, act, 1, b) for st, act in (("bf16", "bf16"), ("fp32", "bf16"), ("fp32", "fp32")) for b in (1, 2, 4, 8, 16, 64)]
cases += [(st, "bf16", T, b) for st in ("bf16", "fp32") for T in (2, 4) for b in (1, 8, 64)]
rows, t0 = [], time.time()
for st, act, T, b in cases:
    case = GDNCase(b, b, bench.DTYPES[st], bench.DTYPES[act], False, "cloned", T)
    r = dict(state=st, act=act, T=T, batch=b, us={v: [] for v in VARIANTS}, gate={})
    r["vllm"] = t(case, "vllm")
    for p in range(2):
        for v in (VARIANTS if p == 0 else list(VARIANTS)[::-1]):
            setv(v)
            if p == 0:
                ok, msg = agreement(case, ["mambalab", "vllm"]); r["gate"][v] = ok
                if not ok: print("# GATE FAILED", v, st, act, T, b, msg, flush=True)
            r["us"][v].append(t(case, "mambalab"))
    m = {v: min(x) for v, x in r["us"].items()}
    pct = 100 * case.nbytes / r["vllm"] / 1e3 / copy
    print(f"gdn {st}/{act} T={T} b={b:3d}: vllm {r['vllm']:7.2f} ({pct:4.1f}%) | " +
          " ".join(f"{v} {m[v]:7.2f} ({r['vllm']/m[v]:.3f}x)" for v in VARIANTS), flush=True)
    rows.append(r)
    json.dump(dict(copy_gbps=copy, rows=rows), open(f"{OUT}/ab-gdn-early.json", "w"), indent=0)
    del case; torch.cuda.empty_cache()
print("done", time.time() - t0, flush=True)
