"""Triton pieces of :mod:`mambalab.kernels.gated_delta_rule` (the GDN decode step, Qwen3-Next).

They mirror vLLM's copy of flash-linear-attention's ``fused_recurrent_gated_delta_rule_fwd_kernel``
(``vllm/third_party/flash_linear_attention/ops/fused_recurrent.py`` in 0.33); the maths is in
:mod:`mambalab.kernels.gated_delta_rule_ref`, the launch design in :mod:`mambalab.kernels.gated_delta_rule`.

* :func:`_load_rows` and :func:`_gdn_rows`: a block of value rows of one (sequence, head) state, loaded, then
  run through all the sequence's tokens (the general kernel ``_gdn_decode_kernel`` calls them).
* :func:`_gdn_stream_kernel`: one token a sequence, one slot a sequence, in place (the decode step proper):
  a program walks ``NB`` blocks of ``RB`` rows in a ``tl.range`` loop with ``num_stages`` (on a GPU Triton's
  pipeliner issues the next block's state load, an asynchronous copy into shared memory, while this block is
  computed), so the bytes in flight sit in shared memory rather than in registers; or, with ``EARLY_STATE``
  (the layer's ``early_state_load``), reads its two blocks into registers with the slot, before PDL's wait
  (``EARLY_ONE``: the first only, the second once the first is computed; fewer registers).
  Each block's token is :func:`_stream_block`; with ``RAW_QK`` (``gated_delta_rule.STREAM_RAW_QK``) on ``q`` and ``k``
  as loaded, their norms and the scale applied to the block's reductions, so those need not wait for the norms.
  A sequence that is not one token long (varlen rows of 0 or several tokens) takes the general path in the same
  program. ptxas issues ``v``'s load only after the gates and norms (the early state's loads hold most of a warp's
  scoreboards): asking L1 for ``v``'s and the gates' lines right after the wait was 0-7% slower on an H200, and
  ``A_log`` / ``dt_bias`` read before the wait within 1% and slower as a layer runs it (call 271,
  ``docs/results/issue14-call271-gdn-token-prefetch.txt``), so the order stays ptxas'.
"""

from __future__ import annotations

import mambalab  # noqa: F401  (sets TRITON_INTERPRET before any kernel is defined)

import triton
import triton.language as tl

from mambalab.kernels.common import is_live_slot, program_row


@triton.jit
def _load_rows(h0, slot, i_hv, o_v, o_k, s_h0_n, s_h0_h, s_h0_v, s_h0_k,
               V: tl.constexpr, K: tl.constexpr, HAS_INITIAL_STATE: tl.constexpr,
               RB: tl.constexpr, BK: tl.constexpr):
    """Rows ``o_v`` of the initial state, in the pool's dtype (zeros without one)."""
    if HAS_INITIAL_STATE:
        mask = (o_v < V)[:, None] & (o_k < K)[None, :]
        tile = i_hv * s_h0_h + o_v[:, None] * s_h0_v + o_k[None, :] * s_h0_k
        rows = tl.load(h0 + slot * s_h0_n + tile, mask=mask, other=0.0)
    else:
        rows = tl.zeros([RB, BK], dtype=tl.float32)
    return rows


@triton.jit
def _gdn_slot(state_indices, num_accepted_tokens, i_n, num_cols, s_idx_n, s_idx_c,
              IS_SPEC: tl.constexpr, BOUND_ACCEPTED: tl.constexpr):
    """The slot sequence ``i_n`` reads its state from (indexed launches): column ``num_accepted - 1`` under
    speculation, else column 0 (the guard is the caller's)."""
    if IS_SPEC:
        col = tl.load(num_accepted_tokens + i_n).to(tl.int64) - 1
    else:
        col = 0
    if BOUND_ACCEPTED:  # #50021: an out-of-row column reads the null block (0): row skipped
        in_row = (col >= 0) & (col < num_cols)
        slot = tl.load(state_indices + i_n * s_idx_n + col * s_idx_c, mask=in_row, other=0).to(tl.int64)
    else:  # every release up to 0.33: a count of 0 reads column -1
        slot = tl.load(state_indices + i_n * s_idx_n + col * s_idx_c).to(tl.int64)
    return slot


@triton.jit
def _sigmoid_gates(b_g, b_beta, b_A, b_dt_bias, softplus_beta, softplus_threshold):
    """Qwen3-Next's gates computed in the kernel (``fused_sigmoid_gating_delta_rule_update``):
    ``g <- A * softplus(g + dt_bias)`` with ``A = -exp(A_log)`` and torch's softplus (``beta``,
    ``threshold``), and ``beta <- sigmoid(beta)``. Returns ``(g, beta)``."""
    x = b_g + b_dt_bias
    bx = softplus_beta * x
    # clamp inside exp so the branch not taken never overflows
    soft = tl.where(
        bx <= softplus_threshold,
        tl.log(1.0 + tl.exp(tl.minimum(bx, softplus_threshold))) / softplus_beta,
        x,
    )
    return b_A * soft, tl.sigmoid(b_beta)


