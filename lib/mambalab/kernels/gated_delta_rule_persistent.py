"""The GDN decode step on a persistent grid: ``_gdn_persistent_kernel`` and its launch rule :data:`PERSIST`.

The launch (:func:`mambalab.kernels.gated_delta_rule._launch`) takes it on a GPU where it would take the streaming
kernel's conditions (one token a sequence, one slot a sequence, in place, no sigmoid gating, one head a program)
and :data:`PERSIST` names the batch; off by default (an empty rule) until measured better on the device.

Why: the streaming kernel (:func:`~mambalab.kernels.gated_delta_rule_kernels._gdn_stream_kernel`) launches one
program per (block of 32 rows, value head, sequence): at batch 64 on an H200 8,192 programs against 3,168
resident slots, 2.6 waves with the last one 60% full, and each program pays its index load, its q/k loads and
their L2 norms before its first state block arrives. Here the grid is the resident slots (``programs_per_sm``
x SMs, by rule) and each program walks work items, one item a block of ``RB`` value rows of one (sequence,
value head) state, in one ``tl.range`` loop with ``num_stages``: on a GPU Triton's pipeliner issues the next
items' state loads (asynchronous copies into shared memory) while this item is worked on, across item
boundaries, and there is no partial wave. Items go to programs in contiguous runs (``CONTIG``: a program's
consecutive items are neighbouring blocks of one state, whose q/k stay in L1) or strided (``it = pid + i x
programs``: programs running side by side stream neighbouring blocks).

Every item reloads its sequence's index, q, k, g, beta and recomputes the L2 norms (from L1/L2 after the first
block): the loop body has no branch, every load is masked. A sequence of one token is the loop's work; one of
zero tokens is skipped; a sequence of several tokens (varlen rows) is only flagged in the loop and run after it
by the general path (:func:`~mambalab.kernels.gated_delta_rule_kernels._gdn_rows`), block by block, in a second
walk over the same items that only programs which saw one take. A sequence whose slot is not live (the guard)
gets zero outputs and no state traffic.
"""

from __future__ import annotations

import mambalab  # noqa: F401  (sets TRITON_INTERPRET before any kernel is defined)

import triton
import triton.language as tl

from mambalab.kernels.common import is_live_slot
from mambalab.kernels.gated_delta_rule_kernels import _gdn_rows, _load_rows

# One token a sequence on a GPU, by state element size: (rows an item, num_stages, programs per SM, fewest
# sequences, most sequences, contiguous runs, register cap a thread (0: none), the next item's index loads carried
# one iteration ahead). Empty: the streaming or general kernel as before.
PERSIST: dict[int, tuple[int, int, int, int, int, bool, int, bool]] = {}


def persistent_launch(state_element_size: int, N: int, HV: int, V: int, num_sms: int):
    """``(kernel, constexpr and extra arguments, grid)`` where :data:`PERSIST` takes this batch, else None."""
    rule = PERSIST.get(state_element_size)
    if not rule or not rule[3] <= N <= rule[4]:
        return None
    rb, stages, per_sm, _, _, contig, maxnreg, prefetch = rule
    items = N * HV * triton.cdiv(V, rb)
    programs = max(1, min(items, per_sm * num_sms))
    extra = dict(RB=rb, STAGES=stages, CONTIG=contig, PREFETCH=prefetch, N_SEQ=N)
    return _gdn_persistent_kernel, dict(extra, maxnreg=maxnreg) if maxnreg else extra, (programs, 1, 1)


