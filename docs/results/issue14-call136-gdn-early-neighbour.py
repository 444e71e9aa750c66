"""Issue 14, call 136: the GDN streaming kernel's early blocks (``gated_delta_rule.STREAM_EARLY_STATE``, "rule")
against the pipelined loop ("none"), with each timed launch preceded by a kernel that does not trigger its dependents
(a torch elementwise op on a small buffer, as the torch ops before the GDN kernel in ``model/gated_delta_net.py``).
In the bench a launch's neighbour is the previous launch of the same kernel, which triggers its dependents at once, so
PDL lets the next launch's early loads overlap its tail; in a model the neighbour is another kernel. Each variant's
time is the graph of (neighbour, launch) pairs less the graph of the neighbours alone; vLLM the same way.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call136-gdn-early-neighbour.py
"""
import json
import os
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

import ab_sweep  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402

print("device", torch.cuda.get_device_name(), flush=True)
bench._vllm_path()
EARLY = dict(gdn.STREAM_EARLY_STATE)
bufs = [torch.zeros(1 << 16, device="cuda") for _ in range(2)]


def neighbour(i):
    bufs[i % 2].mul_(0.5)  # a torch kernel: no PDL trigger, so the next launch waits for its end


def timed(case, impl, with_neighbour):
    pools = case.make_pools(bench._num_pools(case.pool_bytes, ab_sweep.BUDGET))
    bugs = ab_sweep.FIX if impl == "mambalab" else None
    if with_neighbour:
        calls = [(lambda i=i, p=p: (neighbour(i), case.call(impl, p, bugs))) for i, p in enumerate(pools)]
    else:
        calls = [(lambda p=p: case.call(impl, p, bugs)) for p in pools]
    us = bench.time_graph(calls, ab_sweep.REP)
    del pools
    return us


rows = []
for s, a, c in [("bf16", 9, 16), ("bf16", 16, 16), ("bf16", 57, 64), ("bf16", 64, 64), ("bf16", 128, 128),
                ("bf16", 256, 256), ("fp32", 8, 8), ("fp32", 9, 16), ("fp32", 16, 16), ("fp32", 32, 32)]:
    case = GDNCase(a, c, bench.DTYPES[s], torch.bfloat16, True, "cloned", 1)
    L = bench._num_pools(case.pool_bytes, ab_sweep.BUDGET)
    alone = bench.time_graph([(lambda i=i: neighbour(i)) for i in range(L)], ab_sweep.REP)
    r = {"key": [s, a, c], "neighbour_us": alone, "us": {}}
    for rep in range(2):
        for v in (("vllm", "rule", "none") if rep == 0 else ("none", "rule", "vllm")):
            gdn.STREAM_EARLY_STATE = {} if v == "none" else EARLY
            for nb in (True, False):
                t = timed(case, "vllm" if v == "vllm" else "mambalab", nb) - (alone if nb else 0.0)
                r["us"].setdefault(f"{v}{'+nb' if nb else ''}", []).append(t)
    gdn.STREAM_EARLY_STATE = EARLY
    m = {k: min(x) for k, x in r["us"].items()}
    print(f"gdn {s} {a}->{c} (neighbour {alone:5.2f} us): " + " | ".join(
        f"{v}: {m[v]:7.2f} ({m['vllm']/m[v]:.3f}x) +nb {m[v + '+nb']:7.2f} ({m['vllm+nb']/m[v + '+nb']:.3f}x)"
        for v in ("rule", "none")) + f" | vllm {m['vllm']:7.2f} +nb {m['vllm+nb']:7.2f}", flush=True)
    rows.append(r)
    del case
    torch.cuda.empty_cache()
with open(os.path.join(os.environ.get("OUT", "."), "gdn-early-neighbour.json"), "w") as f:
    json.dump(dict(rows=rows), f, indent=0)