@triton.jit
def _token_gates(p_g, p_beta, t, s_g_t, s_beta_t, b_A, b_dtb, softplus_beta, softplus_threshold,
                 SIGMOID_GATING: tl.constexpr, HAS_BETA: tl.constexpr):
    """Token ``t``'s ``(decay, beta)``: with ``SIGMOID_GATING`` from its ``a`` (at ``p_g``) and ``b`` (at
    ``p_beta``), Qwen3-Next's gates (``b_A``, ``b_dtb`` its head's); else ``exp(g)`` and ``beta`` as given (1
    without ``HAS_BETA``)."""
    if SIGMOID_GATING:
        b_a = tl.load(p_g + t * s_g_t).to(tl.float32)
        b_b = tl.load(p_beta + t * s_beta_t).to(tl.float32)
        b_g, b_beta = _sigmoid_gates(b_a, b_b, b_A, b_dtb, softplus_beta, softplus_threshold)
        decay = tl.exp(b_g)
    else:
        decay = tl.exp(tl.load(p_g + t * s_g_t).to(tl.float32))
        if HAS_BETA:
            b_beta = tl.load(p_beta + t * s_beta_t).to(tl.float32)
        else:
            b_beta = 1.0
    return decay, b_beta


@triton.jit
def _gdn_rows(
    h_rows, o_v, q, k, v, g, beta, o, ht, state_indices, A_log, dt_bias,
    scale, softplus_beta, softplus_threshold, num_cols, null_block_id,
    i_b, i_h, i_hv, i_n, bos, flat0, seq_len, slot,
    s_q_b, s_q_t, s_q_h, s_q_k, s_k_b, s_k_t, s_k_h, s_k_k, s_v_b, s_v_t, s_v_h, s_v_v,
    s_g_b, s_g_t, s_g_h, s_beta_b, s_beta_t, s_beta_h,
    s_ht_n, s_ht_h, s_ht_v, s_ht_k, s_idx_n, s_idx_c,
    HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr,
    INPLACE: tl.constexpr, INDEXED: tl.constexpr, HAS_BETA: tl.constexpr, USE_L2NORM: tl.constexpr,
    SIGMOID_GATING: tl.constexpr, GUARD: tl.constexpr,
    TOKEN_STAGES: tl.constexpr = 0,  # > 0: the token loop is a tl.range with this num_stages (GPU only)
    EARLY_DST: tl.constexpr = False,  # INDEXED == 2: each token's store slot loaded with its inputs (_gdn_token)
):
    """All the sequence's tokens on the value rows ``o_v`` of the state: outputs and stores.

    ``h_rows`` is the initial state of those rows (any float dtype); from here
    on it is fp32 in registers until each store rounds it to the pool's dtype.
    With ``TOKEN_STAGES`` the token loop is pipelined on a GPU: the next token's
    ``q``/``k``/``v``/``g``/``beta`` loads are issued while this token is worked on.
    """
    b_h = h_rows.to(tl.float32)
    o_k = tl.arange(0, BK)
    mask_k = o_k < K
    mask_v = o_v < V
    mask_h = mask_v[:, None] & mask_k[None, :]
    tile_ht = i_hv * s_ht_h + o_v[:, None] * s_ht_v + o_k[None, :] * s_ht_k

    if SIGMOID_GATING:
        b_A = -tl.exp(tl.load(A_log + i_hv).to(tl.float32))
        b_dt_bias = tl.load(dt_bias + i_hv).to(tl.float32)
    else:
        b_A = 0.0  # unused (SIGMOID_GATING is off): only so every name is bound
        b_dt_bias = 0.0

    # Scalar base pointers, indexed by the token inside the loop: the loop
    # carries one counter, not a register per vector pointer.
    p_q = q + i_b * s_q_b + bos * s_q_t + i_h * s_q_h
    p_k = k + i_b * s_k_b + bos * s_k_t + i_h * s_k_h
    p_v = v + i_b * s_v_b + bos * s_v_t + i_hv * s_v_h
    p_g = g + i_b * s_g_b + bos * s_g_t + i_hv * s_g_h
    p_beta = beta + i_b * s_beta_b + bos * s_beta_t + i_hv * s_beta_h
    p_o = o + (flat0 * HV + i_hv) * V  # o is a fresh contiguous [B, T, HV, V]
    p_fresh = ht + flat0 * s_ht_n  # only with INPLACE == False
    p_col = state_indices + i_n * s_idx_n  # only with INDEXED == 2

    if TOKEN_STAGES > 0:
        for t in tl.range(0, seq_len, num_stages=TOKEN_STAGES):
            b_h = _gdn_token(b_h, t, p_q, p_k, p_v, p_g, p_beta, p_o, p_fresh, p_col, ht, o_k, o_v, mask_k, mask_v,
                             mask_h, tile_ht, b_A, b_dt_bias, scale, softplus_beta, softplus_threshold, num_cols,
                             null_block_id, s_q_t, s_q_k, s_k_t, s_k_k, s_v_t, s_v_v, s_g_t, s_beta_t, s_ht_n, s_idx_c,
                             HV, V, INPLACE, INDEXED, HAS_BETA, USE_L2NORM, SIGMOID_GATING, GUARD, EARLY_DST)
    else:
        t = tl.zeros([], dtype=tl.int32)
        while t < seq_len:  # not range(): Triton 3.6's interpreter under NumPy 2.4
            b_h = _gdn_token(b_h, t, p_q, p_k, p_v, p_g, p_beta, p_o, p_fresh, p_col, ht, o_k, o_v, mask_k, mask_v,
                             mask_h, tile_ht, b_A, b_dt_bias, scale, softplus_beta, softplus_threshold, num_cols,
                             null_block_id, s_q_t, s_q_k, s_k_t, s_k_k, s_v_t, s_v_v, s_g_t, s_beta_t, s_ht_n, s_idx_c,
                             HV, V, INPLACE, INDEXED, HAS_BETA, USE_L2NORM, SIGMOID_GATING, GUARD, EARLY_DST)
            t += 1

    if INPLACE:
        if INDEXED != 2:
            # one slot per sequence: write back where the state was read
            tl.store(ht + slot * s_ht_n + tile_ht, b_h.to(ht.dtype.element_ty), mask=mask_h)


