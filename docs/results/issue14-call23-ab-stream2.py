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
        json.dump(dict(copy_gbps=copy, rows=rows), open(f"{OUT}/ab-stream2-{part}.json", "w"), indent=0)
        del case; torch.cuda.empty_cache()
    print(part, "done", round(time.time() - t0, 1), flush=True)

D = bench.DTYPES
from mambalab.kernels.mamba_ssm import LaunchConfig
if "gdn" in PARTS:
    V = {"base": None, "8x4x3": (8, 4, 3, 1), "8x4x3w2": (8, 4, 3, 2), "16x2x3w2": (16, 2, 3, 2),
         "16x4x3w4": (16, 4, 3, 4), "32x2x2w4": (32, 2, 2, 4), "8x2x2w2": (8, 2, 2, 2)}
    def setv(v):
        gd.SPEC_STREAM = {} if V[v] is None else {2: V[v][:3] + ALL + V[v][3:]}
    cases = [("bf16", T, b) for T in (3, 4) for b in (64, 256)]
    sweep("gdnT34", cases, V, setv, lambda k: GDNCase(k[2], k[2], D[k[0]], D["bf16"], False, "cloned", k[1]))
    V2 = {k: V[k] for k in ("base", "8x4x3", "8x4x3w2")}
    cases = [("bf16", 2, b) for b in (16, 32, 64, 128, 256)]
    sweep("gdnT2", cases, V2, setv, lambda k: GDNCase(k[2], k[2], D[k[0]], D["bf16"], False, "cloned", k[1]))
if "ssuT" in PARTS:
    V = {"base": None, "8x4x3": (8, 4, 3, False, 1), "8x4x3w2": (8, 4, 3, False, 2), "16x2x3w2": (16, 2, 3, False, 2),
         "16x4x3w4": (16, 4, 3, False, 4), "32x2x2w4": (32, 2, 2, False, 4), "8x2x2w2": (8, 2, 2, False, 2)}
    def setv(v):
        ssu.SSU_STREAM = {} if V[v] is None else {(2, True): V[v][:3] + ALL + V[v][3:]}
    cases = [("bf16", T, b) for T in (3, 4) for b in (64, 256)]
    sweep("ssuT34", cases, V, setv, lambda k: SSUCase(k[2], k[2], D[k[0]], D["bf16"], False, "cloned", k[1]))
    V2 = {k: V[k] for k in ("base", "8x4x3", "8x4x3w2")}
    cases = [("bf16", 2, b) for b in (16, 32, 64, 128, 256)]
    sweep("ssuT2", cases, V2, setv, lambda k: SSUCase(k[2], k[2], D[k[0]], D["bf16"], False, "cloned", k[1]))
if "ssu1" in PARTS:
    V = {"base": None, "bm8": LaunchConfig(8, 1), "bm16w2": LaunchConfig(16, 2), "bm32w2": LaunchConfig(32, 2),
         "bm4": LaunchConfig(4, 1), "bm32w4": LaunchConfig(32, 4)}
    def setv(v):
        ssu._override = V[v]
    cases = [("bf16", "bf16", c, b) for b, c in ((8, 8), (9, 16), (16, 16), (32, 32))]
    sweep("ssu1bf16", cases, V, setv, lambda k: SSUCase(k[3], k[2], D[k[0]], D[k[1]], False, "cloned", 1))
