"""Issue 14 A/B: streaming kernels (pipelined state blocks) for the SSU (one token, speculative) and the GDN
(speculative) beside vLLM, one process. Variants interleaved twice (A B ... then reversed); the best of each."""
import json, os, sys, time
import torch
sys.path.insert(0, "lib")
from mambalab.gpu import bench
from mambalab.gpu.bench_cases import ConvCase, agreement
from mambalab.kernels import causal_conv1d as cv
from mambalab.kernels import gated_delta_rule as gd
from mambalab.kernels import mamba_ssm as ssu
from mambalab.lab.bugs import BugConfig
bench._vllm_path()
REP, BUDGET, FIX = 40, 8 * 2**30, BugConfig.fixed()
OUT = os.environ.get("OUT", ".")
PARTS = os.environ.get("PARTS", "dec,win,g57").split(",")
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
        json.dump(dict(copy_gbps=copy, rows=rows), open(f"{OUT}/ab-conv-{part}.json", "w"), indent=0)
        del case; torch.cuda.empty_cache()
    print(part, "done", round(time.time() - t0, 1), flush=True)

D = bench.DTYPES
if "dec" in PARTS:
    V = {"base": (256, 2), "r4": (256, 4), "b512": (512, 2), "b512r4": (512, 4), "b128r4": (128, 4), "r1": (256, 1)}
    def setv(v):
        cv.DECODE_COLUMN_BYTES, cv.DECODE_ROWS = V[v]
    cases = [(st, b) for st in ("fp32", "bf16") for b in (64, 128, 256, 512)]
    sweep("dec", cases, V, setv, lambda k: ConvCase(k[1], k[1], D[k[0]], D[k[0]], False, "cloned", 1))
if "win2" in PARTS:
    V = {"base": (256, 4), "n512w4": (512, 4)}
    def setv(v):
        cv.WINDOW_BLOCK_N, cv.WINDOW_WARPS = V[v]
    cases = [("fp32", T, b) for T in (2, 3, 4) for b in (1, 8, 64, 256)]
    sweep("win2", cases, V, setv, lambda k: ConvCase(k[2], k[2], D[k[0]], D[k[0]], False, "cloned", k[1]))
if "win" in PARTS:
    V = {"base": (256, 4), "n512w4": (512, 4), "n512w8": (512, 8), "n128w4": (128, 4), "n256w8": (256, 8), "n128w2": (128, 2)}
    def setv(v):
        cv.WINDOW_BLOCK_N, cv.WINDOW_WARPS = V[v]
    cases = [(st, T, b) for st in ("fp32", "bf16") for T in (3, 4) for b in (64, 256)]
    sweep("win", cases, V, setv, lambda k: ConvCase(k[2], k[2], D[k[0]], D[k[0]], False, "cloned", k[1]))
if "g57" in PARTS:
    from mambalab.gpu.bench_cases import GDNCase
    V = {"base": None, "s422": (4, 2, 2), "s822": (8, 2, 2), "s443": (4, 4, 3), "s823": (8, 2, 3)}
    base_stream = dict(gd.STREAM)
    def setv(v):
        gd.STREAM = dict(base_stream) if V[v] is None else {**base_stream, 4: V[v] + (1, 1 << 30)}
    cases = [("bf16", 57, 57), ("bf16", 57, 64), ("bf16", 64, 64), ("fp32", 57, 64), ("fp32", 57, 57)]
    sweep("g57", cases, V, setv, lambda k: GDNCase(k[1], k[2], D["fp32"], D[k[0]], False, "cloned", 1))
