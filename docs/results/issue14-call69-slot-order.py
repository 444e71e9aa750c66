"""Issue 14, call 69: why a slot copy (the kernels' access pattern, state bytes only) reaches 88-90% of the copy
peak where torch's ``copy_`` of the same bytes reaches 95-98% (call 53, batch 64 / 128). Variants of the slot
copy, each timed as the bench times kernels (a CUDA graph over cold pools, ``do_bench`` median):

* ``order``: ``rb`` = grid (requests, blocks), requests fastest (``copy_floor._slot_copy_kernel``, and the
  SSU / GDN kernels' order); ``br`` = blocks of one slot fastest; ``persist`` = a grid of ``k`` programs an SM
  walking the tiles in ``br`` order.
* ``block`` elements a program, ``warps``, ``pdl`` (the loads before the wait), ``hint`` (loads
  ``evict_first``, stores ``.cs``), ``idx`` (``perm``: the bench's random slots; ``sorted``).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call69-slot-order.py
"""
import json
import os
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ab_sweep import BUDGET  # noqa: E402
from mambalab.gpu import bench  # noqa: E402

OUT = os.environ.get("OUT", ".")
SMS = torch.cuda.get_device_properties(0).multi_processor_count


@triton.jit
def _copy(pool_ptr, idx_ptr, slot_elems, R, NB, BR: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr,
          HINT: tl.constexpr):
    if BR:
        b = tl.program_id(0)
        r = tl.program_id(1)
    else:
        r = tl.program_id(0)
        b = tl.program_id(1)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    s = tl.load(idx_ptr + r).to(tl.int64)
    offs = b * BLOCK + tl.arange(0, BLOCK)
    mask = offs < slot_elems
    if HINT:
        v = tl.load(pool_ptr + s * slot_elems + offs, mask=mask, eviction_policy="evict_first")
    else:
        v = tl.load(pool_ptr + s * slot_elems + offs, mask=mask)
    if PDL:
        tl.extra.cuda.gdc_wait()
    if HINT:
        tl.store(pool_ptr + s * slot_elems + offs, v, mask=mask, cache_modifier=".cs")
    else:
        tl.store(pool_ptr + s * slot_elems + offs, v, mask=mask)


@triton.jit
def _copy_persist(pool_ptr, idx_ptr, slot_elems, R, NB, BR: tl.constexpr, BLOCK: tl.constexpr,
                  PDL: tl.constexpr, HINT: tl.constexpr):
    pid = tl.program_id(0)
    G = tl.num_programs(0)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    for t in range(pid, R * NB, G):
        r = t // NB
        b = t % NB
        s = tl.load(idx_ptr + r).to(tl.int64)
        offs = b * BLOCK + tl.arange(0, BLOCK)
        mask = offs < slot_elems
        v = tl.load(pool_ptr + s * slot_elems + offs, mask=mask)
        tl.store(pool_ptr + s * slot_elems + offs, v, mask=mask)


def variants():
    out = []
    for order in ("rb", "br"):
        for block in (4096, 8192, 16384):
            for warps in (4, 8):
                for pdl in (False, True):
                    out.append(dict(order=order, block=block, warps=warps, pdl=pdl, hint=False))
    for block in (8192, 16384):
        for order in ("rb", "br"):
            out.append(dict(order=order, block=block, warps=8, pdl=True, hint=True))
    for block in (4096, 8192):
        for k in (2, 4, 8):
            out.append(dict(order="persist", block=block, warps=8, pdl=False, hint=False, k=k))
    return out


def launch(v, pool, idx, slot_elems):
    R, nb = idx.shape[0], triton.cdiv(slot_elems, v["block"])
    kw = dict(BLOCK=v["block"], PDL=v["pdl"], HINT=v["hint"], num_warps=v["warps"])
    if v["pdl"]:
        kw["launch_pdl"] = True
    if v["order"] == "persist":
        _copy_persist[(min(SMS * v["k"], R * nb),)](pool, idx, slot_elems, R, nb, BR=True, **kw)
    else:
        grid = (nb, R) if v["order"] == "br" else (R, nb)
        _copy[grid](pool, idx, slot_elems, R, nb, BR=v["order"] == "br", **kw)


# (name, slot elements, dtype, requests)
SIZES = [("ssu fp32", 128 * 64 * 128, torch.float32, R) for R in (2, 4, 8, 64)] + [
    ("ssu bf16", 128 * 64 * 128, torch.bfloat16, R) for R in (8, 64)] + [
    ("gdn bf16", 32 * 128 * 128, torch.bfloat16, R) for R in (64, 128)] + [("gdn fp32", 32 * 128 * 128, torch.float32, 64)]


def main():
    peak = bench.copy_bandwidth()
    print(f"copy {peak:.0f} GB/s, {SMS} SMs, {torch.cuda.get_device_name()}", flush=True)
    rows = []
    for name, elems, dtype, R in SIZES:
        esize = torch.tensor([], dtype=dtype).element_size()
        nbytes = 2 * R * elems * esize
        pct = lambda us: 100 * nbytes / us / 1e3 / peak  # noqa: E731
        n = nbytes // 2 // 4
        pairs = bench._num_pools(2 * n * 4, BUDGET)
        bufs = [(torch.empty(n, device="cuda").uniform_(), torch.empty(n, device="cuda")) for _ in range(pairs)]
        cp = bench.time_graph([(lambda s=s, d=d: d.copy_(s)) for s, d in bufs], 40)
        del bufs
        torch.cuda.empty_cache()
        pools = [torch.randn((R + 1, elems), device="cuda").to(dtype)
                 for _ in range(bench._num_pools((R + 1) * elems * esize, BUDGET))]
        res = dict(name=name, R=R, nbytes=nbytes, copy_us=cp, variants=[])
        print(f"\n{name} R={R}: copy_ {cp:8.2f} us ({pct(cp):5.1f}%), {len(pools)} pools", flush=True)
        for idxmode in ("perm", "sorted"):
            idx = (torch.randperm(R, dtype=torch.int32) + 1) if idxmode == "perm" else torch.arange(
                1, R + 1, dtype=torch.int32)
            idx = idx.cuda()
            for v in variants():
                if idxmode == "sorted" and not (v["order"] in ("br", "persist") or v["block"] == 8192):
                    continue
                us = min(bench.time_graph([(lambda p=p: launch(v, p, idx, elems)) for p in pools], 40)
                         for _ in range(2))
                res["variants"].append(dict(v, idx=idxmode, us=us))
                print(f"  {idxmode:6} {v['order']:7} block {v['block']:5} w{v['warps']} pdl {int(v['pdl'])} "
                      f"hint {int(v['hint'])} k {v.get('k', '-')}: {us:8.2f} us ({pct(us):5.1f}%)", flush=True)
        best = min(res["variants"], key=lambda x: x["us"])
        print(f"  best: {best} -> {pct(best['us']):.1f}% (copy_ {pct(cp):.1f}%)", flush=True)
        rows.append(res)
        del pools
        torch.cuda.empty_cache()
        with open(f"{OUT}/slot-order.json", "w") as fh:
            json.dump(dict(device=torch.cuda.get_device_name(), copy_gbps=peak, rows=rows), fh, indent=0)


if __name__ == "__main__":
    main()