@triton.jit
def _gdn_token(b_h, t, p_q, p_k, p_v, p_g, p_beta, p_o, p_fresh, p_col, ht, o_k, o_v, mask_k, mask_v, mask_h,
               tile_ht, b_A, b_dt_bias, scale, softplus_beta, softplus_threshold, num_cols, null_block_id,
               s_q_t, s_q_k, s_k_t, s_k_k, s_v_t, s_v_v, s_g_t, s_beta_t, s_ht_n, s_idx_c,
               HV: tl.constexpr, V: tl.constexpr, INPLACE: tl.constexpr, INDEXED: tl.constexpr,
               HAS_BETA: tl.constexpr, USE_L2NORM: tl.constexpr, SIGMOID_GATING: tl.constexpr, GUARD: tl.constexpr,
               EARLY_DST: tl.constexpr = False):
    """Token ``t`` of :func:`_gdn_rows` on its rows: the output and the per-token store; returns the state.

    ``EARLY_DST`` (one slot a token): the store's slot is loaded first, masked to the index row, so its round trip
    overlaps the inputs' instead of following the output (the same slot, the same guard)."""
    if EARLY_DST and INPLACE and INDEXED == 2:
        dst_early = tl.load(p_col + t * s_idx_c, mask=t < num_cols, other=0).to(tl.int64)
    else:
        dst_early = 0  # unused
    b_q = tl.load(p_q + t * s_q_t + o_k * s_q_k, mask=mask_k, other=0.0).to(tl.float32)
    b_k = tl.load(p_k + t * s_k_t + o_k * s_k_k, mask=mask_k, other=0.0).to(tl.float32)
    b_v = tl.load(p_v + t * s_v_t + o_v * s_v_v, mask=mask_v, other=0.0).to(tl.float32)
    b_g = tl.load(p_g + t * s_g_t).to(tl.float32)
    if HAS_BETA:
        b_beta = tl.load(p_beta + t * s_beta_t).to(tl.float32)
    else:
        b_beta = 1.0
    if SIGMOID_GATING:
        b_g, b_beta = _sigmoid_gates(b_g, b_beta, b_A, b_dt_bias, softplus_beta, softplus_threshold)

    if USE_L2NORM:
        b_q = b_q / tl.sqrt(tl.sum(b_q * b_q, axis=0) + 1e-6)
        b_k = b_k / tl.sqrt(tl.sum(b_k * b_k, axis=0) + 1e-6)
    b_q = b_q * scale

    b_h = b_h * tl.exp(b_g)  # decay
    b_pred = tl.sum(b_h * b_k[None, :], axis=1)  # h @ k: what the memory recalls
    b_vn = (b_v - b_pred) * b_beta  # delta rule correction
    b_h = b_h + b_vn[:, None] * b_k[None, :]  # rank-1 write
    b_o = tl.sum(b_h * b_q[None, :], axis=1)  # h @ q
    tl.store(p_o + t * (HV * V) + o_v, b_o.to(p_o.dtype.element_ty), mask=mask_v)

    if INPLACE:
        if INDEXED == 2:
            # one slot per token (spec decode): the state after token t -> column t
            if t < num_cols:
                if EARLY_DST:
                    dst = dst_early
                else:
                    dst = tl.load(p_col + t * s_idx_c).to(tl.int64)
                if is_live_slot(dst, null_block_id, GUARD):
                    tl.store(ht + dst * s_ht_n + tile_ht, b_h.to(ht.dtype.element_ty), mask=mask_h)
    else:
        tl.store(p_fresh + t * s_ht_n + tile_ht, b_h.to(ht.dtype.element_ty), mask=mask_h)
    return b_h


