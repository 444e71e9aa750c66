"""The conv's kernels as the CPU interpreter runs them: one request and every channel a program.

The interpreter's cost is programs x operations, so :mod:`mambalab.kernels.causal_conv1d` launches these
forms of two of :mod:`mambalab.kernels.causal_conv1d_kernels`'s kernels there (a GPU keeps those, untouched):

* :func:`_causal_conv1d_decode_row_kernel`, the plain decode step (:func:`_causal_conv1d_decode_kernel`)
  without its ``[ROWS, BLOCK_N]`` row tile;
* :func:`_causal_conv1d_window_row_kernel`, the few-tokens step (:func:`_causal_conv1d_window_kernel`), a
  token past the row's length skipped rather than masked.

In both the slot is loaded and tested before any state address is formed (a padded row copies its input
and leaves), there are no lane masks where the block is exactly the channels (``MASKED``), and each element
gets the GPU form's operations in the same order: the results are bit-identical
(``tests/test_kernel_interpreter_launch.py``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from mambalab.kernels.common import is_live_slot


@triton.jit
def _conv_decode_rows(col0, w_row, bias_ptr, bias_offs, out_row, x_in, stride_state_pos, stride_w_tap, chan_ok,
                      other,
                      state_ty: tl.constexpr, out_ty: tl.constexpr, HAS_BIAS: tl.constexpr, HIST: tl.constexpr,
                      SILU: tl.constexpr):
    """One decode step of live rows: the history loaded, the taps applied, the output stored, the shifted history
    stored back at ``col0`` (in place: its loads are done). Tiles of one row (``[BLOCK_N]``) or of several
    requests (``[REQS, BLOCK_N]``, ``causal_conv1d_requests.py``), the same operations on each element; the
    bias (``HAS_BIAS``) at ``bias_ptr + bias_offs``."""
    h0 = tl.load(col0, mask=chan_ok, other=other)
    if HIST > 1:
        h1 = tl.load(col0 + stride_state_pos, mask=chan_ok, other=other)
    if HIST > 2:
        h2 = tl.load(col0 + 2 * stride_state_pos, mask=chan_ok, other=other)
    xv = x_in.to(state_ty)  # what the state will keep
    if HAS_BIAS:
        acc = tl.load(bias_ptr + bias_offs, mask=chan_ok, other=other).to(tl.float32)
    else:
        acc = tl.zeros(x_in.shape, dtype=tl.float32)
    acc = acc + tl.load(w_row, mask=chan_ok, other=other).to(tl.float32) * h0.to(tl.float32)
    w1 = tl.load(w_row + stride_w_tap, mask=chan_ok, other=other).to(tl.float32)
    if HIST == 1:
        acc = acc + w1 * xv.to(tl.float32)
    else:
        acc = acc + w1 * h1.to(tl.float32)
        w2 = tl.load(w_row + 2 * stride_w_tap, mask=chan_ok, other=other).to(tl.float32)
        if HIST == 2:
            acc = acc + w2 * xv.to(tl.float32)
        else:
            acc = acc + w2 * h2.to(tl.float32)
            w3 = tl.load(w_row + 3 * stride_w_tap, mask=chan_ok, other=other).to(tl.float32)
            acc = acc + w3 * xv.to(tl.float32)
    if SILU:
        acc = acc / (1.0 + tl.exp(-acc))
    tl.store(out_row, acc.to(out_ty), mask=chan_ok)
    if HIST == 1:
        tl.store(col0, xv, mask=chan_ok)
    elif HIST == 2:
        tl.store(col0, h1, mask=chan_ok)
        tl.store(col0 + stride_state_pos, xv, mask=chan_ok)
    else:
        tl.store(col0, h1, mask=chan_ok)
        tl.store(col0 + stride_state_pos, h2, mask=chan_ok)
        tl.store(col0 + 2 * stride_state_pos, xv, mask=chan_ok)


@triton.jit
def _causal_conv1d_decode_row_kernel(
    x_ptr, w_ptr, bias_ptr, state_ptr, idx_ptr, out_ptr, batch, dim, null_block_id,
    stride_x_row, stride_x_dim, stride_w_dim, stride_w_tap, stride_bias, stride_state_slot, stride_state_pos,
    stride_idx_row, stride_out_row, stride_out_dim,
    WIDTH: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_INDICES: tl.constexpr, SILU: tl.constexpr,
    GUARD: tl.constexpr,
    ROWS: tl.constexpr,  # 1: one request a program (as the general kernel's programs and rows)
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr = True,  # False where BLOCK_N == dim: no lane to mask
):
    """:func:`_causal_conv1d_decode_kernel` with one request a program and no ``[ROWS, BLOCK_N]`` tile: the
    interpreter's launch, whose cost is programs x ops. The slot is loaded and tested first: a padded row
    copies its input and leaves. Each element gets the decode kernel's operations in the same order."""
    HIST: tl.constexpr = WIDTH - 1
    row = tl.program_id(0)
    chans = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    if MASKED:
        chan_ok = chans < dim
        other = 0.0
    else:  # every lane is a channel: loads and stores without a mask (the interpreter's cheapest)
        chan_ok = None
        other = None
    if HAS_INDICES:
        slot = tl.load(idx_ptr + row * stride_idx_row).to(tl.int64)
        live = is_live_slot(slot, null_block_id, GUARD)
    else:
        slot = row.to(tl.int64)
        live = True
    x_in = tl.load(x_ptr + row * stride_x_row + chans * stride_x_dim, mask=chan_ok, other=other)
    out_row = out_ptr + row * stride_out_row + chans * stride_out_dim
    if not live:  # padding: no state traffic, the output is the input
        tl.store(out_row, x_in.to(tl.float32).to(out_ptr.dtype.element_ty), mask=chan_ok)
        return
    col0 = state_ptr + slot * stride_state_slot + chans
    _conv_decode_rows(col0, w_ptr + chans * stride_w_dim, bias_ptr, chans * stride_bias, out_row, x_in,
                      stride_state_pos, stride_w_tap, chan_ok, other, state_ptr.dtype.element_ty,
                      out_ptr.dtype.element_ty, HAS_BIAS, HIST, SILU)


