"""Issue 14, call 53: the copy floor of every row the recorded H200 run misses (and the GDN bf16 rows under 88% of
copy), beside vLLM 0.33 and mambalab in one process; on an H100 also the SSU's fp32 tile (vLLM's H100 table: 4 rows,
1 warp; ours 16 rows, chosen on the H200).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call53-floor.py

Floors (mambalab.gpu.copy_floor): torch ``copy_`` of the row's bytes, and the fastest slot copy (the kernels' access
pattern, state bytes only), timed as the bench times kernels. vLLM's time over the floor's is the most any kernel
moving those bytes could be ahead of vLLM in this harness.
"""
import json
import os
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import BUDGET, Sweep, timed  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import CASES  # noqa: E402
from mambalab.gpu.copy_floor import floor_times  # noqa: E402

D = bench.DTYPES
OUT = os.environ.get("OUT", ".")
NAME = torch.cuda.get_device_name()
# (kernel, state, act, z, pools, T, active, captured, dt, need): the 44 rows bench-h200-vllm.json misses, then the
# GDN bf16 rows the 88%-of-copy target reads (and two met rows for scale)
MISSED = [
    ('ssu', 'fp32', 'bf16', 'none', 'cloned', 1, 2, 2, 'head'), ('ssu', 'fp32', 'bf16', 'none', 'cloned', 1, 4, 4, 'head'),
    ('ssu', 'fp32', 'bf16', 'none', 'cloned', 1, 8, 8, 'head'), ('ssu', 'fp32', 'bf16', 'none', 'cloned', 1, 9, 9, 'head'),
    ('ssu', 'fp32', 'bf16', 'none', 'cloned', 1, 9, 16, 'head'), ('ssu', 'fp32', 'bf16', 'none', 'cloned', 1, 1, 1, 'element'),
    ('ssu', 'fp32', 'bf16', 'none', 'fresh', 1, 8, 8, 'head'), ('ssu', 'fp32', 'bf16', 'z', 'cloned', 1, 8, 8, 'head'),
    ('ssu', 'fp32', 'bf16', 'none', 'cloned', 1, 8, 8, 'element'), ('ssu', 'fp32', 'bf16', 'none', 'cloned', 1, 64, 64, 'element'),
    ('ssu', 'fp32', 'bf16', 'none', 'cloned', 1, 256, 256, 'element'), ('ssu', 'fp32', 'bf16', 'none', 'cloned', 2, 8, 8, 'head'),
    ('ssu', 'fp32', 'bf16', 'none', 'cloned', 3, 1, 1, 'head'), ('ssu', 'fp32', 'bf16', 'none', 'cloned', 3, 8, 8, 'head'),
    ('ssu', 'fp32', 'bf16', 'none', 'cloned', 4, 1, 1, 'head'), ('ssu', 'fp32', 'bf16', 'none', 'cloned', 4, 8, 8, 'head'),
    ('ssu', 'bf16', 'bf16', 'none', 'cloned', 1, 8, 8, 'head'), ('ssu', 'bf16', 'bf16', 'none', 'cloned', 1, 9, 9, 'head'),
    ('ssu', 'bf16', 'bf16', 'none', 'cloned', 1, 16, 16, 'head'), ('ssu', 'bf16', 'bf16', 'none', 'cloned', 1, 1, 1, 'element'),
    ('ssu', 'bf16', 'bf16', 'none', 'fresh', 1, 8, 8, 'head'), ('ssu', 'bf16', 'bf16', 'z', 'cloned', 1, 8, 8, 'head'),
    ('ssu', 'bf16', 'bf16', 'none', 'cloned', 1, 64, 64, 'element'), ('ssu', 'bf16', 'bf16', 'none', 'cloned', 1, 256, 256, 'element'),
    ('ssu', 'bf16', 'bf16', 'none', 'cloned', 1, 512, 512, 'element'), ('ssu', 'bf16', 'bf16', 'none', 'cloned', 2, 8, 8, 'head'),
    ('ssu', 'bf16', 'bf16', 'none', 'cloned', 2, 64, 64, 'head'), ('ssu', 'bf16', 'bf16', 'none', 'cloned', 3, 1, 1, 'head'),
    ('ssu', 'bf16', 'bf16', 'none', 'cloned', 3, 8, 8, 'head'), ('ssu', 'bf16', 'bf16', 'none', 'cloned', 3, 64, 64, 'head'),
    ('ssu', 'bf16', 'bf16', 'none', 'cloned', 3, 256, 256, 'head'), ('ssu', 'bf16', 'bf16', 'none', 'cloned', 4, 1, 1, 'head'),
    ('ssu', 'bf16', 'bf16', 'none', 'cloned', 4, 8, 8, 'head'), ('ssu', 'bf16', 'bf16', 'none', 'cloned', 4, 64, 64, 'head'),
    ('ssu', 'bf16', 'bf16', 'none', 'cloned', 4, 256, 256, 'head'), ('ssu', 'fp32', 'fp32', 'none', 'cloned', 1, 2, 2, 'head'),
    ('ssu', 'fp32', 'fp32', 'none', 'cloned', 1, 4, 4, 'head'), ('ssu', 'fp32', 'fp32', 'none', 'cloned', 1, 8, 8, 'head'),
    ('ssu', 'fp32', 'fp32', 'none', 'cloned', 1, 9, 9, 'head'), ('ssu', 'fp32', 'fp32', 'none', 'cloned', 1, 9, 16, 'head'),
    ('gdn', 'fp32', 'bf16', 'z', 'cloned', 1, 57, 64, 'head'), ('gdn', 'bf16', 'bf16', 'z', 'cloned', 3, 64, 64, 'head'),
    ('gdn', 'bf16', 'bf16', 'z', 'cloned', 4, 64, 64, 'head'), ('conv', 'fp32', 'fp32', 'z', 'cloned', 4, 256, 256, 'head'),
]
PCT88 = [('gdn', 'bf16', 'bf16', 'z', 'cloned', 1, b, b, 'head') for b in (64, 128, 256)] + [
    ('ssu', 'fp32', 'bf16', 'none', 'cloned', 1, 64, 64, 'head'), ('gdn', 'fp32', 'bf16', 'z', 'cloned', 1, 64, 64, 'head')]


