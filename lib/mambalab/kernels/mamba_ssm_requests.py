"""Every request of a one-token decode step in one program: the interpreter's form of the SSU decode step.

Under Triton's CPU interpreter a launch costs programs x operations, whatever a tile's size (type checks,
broadcasts and tensor construction in Python), and :func:`mambalab.kernels.mamba_ssm_kernels._ssu_heads_kernel`
already takes all the heads of a request in one program. This kernel also takes the ``REQS`` requests of a
launch: the request-major rows ``r = (request * BLOCK_H + head) * BLOCK_M + m`` of one tile. Each request's
slot is loaded once, a ``[REQS]`` vector, and widened to its rows. It runs only where every request is live
and no two share a slot (:func:`mambalab.kernels.common.requests_a_program`), so no lane needs a mask: a
batch with a padded request keeps one request a program, where that request's program leaves after its
index test.

Each element gets the heads kernel's operations in the same order, so results are bit-identical, and each
request makes the same loads and stores, in the same order, as its own program of the heads kernel would:
the sanitizer, told ``rows_per_program=REQS`` (:mod:`mambalab.lab.sanitizer_rows`), checks and reports
them under that program's id (an index of -1 under ``pad-minus-one`` is live, and reported as before).
Used under the interpreter for one token a request (no speculative columns, no ``cu_seqlens``;
:func:`mambalab.kernels.mamba_ssm.selective_state_update`); a GPU never launches it.
"""

from __future__ import annotations

import mambalab  # noqa: F401  (sets TRITON_INTERPRET before any kernel is defined)

import triton
import triton.language as tl

from mambalab.kernels.mamba_ssm_kernels import _ssu_rows_inputs, _ssu_rows_token


@triton.jit
def per_row(v, REQS: tl.constexpr, ROWS: tl.constexpr):
    """A ``[REQS]`` vector widened to the ``REQS * ROWS`` rows of a request-major tile."""
    return tl.reshape(tl.broadcast_to(v[:, None], (REQS, ROWS)), (REQS * ROWS,))


@triton.jit
def _ssu_requests_kernel(
    state_ptr, x_ptr, dt_ptr, dt_bias_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, out_ptr,
    src_idx_ptr, dst_idx_ptr, num_accepted_ptr, cu_seqlens_ptr,
    null_block_id, src_cols, dst_cols, tokens_per_request,
    dim, dstate, heads_per_group,
    s_state_slot, s_state_head, s_state_dim, s_state_n,
    s_x_tok, s_x_head, s_x_dim,
    s_dt_tok, s_dt_head, s_dt_dim,
    s_dtb_head, s_dtb_dim,
    s_A_head, s_A_dim, s_A_n,
    s_B_tok, s_B_group, s_B_n,
    s_C_tok, s_C_group, s_C_n,
    s_D_head, s_D_dim,
    s_z_tok, s_z_head, s_z_dim,
    s_out_tok, s_out_head, s_out_dim,
    s_src_row, s_src_col, s_dst_row, s_dst_col,
    DT_SOFTPLUS: tl.constexpr, TIE_HDIM: tl.constexpr, HAS_DT_BIAS: tl.constexpr, HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr, HAS_INDICES: tl.constexpr, HAS_NUM_ACCEPTED: tl.constexpr, IS_VARLEN: tl.constexpr,
    ONE_TOKEN: tl.constexpr, DST_IS_SRC: tl.constexpr, GUARD: tl.constexpr, CLAMP_ACCEPTED: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_H: tl.constexpr,  # heads a program (a divisor of nheads, so no head is masked)
    REQS: tl.constexpr,  # the launch's requests (a power of two), every one live
    MASKED: tl.constexpr = True,  # False where BLOCK_M == dim and BLOCK_N == dstate: no lane to mask
):
    """``_ssu_heads_kernel``'s arguments (one token a request: ``ONE_TOKEN``, no ``num_accepted``, no
    ``cu_seqlens``) and results; grid ``(cdiv(dim, BLOCK_M), 1, nheads // BLOCK_H)``."""
    TILE: tl.constexpr = BLOCK_H * BLOCK_M
    reqs = tl.arange(0, REQS)
    if HAS_INDICES:
        src_slot = per_row(tl.load(src_idx_ptr + reqs * s_src_row).to(tl.int64), REQS, TILE)
    else:
        src_slot = per_row(reqs.to(tl.int64), REQS, TILE)
    bos = per_row(reqs.to(tl.int64), REQS, TILE)
    rows = tl.arange(0, REQS * TILE) % TILE
    heads = tl.program_id(2) * BLOCK_H + rows // BLOCK_M
    offs_m = tl.program_id(0) * BLOCK_M + rows % BLOCK_M
    offs_n = tl.arange(0, BLOCK_N)
    if MASKED:
        mask_m = offs_m < dim
        mask_mn = mask_m[:, None] & (offs_n < dstate)[None, :]
        other = 0.0
    else:  # every lane is an element: loads and stores without a mask (the interpreter's cheapest)
        mask_m = None
        mask_mn = None
        other = None
    out_ptrs = out_ptr + bos * s_out_tok + heads * s_out_head + offs_m * s_out_dim
    tile = (heads * s_state_head + offs_m * s_state_dim)[:, None] + (offs_n * s_state_n)[None, :]
    state = tl.load(state_ptr + src_slot[:, None] * s_state_slot + tile, mask=mask_mn, other=other)
    state = state.to(tl.float32)

    x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs, A, dt_bias, D = _ssu_rows_inputs(
        x_ptr, dt_ptr, dt_bias_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, bos, heads, offs_m, offs_n, heads_per_group,
        s_x_tok, s_x_head, s_x_dim, s_dt_tok, s_dt_head, s_dt_dim, s_dtb_head, s_dtb_dim, s_A_head, s_A_dim, s_A_n,
        s_B_tok, s_B_group, s_B_n, s_C_tok, s_C_group, s_C_n, s_D_head, s_D_dim, s_z_tok, s_z_head, s_z_dim,
        mask_m, mask_mn, other, TIE_HDIM, HAS_DT_BIAS, HAS_D, HAS_Z)

    state, out = _ssu_rows_token(state, x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs, A, dt_bias, D,
                                 mask_m, mask_mn, other, TIE_HDIM, HAS_DT_BIAS, DT_SOFTPLUS, HAS_D, HAS_Z)
    if DST_IS_SRC or not HAS_INDICES:
        dst_slot = src_slot
    else:
        dst_slot = per_row(tl.load(dst_idx_ptr + reqs * s_dst_row).to(tl.int64), REQS, TILE)
    tl.store(state_ptr + dst_slot[:, None] * s_state_slot + tile, state.to(state_ptr.dtype.element_ty),
             mask=mask_mn)
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask_m)


__all__ = ["_ssu_requests_kernel", "per_row"]
