"""Issue 14, call 230 (H200): the odd programs' early state after PDL's wait (call 229: the SSU's fp32 state at 8 in the
bench 1.044 -> 1.087x, after a torch kernel even, as a layer runs it 1.113 -> 1.145x; bf16 lost), across the SSU fp32
one-token batches, and the same lever in the GDN's streaming kernel (``gated_delta_rule.STREAM_EARLY_HALF``: the odd
32-row programs read their first block after the wait); and the copy floor with programs of 4 KiB of fp32 state, which
call 228's variants lacked and which the SSU's fp32 rule runs at 3-8 x 128 request x heads (8 rows on 2 warps).

SSU variants: "base" the tree; "early" the state read before the wait up to 16 x 128 request x heads; "half" that with
the odd row blocks after the wait. GDN: "base"; "half". Bench, after a torch kernel ("-nb"), layer pairs.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site MAMBALAB_DEVICE=cuda OUT=$OUT python3 docs/results/issue14-call230-half-early-range.py
"""
import json
import os
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import ALL, BUDGET, Sweep, pair_sweep, parts, timed  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase, SSUCase  # noqa: E402
from mambalab.gpu.copy_floor import SlotCopyVariant, floor_times  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402
from mambalab.kernels import mamba_ssm as ssu  # noqa: E402

D = bench.DTYPES
OUT = os.environ.get("OUT", ".")
print("device", torch.cuda.get_device_name(), flush=True)
BASE = ssu.EARLY_STATE_MAX_REQUEST_HEADS


def set_ssu(v):
    ssu.EARLY_STATE_MAX_REQUEST_HEADS = 16 * 128 if v != "base" else BASE
    ssu.EARLY_HALF_STATE = {4: ALL} if v == "half" else {}


def set_gdn(v):
    gdn.STREAM_EARLY_HALF = {2: ALL, 4: ALL} if v == "half" else {}


# (state, act, z, pools, active, captured)
SSU_ROWS = [("fp32", "bf16", False, "cloned", a, c) for a, c in ((5, 5), (6, 6), (8, 8), (9, 9), (12, 12), (16, 16),
                                                                  (9, 16))] + [
    ("fp32", "bf16", False, "fresh", 8, 8), ("fp32", "bf16", True, "cloned", 8, 8),
    ("fp32", "fp32", False, "cloned", 8, 8), ("fp32", "fp32", False, "cloned", 9, 9)]
GDN_ROWS = [("bf16", a, c) for a, c in ((17, 17), (32, 32), (57, 57), (64, 64), (57, 64), (128, 128), (256, 256))] + [
    ("fp32", a, c) for a, c in ((8, 8), (16, 16), (32, 32))]
PARTS = parts("floor,ssu,ssu-nb,ssu-pairs,gdn,gdn-nb,gdn-pairs")
sweep = Sweep("ab-half2")
if "floor" in PARTS:
    small = [SlotCopyVariant(1024, w, True, t, d) for w in (1, 2, 4) for t, d in ((False, False), (True, True))]
    rows = []
    for a, c, act in ((8, 8, "bf16"), (9, 9, "bf16"), (8, 8, "fp32"), (4, 4, "bf16")):
        case = SSUCase(a, c, D["fp32"], D[act], False, "cloned", 1)
        v = timed(case, "vllm")
        f = floor_times(case, BUDGET, small)
        rows.append(dict(key=(a, c, act), vllm=v, **f))
        print(f"floor ssu fp32/{act} {a}->{c}: vllm {v:6.2f} | " + " ".join(f"[{n}] {t:6.2f}" for n, t in f["times"].items())
              + f" | best {f['slot']:6.2f} ({f['slot_variant']}): most possible {v / min(f['slot'], f['copy']):.3f}x",
              flush=True)
        with open(f"{OUT}/floor-4k.json", "w") as fh:
            json.dump(rows, fh, indent=0)
sweep.run_parts([p for p in PARTS if p.startswith("ssu") and p != "ssu-pairs"], SSU_ROWS, ("base", "early", "half"),
                set_ssu, lambda k: SSUCase(k[4], k[5], D[k[0]], D[k[1]], k[2], k[3], 1))
if "ssu-pairs" in PARTS:
    pair_sweep("conv+ssu fp32", ((6, 6), (8, 8), (9, 9), (12, 12), (16, 16)),
               lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], False, "cloned", 1),
                             SSUCase(a, c, D["fp32"], D["bf16"], False, "cloned", 1)),
               ("base", "early", "half"), set_ssu, "half2-ssu-pairs.json")
sweep.run_parts([p for p in PARTS if p.startswith("gdn") and p != "gdn-pairs"], GDN_ROWS, ("base", "half"), set_gdn,
                lambda k: GDNCase(k[1], k[2], D[k[0]], D["bf16"], True, "cloned", 1))
if "gdn-pairs" in PARTS:
    for st, shapes in (("bf16", ((32, 32), (64, 64), (128, 128))), ("fp32", ((16, 16), (32, 32)))):
        pair_sweep(f"conv+gdn {st}", shapes,
                   lambda a, c, st=st: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                                        GDNCase(a, c, D[st], D["bf16"], True, "cloned", 1)),
                   ("base", "half"), set_gdn, f"half2-gdn-pairs-{st}.json")
print("all done", flush=True)