@triton.jit
def _gdn_stream_kernel(
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
    RB: tl.constexpr,  # rows a block (BV == RB * NB rows a program)
    NB: tl.constexpr,  # blocks a program, walked by the pipelined loop
    STAGES: tl.constexpr,  # the loop's num_stages (1: no prefetch)
    ZIGZAG: tl.constexpr = False,  # the sequences in the order 0, n-1, 1, ... (common.program_row; a GPU only)
    USE_PDL: tl.constexpr = False,  # programmatic dependent launch (GPU, sm_90+), only with EARLY_STATE
    EARLY_STATE: tl.constexpr = False,  # NB == 2: the slot and both blocks read first (before the wait, with PDL)
    EARLY_ONE: tl.constexpr = False,  # with EARLY_STATE: only the first block early, the second once it is computed
    RAW_QK: tl.constexpr = False,  # q, k not normalised before the state's reductions, their norms applied after
):
    """The general kernel's arguments (the launch passes the same list; here ``INPLACE``, ``INDEXED == 1``,
    ``HAS_INITIAL_STATE``, no ``num_accepted_tokens``), one token a sequence; with ``SIGMOID_GATING`` ``g`` and
    ``beta`` are ``a`` and ``b`` and the gates are computed here (``fused_sigmoid_gating_delta_rule_update``).

    With ``EARLY_STATE`` the program's two blocks are loaded into registers as soon as the slot is known, not
    through the pipelined loop; under PDL that is before waiting for the previous kernel (the caller's promise,
    as the general kernel's ``EARLY_STATE``), and ``q``/``k``/``v``/``g``/``beta`` are read after it. With
    ``EARLY_ONE`` only the first block is; the second is loaded between the first's arithmetic (its output stored) and
    its state store (the compiler keeps a load below a store to the same pool, so the order is written): 130 registers a
    thread for a bf16 state (128 under ptxas' cap, the launch's), not 168."""
    i_v = tl.program_id(0)
    i_hv = tl.program_id(1)
    i_n = program_row(2, ZIGZAG).to(tl.int64)
    i_h = i_hv // (HV // H)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
        if not EARLY_STATE:
            tl.extra.cuda.gdc_wait()
    if IS_VARLEN:
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        seq_len = tl.load(cu_seqlens + i_n + 1).to(tl.int64) - bos
        i_b = 0
    else:
        bos = 0
        seq_len = T
        i_b = i_n
    flat0 = i_b * T + bos
    slot = tl.load(state_indices + i_n * s_idx_n).to(tl.int64)
    live = is_live_slot(slot, null_block_id, GUARD)
    o_k = tl.arange(0, BK)
    mask_k = o_k < K
    p_o = o + (flat0 * HV + i_hv) * V  # o is a fresh contiguous [B, T, HV, V]
    if seq_len <= 0:
        return  # an empty sequence reads and writes nothing
    if not live or seq_len != 1:
        if USE_PDL:
            if EARLY_STATE:
                tl.extra.cuda.gdc_wait()
    if not live:
        # a skipped sequence: zero outputs, no state traffic (as the general kernel)
        for blk in tl.static_range(NB):
            o_v = (i_v * NB + blk) * RB + tl.arange(0, RB)
            t_skip = tl.zeros([], dtype=tl.int32)
            while t_skip < seq_len:  # not range(): Triton 3.6's interpreter under NumPy 2.4
                tl.store(p_o + t_skip * (HV * V) + o_v, tl.zeros([RB], dtype=tl.float32).to(o.dtype.element_ty),
                         mask=o_v < V)
                t_skip += 1
        return
    if seq_len == 1:
        p_h0 = h0 + slot * s_h0_n + i_hv * s_h0_h
        if EARLY_STATE:
            tl.static_assert(NB == 2, "EARLY_STATE loads two blocks")
            o_va = i_v * NB * RB + tl.arange(0, RB)
            h_a = _load_rows(h0, slot, i_hv, o_va, o_k, s_h0_n, s_h0_h, s_h0_v, s_h0_k, V, K, True, RB, BK)
            if not EARLY_ONE:
                h_b = _load_rows(h0, slot, i_hv, o_va + RB, o_k, s_h0_n, s_h0_h, s_h0_v, s_h0_k, V, K, True, RB, BK)
            if USE_PDL:
                tl.extra.cuda.gdc_wait()
        p_tok_q = q + i_b * s_q_b + bos * s_q_t + i_h * s_q_h
        p_tok_k = k + i_b * s_k_b + bos * s_k_t + i_h * s_k_h
        b_q = tl.load(p_tok_q + o_k * s_q_k, mask=mask_k, other=0.0).to(tl.float32)
        b_k = tl.load(p_tok_k + o_k * s_k_k, mask=mask_k, other=0.0).to(tl.float32)
        p_tok_g = g + i_b * s_g_b + bos * s_g_t + i_hv * s_g_h
        p_tok_beta = beta + i_b * s_beta_b + bos * s_beta_t + i_hv * s_beta_h
        if SIGMOID_GATING:  # g, beta are a, b (vLLM 0.33's packed decode): the gates from them
            b_A = -tl.exp(tl.load(A_log + i_hv).to(tl.float32))
            b_dtb = tl.load(dt_bias + i_hv).to(tl.float32)
        else:
            b_A, b_dtb = 0.0, 0.0  # unused
        decay, b_beta = _token_gates(p_tok_g, p_tok_beta, 0, s_g_t, s_beta_t, b_A, b_dtb, softplus_beta,
                                     softplus_threshold, SIGMOID_GATING, HAS_BETA)
        if RAW_QK:  # q, k as loaded; their norms (and the scale) applied to the reductions below
            r_q, r_k = scale, 1.0
            if USE_L2NORM:
                r_q = scale / tl.sqrt(tl.sum(b_q * b_q, axis=0) + 1e-6)
                r_k = 1.0 / tl.sqrt(tl.sum(b_k * b_k, axis=0) + 1e-6)
            kq = tl.sum(b_k * b_q, axis=0) * (r_q * r_k)
        else:
            if USE_L2NORM:
                b_q = b_q / tl.sqrt(tl.sum(b_q * b_q, axis=0) + 1e-6)
                b_k = b_k / tl.sqrt(tl.sum(b_k * b_k, axis=0) + 1e-6)
            b_q = b_q * scale
            kq = tl.sum(b_k * b_q, axis=0)
            r_q, r_k = 1.0, 1.0
        p_v = v + i_b * s_v_b + bos * s_v_t + i_hv * s_v_h
        p_ht = ht + slot * s_ht_n + i_hv * s_ht_h
        if EARLY_STATE:
            if EARLY_ONE:  # the second block's rows are not the first's: its load may precede their store
                h_a = _stream_output(h_a, o_va, b_q, b_k, kq, decay, b_beta, p_v, p_o, s_v_v, V, r_q, r_k, RAW_QK)
                h_b = _load_rows(h0, slot, i_hv, o_va + RB, o_k, s_h0_n, s_h0_h, s_h0_v, s_h0_k, V, K, True, RB, BK)
                _stream_store(h_a, o_va, p_ht, s_ht_v, s_ht_k, V, K, BK)
            else:
                _stream_block(h_a, o_va, b_q, b_k, kq, decay, b_beta, p_v, p_o, p_ht, s_v_v, s_ht_v, s_ht_k, V, K, BK,
                              r_q, r_k, RAW_QK)
            _stream_block(h_b, o_va + RB, b_q, b_k, kq, decay, b_beta, p_v, p_o, p_ht, s_v_v, s_ht_v, s_ht_k, V, K, BK,
                          r_q, r_k, RAW_QK)
        else:
            for blk in tl.range(0, NB, num_stages=STAGES):
                o_v = (i_v * NB + blk) * RB + tl.arange(0, RB)
                mask_h = (o_v < V)[:, None] & mask_k[None, :]
                b_h = tl.load(p_h0 + o_v[:, None] * s_h0_v + o_k[None, :] * s_h0_k, mask=mask_h, other=0.0)
                _stream_block(b_h, o_v, b_q, b_k, kq, decay, b_beta, p_v, p_o, p_ht, s_v_v, s_ht_v, s_ht_k, V, K, BK,
                              r_q, r_k, RAW_QK)
    else:
        # several tokens in this sequence (varlen): the general kernel's path, block by block
        for blk in tl.static_range(NB):
            o_v = (i_v * NB + blk) * RB + tl.arange(0, RB)
            h_rows = _load_rows(h0, slot, i_hv, o_v, o_k, s_h0_n, s_h0_h, s_h0_v, s_h0_k, V, K, True, RB, BK)
            _gdn_rows(h_rows, o_v, q, k, v, g, beta, o, ht, state_indices, A_log, dt_bias, scale,
                      softplus_beta, softplus_threshold, num_cols, null_block_id,
                      i_b, i_h, i_hv, i_n, bos, flat0, seq_len, slot,
                      s_q_b, s_q_t, s_q_h, s_q_k, s_k_b, s_k_t, s_k_h, s_k_k, s_v_b, s_v_t, s_v_h, s_v_v,
                      s_g_b, s_g_t, s_g_h, s_beta_b, s_beta_t, s_beta_h,
                      s_ht_n, s_ht_h, s_ht_v, s_ht_k, s_idx_n, s_idx_c,
                      HV, K, V, BK, True, 1, HAS_BETA, USE_L2NORM, SIGMOID_GATING, GUARD)


