"""The Triton kernels of :func:`mambalab.kernels.causal_conv1d.causal_conv1d_update`.

Three kernels, launched by that wrapper (the state convention, the guard and the launch design are described in
:mod:`mambalab.kernels.causal_conv1d`):

* :func:`_causal_conv1d_update_kernel`, the general kernel: speculative decoding (``num_accepted_tokens``),
  varlen rows (``query_start_loc``) and several tokens a row; one program per (row, block of channels).
* :func:`_causal_conv1d_window_kernel`, the same results for width 2 to 4 and few tokens a row (speculative
  decoding): no register tile, the window slides through registers.
* :func:`_causal_conv1d_decode_kernel`, the plain decode step (one token a row, width 2 to 4): ``ROWS``
  requests per program.

The CPU interpreter runs the last two's one-request forms: :mod:`mambalab.kernels.causal_conv1d_row_kernels`.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mambalab.kernels.common import is_live_slot

# The plain decode kernel's batch rules (causal_conv1d: PDL_MAX_BATCH_DECODE, DECODE_TRIGGER, DECODE_DEEP) were
# measured at Qwen3-Next's 8192 channels; a tensor-parallel rank has fewer (TP 8: 1024, mambalab.gpu.model_shapes),
# so the same batch is less work there. CONV_RULE_DIM: 0 gives the rules the batch as it is; a channel count gives
# them the batch of that many channels with the same work, cdiv(batch x dim, CONV_RULE_DIM). H200 beside vLLM 0.33
# (call 282, docs/results/issue14-call282-conv-rule-dim.txt; vLLM's time over ours, as is -> scaled): fp32 Qwen3-Next
# TP 8 at 32 / 64 / 128 0.845 / 0.838 / 0.815 -> 1.224 / 1.202 / 1.207x, TP 4 at 32 / 64 0.834 / 1.048 -> 1.208 /
# 1.258x, NemotronH-8B TP 4 at 32 0.881 -> 1.112x, Falcon-H1-1.5B at 32 0.951 -> 1.145x (behind vLLM -> ahead); bf16
# TP 8 / 4 at 16 1.033 / 1.124 -> 1.514 / 1.650x; as a layer runs it (the conv, then the GDN) even or faster (TP 8 fp32
# at 64 1.131 -> 1.213x); after a torch kernel that does not trigger PDL slower, still ahead (TP 8 fp32 at 64 1.288 ->
# 1.068x, bf16 at 16 1.486 -> 1.222x). At 8192 channels (the bench's) the batch is unchanged.
CONV_RULE_DIM = 8192


def rule_batch(batch: int, dim: int) -> int:
    """The batch the decode kernel's rules are asked with (:data:`CONV_RULE_DIM`)."""
    return batch if not CONV_RULE_DIM else max(1, -(-batch * dim // CONV_RULE_DIM))


@triton.jit
def _row_prologue(
    x_ptr, qsl_ptr, out_ptr, idx_ptr, dim, null_block_id, stride_x_row, stride_x_dim, stride_x_tok,
    stride_idx_row, stride_qsl, stride_out_row, stride_out_dim, stride_out_tok,
    MAX_T: tl.constexpr, HAS_INDICES: tl.constexpr, IS_VARLEN: tl.constexpr, GUARD: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """What the general and window kernels' programs start from (upstream's ``_causal_conv1d_update_kernel``
    in ``vllm/model_executor/layers/mamba/ops/causal_conv1d.py`` does the same at its start): the row
    (axis 0), this program's block of channels (axis 1), the row's token count (``MAX_T``, or its
    ``query_start_loc`` span capped at ``MAX_T``), pointers to its first input and output token, and the
    state slot with the guard's verdict (a dense batch without indices: row ``b`` owns slot ``b``, live).

    Returns ``(row, chans, chan_ok, seqlen, x_row, out_row, slot, live)``.
    """
    row = tl.program_id(0).to(tl.int64)
    chans = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    chan_ok = chans < dim
    if IS_VARLEN:
        start = tl.load(qsl_ptr + row * stride_qsl).to(tl.int64)
        end = tl.load(qsl_ptr + (row + 1) * stride_qsl).to(tl.int64)
        seqlen = tl.minimum(tl.maximum(end - start, 0), MAX_T)
    else:
        start = 0
        seqlen = MAX_T
    x_row = x_ptr + row * stride_x_row + start * stride_x_tok + chans * stride_x_dim
    out_row = out_ptr + row * stride_out_row + start * stride_out_tok + chans * stride_out_dim
    if HAS_INDICES:
        slot = tl.load(idx_ptr + row * stride_idx_row).to(tl.int64)
        live = is_live_slot(slot, null_block_id, GUARD)
    else:
        slot = row
        live = slot == slot
    return row, chans, chan_ok, seqlen, x_row, out_row, slot, live


@triton.jit
def _causal_conv1d_update_kernel(
    x_ptr,  # (batch, dim, seqlen) or varlen (num_tokens, dim), any strides
    w_ptr,  # (dim, width)
    bias_ptr,  # (dim,) if HAS_BIAS
    state_ptr,  # pool, logical (num_slots, dim, state_len), stride over dim is 1
    idx_ptr,  # (batch,) or (batch, k) if HAS_INDICES: column 0 is used
    accepted_ptr,  # (batch,) if IS_SPEC
    qsl_ptr,  # (batch + 1,) if IS_VARLEN
    out_ptr,  # same layout as x
    dim,
    null_block_id,
    stride_x_row,
    stride_x_dim,
    stride_x_tok,
    stride_w_dim,
    stride_w_tap,
    stride_bias,
    stride_state_slot,
    stride_state_pos,
    stride_idx_row,
    stride_accepted,
    stride_qsl,
    stride_out_row,
    stride_out_dim,
    stride_out_tok,
    WIDTH: tl.constexpr,
    MAX_T: tl.constexpr,  # x's seqlen, or max_query_len (varlen): most tokens a row may have
    NP2_U: tl.constexpr,  # next_power_of_2(WIDTH - 1 + MAX_T): rows of the u tile
    HAS_BIAS: tl.constexpr,
    HAS_INDICES: tl.constexpr,
    IS_SPEC: tl.constexpr,
    IS_VARLEN: tl.constexpr,
    SILU: tl.constexpr,
    GUARD: tl.constexpr,
    CLAMP_ACCEPTED: tl.constexpr,  # always True: the offset is clamped (module doc)
    BLOCK_N: tl.constexpr,
    USE_PDL: tl.constexpr = False,  # programmatic dependent launch (GPU, sm_90+; off on the interpreter)
    UNROLL_T: tl.constexpr = 8,  # up to this many tokens a row: the token loop unrolled
):
    HIST = WIDTH - 1  # history length (a constexpr)
    if USE_PDL:
        # As the SSU does: let the next launch's programs be scheduled, then wait for every earlier launch;
        # nothing is read before the wait.
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    # -- this row's tokens, channels and slot (may we touch it?) -----------
    row, chans, chan_ok, seqlen, x_row, out_row, slot, live = _row_prologue(
        x_ptr, qsl_ptr, out_ptr, idx_ptr, dim, null_block_id, stride_x_row, stride_x_dim, stride_x_tok,
        stride_idx_row, stride_qsl, stride_out_row, stride_out_dim, stride_out_tok,
        MAX_T, HAS_INDICES, IS_VARLEN, GUARD, BLOCK_N)
    if HAS_INDICES:
        if live == 0:
            # Padding: no state traffic; the output is the input (upstream: in place over x).
            t = tl.zeros([], dtype=tl.int32)
            while t < seqlen:  # not range(): Triton 3.6's interpreter under NumPy 2.4
                x_in = tl.load(x_row + t * stride_x_tok, mask=chan_ok, other=0.0)
                tl.store(out_row + t * stride_out_tok, x_in.to(out_ptr.dtype.element_ty), mask=chan_ok)
                t += 1
            return
    if seqlen == 0:
        return

    # -- where the history starts, how far the state shifts ----------------
    if IS_SPEC:
        accepted = tl.load(accepted_ptr + row * stride_accepted).to(tl.int64)
        if CLAMP_ACCEPTED:  # a count of 0 reads as 1 (ours; module doc)
            off = tl.maximum(accepted - 1, 0)
        else:
            off = accepted - 1
        shift = 1
        new_len = HIST - 1 + seqlen
    else:
        off = 0
        shift = seqlen
        new_len = HIST

    # -- u = [history (HIST columns) | new tokens (seqlen)], fp32 ----------
    pos = tl.arange(0, NP2_U)
    in_hist = pos < HIST
    in_x = (pos >= HIST) & (pos < HIST + seqlen)
    slot_base = state_ptr + slot * stride_state_slot
    hist_col = tl.where(in_hist, off + pos, off)  # never form a pointer we do not use
    hist = tl.load(
        slot_base + hist_col[:, None] * stride_state_pos + chans[None, :],
        mask=in_hist[:, None] & chan_ok[None, :],
        other=0.0,
        eviction_policy="evict_first",
    )
    x_tok = tl.where(in_x, pos - HIST, 0)
    xv = tl.load(
        x_row[None, :] + x_tok[:, None] * stride_x_tok,
        mask=in_x[:, None] & chan_ok[None, :],
        other=0.0,
    )
    xv = xv.to(state_ptr.dtype.element_ty)  # what the state will keep
    u = tl.where(in_hist[:, None], hist.to(tl.float32), xv.to(tl.float32))

    # -- outputs: token t's window is u[t : t + WIDTH] ---------------------
    if HAS_BIAS:
        acc0 = tl.load(bias_ptr + chans * stride_bias, mask=chan_ok, other=0.0).to(tl.float32)
    else:
        acc0 = tl.zeros((BLOCK_N,), dtype=tl.float32)
    w_row = w_ptr + chans * stride_w_dim
    if MAX_T <= UNROLL_T:
        # Few tokens (speculative decoding): one copy of the body per token, so which column each tap
        # reads, and from where, is known when compiling. On an H200 (T = 2..4, batch 1..256, PDL off)
        # 1.16-1.6x faster than the rolled loop that picked u[t + j] out of the register tile
        # (geometric mean 1.34x; reading from memory in the rolled loop alone: 1.21x).
        for t in tl.static_range(MAX_T):
            if t < seqlen:
                acc = acc0
                for j in tl.static_range(WIDTH):
                    w_j = tl.load(w_row + j * stride_w_tap, mask=chan_ok, other=0.0, eviction_policy="evict_last")
                    if t + j < HIST:
                        u_k = tl.load(slot_base + (off + t + j) * stride_state_pos + chans, mask=chan_ok,
                                      other=0.0).to(tl.float32)
                    else:
                        u_k = tl.load(x_row + (t + j - HIST) * stride_x_tok, mask=chan_ok, other=0.0)
                        u_k = u_k.to(state_ptr.dtype.element_ty).to(tl.float32)  # as the state keeps it
                    acc += w_j.to(tl.float32) * u_k
                if SILU:
                    acc = acc / (1.0 + tl.exp(-acc))
                tl.store(out_row + t * stride_out_tok, acc.to(out_ptr.dtype.element_ty), mask=chan_ok)
    else:
        t = tl.zeros([], dtype=tl.int32)
        while t < seqlen:  # not range(): Triton 3.6's interpreter under NumPy 2.4
            acc = acc0
            for j in tl.static_range(WIDTH):
                # the same taps serve every row: ask the cache to keep them
                w_j = tl.load(w_row + j * stride_w_tap, mask=chan_ok, other=0.0, eviction_policy="evict_last")
                # u[t + j], read again where it lives (the slot's history column or the token), a cache
                # hit after the tile's load above; picking the row out of the register tile instead
                # (a masked sum over its rows) made this kernel instruction-bound: 63% of issue slots
                # busy and 16% of DRAM peak at batch 64, T = 4 (docs/results/ncu-h200-vllm.txt).
                k = t + j
                if k < HIST:
                    u_k = tl.load(slot_base + (off + k) * stride_state_pos + chans, mask=chan_ok, other=0.0)
                    u_k = u_k.to(tl.float32)
                else:
                    u_k = tl.load(x_row + (k - HIST) * stride_x_tok, mask=chan_ok, other=0.0)
                    u_k = u_k.to(state_ptr.dtype.element_ty).to(tl.float32)  # as the state keeps it
                acc += w_j.to(tl.float32) * u_k
            if SILU:
                acc = acc / (1.0 + tl.exp(-acc))
            tl.store(out_row + t * stride_out_tok, acc.to(out_ptr.dtype.element_ty), mask=chan_ok)
            t += 1

    # -- new state: u[shift : shift + new_len] -> columns [0, new_len) -----
    # In place: every thread's loads of this slot must be done before any
    # thread overwrites it (a column's rows may live in different threads).
    tl.debug_barrier()
    keep = (pos >= shift) & (pos < shift + new_len)
    dst_col = tl.where(keep, pos - shift, 0)
    tl.store(
        slot_base + dst_col[:, None] * stride_state_pos + chans[None, :],
        u.to(state_ptr.dtype.element_ty),
        mask=keep[:, None] & chan_ok[None, :],
        eviction_policy="evict_first",
    )


@triton.jit
def _causal_conv1d_window_kernel(
    x_ptr,  # (batch, dim, seqlen) or varlen (num_tokens, dim), any strides
    w_ptr,  # (dim, width)
    bias_ptr,  # (dim,) if HAS_BIAS
    state_ptr,  # pool, logical (num_slots, dim, state_len), stride over dim is 1
    idx_ptr,  # (batch,) or (batch, k) if HAS_INDICES: column 0 is used
    accepted_ptr,  # (batch,) if IS_SPEC
    qsl_ptr,  # (batch + 1,) if IS_VARLEN
    out_ptr,  # same layout as x
    dim,
    null_block_id,
    stride_x_row,
    stride_x_dim,
    stride_x_tok,
    stride_w_dim,
    stride_w_tap,
    stride_bias,
    stride_state_slot,
    stride_state_pos,
    stride_idx_row,
    stride_accepted,
    stride_qsl,
    stride_out_row,
    stride_out_dim,
    stride_out_tok,
    WIDTH: tl.constexpr,  # 2, 3 or 4
    MAX_T: tl.constexpr,  # most tokens a row may have (few: the loop over them is unrolled)
    HAS_BIAS: tl.constexpr,
    HAS_INDICES: tl.constexpr,
    IS_SPEC: tl.constexpr,
    IS_VARLEN: tl.constexpr,
    SILU: tl.constexpr,
    GUARD: tl.constexpr,
    BLOCK_N: tl.constexpr,
    USE_PDL: tl.constexpr = 0,  # 0 off; 1 let the next launch start at once; 2 after the state is written
    PRELOAD_X: tl.constexpr = False,  # (MAX_T <= 4) the tokens loaded with the history, before any store
):
    """Few tokens a row (speculative decoding, short varlen rows), width 2 to 4: the general kernel's
    results without its register tile.

    Every load is issued first (the ``WIDTH - 1`` history columns from ``off``, the taps, and with
    ``PRELOAD_X`` the row's tokens), one ``[BLOCK_N]`` vector each; the window slides through registers (``c0 c1 c2``, as upstream's
    kernel); the new state is written from those registers: under speculation columns ``[0, HIST - 1)``
    get ``h1 ..`` and column ``HIST - 1 + t`` token ``t``, otherwise the last ``HIST`` window entries.
    Every vector has the same layout, so each element is read and written by the same thread; a barrier
    still separates the last load from the first store (the update is in place).
    """
    HIST: tl.constexpr = WIDTH - 1
    if USE_PDL > 0:
        if USE_PDL == 1:
            tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    row, chans, chan_ok, seqlen, x_row, out_row, slot, live = _row_prologue(
        x_ptr, qsl_ptr, out_ptr, idx_ptr, dim, null_block_id, stride_x_row, stride_x_dim, stride_x_tok,
        stride_idx_row, stride_qsl, stride_out_row, stride_out_dim, stride_out_tok,
        MAX_T, HAS_INDICES, IS_VARLEN, GUARD, BLOCK_N)
    if IS_VARLEN:
        live = live & (seqlen > 0)  # an empty row touches nothing (its copy below has no token)
    if live == 0:
        # padding: no state traffic, the output is the input
        for t in tl.static_range(MAX_T):
            if t < seqlen:
                x_in = tl.load(x_row + t * stride_x_tok, mask=chan_ok, other=0.0)
                tl.store(out_row + t * stride_out_tok, x_in.to(out_ptr.dtype.element_ty), mask=chan_ok)
    else:
        if IS_SPEC:
            accepted = tl.load(accepted_ptr + row * stride_accepted).to(tl.int64)
            off = tl.maximum(accepted - 1, 0)  # a count of 0 reads as 1 (module doc)
        else:
            off = 0
        col0 = state_ptr + slot * stride_state_slot + chans
        hist0 = col0 + off * stride_state_pos
        # -- every load first ------------------------------------------------
        c0 = tl.load(hist0, mask=chan_ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
        if HIST > 1:
            c1 = tl.load(hist0 + stride_state_pos, mask=chan_ok, other=0.0,
                         eviction_policy="evict_first").to(tl.float32)
        else:
            c1 = c0
        if HIST > 2:
            c2 = tl.load(hist0 + 2 * stride_state_pos, mask=chan_ok, other=0.0,
                         eviction_policy="evict_first").to(tl.float32)
        else:
            c2 = c0
        w_row = w_ptr + chans * stride_w_dim
        w0 = tl.load(w_row, mask=chan_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
        w1 = tl.load(w_row + stride_w_tap, mask=chan_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
        if WIDTH > 2:
            w2 = tl.load(w_row + 2 * stride_w_tap, mask=chan_ok, other=0.0,
                         eviction_policy="evict_last").to(tl.float32)
        else:
            w2 = w1
        if WIDTH > 3:
            w3 = tl.load(w_row + 3 * stride_w_tap, mask=chan_ok, other=0.0,
                         eviction_policy="evict_last").to(tl.float32)
        else:
            w3 = w1
        if HAS_BIAS:
            acc0 = tl.load(bias_ptr + chans * stride_bias, mask=chan_ok, other=0.0).to(tl.float32)
        else:
            acc0 = tl.zeros((BLOCK_N,), dtype=tl.float32)
        if PRELOAD_X:
            # every token's load issued now: a token's load placed after the stores of the one before
            # waits for that token's data first (a memory round trip per token)
            x0 = tl.load(x_row, mask=chan_ok & (0 < seqlen), other=0.0)
            x1 = x0
            x2 = x0
            x3 = x0
            if MAX_T > 1:
                x1 = tl.load(x_row + stride_x_tok, mask=chan_ok & (1 < seqlen), other=0.0)
            if MAX_T > 2:
                x2 = tl.load(x_row + 2 * stride_x_tok, mask=chan_ok & (2 < seqlen), other=0.0)
            if MAX_T > 3:
                x3 = tl.load(x_row + 3 * stride_x_tok, mask=chan_ok & (3 < seqlen), other=0.0)
        # -- in place: no store to the slot before every load of it -----------
        tl.debug_barrier()
        if IS_SPEC:
            # the history minus its oldest input, from column 0 (the tokens follow, below)
            if HIST > 1:
                tl.store(col0, c1.to(state_ptr.dtype.element_ty), mask=chan_ok, eviction_policy="evict_first")
            if HIST > 2:
                tl.store(col0 + stride_state_pos, c2.to(state_ptr.dtype.element_ty), mask=chan_ok,
                         eviction_policy="evict_first")
        if USE_PDL == 2:
            tl.extra.cuda.gdc_launch_dependents()
        for t in tl.static_range(MAX_T):
            tok_ok = t < seqlen
            if PRELOAD_X:
                if t == 0:
                    xv = x0
                elif t == 1:
                    xv = x1
                elif t == 2:
                    xv = x2
                else:
                    xv = x3
            else:
                xv = tl.load(x_row + t * stride_x_tok, mask=chan_ok & tok_ok, other=0.0)
            xs = xv.to(state_ptr.dtype.element_ty)  # what the state keeps
            xf = xs.to(tl.float32)
            if IS_SPEC:
                tl.store(col0 + (HIST - 1 + t) * stride_state_pos, xs, mask=chan_ok & tok_ok,
                         eviction_policy="evict_first")
            if WIDTH == 2:
                acc = acc0 + w0 * c0 + w1 * xf
            elif WIDTH == 3:
                acc = acc0 + w0 * c0 + w1 * c1 + w2 * xf
            else:
                acc = acc0 + w0 * c0 + w1 * c1 + w2 * c2 + w3 * xf
            if SILU:
                acc = acc / (1.0 + tl.exp(-acc))
            tl.store(out_row + t * stride_out_tok, acc.to(out_ptr.dtype.element_ty), mask=chan_ok & tok_ok)
            # slide the window by one token (a row shorter than MAX_T stops sliding)
            if HIST == 1:
                c0 = tl.where(tok_ok, xf, c0)
            elif HIST == 2:
                c0 = tl.where(tok_ok, c1, c0)
                c1 = tl.where(tok_ok, xf, c1)
            else:
                c0 = tl.where(tok_ok, c1, c0)
                c1 = tl.where(tok_ok, c2, c1)
                c2 = tl.where(tok_ok, xf, c2)
        if not IS_SPEC:
            # the last HIST inputs of [history | tokens], from column 0
            tl.store(col0, c0.to(state_ptr.dtype.element_ty), mask=chan_ok, eviction_policy="evict_first")
            if HIST > 1:
                tl.store(col0 + stride_state_pos, c1.to(state_ptr.dtype.element_ty), mask=chan_ok,
                         eviction_policy="evict_first")
            if HIST > 2:
                tl.store(col0 + 2 * stride_state_pos, c2.to(state_ptr.dtype.element_ty), mask=chan_ok,
                         eviction_policy="evict_first")


@triton.jit
def _causal_conv1d_decode_kernel(
    x_ptr,  # (batch, dim), any strides
    w_ptr,  # (dim, width)
    bias_ptr,  # (dim,) if HAS_BIAS
    state_ptr,  # pool, logical (num_slots, dim, state_len), stride over dim is 1
    idx_ptr,  # (batch,) or (batch, k) if HAS_INDICES: column 0 is used
    out_ptr,  # (batch, dim)
    batch,
    dim,
    null_block_id,
    stride_x_row,
    stride_x_dim,
    stride_w_dim,
    stride_w_tap,
    stride_bias,
    stride_state_slot,
    stride_state_pos,
    stride_idx_row,
    stride_out_row,
    stride_out_dim,
    WIDTH: tl.constexpr,  # 2, 3 or 4
    HAS_BIAS: tl.constexpr,
    HAS_INDICES: tl.constexpr,
    SILU: tl.constexpr,
    GUARD: tl.constexpr,
    ROWS: tl.constexpr,  # requests per program
    BLOCK_N: tl.constexpr,
    USE_PDL: tl.constexpr = False,  # programmatic dependent launch (as the general kernel)
    TRIGGER: tl.constexpr = False,  # without USE_PDL: still let the next launch start at once (its own PDL)
):
    """The plain decode step (one token a row, no speculation): ``ROWS`` requests per program.

    Same results as :func:`_causal_conv1d_update_kernel` for that case, laid out
    for bandwidth: each history column of ``ROWS`` requests is one
    ``[ROWS, BLOCK_N]`` load, all issued before any arithmetic, and the taps
    are loaded once for all the rows. A padded row (the guard) loads and
    stores no state and gets its input as output; a program of padded rows only
    touches its index loads and that copy.
    """
    HIST: tl.constexpr = WIDTH - 1
    if USE_PDL or TRIGGER:
        tl.extra.cuda.gdc_launch_dependents()
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    chans = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < batch
    chan_ok = chans < dim
    if HAS_INDICES:
        slots = tl.load(idx_ptr + rows * stride_idx_row, mask=row_ok, other=0).to(tl.int64)
        live = row_ok & is_live_slot(slots, null_block_id, GUARD)
    else:
        slots = rows.to(tl.int64)  # a dense batch: row b owns slot b
        live = row_ok
    io_mask = row_ok[:, None] & chan_ok[None, :]
    st_mask = live[:, None] & chan_ok[None, :]
    col0 = state_ptr + slots[:, None] * stride_state_slot + chans[None, :]

    # -- every load first: history columns, the new token, the taps ---------
    h0 = tl.load(col0, mask=st_mask, other=0.0, eviction_policy="evict_first")
    if HIST > 1:
        h1 = tl.load(col0 + stride_state_pos, mask=st_mask, other=0.0, eviction_policy="evict_first")
    else:
        h1 = h0
    if HIST > 2:
        h2 = tl.load(col0 + 2 * stride_state_pos, mask=st_mask, other=0.0, eviction_policy="evict_first")
    else:
        h2 = h0
    x_in = tl.load(x_ptr + rows[:, None] * stride_x_row + chans[None, :] * stride_x_dim, mask=io_mask, other=0.0)
    xv = x_in.to(state_ptr.dtype.element_ty)  # what the state will keep
    w_row = w_ptr + chans * stride_w_dim
    w0 = tl.load(w_row, mask=chan_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
    w1 = tl.load(w_row + stride_w_tap, mask=chan_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
    if HAS_BIAS:
        acc = tl.load(bias_ptr + chans * stride_bias, mask=chan_ok, other=0.0).to(tl.float32)[None, :]
    else:
        acc = tl.zeros((1, BLOCK_N), dtype=tl.float32)

    # -- the window [h0 .. h_{HIST-1}, x] times the taps --------------------
    acc = acc + w0[None, :] * h0.to(tl.float32)
    if HIST == 1:
        acc = acc + w1[None, :] * xv.to(tl.float32)
    else:
        acc = acc + w1[None, :] * h1.to(tl.float32)
        w2 = tl.load(w_row + 2 * stride_w_tap, mask=chan_ok, other=0.0, eviction_policy="evict_last")
        if HIST == 2:
            acc = acc + w2.to(tl.float32)[None, :] * xv.to(tl.float32)
        else:
            acc = acc + w2.to(tl.float32)[None, :] * h2.to(tl.float32)
            w3 = tl.load(w_row + 3 * stride_w_tap, mask=chan_ok, other=0.0, eviction_policy="evict_last")
            acc = acc + w3.to(tl.float32)[None, :] * xv.to(tl.float32)
    if SILU:
        acc = acc / (1.0 + tl.exp(-acc))
    acc = tl.where(live[:, None], acc, x_in.to(tl.float32))  # a padded row's output is its input
    tl.store(out_ptr + rows[:, None] * stride_out_row + chans[None, :] * stride_out_dim,
             acc.to(out_ptr.dtype.element_ty), mask=io_mask)

    # -- the shifted history back into the slot (in place: loads done first) -
    tl.debug_barrier()
    if HIST == 1:
        tl.store(col0, xv, mask=st_mask, eviction_policy="evict_first")
    elif HIST == 2:
        tl.store(col0, h1, mask=st_mask, eviction_policy="evict_first")
        tl.store(col0 + stride_state_pos, xv, mask=st_mask, eviction_policy="evict_first")
    else:
        tl.store(col0, h1, mask=st_mask, eviction_policy="evict_first")
        tl.store(col0 + stride_state_pos, h2, mask=st_mask, eviction_policy="evict_first")
        tl.store(col0 + 2 * stride_state_pos, xv, mask=st_mask, eviction_policy="evict_first")


__all__ = ["_causal_conv1d_update_kernel", "_causal_conv1d_window_kernel", "_causal_conv1d_decode_kernel"]
