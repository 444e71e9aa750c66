"""Issue-14 A/B (one process, H200): conv window kernel launch/PDL variants vs the general kernel and vLLM;
conv decode PDL bound; SSU small-batch / per-element-dt / speculative tiles. Prints a table, writes JSON."""
import json, os, sys, time
import torch
sys.path.insert(0, "lib")
from mambalab.gpu import bench
from mambalab.gpu.bench_cases import ConvCase, SSUCase, agreement
from mambalab.kernels import causal_conv1d as cm
from mambalab.kernels import mamba_ssm as sm
from mambalab.lab.bugs import BugConfig

bench._vllm_path()
REP = int(os.environ.get("AB_REP", "40"))
BUDGET = 8 * 2**30
rows = []
t0 = time.time()
copy = bench.copy_bandwidth()
print(f"copy {copy:.0f} GB/s", flush=True)
FIX = BugConfig.fixed()


def t(case, impl):
    calls = bench._timed_calls(case, impl, BUDGET, FIX if impl == "mambalab" else None)
    us = bench.time_graph(calls, REP)
    del calls
    return us


def record(section, key, variant, us, case):
    pct = 100 * case.nbytes / (us * 1e-6) / 1e9 / copy
    rows.append(dict(section=section, key=key, variant=variant, us=us, pct=pct))


def setattrs(mod, **kw):
    old = {k: getattr(mod, k) for k in kw}
    for k, v in kw.items():
        setattr(mod, k, v)
    return old


# ---- 1. conv speculative: window kernel variants ----
CONV_VARIANTS = {
    "old": dict(WINDOW_KERNEL=False),
    "w256x1": dict(WINDOW_COLUMN_BYTES=256, WINDOW_WARPS=1),
    "w256x2": dict(WINDOW_COLUMN_BYTES=256, WINDOW_WARPS=2),
    "w512x2": dict(WINDOW_COLUMN_BYTES=512, WINDOW_WARPS=2),
    "w512x4": dict(WINDOW_COLUMN_BYTES=512, WINDOW_WARPS=4),
    "w1024x4": dict(WINDOW_COLUMN_BYTES=1024, WINDOW_WARPS=4),
}
PDL = {"p0": dict(WINDOW_PDL_MAX_BATCH=0), "p1": dict(WINDOW_PDL_MAX_BATCH=10**6, WINDOW_PDL_MODE=1),
       "p2": dict(WINDOW_PDL_MAX_BATCH=10**6, WINDOW_PDL_MODE=2)}
base = {k: getattr(cm, k) for k in ("WINDOW_KERNEL", "WINDOW_COLUMN_BYTES", "WINDOW_WARPS", "WINDOW_PDL_MAX_BATCH",
                                    "WINDOW_PDL_MODE", "PDL_MAX_BATCH_DECODE")}
for st in ("fp32", "bf16"):
    for T in (2, 4):
        for b in (1, 8, 64, 256):
            dt = bench.DTYPES[st]
            case = ConvCase(b, b, dt, dt, True, "cloned", T)
            key = f"conv {st} T={T} b={b}"
            setattrs(cm, **base)
            ok, msg = agreement(case, ["mambalab", "vllm"])
            print(f"# gate {key}: {ok} {msg}", flush=True)
            record("conv-spec", key, "vllm", t(case, "vllm"), case)
            for name, kw in CONV_VARIANTS.items():
                pdls = {"pX": {}} if name == "old" else PDL
                for pn, pkw in pdls.items():
                    setattrs(cm, **base)
                    setattrs(cm, **kw, **pkw)
                    if name != "old":
                        ok2, _ = agreement(case, ["mambalab", "vllm"])
                        if not ok2:
                            print(f"# GATE FAILED {key} {name}{pn}", flush=True)
                    record("conv-spec", key, f"{name}-{pn}", t(case, "mambalab"), case)
            del case
            torch.cuda.empty_cache()
            best = sorted([r for r in rows if r["key"] == key], key=lambda r: r["us"])
            print(key, " ".join(f"{r['variant']}={r['us']:.2f}" for r in best[:6]),
                  "| vllm", [f"{r['us']:.2f}" for r in rows if r["key"] == key and r["variant"] == "vllm"],
                  "| old", [f"{r['us']:.2f}" for r in rows if r["key"] == key and r["variant"] == "old-pX"],
                  flush=True)
