"""The copy floor of a bench row: the state bytes a decode kernel moves, moved by kernels that do nothing else.

A decode kernel (SSU, GDN) must read each live request's state slot once and write it back, to ``T`` slots
under speculative decoding. No arithmetic can make it faster than a kernel that only moves those bytes, in the
same launch pattern: one launch a step, each launch on its own pool of a cold-L2 CUDA graph, timed by
:func:`mambalab.gpu.bench.time_graph`. So where the issue asks for 1.1x over vLLM, vLLM's time over the floor's
says whether *any* kernel could get there in this harness: the bench's "% of copy" divides by a 1 GiB copy,
while a batch-8 step moves 64 MiB, and a small transfer does not reach a big one's rate.

Two floors, both timed as the bench times a kernel:

* ``copy_``: torch's device copy between two contiguous buffers of half the row's bytes each (read + write =
  the row's bytes): the "% of copy" yardstick at this size.
* ``slot_copy``: a Triton kernel that reads each request's source slot through its index and stores it to each
  of its destination slots (the kernels' access pattern, state bytes only), as a grid of ``(requests, blocks)``
  programs; the fastest of :data:`SLOT_COPY_VARIANTS` (block size, warps, and PDL with the loads before the
  wait, as the kernels' early state load does).

A third, the **token floor** (:data:`TOKEN_FLOOR_VARIANTS`): a decode kernel cannot store a byte of new state before
it has read its token (``x``, ``B``, ``C``, ``dt`` for the SSU; ``q``, ``k``, ``v``, the gates for the GDN), and under
programmatic dependent launch it may read the token only after PDL's wait, since the kernel before writes it. So the
slot copy again, each program's stores held until one word it loads after the wait has arrived (``token``): with
PDL and every state load before the wait, with PDL and the odd blocks' state loads after it (``defer``: bytes move
while the others wait on their token), and without PDL (every load after the launch, the token beside the state). One
word a request, far less than a kernel's token: the floor stays a floor.

Not a mirror of an upstream file: a yardstick of this repo's bench (issue 14). Runs on the interpreter too
(tests/test_copy_floor.py checks it against :func:`slot_copy_ref`).
"""

from __future__ import annotations

from dataclasses import dataclass

import mambalab  # noqa: F401  (sets TRITON_INTERPRET before any kernel is defined)

import torch
import triton
import triton.language as tl


@triton.jit
def _slot_copy_kernel(pool_ptr, src_ptr, dst_ptr, tok_ptr, slot_elems, s_dst_row, never,
                      NDST: tl.constexpr, BLOCK: tl.constexpr, USE_PDL: tl.constexpr,
                      TOKEN: tl.constexpr = False, DEFER: tl.constexpr = False):
    r = tl.program_id(0)
    b = tl.program_id(1)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
    src = tl.load(src_ptr + r).to(tl.int64)
    offs = b * BLOCK + tl.arange(0, BLOCK)
    mask = offs < slot_elems
    if DEFER:  # the odd blocks read their state after the wait
        odd = (offs * 0 + b) % 2  # 1 in an odd block (a tile: the interpreter takes no scalar in a mask)
        vals = tl.load(pool_ptr + src * slot_elems + offs, mask=mask & (odd == 0))
    else:
        vals = tl.load(pool_ptr + src * slot_elems + offs, mask=mask)
    if USE_PDL:
        # the loads above ran before the previous launch finished: only where it writes nothing this one reads
        tl.extra.cuda.gdc_wait()
    if DEFER:
        vals = tl.where(odd == 1, tl.load(pool_ptr + src * slot_elems + offs, mask=mask & (odd == 1)), vals)
    if TOKEN:  # the stores wait on a word read after the wait, as a kernel's wait on its token
        mask = mask & ((offs * 0 + tl.load(tok_ptr + r)) != never)
    for t in tl.static_range(NDST):
        dst = tl.load(dst_ptr + r * s_dst_row + t).to(tl.int64)
        tl.store(pool_ptr + dst * slot_elems + offs, vals, mask=mask)


