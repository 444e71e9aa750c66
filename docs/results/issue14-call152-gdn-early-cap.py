"""Issue 14, call 152: the GDN's bf16 streaming kernel reading its two blocks before PDL's wait
(``STREAM_EARLY_STATE[2]``) with the conv's trigger at every batch (``causal_conv1d.DECODE_TRIGGER``, call 151: the
layer pairs gain where the next kernel waits, fp32 GDN 16 1.225 -> 1.290x, SSU bf16 16 1.079 -> 1.118x, nothing
slower). Call 151: the early blocks win the bench (9 -> 16 0.963 -> 1.193x) but lose the layer at 16 / 32 (pair 1.199
/ 1.164 -> 1.130 / 1.129x): 168 registers a thread, 12 programs an SM, two waves at 16. Here with ptxas' register cap
(``maxnreg``, no spill by the local sm_90 compile: 128 -> 16 programs an SM). Variants, all with the trigger: "base";
"early" (168 registers); "cap128"; "cap120"; "early33" (uncapped, from 33 sequences). Layer pairs (after a torch
kernel), then the GDN alone in both harnesses.

Runs at 7978537 (its rule formats: `DECODE_TRIGGER` a bool, three-field `STREAM_EARLY_STATE`).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call152-gdn-early-cap.py
"""
import json
import os
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

import ab_sweep  # noqa: E402
from ab_sweep import Sweep, parts, register_cap  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase, agreement  # noqa: E402
from mambalab.kernels import causal_conv1d as conv  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402
from mambalab.lab.bugs import BugConfig  # noqa: E402

D, FIX, BUDGET = bench.DTYPES, BugConfig.fixed(), 8 * 2**30
print("device", torch.cuda.get_device_name(), flush=True)
bench._vllm_path()
conv.DECODE_TRIGGER = True
EARLY = dict(gdn.STREAM_EARLY_STATE)
CAP = register_cap([gdn._gdn_stream_kernel])
VARIANTS = ("base", "early", "cap128", "cap120", "early33")


def setv(v):
    lo = 33 if v == "early33" else 1
    gdn.STREAM_EARLY_STATE = EARLY if v == "base" else {**EARLY, 2: (lo, 1 << 30, False)}
    CAP[0] = {"cap128": 128, "cap120": 120}.get(v, 0)


def calls(case, impl):
    return bench._timed_calls(case, impl, BUDGET, FIX if impl == "mambalab" else None)


def pair_time(cv, second, impl):
    a, b = calls(cv, impl), calls(second, impl)
    n = min(len(a), len(b))
    return bench.time_graph_after_torch([(lambda x=x, y=y: (x(), y())) for x, y in zip(a[:n], b[:n])])


SHAPES = ((9, 16), (16, 16), (17, 32), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256), (257, 272), (512, 512))
rows = []
if "pairs" in parts("pairs,gdn-nb,gdn"):
    for active, captured in SHAPES:
        cv = ConvCase(active, captured, D["bf16"], D["bf16"], True, "cloned", 1)
        second = GDNCase(active, captured, D["bf16"], D["bf16"], True, "cloned", 1)
        vllm = min(pair_time(cv, second, "vllm") for _ in range(2))
        best, gates = {}, {}
        for rnd in range(2):
            for v in (VARIANTS if rnd == 0 else VARIANTS[::-1]):
                setv(v)
                if rnd == 0:
                    gates[v] = agreement(second, ["mambalab", "vllm"])[0]
                best[v] = min(best.get(v, 1e9), pair_time(cv, second, "mambalab"))
        setv("base")
        line = " ".join(f"{v} {best[v]:7.2f} ({vllm / best[v]:.3f}x){'' if gates[v] else ' GATE FAIL'}"
                        for v in VARIANTS)
        print(f"pair conv+gdn bf16 {active}->{captured}: vllm {vllm:7.2f} | {line}", flush=True)
        rows.append(dict(active=active, captured=captured, vllm=vllm, ours=best, gates=gates))
        with open(os.path.join(os.environ.get("OUT", "."), "early-cap-pairs.json"), "w") as f:
            json.dump(rows, f, indent=0)
        del cv, second
        torch.cuda.empty_cache()

SWEEP = Sweep("ab-early-cap")
for part in [p for p in parts("pairs,gdn-nb,gdn") if p != "pairs"]:
    ab_sweep.NEIGHBOUR[0] = part.endswith("-nb")
    SWEEP.run(part, [("bf16",) + s for s in SHAPES], {v: i for i, v in enumerate(VARIANTS)}, setv,
              lambda k: GDNCase(k[1], k[2], D[k[0]], D["bf16"], True, "cloned", 1))
print("all done", flush=True)
