"""Issue 14 A/B, call 37: the GDN persistent grid, third round: the register cap alone. Call 36
(issue14-call36-ab-persistent2.txt) carried the next item's index loads one iteration ahead (PREFETCH) together with
the caps, and PREFETCH made every variant 1.3-1.8x slower (the state load's address then comes through the loop's
carried values, and the pipelined walk lost its overlap), so the caps were never seen alone. Here: no PREFETCH; the
walk of call 35's best bf16 shape (8 rows, strided) capped at 80 / 96 registers, and 3 / 5 stages at 80.
Programs a SM from each variant's compiled kernel, as in calls 35-36.

    variant    bf16 state (rows, stages, cap)   fp32 state           order
    base       the tree's rules (PERSIST empty)
    s8s4       8, 4, none                        4 rows, 4 stages     strided (call 35's best bf16)
    s8s4r80    8, 4, 80                          4, 4, 80             strided
    s8s4r96    8, 4, 96                          4, 4, 96             strided
    s8s3r80    8, 3, 80                          4, 3, 80             strided
    s8s5r80    8, 5, 80                          4, 5, 80             strided

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
SHAPES = {  # name: ({element size: (rows, stages, register cap)}, contiguous, prefetch)
    "s8s4": ({2: (8, 4, 0), 4: (4, 4, 0)}, False, False),
    "s8s4r80": ({2: (8, 4, 80), 4: (4, 4, 80)}, False, False),
    "s8s4r96": ({2: (8, 4, 96), 4: (4, 4, 96)}, False, False),
    "s8s3r80": ({2: (8, 3, 80), 4: (4, 3, 80)}, False, False),
    "s8s5r80": ({2: (8, 5, 80), 4: (4, 5, 80)}, False, False),
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
    for name, (by_size, contig, prefetch) in SHAPES.items():
        rule = {}
        for size, dt in ((2, "bf16"), (4, "fp32")):
            rb, st, cap = by_size[size]
            for dc in gp._gdn_persistent_kernel.device_caches.values():
                dc[0].clear()
            gp.PERSIST = {size: (rb, st, 1, 1, 1 << 30, contig, cap, prefetch)}
            case = GDNCase(64, 64, D[dt], D["bf16"], False, "cloned", 1)
            case.call("mambalab", case.new_pool())
            torch.cuda.synchronize()
            res = compiled_resources()
            regs, shared, spills = res[-1]
            occ = occupancy(regs, shared)
            per_sm = occ
            print(f"calibrate {name} {dt}: rows {rb} stages {st} cap {cap} contig {contig} prefetch {prefetch}: "
                  f"{regs} registers, {shared} B shared,"
                  f" {spills} spills -> {occ} resident a SM, {per_sm} programs a SM ({len(res)} compiled)", flush=True)
            rule[size] = (rb, st, per_sm, ALL[0], ALL[1], contig, cap, prefetch)
            del case
        table[name] = rule
    gp.PERSIST = {}
    return table


TABLE = calibrate()
SWEEP = Sweep("ab-persistent3")


def setv(v):
    gp.PERSIST = dict(TABLE[v])


one = [("bf16", "bf16", a, c) for a, c in ((57, 64), (64, 64), (128, 128), (256, 256), (512, 512))]
one += [("fp32", "bf16", a, c) for a, c in ((57, 57), (57, 64), (64, 64), (128, 128), (256, 256))]
SWEEP.run("one", [("one",) + k for k in one], {v: None for v in TABLE}, setv,
          lambda k: GDNCase(k[3], k[4], D[k[1]], D[k[2]], False, "cloned", 1))
setv("base")