@triton.jit
def _gdn_persistent_place(it, HV: tl.constexpr, NBLK: tl.constexpr):
    """Item ``it``'s block, value head and sequence."""
    return it % NBLK, (it // NBLK) % HV, it // (NBLK * HV) + tl.zeros([], dtype=tl.int64)  # (interpreter: an int)


@triton.jit
def _gdn_persistent_seq(i_n, cu_seqlens, state_indices, T, s_idx_n, IS_VARLEN: tl.constexpr):
    """Sequence ``i_n``'s batch row, first token, length and slot."""
    i_n = i_n + tl.zeros([], dtype=tl.int64)
    if IS_VARLEN:
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        seq_len = tl.load(cu_seqlens + i_n + 1).to(tl.int64) - bos
        i_b = i_n * 0
    else:
        bos = i_n * 0
        seq_len = T + i_n * 0
        i_b = i_n
    return i_b, bos, seq_len, tl.load(state_indices + i_n * s_idx_n).to(tl.int64)


@triton.jit
def _gdn_persistent_item(it, cu_seqlens, state_indices, null_block_id, T, s_idx_n,
                         HV: tl.constexpr, NBLK: tl.constexpr, IS_VARLEN: tl.constexpr, GUARD: tl.constexpr):
    """Item ``it``'s block, value head and sequence; the sequence's batch row, first token, length and slot; and
    whether the slot is live."""
    blk, i_hv, i_n = _gdn_persistent_place(it, HV, NBLK)
    i_b, bos, seq_len, slot = _gdn_persistent_seq(i_n, cu_seqlens, state_indices, T, s_idx_n, IS_VARLEN)
    return blk, i_hv, i_n, i_b, bos, seq_len, slot, is_live_slot(slot, null_block_id, GUARD)


@triton.jit
def _gdn_persistent_kernel(
    q, k, v, g, beta, o, h0, ht,
    cu_seqlens, state_indices, num_accepted_tokens, A_log, dt_bias,
    scale, softplus_beta, softplus_threshold, T, num_cols, null_block_id,
    s_q_b, s_q_t, s_q_h, s_q_k,
    s_k_b, s_k_t, s_k_h, s_k_k,
    s_v_b, s_v_t, s_v_h, s_v_v,
    s_g_b, s_g_t, s_g_h,
    s_beta_b, s_beta_t, s_beta_h,
    s_h0_n, s_h0_h, s_h0_v, s_h0_k,
    s_ht_n, s_ht_h, s_ht_v, s_ht_k,
    s_idx_n, s_idx_c,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr,
    HAS_INITIAL_STATE: tl.constexpr, INPLACE: tl.constexpr, IS_VARLEN: tl.constexpr,
    INDEXED: tl.constexpr, IS_SPEC: tl.constexpr, BOUND_ACCEPTED: tl.constexpr, HAS_BETA: tl.constexpr,
    USE_L2NORM: tl.constexpr, SIGMOID_GATING: tl.constexpr, GUARD: tl.constexpr, SPLIT: tl.constexpr,
    N_SEQ,  # sequences (the grid no longer counts them)
    RB: tl.constexpr,  # value rows an item
    STAGES: tl.constexpr,  # the item loop's num_stages (1: no prefetch)
    CONTIG: tl.constexpr,  # items in contiguous runs a program (else strided by the grid)
    PREFETCH: tl.constexpr = False,  # the next item's cu_seqlens and index loads issued an iteration ahead
):
    """The general kernel's arguments (the launch passes the same list; here ``INPLACE``, ``INDEXED == 1``,
    ``HAS_INITIAL_STATE``, no ``num_accepted_tokens`` and no sigmoid gating), then the persistent walk's."""
    NBLK: tl.constexpr = (V + RB - 1) // RB
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    total = N_SEQ * (HV * NBLK)
    if CONTIG:
        first = (pid * total) // programs
        last = ((pid + 1) * total) // programs
        step = 1
    else:
        first = pid
        last = total
        step = programs
    o_k = tl.arange(0, BK)
    mask_k = o_k < K
    o_r = tl.arange(0, RB)
    several = tl.zeros([], dtype=tl.int32)  # items of sequences of 2+ tokens seen (run after the loop)
    if PREFETCH:  # the first item's sequence (an in-range one: clamped), then carried one item ahead
        n_b, n_bos, n_len, n_slot = _gdn_persistent_seq(tl.minimum(first, total - 1) // (NBLK * HV), cu_seqlens,
                                                        state_indices, T, s_idx_n, IS_VARLEN)
    for it in tl.range(first, last, step, num_stages=STAGES):
        if PREFETCH:
            blk, i_hv, i_n = _gdn_persistent_place(it, HV, NBLK)
            i_b, bos, seq_len, slot = n_b, n_bos, n_len, n_slot
            live = is_live_slot(slot, null_block_id, GUARD)
            n_b, n_bos, n_len, n_slot = _gdn_persistent_seq(tl.minimum(it + step, total - 1) // (NBLK * HV),
                                                            cu_seqlens, state_indices, T, s_idx_n, IS_VARLEN)
        else:
            blk, i_hv, i_n, i_b, bos, seq_len, slot, live = _gdn_persistent_item(
                it, cu_seqlens, state_indices, null_block_id, T, s_idx_n, HV, NBLK, IS_VARLEN, GUARD)
        one = seq_len == 1
        several += (seq_len > 1).to(tl.int32)
        run = one & live
        i_h = i_hv // (HV // H)
        o_v = blk * RB + o_r
        mask_v = o_v < V
        mask_h = (mask_v[:, None] & mask_k[None, :]) & run
        tile_h0 = i_hv * s_h0_h + o_v[:, None] * s_h0_v + o_k[None, :] * s_h0_k
        b_h = tl.load(h0 + slot * s_h0_n + tile_h0, mask=mask_h, other=0.0).to(tl.float32)
        b_q = tl.load(q + i_b * s_q_b + bos * s_q_t + i_h * s_q_h + o_k * s_q_k, mask=mask_k & run,
                      other=0.0).to(tl.float32)
        b_k = tl.load(k + i_b * s_k_b + bos * s_k_t + i_h * s_k_h + o_k * s_k_k, mask=mask_k & run,
                      other=0.0).to(tl.float32)
        b_v = tl.load(v + i_b * s_v_b + bos * s_v_t + i_hv * s_v_h + o_v * s_v_v, mask=mask_v & run,
                      other=0.0).to(tl.float32)
        decay = tl.exp(tl.load(g + i_b * s_g_b + bos * s_g_t + i_hv * s_g_h, mask=run, other=0.0).to(tl.float32))
        if HAS_BETA:
            b_beta = tl.load(beta + i_b * s_beta_b + bos * s_beta_t + i_hv * s_beta_h, mask=run,
                             other=0.0).to(tl.float32)
        else:
            b_beta = 1.0
        if USE_L2NORM:
            b_q = b_q / tl.sqrt(tl.sum(b_q * b_q, axis=0) + 1e-6)
            b_k = b_k / tl.sqrt(tl.sum(b_k * b_k, axis=0) + 1e-6)
        b_q = b_q * scale
        kq = tl.sum(b_k * b_q, axis=0)
        # as the streaming kernel: h' @ q = decay (h @ q) + vn (k . q), both reductions on the block as loaded
        b_hk = tl.sum(b_h * b_k[None, :], axis=1)
        b_hq = tl.sum(b_h * b_q[None, :], axis=1)
        b_vn = (b_v - decay * b_hk) * b_beta
        b_o = tl.where(run, decay * b_hq + b_vn * kq, 0.0)  # a skipped sequence's output: zeros
        tl.store(o + ((i_b * T + bos) * HV + i_hv) * V + o_v, b_o.to(o.dtype.element_ty), mask=mask_v & one)
        b_h = b_h * decay + b_vn[:, None] * b_k[None, :]
        tile_ht = i_hv * s_ht_h + o_v[:, None] * s_ht_v + o_k[None, :] * s_ht_k
        tl.store(ht + slot * s_ht_n + tile_ht, b_h.to(ht.dtype.element_ty), mask=mask_h)
    if several > 0:
        # sequences of several tokens (varlen rows): the general kernel's path, item by item, after the walk
        it = first
        while it < last:  # not range(): Triton 3.6's interpreter under NumPy 2.4
            blk, i_hv, i_n, i_b, bos, seq_len, slot, live = _gdn_persistent_item(
                it, cu_seqlens, state_indices, null_block_id, T, s_idx_n, HV, NBLK, IS_VARLEN, GUARD)
            o_v = blk * RB + o_r
            if seq_len > 1:
                if live:
                    h_rows = _load_rows(h0, slot, i_hv, o_v, o_k, s_h0_n, s_h0_h, s_h0_v, s_h0_k, V, K, True, RB, BK)
                    _gdn_rows(h_rows, o_v, q, k, v, g, beta, o, ht, state_indices, A_log, dt_bias, scale,
                              softplus_beta, softplus_threshold, num_cols, null_block_id,
                              i_b, i_hv // (HV // H), i_hv, i_n, bos, i_b * T + bos, seq_len, slot,
                              s_q_b, s_q_t, s_q_h, s_q_k, s_k_b, s_k_t, s_k_h, s_k_k, s_v_b, s_v_t, s_v_h, s_v_v,
                              s_g_b, s_g_t, s_g_h, s_beta_b, s_beta_t, s_beta_h,
                              s_ht_n, s_ht_h, s_ht_v, s_ht_k, s_idx_n, s_idx_c,
                              HV, K, V, BK, True, 1, HAS_BETA, USE_L2NORM, False, GUARD)
                else:
                    p_o = o + ((i_b * T + bos) * HV + i_hv) * V + o_v
                    t_skip = tl.zeros([], dtype=tl.int32)
                    while t_skip < seq_len:
                        tl.store(p_o + t_skip * (HV * V), tl.zeros([RB], dtype=tl.float32).to(o.dtype.element_ty),
                                 mask=o_v < V)
                        t_skip += 1
            it += step
