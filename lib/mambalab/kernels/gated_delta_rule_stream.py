"""The GDN decode step for speculative decoding, streamed: ``_gdn_spec_stream_kernel``.

The launch (:func:`mambalab.kernels.gated_delta_rule._launch`) picks it on a GPU for a speculative call
(2-D ``ssm_state_indices``, one slot a token, in place; the gates given or computed from ``a``/``b``) when the rule
``gated_delta_rule.SPEC_STREAM`` says so. It mirrors the same upstream kernel as the general one (vLLM 0.33's
``vllm/third_party/flash_linear_attention/ops/fused_recurrent.py``, ``fused_recurrent_gated_delta_rule_fwd_kernel``
with ``IS_SPEC_DECODING``) and gives the same results; what differs is how a program walks its state.

A program owns ``NB`` blocks of ``RB`` value rows of one (sequence, head) state and walks them in a
``tl.range`` loop with ``num_stages``: on a GPU Triton's pipeliner issues the next block's state load (an
asynchronous copy into shared memory) while this block runs its tokens and stores, as
:func:`~mambalab.kernels.gated_delta_rule_kernels._gdn_stream_kernel` does for one token. A sequence of exactly
``TOKENS`` tokens (the index row's width: every sequence of a speculative step, ``num_speculative_tokens + 1``)
runs them unrolled on the block; one of any other length takes the general kernel's path in the same program.
"""

from __future__ import annotations

import mambalab  # noqa: F401  (sets TRITON_INTERPRET before any kernel is defined)

import triton
import triton.language as tl

from mambalab.kernels.common import is_live_slot
from mambalab.kernels.gated_delta_rule_kernels import _gdn_rows, _load_rows, _token_gates