def make(k):
    kernel, state, act, z, pools, T, a, c, dt = k
    return CASES[kernel](a, c, D[state], D[act], z == "z", pools, T, dt)


def floors(sweep):
    rows = []
    for k in MISSED + PCT88:
        case = make(k)
        v, m = timed(case, "vllm"), timed(case, "mambalab")
        f = floor_times(case, BUDGET)
        best = min(f["copy"], f.get("slot", f["copy"]))
        pct = lambda us: 100 * case.nbytes / us / 1e3 / sweep.copy  # noqa: E731
        r = dict(key=k, nbytes=case.nbytes, vllm=v, mambalab=m, **f)
        rows.append(r)
        print(f"floor {k}: vllm {v:7.2f} ({pct(v):4.1f}%) ours {m:7.2f} ({v / m:.3f}x) | copy_ {f['copy']:7.2f} "
              f"({pct(f['copy']):4.1f}%)" + (f" slot {f['slot']:7.2f} ({pct(f['slot']):4.1f}%, {f['slot_variant']})"
                                             if "slot" in f else "") +
              f" | most possible {v / best:.3f}x, ours at {100 * best / m:.1f}% of the floor's speed", flush=True)
        with open(f"{OUT}/floor.json", "w") as fh:
            json.dump(dict(device=NAME, copy_gbps=sweep.copy, rows=rows), fh, indent=0)
        del case
        torch.cuda.empty_cache()


SWEEP = Sweep("ab-floor")
print("device", NAME, flush=True)
floors(SWEEP)  # (as run, the script also held an H100-only tile sweep; call 53 got an H200: call 54 ran it)
