"""Issue 14, call 154: the conv's PDL trigger by batch. Call 153's recording, with the trigger at every batch where
the conv's own PDL is off, read the conv alone (the bench: conv after conv) slower at large batches (bf16 256 / 512
-8 / -18%, fp32 57-512 -12-34%), though call 151's layer pairs (bf16 conv state) did not. Variants: "none" (no
trigger), "rule" (``DECODE_TRIGGER``: bf16 to 128 requests, fp32 to 32), "all" (every batch). The conv alone in both
harnesses, then layer pairs after a torch kernel (conv + GDN fp32 state, conv + SSU bf16 state; bf16 conv state).

Runs at b4fc456 (the trigger rule by batch as it was measured).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call154-conv-trigger-range.py
"""
import json
import os
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

import ab_sweep  # noqa: E402
from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase, SSUCase, agreement  # noqa: E402
from mambalab.kernels import causal_conv1d as conv  # noqa: E402
from mambalab.lab.bugs import BugConfig  # noqa: E402

D, FIX, BUDGET = bench.DTYPES, BugConfig.fixed(), 8 * 2**30
print("device", torch.cuda.get_device_name(), flush=True)
bench._vllm_path()
RULE = dict(conv.DECODE_TRIGGER)
VARIANTS = ("none", "rule", "all")


def setv(v):
    conv.DECODE_TRIGGER = {} if v == "none" else RULE if v in ("rule", "base") else {2: 1 << 30, 4: 1 << 30}


SWEEP = Sweep("ab-trigger-range")
CASES = [(s, b) for s in ("bf16", "fp32") for b in (16, 32, 57, 64, 128, 256, 512)]
for part in [p for p in parts("conv,conv-nb,pairs") if p != "pairs"]:
    ab_sweep.NEIGHBOUR[0] = part.endswith("-nb")
    SWEEP.run(part, CASES, {"base": 0, "none": 1, "all": 2}, setv,
              lambda k: ConvCase(k[1], k[1], D[k[0]], D[k[0]], True, "cloned", 1))


def calls(case, impl):
    return bench._timed_calls(case, impl, BUDGET, FIX if impl == "mambalab" else None)


def pair_time(cv, second, impl):
    a, b = calls(cv, impl), calls(second, impl)
    n = min(len(a), len(b))
    return bench.time_graph_after_torch([(lambda x=x, y=y: (x(), y())) for x, y in zip(a[:n], b[:n])])


rows = []
if "pairs" in parts("conv,conv-nb,pairs"):
    for layer, state, batch in [(la, s, b) for la, s in (("gdn", "fp32"), ("ssu", "bf16")) for b in (16, 64, 128, 256)]:
        cv = ConvCase(batch, batch, D["bf16"], D["bf16"], True, "cloned", 1)
        second = (SSUCase(batch, batch, D[state], D["bf16"], False, "cloned", 1, "head") if layer == "ssu"
                  else GDNCase(batch, batch, D[state], D["bf16"], True, "cloned", 1))
        vllm = min(pair_time(cv, second, "vllm") for _ in range(2))
        best = {}
        for rnd in range(2):
            for v in (VARIANTS if rnd == 0 else VARIANTS[::-1]):
                setv(v)
                best[v] = min(best.get(v, 1e9), pair_time(cv, second, "mambalab"))
        setv("rule")
        ok = agreement(cv, ["mambalab", "vllm"])[0] and agreement(second, ["mambalab", "vllm"])[0]
        print(f"pair conv+{layer} {state} {batch}: vllm {vllm:7.2f} | "
              + " ".join(f"{v} {best[v]:7.2f} ({vllm / best[v]:.3f}x)" for v in VARIANTS)
              + ("" if ok else " GATE FAIL"), flush=True)
        rows.append(dict(layer=layer, state=state, batch=batch, vllm=vllm, ours=best, gate=ok))
        with open(os.path.join(os.environ.get("OUT", "."), "trigger-range-pairs.json"), "w") as f:
            json.dump(rows, f, indent=0)
        del cv, second
        torch.cuda.empty_cache()
print("all done", flush=True)
