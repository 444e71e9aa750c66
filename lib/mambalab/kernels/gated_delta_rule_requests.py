"""Every sequence of a one-token decode step in one program: the interpreter's form of the gated-delta-rule step.

Under Triton's CPU interpreter a launch costs programs x operations, whatever a tile's size, and
:func:`mambalab.kernels.gated_delta_rule_kernels._gdn_heads_kernel` already takes all the value heads of a
sequence in one program. This kernel also takes the ``REQS`` sequences of a launch: the sequence-major rows
``r = (sequence * BLOCK_H + head) * BV + v`` of one ``[rows, BK]`` tile. Each sequence's slot is loaded once,
a ``[REQS]`` vector, and widened to its rows. It runs only where every sequence is live and no two share a
slot (:func:`mambalab.kernels.common.requests_a_program`), so no lane needs a mask; a batch with a padded
sequence keeps one sequence a program.

Each element gets the heads kernel's operations in the same order, so results are bit-identical, and each
sequence makes the same loads and stores, in the same order, as its own program of the heads kernel would:
the sanitizer, told ``rows_per_program=REQS`` (:mod:`mambalab.lab.sanitizer_rows`), checks and reports them
under that program's id. Used under the interpreter for one token a sequence without speculative columns or
``cu_seqlens`` (:func:`mambalab.kernels.gated_delta_rule.fused_recurrent_gated_delta_rule`); a GPU never
launches it.
"""

from __future__ import annotations

import mambalab  # noqa: F401  (sets TRITON_INTERPRET before any kernel is defined)

import triton
import triton.language as tl

from mambalab.kernels.gated_delta_rule_kernels import _gdn_heads_state, _gdn_heads_token
from mambalab.kernels.mamba_ssm_requests import per_row


@triton.jit
def _gdn_requests_kernel(
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
    USE_L2NORM: tl.constexpr, SIGMOID_GATING: tl.constexpr, GUARD: tl.constexpr,
    BLOCK_H: tl.constexpr,  # value heads a program (a divisor of HV, so no head is masked)
    REQS: tl.constexpr,  # the launch's sequences (a power of two), every one live
    ONE_TOKEN: tl.constexpr = True,
    MASKED: tl.constexpr = True,  # False where BV == V and BK == K: no lane to mask
):
    """``_gdn_heads_kernel``'s arguments (``ONE_TOKEN``: T == 1, no ``cu_seqlens``, no ``num_accepted_tokens``)
    and results; grid ``(cdiv(V, BV), HV // BLOCK_H, 1)``."""
    TILE: tl.constexpr = BLOCK_H * BV
    seqs = tl.arange(0, REQS)
    i_n = per_row(seqs.to(tl.int64), REQS, TILE)
    if INDEXED == 0:
        slot = i_n
    else:  # column 0 (num_cols >= 1)
        slot = per_row(tl.load(state_indices + seqs * s_idx_n).to(tl.int64), REQS, TILE)

    rows = tl.arange(0, REQS * TILE) % TILE
    i_hv = tl.program_id(1) * BLOCK_H + rows // BV
    o_v = tl.program_id(0) * BV + rows % BV
    o_k = tl.arange(0, BK)
    if MASKED:
        mask_v = o_v < V
        mask_h = mask_v[:, None] & (o_k < K)[None, :]
        other = 0.0
    else:  # every lane is an element: loads and stores without a mask (the interpreter's cheapest)
        mask_v = None
        mask_h = None
        other = None
    p_o = o + (i_n * HV + i_hv) * V + o_v  # T == 1: the sequence's token is its row
    tile_ht = (i_hv * s_ht_h + o_v * s_ht_v)[:, None] + (o_k * s_ht_k)[None, :]
    b_h, b_A, b_dt_bias = _gdn_heads_state(h0, (slot * s_h0_n)[:, None], tile_ht, A_log, dt_bias, i_hv, o_v, o_k,
                                           s_h0_h, s_h0_v, s_h0_k, mask_h, other, HAS_INITIAL_STATE, INPLACE,
                                           SIGMOID_GATING, REQS * TILE, BK)
    i_h = i_hv // (HV // H)
    p_q = q + (i_n * s_q_b + i_h * s_q_h)[:, None] + (o_k * s_q_k)[None, :]
    p_k = k + (i_n * s_k_b + i_h * s_k_h)[:, None] + (o_k * s_k_k)[None, :]
    p_v = v + i_n * s_v_b + i_hv * s_v_h + o_v * s_v_v
    p_g = g + i_n * s_g_b + i_hv * s_g_h
    p_beta = beta + i_n * s_beta_b + i_hv * s_beta_h
    b_h = _gdn_heads_token(b_h, p_q, p_k, p_v, p_g, p_beta, p_o, b_A, b_dt_bias, scale, softplus_beta,
                           softplus_threshold, mask_v, mask_h, other, o.dtype.element_ty,
                           HAS_BETA, USE_L2NORM, SIGMOID_GATING)
    if not INPLACE:
        tl.store(ht + i_n[:, None] * s_ht_n + tile_ht, b_h.to(ht.dtype.element_ty), mask=mask_h)
    elif INDEXED != 2:  # one slot per sequence: back where it was read
        tl.store(ht + slot[:, None] * s_ht_n + tile_ht, b_h.to(ht.dtype.element_ty), mask=mask_h)
    elif num_cols > 0:  # one slot per token: column 0, loaded again as the heads kernel does
        dst = per_row(tl.load(state_indices + seqs * s_idx_n).to(tl.int64), REQS, TILE)
        tl.store(ht + dst[:, None] * s_ht_n + tile_ht, b_h.to(ht.dtype.element_ty), mask=mask_h)


__all__ = ["_gdn_requests_kernel"]
