"""Mamba2's speculative decode step with its tokens unrolled: ``_ssu_spec_tokens``.

``mambalab.kernels.mamba_ssm._ssu_kernel`` calls it (where the rule ``mamba_ssm_kernels.SPEC_UNROLL`` takes the
launch: small batches) for a request of exactly ``SPEC_TOKENS`` tokens: the width of the 2-D index row, which every
request of a speculative step has (``num_speculative_tokens + 1``; vLLM 0.33's ``mamba_mixer2`` passes ``cu_seqlens`` and
``dst_state_batch_indices`` of that width). The maths and the stores are the token loop's, token for token, so the
results are bit-identical; what differs is when the loads go out.

In the token loop a token's loads (``x``, ``z``, ``B``, ``C``, ``dt`` and the store's slot) come after the previous
token's state store, and the compiler cannot move them above it (a store may alias a later load, for all it knows),
so every token waits a memory round trip before its arithmetic. Here the loads of token ``t + AHEAD`` are issued
before token ``t``'s update and store (``AHEAD`` up to ``SPEC_TOKENS - 1``: every load first), for the registers
that holding them costs. Each token's values need names of their own (a Triton kernel keeps no list of tensors), so
the four tokens are written out one by one.
"""

from __future__ import annotations

import mambalab  # noqa: F401  (sets TRITON_INTERPRET before any kernel is defined)

import triton
import triton.language as tl

from mambalab.kernels.common import is_live_slot
from mambalab.kernels.mamba_ssm_token import _ssu_token_inputs, _ssu_token_math


@triton.jit
def _spec_load(t, x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs, dst_ptr, s_x_tok, s_B_tok, s_C_tok, s_dt_tok, s_z_tok,
               s_dst_col, mask_m, mask_n, TIE_HDIM: tl.constexpr, HAS_Z: tl.constexpr):
    """Token ``t``'s inputs and its store slot (column ``t`` of the request's index row)."""
    x, z, B, C, dt = _ssu_token_inputs(x_ptrs + t * s_x_tok, B_ptrs + t * s_B_tok, C_ptrs + t * s_C_tok,
                                       dt_ptrs + t * s_dt_tok, z_ptrs + t * s_z_tok, mask_m, mask_n, TIE_HDIM, HAS_Z)
    return x, z, B, C, dt, tl.load(dst_ptr + t * s_dst_col).to(tl.int64)


@triton.jit
def _spec_step(state, t, x, z, B, C, dt, dst, A, dt_bias, D, state_tile_ptrs, s_state_slot, out_ptrs, s_out_tok,
               mask_m, mask_mn, null_block_id,
               TIE_HDIM: tl.constexpr, HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr, HAS_D: tl.constexpr,
               HAS_Z: tl.constexpr, FAST_SOFTPLUS: tl.constexpr, GUARD: tl.constexpr):
    """Token ``t``'s update from its loaded inputs; its state to slot ``dst`` (where the guard passes it) and its
    output rows: the token loop's body."""
    state, out = _ssu_token_math(state, x, z, B, C, dt, A, dt_bias, D, TIE_HDIM, HAS_DT_BIAS, DT_SOFTPLUS, HAS_D,
                                 HAS_Z, FAST_SOFTPLUS)
    if is_live_slot(dst, null_block_id, GUARD):
        tl.store(state_tile_ptrs + dst * s_state_slot, state.to(state_tile_ptrs.dtype.element_ty), mask=mask_mn)
    tl.store(out_ptrs + t * s_out_tok, out.to(out_ptrs.dtype.element_ty), mask=mask_m)
    return state


