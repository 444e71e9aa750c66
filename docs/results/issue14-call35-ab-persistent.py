"""Issue 14 A/B, call 35: the GDN decode step (one token) on a persistent grid
(``gated_delta_rule_persistent.PERSIST``) against the tree's rules (streaming kernel for bf16, general kernel for
fp32 from 33 sequences), beside vLLM in one process (scripts/ab_sweep.py: variants interleaved twice, the best of
each). The programs a SM of each variant come from its compiled kernel (registers and shared memory, sm_90 limits:
64 K registers, 228 KiB shared, 32 blocks a SM), found first by one launch and printed.

    variant   bf16 state (rows an item, stages)   fp32 state        items to programs
    base      the tree's rules (PERSIST empty)
    c8s4      8 rows (2 KiB), 4 stages             4 rows, 4 stages  contiguous runs
    s8s4      the same                              the same          strided by the grid
    c16s3     16 rows (4 KiB), 3 stages            8 rows, 3 stages  contiguous
    c8s5      8 rows, 5 stages                      4 rows, 5 stages  contiguous
    c8s4h     c8s4 with half the resident programs (a probe of the occupancy the walk needs)

Ran against the kernel's first form (a 6-field PERSIST rule); call 36 added two fields (register cap, prefetch),
so this script as it stands needs ``(..., contig, 0, False)`` rules to run again.

The kernel it measures (gated_delta_rule_persistent) was not taken: it is at commit 04e1fc3, not in later trees.
"""
import os
import sys
sys.path[:0] = ["lib", "scripts"]
from ab_sweep import ALL, Sweep  # noqa: E402
import torch  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule_persistent as gp  # noqa: E402

D = bench.DTYPES
SHAPES = {  # name: ({element size: (rows, stages)}, contiguous, occupancy fraction)
    "c8s4": ({2: (8, 4), 4: (4, 4)}, True, 1.0),
    "s8s4": ({2: (8, 4), 4: (4, 4)}, False, 1.0),
    "c16s3": ({2: (16, 3), 4: (8, 3)}, True, 1.0),
    "c8s5": ({2: (8, 5), 4: (4, 5)}, True, 1.0),
    "c8s4h": ({2: (8, 4), 4: (4, 4)}, True, 0.5),
}
ONLY = os.environ.get("VARIANTS")
if ONLY:
    SHAPES = {k: v for k, v in SHAPES.items() if k in ONLY.split(",")}


def occupancy(regs: int, shared: int) -> int:
    """Resident one-warp programs a SM on sm_90: registers (256 a warp's allocation unit), shared memory
    (1 KiB reserved a block), 32 blocks."""
    by_regs = 65536 // (((max(regs, 1) * 32 + 255) // 256) * 256)
    by_smem = (228 * 1024) // (shared + 1024)
    return max(1, min(32, by_regs, by_smem))


def compiled_resources():
    """(registers, shared bytes, spills) of the one compiled persistent kernel in Triton's cache."""
    fn = gp._gdn_persistent_kernel
    found = []
    for dc in fn.device_caches.values():
        for ck in dc[0].values():
            found.append((ck.n_regs, ck.metadata.shared, ck.n_spills))
    return found


def calibrate() -> dict:
    """Each variant's PERSIST, its programs a SM from its compiled kernel (bench shapes, batch 64)."""
    table = {"base": {}}
    for name, (by_size, contig, frac) in SHAPES.items():
        rule = {}
        for size, dt in ((2, "bf16"), (4, "fp32")):
            rb, st = by_size[size]
            for dc in gp._gdn_persistent_kernel.device_caches.values():
                dc[0].clear()
            gp.PERSIST = {size: (rb, st, 1, 1, 1 << 30, contig)}
            case = GDNCase(64, 64, D[dt], D["bf16"], False, "cloned", 1)
            case.call("mambalab", case.new_pool())
            torch.cuda.synchronize()
            res = compiled_resources()
            regs, shared, spills = res[-1]
            occ = occupancy(regs, shared)
            per_sm = max(1, int(occ * frac))
            print(f"calibrate {name} {dt}: rows {rb} stages {st} contig {contig}: {regs} registers, {shared} B shared,"
                  f" {spills} spills -> {occ} resident a SM, {per_sm} programs a SM ({len(res)} compiled)", flush=True)
            rule[size] = (rb, st, per_sm, ALL[0], ALL[1], contig)
            del case
        table[name] = rule
    gp.PERSIST = {}
    return table


TABLE = calibrate()
SWEEP = Sweep("ab-persistent")


def setv(v):
    gp.PERSIST = dict(TABLE[v])


one = [("bf16", "bf16", a, c) for a, c in ((57, 64), (64, 64), (128, 128), (256, 256), (512, 512))]
one += [("fp32", "bf16", a, c) for a, c in ((57, 57), (57, 64), (64, 64), (128, 128), (256, 256))]
SWEEP.run("one", [("one",) + k for k in one], {v: None for v in TABLE}, setv,
          lambda k: GDNCase(k[3], k[4], D[k[1]], D[k[2]], False, "cloned", 1))
setv("base")