@triton.jit
def _stream_block(b_h, o_v, b_q, b_k, kq, decay, b_beta, p_v, p_o, p_ht, s_v_v, s_ht_v, s_ht_k,
                  V: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, r_q, r_k, RAW: tl.constexpr):
    """One token on the rows ``o_v`` of a state (``b_h`` as loaded, any float dtype): the output rows and
    the updated rows stored. ``q`` is normalised and scaled, ``kq = k . q``; with ``RAW`` they are as loaded and
    ``r_q``, ``r_k`` their factors (``kq`` the normalised one)."""
    b_h = _stream_output(b_h, o_v, b_q, b_k, kq, decay, b_beta, p_v, p_o, s_v_v, V, r_q, r_k, RAW)
    _stream_store(b_h, o_v, p_ht, s_ht_v, s_ht_k, V, K, BK)


@triton.jit
def _stream_output(b_h, o_v, b_q, b_k, kq, decay, b_beta, p_v, p_o, s_v_v, V: tl.constexpr, r_q, r_k,
                   RAW: tl.constexpr):
    """:func:`_stream_block` up to its state store: the output rows stored, the updated rows returned (fp32)."""
    mask_v = o_v < V
    b_h = b_h.to(tl.float32)
    b_v = tl.load(p_v + o_v * s_v_v, mask=mask_v, other=0.0).to(tl.float32)
    # h' = decay h + vn k^T, so h' @ q = decay (h @ q) + vn (k . q): the two reductions read the
    # block as loaded, independently (in _gdn_rows this form ran 1.2x slower for bf16 on an H200)
    b_hk = tl.sum(b_h * b_k[None, :], axis=1)
    b_hq = tl.sum(b_h * b_q[None, :], axis=1)
    if RAW:
        b_hk = b_hk * r_k
        b_hq = b_hq * r_q
    b_vn = (b_v - decay * b_hk) * b_beta
    tl.store(p_o + o_v, (decay * b_hq + b_vn * kq).to(p_o.dtype.element_ty), mask=mask_v)
    if RAW:
        b_vn = b_vn * r_k
    return b_h * decay + b_vn[:, None] * b_k[None, :]