setattrs(cm, **base)
print(f"[{time.time()-t0:.0f} s] conv spec done", flush=True)
OUTD = os.environ.get("OUT", ".")
dump = lambda: json.dump(dict(copy_gbps=copy, rows=rows), open(f"{OUTD}/ab14.json", "w"), indent=0)
dump()

# ---- 2. conv decode PDL bound ----
for st in ("fp32", "bf16"):
    for a, c in ((9, 9), (9, 16), (16, 16), (32, 32), (128, 128)):
        dt = bench.DTYPES[st]
        case = ConvCase(a, c, dt, dt, True, "cloned", 1)
        key = f"conv-dec {st} b={a}/{c}"
        record("conv-dec", key, "vllm", t(case, "vllm"), case)
        for mb in (8, 16, 32):
            setattrs(cm, PDL_MAX_BATCH_DECODE=mb)
            record("conv-dec", key, f"pdl<={mb}", t(case, "mambalab"), case)
        setattrs(cm, **base)
        print(key, [(r["variant"], round(r["us"], 2)) for r in rows if r["key"] == key], flush=True)
        del case
print(f"[{time.time()-t0:.0f} s] conv decode done", flush=True)
dump()

# ---- 3. SSU tiles ----
def ssu_rows(section, st, act, b, T, dtmode, cfgs, pdl_block=None):
    case = SSUCase(b, b, bench.DTYPES[st], bench.DTYPES[act], False, "cloned", T, dtmode)
    key = f"ssu {st}/{act} T={T} dt={dtmode} b={b}"
    record(section, key, "vllm", t(case, "vllm"), case)
    record(section, key, "current", t(case, "mambalab"), case)
    for bm, nw in cfgs:
        for pb in (pdl_block or [None]):
            old = sm.PDL_FP32_NO_PDL_BLOCK_M
            if pb is not None:
                sm.PDL_FP32_NO_PDL_BLOCK_M = pb
            with sm.launch_config_override(sm.LaunchConfig(bm, nw)):
                if bm == cfgs[0][0] and nw == cfgs[0][1] and pb == (pdl_block or [None])[0]:
                    ok, msg = agreement(case, ["mambalab", "vllm"])
                    if not ok:
                        print(f"# GATE FAILED {key}", msg, flush=True)
                record(section, key, f"m{bm}w{nw}" + ("" if pb is None else f"-nopdl<={pb}"), t(case, "mambalab"), case)
            sm.PDL_FP32_NO_PDL_BLOCK_M = old
    print(key, " ".join(f"{r['variant']}={r['us']:.2f}" for r in rows if r["key"] == key), flush=True)
    dump()
    del case
    torch.cuda.empty_cache()

for st in ("fp32", "bf16"):
    for b in (1, 8, 64, 256, 512):
        ssu_rows("ssu-elem", st, "bf16", b, 1, "element", [(4, 1), (8, 1), (8, 2), (16, 2), (2, 1)])
for st, act in (("fp32", "bf16"), ("fp32", "fp32")):
    for b in (1, 2, 4, 8):
        ssu_rows("ssu-small", st, act, b, 1, "head", [(4, 1), (2, 1), (8, 1), (4, 2)], pdl_block=[4, 0])
for st in ("fp32", "bf16"):
    for T in (2, 4):
        ssu_rows("ssu-spec1", st, "bf16", 1, T, "head", [(2, 1), (4, 1), (8, 1), (16, 1)])
print(f"[{time.time()-t0:.0f} s] ssu done", flush=True)
dump()