def slot_copy_ref(pool: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """Pure torch: ``pool[dst[r, t]] = pool[src[r]]`` for every request ``r`` and column ``t`` (sources read
    before any store). Returns ``pool``."""
    vals = pool[src.long()].clone()
    for t in range(dst.shape[1]):
        pool[dst[:, t].long()] = vals
    return pool


@dataclass(frozen=True)
class SlotCopyVariant:
    block: int  # elements a program moves
    num_warps: int
    pdl: bool  # programmatic dependent launch, the loads before the wait (GPU, sm_90+)
    token: bool = False  # the stores wait on a word read after the wait (the token floor)
    defer: bool = False  # the odd blocks' state read after the wait

    @property
    def name(self) -> str:
        return (f"block {self.block}, {self.num_warps} warps" + (", PDL" if self.pdl else "")
                + (", token" if self.token else "") + (", odd blocks after the wait" if self.defer else ""))


SLOT_COPY_VARIANTS = [SlotCopyVariant(b, w, p) for b in (2048, 4096, 8192) for w in (4, 8) for p in (False, True)]
TOKEN_FLOOR_VARIANTS = [SlotCopyVariant(b, w, p, True, d) for b in (2048, 4096, 8192) for w in (4, 8)
                        for p, d in ((False, False), (True, False), (True, True))]


class SlotCopy:
    """``pool[dst[r, t]] = pool[src[r]]`` for every request, as one launch; indices checked once, here, so a
    call can be captured in a CUDA graph. ``src``: ``(R,)`` int32 slot ids; ``dst``: ``(R, T)`` int32; every id
    in ``[0, slots)``, no destination twice (the order of two stores to one slot is not defined)."""

    def __init__(self, src: torch.Tensor, dst: torch.Tensor, slots: int, variant: SlotCopyVariant | None = None):
        if src.dim() != 1 or dst.dim() != 2 or dst.shape[0] != src.shape[0]:
            raise ValueError(f"slot_copy: src must be (R,) and dst (R, T), got {tuple(src.shape)} and "
                             f"{tuple(dst.shape)}")
        if src.dtype != torch.int32 or dst.dtype != torch.int32:
            raise TypeError(f"slot_copy: indices must be int32, got {src.dtype} and {dst.dtype}")
        for name, ids in (("src", src), ("dst", dst)):
            if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= slots):
                bad = ids[(ids < 0) | (ids >= slots)].flatten()[0]
                raise IndexError(f"slot_copy: {name} holds slot {int(bad)}, outside the pool's [0, {slots})")
        if dst.numel() != torch.unique(dst).numel():
            raise ValueError("slot_copy: a destination slot appears twice")
        self.src, self.dst = src.contiguous(), dst.contiguous()
        self.slots = slots
        self.variant = variant or SlotCopyVariant(4096, 4, False)
        self.token = torch.zeros_like(self.src)  # one word a request, never equal to -1: no store is dropped

    def __call__(self, pool: torch.Tensor) -> torch.Tensor:
        if pool.shape[0] != self.slots or not pool.is_contiguous():
            raise ValueError(f"slot_copy: pool must be contiguous with {self.slots} slots, got shape "
                             f"{tuple(pool.shape)}{'' if pool.is_contiguous() else ' (not contiguous)'}")
        if pool.device != self.src.device:
            raise ValueError(f"slot_copy: pool on {pool.device}, indices on {self.src.device}")
        v = self.variant
        slot_elems = pool[0].numel()
        pdl = v.pdl and pool.is_cuda and torch.cuda.get_device_capability(pool.device)[0] >= 9
        grid = (self.src.shape[0], triton.cdiv(slot_elems, v.block))
        if grid[0]:
            _slot_copy_kernel[grid](pool, self.src, self.dst, self.token, slot_elems, self.dst.stride(0), -1,
                                    NDST=self.dst.shape[1], BLOCK=v.block, USE_PDL=pdl, TOKEN=v.token,
                                    DEFER=v.defer, num_warps=v.num_warps, **({"launch_pdl": True} if pdl else {}))
        return pool


def case_slots(case) -> tuple[torch.Tensor, torch.Tensor]:
    """A bench case's (SSU or GDN) live requests as ``(src, dst)``: one token, ``src = dst = idx[r]``;
    speculative (``T`` tokens), ``src = idx[r, num_accepted[r] - 1]`` and ``dst = idx[r, :]``."""
    if case.kernel not in ("ssu", "gdn"):
        raise ValueError(f"case_slots: the slot copy mirrors the SSU and GDN pools, not {case.kernel!r}")
    if case.T == 1:
        src = case.idx[: case.active].contiguous()
        return src, src[:, None].contiguous()
    rows = torch.arange(case.active, device=case.idx.device)
    src = case.idx[rows, (case.num_acc.long() - 1)].contiguous()
    return src, case.idx.contiguous()


def floor_times(case, budget: int, variants=None, token: bool = False) -> dict:
    """µs a call of each floor on ``case`` (timed as the bench times kernels): ``copy`` (torch ``copy_`` of
    half the row's bytes), ``slot`` (the fastest slot-copy variant, its name in ``slot_variant``; SSU and GDN);
    with ``token`` also ``token`` (the fastest of :data:`TOKEN_FLOOR_VARIANTS`, its name in ``token_variant``).
    ``times``: every variant's µs by name."""
    from mambalab.gpu import bench

    n = case.nbytes // 2 // 4
    pairs = bench._num_pools(2 * n * 4, budget)
    bufs = [(torch.empty(n, dtype=torch.float32, device="cuda").uniform_(),
             torch.empty(n, dtype=torch.float32, device="cuda")) for _ in range(pairs)]
    out = {"copy": bench.time_graph([(lambda s=s, d=d: d.copy_(s)) for s, d in bufs])}
    del bufs
    if case.kernel in ("ssu", "gdn"):
        src, dst = case_slots(case)
        pools = case.make_pools(bench._num_pools(case.pool_bytes, budget))
        times = {}
        for key, group in (("slot", variants or SLOT_COPY_VARIANTS), ("token", TOKEN_FLOOR_VARIANTS if token else [])):
            best = None
            for v in group:
                op = SlotCopy(src, dst, case.slots, v)
                us = times[v.name] = bench.time_graph([(lambda p=p: op(p)) for p in pools])
                if best is None or us < best[0]:
                    best = (us, v)
            if best is not None:
                out[key], out[f"{key}_variant"] = best[0], best[1].name
        out["times"] = times
        del pools
    torch.cuda.empty_cache()
    return out


__all__ = ["SlotCopy", "SlotCopyVariant", "SLOT_COPY_VARIANTS", "TOKEN_FLOOR_VARIANTS", "slot_copy_ref", "case_slots", "floor_times"]
