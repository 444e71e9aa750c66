"""Issue 14 A/B: streaming kernels (pipelined state blocks) for the SSU (one token, speculative) and the GDN
(speculative) beside vLLM, one process. Variants interleaved twice (A B ... then reversed); the best of each."""
import json, os, sys, time
import torch
sys.path.insert(0, "lib")
from mambalab.gpu import bench
from mambalab.gpu.bench_cases import GDNCase, SSUCase, agreement
from mambalab.kernels import gated_delta_rule as gd
from mambalab.kernels import mamba_ssm as ssu
from mambalab.lab.bugs import BugConfig
bench._vllm_path()
REP, BUDGET, FIX = 40, 8 * 2**30, BugConfig.fixed()
OUT = os.environ.get("OUT", ".")
PARTS = os.environ.get("PARTS", "gdn,ssu1,ssuT").split(",")
copy = bench.copy_bandwidth(); print(f"copy {copy:.0f} GB/s", flush=True)
ALL = (1, 1 << 30)

def t(case, impl):
    calls = bench._timed_calls(case, impl, BUDGET, FIX if impl == "mambalab" else None)
    us = bench.time_graph(calls, REP); del calls; return us

def sweep(part, cases, variants, setv, make):
    rows, t0 = [], time.time()
    for key in cases:
        case = make(key)
        r = dict(part=part, key=key, us={v: [] for v in variants}, gate={})
        r["vllm"] = t(case, "vllm")
        for p in range(2):
            for v in (variants if p == 0 else list(variants)[::-1]):
                setv(v)
                if p == 0:
                    ok, msg = agreement(case, ["mambalab", "vllm"]); r["gate"][v] = ok
                    if not ok: print("# GATE FAILED", part, v, key, msg, flush=True)
                r["us"][v].append(t(case, "mambalab"))
        setv("base")
        m = {v: min(x) for v, x in r["us"].items()}
        pct = 100 * case.nbytes / r["vllm"] / 1e3 / copy
        print(f"{part} {key}: vllm {r['vllm']:7.2f} ({pct:4.1f}%) | " +
              " ".join(f"{v} {m[v]:7.2f} ({r['vllm']/m[v]:.3f}x)" for v in variants), flush=True)
        rows.append(r)
        json.dump(dict(copy_gbps=copy, rows=rows), open(f"{OUT}/ab-ssu-tokstages-{part}.json", "w"), indent=0)
        del case; torch.cuda.empty_cache()
    print(part, "done", round(time.time() - t0, 1), flush=True)

D = bench.DTYPES
V = {"base": 0, "ts2": 2, "ts3": 3}
def setv(v):
    ssu.SSU_TOKEN_STAGES = {2: V[v], 4: V[v]}
cases = [(st, T, b) for st in ("bf16", "fp32") for T in (2, 3, 4) for b in (1, 8, 64, 256)]
sweep("ssu", cases, V, setv, lambda k: SSUCase(k[2], k[2], D[k[0]], D["bf16"], False, "cloned", k[1]))
