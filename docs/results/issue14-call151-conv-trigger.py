"""Issue 14, call 151: the conv's PDL trigger at every batch (``causal_conv1d.DECODE_TRIGGER``: the decode kernel
executes ``griddepcontrol.launch_dependents`` where its own PDL is off, bf16 from 9 requests, fp32 from 17), so the
kernel after it in a layer may start early, and the GDN's bf16 streaming kernel reading its two blocks before PDL's
wait (``STREAM_EARLY_STATE[2]``), which call 136 left out because after a non-triggering kernel it lost (16: -11%).
Measured as a layer runs them: a torch kernel that does not trigger (the previous layer's projection), then the conv,
then the GDN's packed decode (or the SSU), the torch kernel alone subtracted (``bench.time_graph_after_torch``); ours
per variant against vLLM 0.33's pair. Then the GDN alone in the bench's harness and after torch.
Variants: "base"; "trig" the conv triggers; "early" the GDN's early blocks; "both".

Runs at 7978537 (its rule formats: `DECODE_TRIGGER` a bool, three-field `STREAM_EARLY_STATE`).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call151-conv-trigger.py
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
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402
from mambalab.lab.bugs import BugConfig  # noqa: E402

D, FIX, BUDGET = bench.DTYPES, BugConfig.fixed(), 8 * 2**30
print("device", torch.cuda.get_device_name(), flush=True)
bench._vllm_path()
EARLY = dict(gdn.STREAM_EARLY_STATE)
VARIANTS = ("base", "trig", "early", "both")


def setv(v):
    conv.DECODE_TRIGGER = v in ("trig", "both")
    gdn.STREAM_EARLY_STATE = {**EARLY, 2: (1, 1 << 30, False)} if v in ("early", "both") else EARLY


def calls(case, impl):
    return bench._timed_calls(case, impl, BUDGET, FIX if impl == "mambalab" else None)


def pair_time(cv, second, impl):
    a, b = calls(cv, impl), calls(second, impl)
    n = min(len(a), len(b))
    return bench.time_graph_after_torch([(lambda x=x, y=y: (x(), y())) for x, y in zip(a[:n], b[:n])])


rows = []
PAIRS = [("gdn", "bf16", a, c) for a, c in ((8, 8), (9, 16), (16, 16), (17, 32), (32, 32), (57, 64), (64, 64),
                                            (128, 128), (256, 256))]
PAIRS += [("gdn", "fp32", a, a) for a in (16, 64, 256)] + [("ssu", s, a, a) for s in ("bf16", "fp32")
                                                            for a in (16, 64, 256)]
if "pairs" in parts("pairs,gdn-nb,gdn"):
    for layer, state, active, captured in PAIRS:
        cv = ConvCase(active, captured, D["bf16"], D["bf16"], True, "cloned", 1)
        if layer == "ssu":
            second = SSUCase(active, captured, D[state], D["bf16"], False, "cloned", 1, "head")
        else:
            second = GDNCase(active, captured, D[state], D["bf16"], True, "cloned", 1)
        vllm = min(pair_time(cv, second, "vllm") for _ in range(2))
        best, gates = {}, {}
        for rnd in range(2):
            for v in (VARIANTS if rnd == 0 else VARIANTS[::-1]):
                setv(v)
                if rnd == 0:
                    gates[v] = agreement(second, ["mambalab", "vllm"])[0] and agreement(cv, ["mambalab", "vllm"])[0]
                best[v] = min(best.get(v, 1e9), pair_time(cv, second, "mambalab"))
        setv("base")
        line = " ".join(f"{v} {best[v]:7.2f} ({vllm / best[v]:.3f}x){'' if gates[v] else ' GATE FAIL'}"
                        for v in VARIANTS)
        print(f"pair conv+{layer} {state} {active}->{captured}: vllm {vllm:7.2f} | {line}", flush=True)
        rows.append(dict(layer=layer, state=state, active=active, captured=captured, vllm=vllm, ours=best,
                         gates=gates))
        with open(os.path.join(os.environ.get("OUT", "."), "conv-trigger-pairs.json"), "w") as f:
            json.dump(rows, f, indent=0)
        del cv, second
        torch.cuda.empty_cache()

SWEEP = Sweep("ab-trigger")
CASES = [("bf16", a, c) for a, c in ((9, 16), (16, 16), (17, 32), (32, 32), (57, 64), (64, 64), (128, 128),
                                     (256, 256))]
for part in [p for p in parts("pairs,gdn-nb,gdn") if p != "pairs"]:
    ab_sweep.NEIGHBOUR[0] = part.endswith("-nb")
    SWEEP.run(part, CASES, {"base": 0, "early": 2}, setv,
              lambda k: GDNCase(k[1], k[2], D[k[0]], D["bf16"], True, "cloned", 1))
print("all done", flush=True)