@triton.jit
def _stream_store(b_h, o_v, p_ht, s_ht_v, s_ht_k, V: tl.constexpr, K: tl.constexpr, BK: tl.constexpr):
    """:func:`_stream_block`'s state store: the updated rows ``o_v``."""
    o_k = tl.arange(0, BK)
    mask_h = (o_v < V)[:, None] & (o_k < K)[None, :]
    tl.store(p_ht + o_v[:, None] * s_ht_v + o_k[None, :] * s_ht_k, b_h.to(p_ht.dtype.element_ty), mask=mask_h)


@triton.jit
def _gdn_heads_kernel(
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
    ONE_TOKEN: tl.constexpr = False,  # T == 1 and no cu_seqlens: no token loop
    MASKED: tl.constexpr = True,  # False where BV == V and BK == K: no lane to mask
):
    """The general kernel's arguments and results with ``BLOCK_H`` value heads of a sequence in one program
    (the interpreter's launch: its cost is programs x ops). The heads' ``BV x BK`` tiles are stacked as the rows
    ``r = head * BV + v`` of one tile and each head's ``q``, ``k``, ``g``, ``beta`` is loaded per row; the
    arithmetic is :func:`_gdn_rows`', element for element. The index is loaded and tested first."""
    i_n = tl.program_id(2).to(tl.int64)
    if IS_VARLEN:
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        seq_len = tl.load(cu_seqlens + i_n + 1).to(tl.int64) - bos
        if seq_len <= 0:
            return
        flat0 = bos
    else:
        seq_len = T
        flat0 = i_n * T
    if INDEXED == 0:
        slot = i_n
        live = True
    else:
        if IS_SPEC:
            col = tl.load(num_accepted_tokens + i_n).to(tl.int64) - 1
            if BOUND_ACCEPTED:
                in_row = (col >= 0) & (col < num_cols)
                slot = tl.load(state_indices + i_n * s_idx_n + col * s_idx_c, mask=in_row, other=0).to(tl.int64)
            else:
                slot = tl.load(state_indices + i_n * s_idx_n + col * s_idx_c).to(tl.int64)
        else:  # column 0 (num_cols >= 1)
            slot = tl.load(state_indices + i_n * s_idx_n).to(tl.int64)
        live = is_live_slot(slot, null_block_id, GUARD)

    rows = tl.arange(0, BLOCK_H * BV)
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
    p_o = o + (flat0 * HV + i_hv) * V + o_v
    tile_ht = (i_hv * s_ht_h + o_v * s_ht_v)[:, None] + (o_k * s_ht_k)[None, :]
    if not live:  # zero outputs (and rows of a fresh final state), no state traffic
        zero_v = tl.zeros([BLOCK_H * BV], dtype=o.dtype.element_ty)
        t_skip = tl.zeros([], dtype=tl.int32)
        while t_skip < seq_len:
            tl.store(p_o + t_skip * (HV * V), zero_v, mask=mask_v)
            if not INPLACE:
                tl.store(ht + (flat0 + t_skip) * s_ht_n + tile_ht,
                         tl.zeros([BLOCK_H * BV, BK], dtype=ht.dtype.element_ty), mask=mask_h)
            t_skip += 1
        return

    b_h, b_A, b_dt_bias = _gdn_heads_state(h0, slot * s_h0_n, tile_ht, A_log, dt_bias, i_hv, o_v, o_k, s_h0_h,
                                           s_h0_v, s_h0_k, mask_h, other, HAS_INITIAL_STATE, INPLACE,
                                           SIGMOID_GATING, BLOCK_H * BV, BK)
    i_h = i_hv // (HV // H)
    if IS_VARLEN:  # the sequence's first token on the packed token axis
        p_q, p_k, p_v = q + bos * s_q_t, k + bos * s_k_t, v + bos * s_v_t
        p_g, p_beta = g + bos * s_g_t, beta + bos * s_beta_t
    else:  # the sequence's row of the batch
        p_q, p_k, p_v = q + i_n * s_q_b, k + i_n * s_k_b, v + i_n * s_v_b
        p_g, p_beta = g + i_n * s_g_b, beta + i_n * s_beta_b
    p_q += (i_h * s_q_h)[:, None] + (o_k * s_q_k)[None, :]
    p_k += (i_h * s_k_h)[:, None] + (o_k * s_k_k)[None, :]
    p_v += i_hv * s_v_h + o_v * s_v_v
    p_g += i_hv * s_g_h
    p_beta += i_hv * s_beta_h
    if ONE_TOKEN:
        b_h = _gdn_heads_token(b_h, p_q, p_k, p_v, p_g, p_beta, p_o, b_A, b_dt_bias, scale, softplus_beta,
                               softplus_threshold, mask_v, mask_h, other, o.dtype.element_ty,
                               HAS_BETA, USE_L2NORM, SIGMOID_GATING)
        if not INPLACE:
            tl.store(ht + flat0 * s_ht_n + tile_ht, b_h.to(ht.dtype.element_ty), mask=mask_h)
        elif INDEXED != 2:  # one slot per sequence: back where it was read
            tl.store(ht + slot * s_ht_n + tile_ht, b_h.to(ht.dtype.element_ty), mask=mask_h)
        elif num_cols > 0:  # one slot per token: column 0
            dst = tl.load(state_indices + i_n * s_idx_n).to(tl.int64)
            if is_live_slot(dst, null_block_id, GUARD):
                tl.store(ht + dst * s_ht_n + tile_ht, b_h.to(ht.dtype.element_ty), mask=mask_h)
    else:
        t = tl.zeros([], dtype=tl.int32)
        while t < seq_len:  # not range(): Triton 3.6's interpreter under NumPy 2.4
            b_h = _gdn_heads_token(b_h, p_q + t * s_q_t, p_k + t * s_k_t, p_v + t * s_v_t, p_g + t * s_g_t,
                                   p_beta + t * s_beta_t, p_o + t * (HV * V), b_A, b_dt_bias, scale,
                                   softplus_beta, softplus_threshold, mask_v, mask_h, other,
                                   o.dtype.element_ty, HAS_BETA, USE_L2NORM, SIGMOID_GATING)
            if INPLACE:
                if INDEXED == 2:  # one slot per token (spec decode): the state after token t -> column t
                    if t < num_cols:
                        dst = tl.load(state_indices + i_n * s_idx_n + t * s_idx_c).to(tl.int64)
                        if is_live_slot(dst, null_block_id, GUARD):
                            tl.store(ht + dst * s_ht_n + tile_ht, b_h.to(ht.dtype.element_ty), mask=mask_h)
            else:
                tl.store(ht + (flat0 + t) * s_ht_n + tile_ht, b_h.to(ht.dtype.element_ty), mask=mask_h)
            t += 1
        if INPLACE:
            if INDEXED != 2:
                tl.store(ht + slot * s_ht_n + tile_ht, b_h.to(ht.dtype.element_ty), mask=mask_h)

