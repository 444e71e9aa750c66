"""Issue 14 A/B, call 36: the GDN decode step (one token) on a persistent grid, second round. Call 35
(issue14-call35-ab-persistent.txt) lost everywhere (bf16 at 64: 40.8 us strided against the streaming kernel's 39.4;
fp32 0.97-1.02x against 1.10x): the walk took 122 registers a thread for bf16 (16 programs a SM against the
streaming kernel's 24 at 80) and half the programs cost 15-20% more, so occupancy decides; strided beat contiguous
for bf16. Here: a register cap (Triton's ``maxnreg``) and the next item's cu_seqlens / index loads carried one
iteration ahead (``PREFETCH``: the state load's address no longer waits on a load in the same iteration).
Programs a SM from each variant's compiled kernel, as in call 35.

    variant    bf16 state (rows, stages, cap)   fp32 state           order, prefetch
    base       the tree's rules (PERSIST empty)
    s8s4       8, 4, none                        4 rows, 4 stages     strided (call 35's best bf16)
    s8s4p      8, 4, none                        4, 4                 strided, prefetch
    s8s4r80p   8, 4, 80                          4, 4, 80             strided, prefetch
    s8s4r96p   8, 4, 96                          4, 4, 96             strided, prefetch
    s8s3r80p   8, 3, 80                          4, 3, 80             strided, prefetch
    c16s3p     16, 3, none                       8, 3, none           contiguous, prefetch (call 35's best fp32)

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
    "s8s4p": ({2: (8, 4, 0), 4: (4, 4, 0)}, False, True),
    "s8s4r80p": ({2: (8, 4, 80), 4: (4, 4, 80)}, False, True),
    "s8s4r96p": ({2: (8, 4, 96), 4: (4, 4, 96)}, False, True),
    "s8s3r80p": ({2: (8, 3, 80), 4: (4, 3, 80)}, False, True),
    "c16s3p": ({2: (16, 3, 0), 4: (8, 3, 0)}, True, True),
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
SWEEP = Sweep("ab-persistent2")


def setv(v):
    gp.PERSIST = dict(TABLE[v])


one = [("bf16", "bf16", a, c) for a, c in ((57, 64), (64, 64), (128, 128), (256, 256), (512, 512))]
one += [("fp32", "bf16", a, c) for a, c in ((57, 57), (57, 64), (64, 64), (128, 128), (256, 256))]
SWEEP.run("one", [("one",) + k for k in one], {v: None for v in TABLE}, setv,
          lambda k: GDNCase(k[3], k[4], D[k[1]], D[k[2]], False, "cloned", 1))
setv("base")
