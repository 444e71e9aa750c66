"""Issue 14, call 156: the GDN's bf16 streaming kernel with only its first block read before PDL's wait, the second
after the first is stored (``EARLY_ONE``, 128 registers by the local sm_90 compile against the two early blocks' 168:
16 programs an SM, not 12). Call 152: the two early blocks win the padded 9 -> 16 (+10% in the layer) and lose a
full 16 / 32 (-6 / -2%) to occupancy. Variants (``EARLY_ONE`` passed by a launch wrapper, as ``ab_sweep.register_cap``
does): "base" (the rules at b4fc456: two early blocks from 64); "one" (the first block early from 16 sequences, every
streaming launch); "one64" (from 64, in place of the two). The GDN alone in both harnesses, then layer pairs (a torch
kernel, the conv with its trigger, the packed decode; the torch kernel subtracted).

Runs at 3ddd600 (three-field `STREAM_EARLY_STATE`, ``EARLY_ONE`` passed by the wrapper).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call156-gdn-early-one.py
"""
import json
import os
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

import ab_sweep  # noqa: E402
from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase, agreement  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402
from mambalab.lab import sanitizer  # noqa: E402
from mambalab.lab.bugs import BugConfig  # noqa: E402

D, FIX, BUDGET = bench.DTYPES, BugConfig.fixed(), 8 * 2**30
print("device", torch.cuda.get_device_name(), flush=True)
bench._vllm_path()
EARLY = dict(gdn.STREAM_EARLY_STATE)
ONE = [False]
_launch = sanitizer.launch


def _with_one(kernel, grid, *args, **kwargs):
    if ONE[0] and kernel is gdn._gdn_stream_kernel and kwargs.get("EARLY_STATE"):
        kwargs["EARLY_ONE"] = True
    return _launch(kernel, grid, *args, **kwargs)


sanitizer.launch = _with_one
VARIANTS = ("base", "one", "one64")


def setv(v):
    gdn.STREAM_EARLY_STATE = {**EARLY, 2: (16, 1 << 30, False)} if v == "one" else EARLY
    ONE[0] = v != "base"


SHAPES = ((9, 16), (16, 16), (17, 32), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256))
SWEEP = Sweep("ab-early-one")
for part in [p for p in parts("gdn,gdn-nb,pairs") if p != "pairs"]:
    ab_sweep.NEIGHBOUR[0] = part.endswith("-nb")
    SWEEP.run(part, [("bf16",) + s for s in SHAPES], {v: i for i, v in enumerate(VARIANTS)}, setv,
              lambda k: GDNCase(k[1], k[2], D[k[0]], D["bf16"], True, "cloned", 1))


def calls(case, impl):
    return bench._timed_calls(case, impl, BUDGET, FIX if impl == "mambalab" else None)


def pair_time(cv, second, impl):
    a, b = calls(cv, impl), calls(second, impl)
    n = min(len(a), len(b))
    return bench.time_graph_after_torch([(lambda x=x, y=y: (x(), y())) for x, y in zip(a[:n], b[:n])])


rows = []
if "pairs" in parts("gdn,gdn-nb,pairs"):
    for active, captured in ((9, 16), (16, 16), (17, 32), (32, 32), (64, 64), (256, 256)):
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
        print(f"pair conv+gdn bf16 {active}->{captured}: vllm {vllm:7.2f} | "
              + " ".join(f"{v} {best[v]:7.2f} ({vllm / best[v]:.3f}x){'' if gates[v] else ' GATE FAIL'}"
                         for v in VARIANTS), flush=True)
        rows.append(dict(active=active, captured=captured, vllm=vllm, ours=best, gates=gates))
        with open(os.path.join(os.environ.get("OUT", "."), "early-one-pairs.json"), "w") as f:
            json.dump(rows, f, indent=0)
        del cv, second
        torch.cuda.empty_cache()
print("all done", flush=True)