@triton.jit
def _ssu_spec_tokens(state, x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs, dst_ptr, state_tile_ptrs, out_ptrs,
                     s_x_tok, s_B_tok, s_C_tok, s_dt_tok, s_z_tok, s_dst_col, s_state_slot, s_out_tok,
                     A, dt_bias, D, mask_m, mask_n, mask_mn, null_block_id,
                     TOKENS: tl.constexpr, AHEAD: tl.constexpr,
                     TIE_HDIM: tl.constexpr, HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr,
                     HAS_D: tl.constexpr, HAS_Z: tl.constexpr, FAST_SOFTPLUS: tl.constexpr, GUARD: tl.constexpr):
    """``TOKENS`` (2 to 4) tokens of one request on the register tile ``state`` (fp32), token ``k``'s loads issued
    before token ``k - AHEAD``'s update (``AHEAD`` >= 1). ``state_tile_ptrs``: the tile's addresses in slot 0 of
    the head; ``dst_ptr``: the request's index row. Returns the state after the last token."""
    # loads ahead of the first update: tokens 0 .. AHEAD
    x0, z0, B0, C0, dt0, d0 = _spec_load(0, x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs, dst_ptr, s_x_tok, s_B_tok,
                                         s_C_tok, s_dt_tok, s_z_tok, s_dst_col, mask_m, mask_n, TIE_HDIM, HAS_Z)
    x1, z1, B1, C1, dt1, d1 = _spec_load(1, x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs, dst_ptr, s_x_tok, s_B_tok,
                                         s_C_tok, s_dt_tok, s_z_tok, s_dst_col, mask_m, mask_n, TIE_HDIM, HAS_Z)
    if TOKENS > 2:
        if AHEAD >= 2:
            x2, z2, B2, C2, dt2, d2 = _spec_load(2, x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs, dst_ptr, s_x_tok,
                                                 s_B_tok, s_C_tok, s_dt_tok, s_z_tok, s_dst_col, mask_m, mask_n,
                                                 TIE_HDIM, HAS_Z)
    if TOKENS > 3:
        if AHEAD >= 3:
            x3, z3, B3, C3, dt3, d3 = _spec_load(3, x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs, dst_ptr, s_x_tok,
                                                 s_B_tok, s_C_tok, s_dt_tok, s_z_tok, s_dst_col, mask_m, mask_n,
                                                 TIE_HDIM, HAS_Z)
    state = _spec_step(state, 0, x0, z0, B0, C0, dt0, d0, A, dt_bias, D, state_tile_ptrs, s_state_slot, out_ptrs,
                       s_out_tok, mask_m, mask_mn, null_block_id, TIE_HDIM, HAS_DT_BIAS, DT_SOFTPLUS, HAS_D, HAS_Z,
                       FAST_SOFTPLUS, GUARD)
    # token 1 + AHEAD's loads go out before token 1's update
    if TOKENS > 2:
        if AHEAD == 1:
            x2, z2, B2, C2, dt2, d2 = _spec_load(2, x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs, dst_ptr, s_x_tok,
                                                 s_B_tok, s_C_tok, s_dt_tok, s_z_tok, s_dst_col, mask_m, mask_n,
                                                 TIE_HDIM, HAS_Z)
    if TOKENS > 3:
        if AHEAD == 2:
            x3, z3, B3, C3, dt3, d3 = _spec_load(3, x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs, dst_ptr, s_x_tok,
                                                 s_B_tok, s_C_tok, s_dt_tok, s_z_tok, s_dst_col, mask_m, mask_n,
                                                 TIE_HDIM, HAS_Z)
    state = _spec_step(state, 1, x1, z1, B1, C1, dt1, d1, A, dt_bias, D, state_tile_ptrs, s_state_slot, out_ptrs,
                       s_out_tok, mask_m, mask_mn, null_block_id, TIE_HDIM, HAS_DT_BIAS, DT_SOFTPLUS, HAS_D, HAS_Z,
                       FAST_SOFTPLUS, GUARD)
    if TOKENS > 3:
        if AHEAD == 1:
            x3, z3, B3, C3, dt3, d3 = _spec_load(3, x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs, dst_ptr, s_x_tok,
                                                 s_B_tok, s_C_tok, s_dt_tok, s_z_tok, s_dst_col, mask_m, mask_n,
                                                 TIE_HDIM, HAS_Z)
    if TOKENS > 2:
        state = _spec_step(state, 2, x2, z2, B2, C2, dt2, d2, A, dt_bias, D, state_tile_ptrs, s_state_slot,
                           out_ptrs, s_out_tok, mask_m, mask_mn, null_block_id, TIE_HDIM, HAS_DT_BIAS, DT_SOFTPLUS,
                           HAS_D, HAS_Z, FAST_SOFTPLUS, GUARD)
    if TOKENS > 3:
        state = _spec_step(state, 3, x3, z3, B3, C3, dt3, d3, A, dt_bias, D, state_tile_ptrs, s_state_slot,
                           out_ptrs, s_out_tok, mask_m, mask_mn, null_block_id, TIE_HDIM, HAS_DT_BIAS, DT_SOFTPLUS,
                           HAS_D, HAS_Z, FAST_SOFTPLUS, GUARD)
    return state