@triton.jit
def _gdn_spec_stream_kernel(
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
    RB: tl.constexpr,  # rows a block (RB * NB rows a program)
    NB: tl.constexpr,  # blocks a program, walked by the pipelined loop
    STAGES: tl.constexpr,  # the loop's num_stages (1: no prefetch)
    TOKENS: tl.constexpr,  # the unrolled sequence length (the index row's width)
):
    """The general kernel's arguments (the launch passes the same list; here ``INPLACE``, ``INDEXED == 2``,
    ``HAS_INITIAL_STATE``), then the streaming shape."""
    i_v = tl.program_id(0)
    i_hv = tl.program_id(1)
    i_n = tl.program_id(2).to(tl.int64)
    i_h = i_hv // (HV // H)
    if IS_VARLEN:
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        seq_len = tl.load(cu_seqlens + i_n + 1).to(tl.int64) - bos
        i_b = 0
    else:
        bos = 0
        seq_len = T
        i_b = i_n
    if seq_len <= 0:
        return  # an empty sequence reads and writes nothing
    flat0 = i_b * T + bos
    p_o = o + (flat0 * HV + i_hv) * V  # o is a fresh contiguous [B, T, HV, V]

    # -- the initial state's column and the load guard (as the general kernel) ---------------------------------
    if IS_SPEC:
        col = tl.load(num_accepted_tokens + i_n).to(tl.int64) - 1
    else:
        col = 0
    if BOUND_ACCEPTED:  # #50021: an out-of-row column reads the null block (0): row skipped
        in_row = (col >= 0) & (col < num_cols)
        slot = tl.load(state_indices + i_n * s_idx_n + col * s_idx_c, mask=in_row, other=0).to(tl.int64)
    else:  # every release up to 0.33: a count of 0 reads column -1
        slot = tl.load(state_indices + i_n * s_idx_n + col * s_idx_c).to(tl.int64)
    if not is_live_slot(slot, null_block_id, GUARD):
        # a skipped sequence: zero outputs, no state traffic
        for blk in tl.static_range(NB):
            o_v = (i_v * NB + blk) * RB + tl.arange(0, RB)
            t_skip = tl.zeros([], dtype=tl.int32)
            while t_skip < seq_len:  # not range(): Triton 3.6's interpreter under NumPy 2.4
                tl.store(p_o + t_skip * (HV * V) + o_v, tl.zeros([RB], dtype=tl.float32).to(o.dtype.element_ty),
                         mask=o_v < V)
                t_skip += 1
        return

    o_k = tl.arange(0, BK)
    mask_k = o_k < K
    if seq_len == TOKENS:
        p_q = q + i_b * s_q_b + bos * s_q_t + i_h * s_q_h
        p_k = k + i_b * s_k_b + bos * s_k_t + i_h * s_k_h
        p_v = v + i_b * s_v_b + bos * s_v_t + i_hv * s_v_h
        p_g = g + i_b * s_g_b + bos * s_g_t + i_hv * s_g_h
        p_beta = beta + i_b * s_beta_b + bos * s_beta_t + i_hv * s_beta_h
        p_h0 = h0 + slot * s_h0_n + i_hv * s_h0_h
        p_col = state_indices + i_n * s_idx_n
        if SIGMOID_GATING:  # the gates of every token once, not once a block (up to 4 tokens)
            tl.static_assert(TOKENS <= 4, "the gates are computed before the block loop for at most 4 tokens")
            b_A = -tl.exp(tl.load(A_log + i_hv).to(tl.float32))
            b_dtb = tl.load(dt_bias + i_hv).to(tl.float32)
            dec0, bet0 = _token_gates(p_g, p_beta, 0, s_g_t, s_beta_t, b_A, b_dtb, softplus_beta, softplus_threshold,
                                      True, HAS_BETA)
            dec1, bet1 = _token_gates(p_g, p_beta, 1 if TOKENS > 1 else 0, s_g_t, s_beta_t, b_A, b_dtb,
                                      softplus_beta, softplus_threshold, True, HAS_BETA)
            dec2, bet2 = _token_gates(p_g, p_beta, 2 if TOKENS > 2 else 0, s_g_t, s_beta_t, b_A, b_dtb,
                                      softplus_beta, softplus_threshold, True, HAS_BETA)
            dec3, bet3 = _token_gates(p_g, p_beta, 3 if TOKENS > 3 else 0, s_g_t, s_beta_t, b_A, b_dtb,
                                      softplus_beta, softplus_threshold, True, HAS_BETA)
        else:  # unused
            dec0, dec1, dec2, dec3 = 0.0, 0.0, 0.0, 0.0
            bet0, bet1, bet2, bet3 = 0.0, 0.0, 0.0, 0.0
        for blk in tl.range(0, NB, num_stages=STAGES):
            o_v = (i_v * NB + blk) * RB + tl.arange(0, RB)
            mask_v = o_v < V
            mask_h = mask_v[:, None] & mask_k[None, :]
            tile_ht = i_hv * s_ht_h + o_v[:, None] * s_ht_v + o_k[None, :] * s_ht_k
            b_h = tl.load(p_h0 + o_v[:, None] * s_h0_v + o_k[None, :] * s_h0_k, mask=mask_h, other=0.0)
            b_h = b_h.to(tl.float32)
            for t in tl.static_range(TOKENS):
                # the token's vectors are re-read for each block: from L1/L2 after the first
                b_q = tl.load(p_q + t * s_q_t + o_k * s_q_k, mask=mask_k, other=0.0).to(tl.float32)
                b_k = tl.load(p_k + t * s_k_t + o_k * s_k_k, mask=mask_k, other=0.0).to(tl.float32)
                b_v = tl.load(p_v + t * s_v_t + o_v * s_v_v, mask=mask_v, other=0.0).to(tl.float32)
                if SIGMOID_GATING:  # g, beta are a, b: their gates, computed above
                    decay = dec0 if t == 0 else (dec1 if t == 1 else (dec2 if t == 2 else dec3))
                    b_beta = bet0 if t == 0 else (bet1 if t == 1 else (bet2 if t == 2 else bet3))
                else:  # given: loaded a block at a time
                    decay, b_beta = _token_gates(p_g, p_beta, t, s_g_t, s_beta_t, 0.0, 0.0, softplus_beta,
                                                 softplus_threshold, False, HAS_BETA)
                if USE_L2NORM:
                    b_q = b_q / tl.sqrt(tl.sum(b_q * b_q, axis=0) + 1e-6)
                    b_k = b_k / tl.sqrt(tl.sum(b_k * b_k, axis=0) + 1e-6)
                b_q = b_q * scale
                b_h = b_h * decay
                b_vn = (b_v - tl.sum(b_h * b_k[None, :], axis=1)) * b_beta  # delta rule correction
                b_h = b_h + b_vn[:, None] * b_k[None, :]
                b_o = tl.sum(b_h * b_q[None, :], axis=1)
                tl.store(p_o + t * (HV * V) + o_v, b_o.to(o.dtype.element_ty), mask=mask_v)
                if t < num_cols:  # the state after token t -> column t (TOKENS is the row's width)
                    dst = tl.load(p_col + t * s_idx_c).to(tl.int64)
                    if is_live_slot(dst, null_block_id, GUARD):
                        tl.store(ht + dst * s_ht_n + tile_ht, b_h.to(ht.dtype.element_ty), mask=mask_h)
    else:
        # a sequence of another length (varlen): the general kernel's path, block by block
        for blk in tl.static_range(NB):
            o_v = (i_v * NB + blk) * RB + tl.arange(0, RB)
            h_rows = _load_rows(h0, slot, i_hv, o_v, o_k, s_h0_n, s_h0_h, s_h0_v, s_h0_k, V, K, True, RB, BK)
            _gdn_rows(h_rows, o_v, q, k, v, g, beta, o, ht, state_indices, A_log, dt_bias, scale,
                      softplus_beta, softplus_threshold, num_cols, null_block_id,
                      i_b, i_h, i_hv, i_n, bos, flat0, seq_len, slot,
                      s_q_b, s_q_t, s_q_h, s_q_k, s_k_b, s_k_t, s_k_h, s_k_k, s_v_b, s_v_t, s_v_h, s_v_v,
                      s_g_b, s_g_t, s_g_h, s_beta_b, s_beta_t, s_beta_h,
                      s_ht_n, s_ht_h, s_ht_v, s_ht_k, s_idx_n, s_idx_c,
                      HV, K, V, BK, True, 2, HAS_BETA, USE_L2NORM, SIGMOID_GATING, GUARD)

