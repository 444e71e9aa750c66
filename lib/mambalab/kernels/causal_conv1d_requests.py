"""Every request of a plain decode step in one program: the interpreter's form of the conv's decode step.

Under Triton's CPU interpreter a launch costs programs x operations, whatever a tile's size.
:func:`mambalab.kernels.causal_conv1d_row_kernels._causal_conv1d_decode_row_kernel` runs one request and
every channel a program; this kernel runs the ``REQS`` requests of a launch as the rows of ``[REQS, BLOCK_N]``
tiles, each request's slot loaded once (a ``[REQS]`` vector). It runs only where every request is live and no
two share a slot (:func:`mambalab.kernels.common.requests_a_program`), so no lane needs a mask; a batch with a
padded request keeps one request a program.

Each element gets the row kernel's operations in the same order, so results are bit-identical, and each
request makes the same loads and stores, in the same order, as its own program of the row kernel would: the
sanitizer, told ``rows_per_program=REQS`` (:mod:`mambalab.lab.sanitizer_rows`), checks and reports them under
that program's id. Used under the interpreter (:func:`mambalab.kernels.causal_conv1d.causal_conv1d_update`);
a GPU never launches it (its decode kernel has row tiles of its own, :data:`DECODE_ROWS` requests).
"""

from __future__ import annotations

import triton
import triton.language as tl

from mambalab.kernels.causal_conv1d_row_kernels import _conv_decode_rows



@triton.jit
def _causal_conv1d_decode_requests_kernel(
    x_ptr, w_ptr, bias_ptr, state_ptr, idx_ptr, out_ptr, batch, dim, null_block_id,
    stride_x_row, stride_x_dim, stride_w_dim, stride_w_tap, stride_bias, stride_state_slot, stride_state_pos,
    stride_idx_row, stride_out_row, stride_out_dim,
    WIDTH: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_INDICES: tl.constexpr, SILU: tl.constexpr,
    GUARD: tl.constexpr,
    ROWS: tl.constexpr,  # 1 (the row kernel's argument; the requests a program are REQS)
    BLOCK_N: tl.constexpr,
    REQS: tl.constexpr,  # the launch's requests (a power of two), every one live
    MASKED: tl.constexpr = True,  # False where BLOCK_N == dim: no lane to mask
):
    """:func:`_causal_conv1d_decode_row_kernel`'s arguments and results; grid ``(1, cdiv(dim, BLOCK_N))``."""
    HIST: tl.constexpr = WIDTH - 1
    reqs = tl.arange(0, REQS)
    chans = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    if MASKED:
        chan_ok = (chans < dim)[None, :]
        other = 0.0
    else:  # every lane is a channel: loads and stores without a mask (the interpreter's cheapest)
        chan_ok = None
        other = None
    if HAS_INDICES:
        slot = tl.load(idx_ptr + reqs * stride_idx_row).to(tl.int64)
    else:
        slot = reqs.to(tl.int64)
    x_in = tl.load(x_ptr + (reqs * stride_x_row)[:, None] + (chans * stride_x_dim)[None, :], mask=chan_ok,
                   other=other)
    out_rows = out_ptr + (reqs * stride_out_row)[:, None] + (chans * stride_out_dim)[None, :]
    col0 = state_ptr + (slot * stride_state_slot)[:, None] + chans[None, :]
    _conv_decode_rows(col0, w_ptr + (reqs * 0)[:, None] + (chans * stride_w_dim)[None, :], bias_ptr,
                      (reqs * 0)[:, None] + (chans * stride_bias)[None, :], out_rows, x_in, stride_state_pos,
                      stride_w_tap, chan_ok, other, state_ptr.dtype.element_ty, out_ptr.dtype.element_ty, HAS_BIAS,
                      HIST, SILU)


__all__ = ["_causal_conv1d_decode_requests_kernel"]