@triton.jit
def _gdn_heads_state(h0, slot_offset, tile_ht, A_log, dt_bias, i_hv, o_v, o_k, s_h0_h, s_h0_v, s_h0_k, mask_h, other,
                     HAS_INITIAL_STATE: tl.constexpr, INPLACE: tl.constexpr, SIGMOID_GATING: tl.constexpr,
                     ROWS: tl.constexpr, BK: tl.constexpr):
    """A stacked tile's initial state (fp32; loaded at ``h0 + slot_offset``, one offset or one per row) and its
    rows' gate weights ``-exp(A_log)``, ``dt_bias`` (zeros without ``SIGMOID_GATING``): for the heads kernel and
    the requests kernel (``gated_delta_rule_requests.py``), the same operations."""
    if HAS_INITIAL_STATE:
        if INPLACE:  # h0 is ht
            tile_h0 = tile_ht
        else:
            tile_h0 = (i_hv * s_h0_h + o_v * s_h0_v)[:, None] + (o_k * s_h0_k)[None, :]
        b_h = tl.load(h0 + slot_offset + tile_h0, mask=mask_h, other=other).to(tl.float32)
    else:
        b_h = tl.zeros([ROWS, BK], dtype=tl.float32)
    if SIGMOID_GATING:
        b_A = -tl.exp(tl.load(A_log + i_hv).to(tl.float32))
        b_dt_bias = tl.load(dt_bias + i_hv).to(tl.float32)
    else:
        b_A = 0.0
        b_dt_bias = 0.0
    return b_h, b_A, b_dt_bias


