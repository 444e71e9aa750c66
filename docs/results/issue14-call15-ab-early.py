"""Issue 14, call 15 A/B: the SSU's early state load under PDL (EARLY_STATE) beside vLLM, one process.
Variants: base (every launch waits first: today's kernels), early (indices + state before gdc_wait, the small
fp32 tiles still without PDL), early_all (also the small fp32 tiles with PDL). Two interleaved passes."""
import json, math, os, sys, time
sys.path.insert(0, "build/wt_lib")  # call 15 ran the early-state lib from a copy there (now lib/)
import torch
from mambalab.gpu import bench
from mambalab.gpu.bench_cases import SSUCase, agreement
from mambalab.kernels import mamba_ssm as sm
from mambalab.lab.bugs import BugConfig
assert sm.__file__.startswith(os.path.abspath("build/wt_lib")), sm.__file__
bench._vllm_path()
REP, BUDGET, FIX = 40, 8 * 2**30, BugConfig.fixed()
OUT = os.environ.get("OUT", ".")
copy = bench.copy_bandwidth()
print(f"copy {copy:.0f} GB/s", flush=True)
VARIANTS = {"base": (False, False), "early": (True, False), "early_all": (True, True)}

def setv(v):
    sm.EARLY_STATE_LOAD, sm.EARLY_STATE_PDL_SMALL_FP32 = VARIANTS[v]

def t(case, impl):
    calls = bench._timed_calls(case, impl, BUDGET, FIX if impl == "mambalab" else None)
    us = bench.time_graph(calls, REP); del calls; return us

rows = []
cases = []
for st in ("fp32", "bf16"):
    for b in (1, 2, 4, 8, 9, 16, 32, 64, 256):
        cases.append((st, "bf16", False, 1, "head", b))
    cases.append((st, "bf16", True, 1, "head", 1)); cases.append((st, "bf16", True, 1, "head", 8))
    for T in (2, 4):
        for b in (1, 8, 64):
            cases.append((st, "bf16", False, T, "head", b))
    for b in (1, 8):
        cases.append((st, "bf16", False, 1, "element", b))
for b in (1, 8, 64):
    cases.append(("fp32", "fp32", False, 1, "head", b))
t0 = time.time()
for (st, act, z, T, dtm, b) in cases:
    if time.time() - t0 > float(os.environ.get("AB_LIMIT", 330)):
        print("# time limit", flush=True); break
    case = SSUCase(b, b, bench.DTYPES[st], bench.DTYPES[act], z, "cloned", T, dtm)
    r = dict(state=st, act=act, z=z, T=T, dt=dtm, batch=b, nbytes=case.nbytes, us={v: [] for v in VARIANTS}, gate={})
    r["vllm"] = t(case, "vllm")
    for p in range(2):
        for v in (VARIANTS if p == 0 else list(VARIANTS)[::-1]):
            setv(v)
            if p == 0:
                ok, msg = agreement(case, ["mambalab", "vllm"]); r["gate"][v] = ok
                if not ok: print("# GATE FAILED", v, st, act, T, dtm, b, msg, flush=True)
            r["us"][v].append(t(case, "mambalab"))
    setv("base")
    m = {v: min(x) for v, x in r["us"].items()}
    gbs = lambda us: case.nbytes / us / 1e3
    print(f"{st}/{act} z={int(z)} T={T} dt={dtm} b={b:3d}: vllm {r['vllm']:7.2f} ({100*gbs(r['vllm'])/copy:4.1f}%) | " +
          " ".join(f"{v} {m[v]:7.2f} ({r['vllm']/m[v]:.3f}x)" for v in VARIANTS), flush=True)
    rows.append(r)
    json.dump(dict(copy_gbps=copy, rows=rows), open(f"{OUT}/ab-early.json", "w"), indent=0)
    del case; torch.cuda.empty_cache()
print("done", time.time() - t0, flush=True)