@triton.jit
def _causal_conv1d_window_row_kernel(
    x_ptr, w_ptr, bias_ptr, state_ptr, idx_ptr, accepted_ptr, qsl_ptr, out_ptr, dim, null_block_id,
    stride_x_row, stride_x_dim, stride_x_tok, stride_w_dim, stride_w_tap, stride_bias, stride_state_slot,
    stride_state_pos, stride_idx_row, stride_accepted, stride_qsl, stride_out_row, stride_out_dim, stride_out_tok,
    WIDTH: tl.constexpr, MAX_T: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_INDICES: tl.constexpr,
    IS_SPEC: tl.constexpr, IS_VARLEN: tl.constexpr, SILU: tl.constexpr, GUARD: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr = True,  # False where BLOCK_N == dim: no lane to mask
):
    """:func:`_causal_conv1d_window_kernel` under the CPU interpreter, whose cost is programs x ops: one
    request and every channel a program, the slot tested before any address arithmetic (a padded or empty
    row copies its tokens and leaves), a token past the row's length skipped rather than masked, no lane
    masks where the block is the channels. Each element gets the window kernel's operations in the same
    order (the same loads and stores too, a masked-off one being no access), so results are bit-identical."""
    HIST: tl.constexpr = WIDTH - 1
    row = tl.program_id(0)
    chans = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    if MASKED:
        chan_ok = chans < dim
        other = 0.0
    else:  # every lane is a channel: loads and stores without a mask (the interpreter's cheapest)
        chan_ok = None
        other = None
    if IS_VARLEN:  # the row's span first, then its slot: the window kernel's order of loads
        start = tl.load(qsl_ptr + row * stride_qsl).to(tl.int64)
        end = tl.load(qsl_ptr + (row + 1) * stride_qsl).to(tl.int64)
        seqlen = tl.minimum(tl.maximum(end - start, 0), MAX_T)
    else:
        start = 0
        seqlen = MAX_T
    if HAS_INDICES:
        slot = tl.load(idx_ptr + row * stride_idx_row).to(tl.int64)
        live = is_live_slot(slot, null_block_id, GUARD)
        if IS_VARLEN:
            live = live & (seqlen > 0)  # an empty row touches nothing
    else:
        slot = row.to(tl.int64)
        if IS_VARLEN:
            live = seqlen > 0
        else:
            live = True
    if IS_VARLEN:  # the wrapper passes row strides 0 under varlen: a row starts at its first token
        x_row = x_ptr + start * stride_x_tok + chans * stride_x_dim
        out_row = out_ptr + start * stride_out_tok + chans * stride_out_dim
    else:
        x_row = x_ptr + row * stride_x_row + chans * stride_x_dim
        out_row = out_ptr + row * stride_out_row + chans * stride_out_dim
    if not live:  # padding (or no token): no state traffic, the output is the input
        for t in tl.static_range(MAX_T):
            if t < seqlen:
                x_in = tl.load(x_row if t == 0 else x_row + t * stride_x_tok, mask=chan_ok, other=other)
                tl.store(out_row if t == 0 else out_row + t * stride_out_tok, x_in.to(out_ptr.dtype.element_ty),
                         mask=chan_ok)
        return
    col0 = state_ptr + slot * stride_state_slot + chans
    if IS_SPEC:
        accepted = tl.load(accepted_ptr + row * stride_accepted).to(tl.int64)
        off = tl.maximum(accepted - 1, 0)  # a count of 0 reads as 1 (module doc)
        hist0 = col0 + off * stride_state_pos
    else:
        hist0 = col0
    # -- every load first (the window kernel's order) ---------------------------
    c0 = tl.load(hist0, mask=chan_ok, other=other).to(tl.float32)
    c1 = c0
    c2 = c0
    if HIST > 1:
        c1 = tl.load(hist0 + stride_state_pos, mask=chan_ok, other=other).to(tl.float32)
    if HIST > 2:
        c2 = tl.load(hist0 + 2 * stride_state_pos, mask=chan_ok, other=other).to(tl.float32)
    w_row = w_ptr + chans * stride_w_dim
    w0 = tl.load(w_row, mask=chan_ok, other=other).to(tl.float32)
    w1 = tl.load(w_row + stride_w_tap, mask=chan_ok, other=other).to(tl.float32)
    w2 = w1
    w3 = w1
    if WIDTH > 2:
        w2 = tl.load(w_row + 2 * stride_w_tap, mask=chan_ok, other=other).to(tl.float32)
    if WIDTH > 3:
        w3 = tl.load(w_row + 3 * stride_w_tap, mask=chan_ok, other=other).to(tl.float32)
    if HAS_BIAS:
        acc0 = tl.load(bias_ptr + chans * stride_bias, mask=chan_ok, other=other).to(tl.float32)
    else:
        acc0 = tl.zeros((BLOCK_N,), dtype=tl.float32)
    # the row's tokens (MAX_T <= 4: loaded with the history, as the window kernel's PRELOAD_X; more: in the loop)
    if MAX_T <= 4:
        x0 = tl.load(x_row, mask=chan_ok, other=other)
        x1 = x0
        x2 = x0
        x3 = x0
        if seqlen > 1:
            x1 = tl.load(x_row + stride_x_tok, mask=chan_ok, other=other)
        if seqlen > 2:
            x2 = tl.load(x_row + 2 * stride_x_tok, mask=chan_ok, other=other)
        if seqlen > 3:
            x3 = tl.load(x_row + 3 * stride_x_tok, mask=chan_ok, other=other)
    # -- the stores (in place: every load of the slot is done) -------------------
    if IS_SPEC:  # the history minus its oldest input, from column 0 (the tokens follow)
        if HIST > 1:
            tl.store(col0, c1.to(state_ptr.dtype.element_ty), mask=chan_ok)
        if HIST > 2:
            tl.store(col0 + stride_state_pos, c2.to(state_ptr.dtype.element_ty), mask=chan_ok)
    for t in tl.static_range(MAX_T):
        if t < seqlen:
            if MAX_T > 4:
                xv = tl.load(x_row if t == 0 else x_row + t * stride_x_tok, mask=chan_ok, other=other)
            elif t == 0:
                xv = x0
            elif t == 1:
                xv = x1
            elif t == 2:
                xv = x2
            else:
                xv = x3
            xs = xv.to(state_ptr.dtype.element_ty)  # what the state keeps
            xf = xs.to(tl.float32)
            if IS_SPEC:
                tl.store(col0 + (HIST - 1 + t) * stride_state_pos, xs, mask=chan_ok)
            if WIDTH == 2:
                acc = acc0 + w0 * c0 + w1 * xf
            elif WIDTH == 3:
                acc = acc0 + w0 * c0 + w1 * c1 + w2 * xf
            else:
                acc = acc0 + w0 * c0 + w1 * c1 + w2 * c2 + w3 * xf
            if SILU:
                acc = acc / (1.0 + tl.exp(-acc))
            tl.store(out_row if t == 0 else out_row + t * stride_out_tok, acc.to(out_ptr.dtype.element_ty),
                     mask=chan_ok)
            # slide the window by one token
            if HIST == 1:
                c0 = xf
            elif HIST == 2:
                c0 = c1
                c1 = xf
            else:
                c0 = c1
                c1 = c2
                c2 = xf
    if not IS_SPEC:  # the last HIST inputs of [history | tokens], from column 0
        tl.store(col0, c0.to(state_ptr.dtype.element_ty), mask=chan_ok)
        if HIST > 1:
            tl.store(col0 + stride_state_pos, c1.to(state_ptr.dtype.element_ty), mask=chan_ok)
        if HIST > 2:
            tl.store(col0 + 2 * stride_state_pos, c2.to(state_ptr.dtype.element_ty), mask=chan_ok)


__all__ = ["_causal_conv1d_decode_row_kernel", "_causal_conv1d_window_row_kernel"]
