"""Issue 14, call 234 (H200): the GDN bf16's copy and token floors at 32 / 64 in 4 KiB programs on 1, 2 or 4 warps
(call 228's variants had 4 and 8 warps only), so the plan knows whether a kernel at the floor there needs several warps
a program, beside vLLM and ours.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site MAMBALAB_DEVICE=cuda OUT=$OUT python3 docs/results/issue14-call234-gdn-floor-warps.py
"""
import json
import os
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import BUDGET, Sweep, timed  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase  # noqa: E402
from mambalab.gpu.copy_floor import SlotCopyVariant, floor_times  # noqa: E402

D = bench.DTYPES
OUT = os.environ.get("OUT", ".")
Sweep("gdn-floor-warps")  # the vLLM path and the copy peak
VARIANTS = [SlotCopyVariant(e, w, True, t, d) for e in (2048, 4096) for w in (1, 2, 4)
            for t, d in ((False, False), (True, True))]
rows = []
for a in (32, 64):
    case = GDNCase(a, a, D["bf16"], D["bf16"], True, "cloned", 1)
    v, m = timed(case, "vllm"), timed(case, "mambalab")
    f = floor_times(case, BUDGET, VARIANTS)
    rows.append(dict(batch=a, vllm=v, mambalab=m, **f))
    print(f"gdn bf16 {a}: vllm {v:6.2f} ours {m:6.2f} | " + " ".join(f"[{n}] {t:6.2f}" for n, t in f["times"].items()),
          flush=True)
    with open(f"{OUT}/gdn-floor-warps.json", "w") as fh:
        json.dump(rows, fh, indent=0)
