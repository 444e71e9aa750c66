"""Issue 14, call 133 (a diagnostic): GDN bf16 one token at 57 -> 64 / 64 / 128 / 256, where ours (the rule at
5a056fa: streaming kernel, 2 blocks of 16 rows early, one warp, 8 KiB of state a program) stays 3-4 us behind the
slot-copy floor (``mambalab.gpu.copy_floor``: 4 KiB a program on 4 warps, PDL, loads before the wait; call 53).
The slot copy timed in several program shapes, ours among them (4096 elements on 1 warp = our 32 rows x 128), to
tell the program's shape from its work: if the copy in our shape is as slow as ours, the shape costs the time.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call133-gdn-floor-shapes.py
"""
import json
import os
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

import ab_sweep  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase  # noqa: E402
from mambalab.gpu.copy_floor import SlotCopyVariant, floor_times  # noqa: E402

print("device", torch.cuda.get_device_name(), flush=True)
bench._vllm_path()
copy = bench.copy_bandwidth()
print(f"copy {copy:.0f} GB/s", flush=True)
SHAPES = [(2048, 4, True), (4096, 4, True), (4096, 1, True), (4096, 1, False), (2048, 1, True), (1024, 1, True),
          (8192, 4, True), (4096, 2, True)]
rows = []
for a, c in ((57, 64), (64, 64), (128, 128), (256, 256)):
    case = GDNCase(a, c, torch.bfloat16, torch.bfloat16, True, "cloned", 1)
    r = {"key": [a, c], "ours": [], "slot": {}}
    for rep in range(2):
        r["ours"].append(ab_sweep.timed(case, "mambalab"))
        for b, w, p in SHAPES:
            us = floor_times(case, ab_sweep.BUDGET, [SlotCopyVariant(b, w, p)])["slot"]
            r["slot"].setdefault(f"{b}x{w}w{'-pdl' if p else ''}", []).append(us)
    pct = lambda us: 100 * case.nbytes / us / 1e3 / copy  # noqa: E731
    ours = min(r["ours"])
    print(f"gdn bf16 {a}->{c}: ours {ours:7.2f} ({pct(ours):4.1f}%) | " + " ".join(
        f"{k} {min(v):7.2f} ({pct(min(v)):4.1f}%)" for k, v in r["slot"].items()), flush=True)
    rows.append(r)
    del case
    torch.cuda.empty_cache()
with open(os.path.join(os.environ.get("OUT", "."), "gdn-floor-shapes.json"), "w") as f:
    json.dump(dict(copy_gbps=copy, rows=rows), f, indent=0)