@triton.jit
def _gdn_heads_token(b_h, p_q, p_k, p_v, p_g, p_beta, p_o, b_A, b_dt_bias, scale, softplus_beta,
                     softplus_threshold, mask_v, mask_h, other, o_ty: tl.constexpr,
                     HAS_BETA: tl.constexpr, USE_L2NORM: tl.constexpr, SIGMOID_GATING: tl.constexpr):
    """One token on the stacked tile (:func:`_gdn_rows`' loop body, a head per row): stores its output,
    returns the new state rows (fp32)."""
    b_q = tl.load(p_q, mask=mask_h, other=other).to(tl.float32)
    b_k = tl.load(p_k, mask=mask_h, other=other).to(tl.float32)
    b_v = tl.load(p_v, mask=mask_v, other=other).to(tl.float32)
    b_g = tl.load(p_g).to(tl.float32)
    if HAS_BETA:
        b_beta = tl.load(p_beta).to(tl.float32)
    else:
        b_beta = 1.0
    if SIGMOID_GATING:
        b_g, b_beta = _sigmoid_gates(b_g, b_beta, b_A, b_dt_bias, softplus_beta, softplus_threshold)
    if USE_L2NORM:
        b_q = b_q / tl.sqrt(tl.sum(b_q * b_q, axis=1) + 1e-6)[:, None]
        b_k = b_k / tl.sqrt(tl.sum(b_k * b_k, axis=1) + 1e-6)[:, None]
    b_q = b_q * scale
    b_h = b_h * tl.exp(b_g)[:, None]
    b_pred = tl.sum(b_h * b_k, axis=1)
    b_vn = (b_v - b_pred) * b_beta
    b_h = b_h + b_vn[:, None] * b_k
    b_o = tl.sum(b_h * b_q, axis=1)
    tl.store(p_o, b_o.to(o_ty), mask=mask_v)
    return b_h
