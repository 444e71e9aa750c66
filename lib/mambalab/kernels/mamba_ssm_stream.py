"""Mamba2's decode step, streamed: ``_ssu_stream_kernel``, and the token step every SSU kernel shares.

:func:`~mambalab.kernels.mamba_ssm.selective_state_update` picks the streaming kernel on a GPU where the rule
``mamba_ssm.SSU_STREAM`` says so (``A``/``dt`` per head, indexed state; an A/B switch, empty since issue 14's call
121: the capped token loop of ``_ssu_kernel`` beats it). It mirrors the same upstream kernel
as ``_ssu_kernel`` (vLLM 0.33's ``vllm/model_executor/layers/mamba/ops/mamba_ssm.py``,
``_selective_scan_update_kernel``) and gives the same results; what differs is how a program walks its state.

A program owns ``NB`` blocks of ``RB`` rows of one (request, head) state and walks them in a ``tl.range`` loop
with ``num_stages``: on a GPU Triton's pipeliner issues the next block's state load (an asynchronous copy into
shared memory) while this block is updated and stored, where ``_ssu_kernel``'s one block a program has nothing
in flight between its load and its store. A request of exactly ``TOKENS`` tokens (1 for a decode step; the
index row's width under speculative decoding) runs them unrolled on the block; one of any other length
(varlen) takes the token loop of ``_ssu_kernel`` in the same program.
"""

from __future__ import annotations

import mambalab  # noqa: F401  (sets TRITON_INTERPRET before any kernel is defined)

import triton
import triton.language as tl

from mambalab.kernels.common import is_live_slot
from mambalab.kernels.mamba_ssm_kernels import _softplus, _ssu_request_head, _ssu_src_slot


@triton.jit
def _ssu_token_inputs(x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs, mask_m, mask_n,
                      TIE_HDIM: tl.constexpr, HAS_Z: tl.constexpr):
    """One token's inputs as loaded (``x``, ``z``, ``B``, ``C``, ``dt``; ``z`` is ``x`` without a gate): the loads
    of :func:`_ssu_token`, apart so a caller can issue several tokens' loads before any store."""
    x = tl.load(x_ptrs, mask=mask_m, other=0.0)
    if HAS_Z:
        z = tl.load(z_ptrs, mask=mask_m, other=0.0)
    else:
        z = x  # never used (HAS_Z is off)
    B = tl.load(B_ptrs, mask=mask_n, other=0.0)
    C = tl.load(C_ptrs, mask=mask_n, other=0.0)
    if TIE_HDIM:
        dt = tl.load(dt_ptrs)  # one scalar per head
    else:
        dt = tl.load(dt_ptrs, mask=mask_m, other=0.0)
    return x, z, B, C, dt


@triton.jit
def _ssu_token_math(state, x, z, B, C, dt, A, dt_bias, D,
                    TIE_HDIM: tl.constexpr, HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr,
                    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, FAST_SOFTPLUS: tl.constexpr = False):
    """One token of the recurrence on a register tile, from its loaded inputs: (new state, output rows), fp32."""
    x = x.to(tl.float32)
    B = B.to(tl.float32)
    C = C.to(tl.float32)
    dt = dt.to(tl.float32)
    if HAS_DT_BIAS:
        dt += dt_bias
    if DT_SOFTPLUS:
        dt = _softplus(dt, FAST_SOFTPLUS)
    if TIE_HDIM:
        dA = tl.exp(A * dt)  # a scalar, not a tile
        dBx = (B * dt)[None, :] * x[:, None]
    else:
        # One exponential per state element: exp2 on the pre-scaled argument is one ex2.approx
        # instruction, where tl.exp goes through libdevice's range-checked expf (vLLM's
        # triton_helpers.fast_exp does the same). On an H200 this path ran at 78-80% of copy with
        # tl.exp against 86-89% for vLLM's kernel (docs/benchmarks.md, issue 14).
        # The per-row factors are formed first (dt * log2(e), dt * x: BLOCK_M values), so each state
        # element costs one multiply for dA and one for dBx, not two each (the kernel is issue-bound here).
        dA = tl.math.exp2(A * (dt * 1.4426950408889634)[:, None])
        dBx = B[None, :] * (dt * x)[:, None]
    state = state * dA + dBx
    out = tl.sum(state * C[None, :], axis=1)
    if HAS_D:
        out += D * x
    if HAS_Z:
        z = z.to(tl.float32)
        out *= z * tl.sigmoid(z)
    return state, out


@triton.jit
def _ssu_token(state, x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs, A, dt_bias, D, mask_m, mask_n,
               TIE_HDIM: tl.constexpr, HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr,
               HAS_D: tl.constexpr, HAS_Z: tl.constexpr, FAST_SOFTPLUS: tl.constexpr = False):
    """One token of the recurrence on a register tile: returns (new state, output rows), fp32. The gate ``z`` is
    loaded with ``x``, so its latency hides behind the state update (call 72, H200, bf16 state with ``z``: batch
    8 / 16 / 64 / 256 1.006 / 1.058 / 1.037 / 1.044 -> 1.063 / 1.102 / 1.072 / 1.074x of vLLM; fp32 even)."""
    x, z, B, C, dt = _ssu_token_inputs(x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs, mask_m, mask_n, TIE_HDIM, HAS_Z)
    return _ssu_token_math(state, x, z, B, C, dt, A, dt_bias, D, TIE_HDIM, HAS_DT_BIAS, DT_SOFTPLUS, HAS_D, HAS_Z,
                           FAST_SOFTPLUS)


@triton.jit
def _ssu_stream_kernel(
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
    USE_PDL: tl.constexpr = False,  # PDL, waiting first (no early state load here)
    RB: tl.constexpr = 4,  # rows of the head dim a block (RB * NB rows a program)
    NB: tl.constexpr = 1,  # blocks a program, walked by the pipelined loop
    STAGES: tl.constexpr = 1,  # the loop's num_stages (1: no prefetch)
    TOKENS: tl.constexpr = 1,  # the unrolled request length (1, or the index row's width)
    HEADS_FIRST: tl.constexpr = False,  # grid (row blocks, heads, requests), as _ssu_kernel's
    FAST_SOFTPLUS: tl.constexpr = False,  # as _ssu_kernel's
    HPG: tl.constexpr = 0,  # as _ssu_kernel's
):
    """``_ssu_kernel``'s arguments (the launch passes the same list; here ``TIE_HDIM`` and ``HAS_INDICES``),
    then the streaming shape."""
    pid_m = tl.program_id(0)
    pid_r, pid_h = _ssu_request_head(HEADS_FIRST)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    if IS_VARLEN:
        bos = tl.load(cu_seqlens_ptr + pid_r).to(tl.int64)
        seq_len = tl.load(cu_seqlens_ptr + pid_r + 1).to(tl.int64) - bos
        if seq_len == 0:  # a request with no tokens this step: nothing to read or write
            return
    else:
        bos = pid_r.to(tl.int64) * tokens_per_request
        seq_len = tokens_per_request
    out_ptr0 = out_ptr + bos * s_out_tok + pid_h * s_out_head

    # -- the initial state's slot and the guard (as _ssu_kernel) ---------------------------------------------
    src_slot = _ssu_src_slot(src_idx_ptr, num_accepted_ptr, pid_r, s_src_row, s_src_col, src_cols,
                             HAS_NUM_ACCEPTED, CLAMP_ACCEPTED)
    if not is_live_slot(src_slot, null_block_id, GUARD):
        for blk in tl.static_range(NB):  # a padded row: zero outputs, no state traffic
            offs_z = (pid_m * NB + blk) * RB + tl.arange(0, RB)
            t = tl.zeros([], dtype=tl.int32)
            while t < seq_len:
                tl.store(out_ptr0 + t * s_out_tok + offs_z * s_out_dim,
                         tl.zeros([RB], dtype=tl.float32).to(out_ptr.dtype.element_ty), mask=offs_z < dim)
                t += 1
        return

    offs_n = tl.arange(0, BLOCK_N)
    mask_n = offs_n < dstate
    group = pid_h // (HPG if HPG else heads_per_group)  # HPG: a shift, not a runtime division
    B_ptrs = B_ptr + bos * s_B_tok + group * s_B_group + offs_n * s_B_n
    C_ptrs = C_ptr + bos * s_C_tok + group * s_C_group + offs_n * s_C_n
    dt_ptrs = dt_ptr + bos * s_dt_tok + pid_h * s_dt_head
    A = tl.load(A_ptr + pid_h * s_A_head).to(tl.float32)  # A, dt, dt_bias one scalar a head (TIE_HDIM)
    if HAS_DT_BIAS:
        dt_bias = tl.load(dt_bias_ptr + pid_h * s_dtb_head).to(tl.float32)
    else:
        dt_bias = 0.0
    head_state_ptr = state_ptr + pid_h * s_state_head
    x_ptr0 = x_ptr + bos * s_x_tok + pid_h * s_x_head
    if HAS_Z:
        z_ptr0 = z_ptr + bos * s_z_tok + pid_h * s_z_head
    else:
        z_ptr0 = x_ptr0  # never dereferenced (HAS_Z is off)
    if seq_len == TOKENS:
        for blk in tl.range(0, NB, num_stages=STAGES):
            offs_m = (pid_m * NB + blk) * RB + tl.arange(0, RB)
            mask_m = offs_m < dim
            mask_mn = mask_m[:, None] & mask_n[None, :]
            tile = offs_m[:, None] * s_state_dim + offs_n[None, :] * s_state_n
            state = tl.load(head_state_ptr + src_slot * s_state_slot + tile, mask=mask_mn, other=0.0)
            state = state.to(tl.float32)
            if HAS_D:
                D = tl.load(D_ptr + pid_h * s_D_head + offs_m * s_D_dim, mask=mask_m, other=0.0).to(tl.float32)
            else:
                D = 0.0
            for t in tl.static_range(TOKENS):
                state, out = _ssu_token(state, x_ptr0 + t * s_x_tok + offs_m * s_x_dim, B_ptrs + t * s_B_tok,
                                        C_ptrs + t * s_C_tok, dt_ptrs + t * s_dt_tok,
                                        z_ptr0 + t * s_z_tok + offs_m * s_z_dim, A, dt_bias, D,
                                        mask_m, mask_n, True, HAS_DT_BIAS, DT_SOFTPLUS, HAS_D, HAS_Z,
                                        FAST_SOFTPLUS)
                if ONE_TOKEN:
                    if DST_IS_SRC:
                        tl.store(head_state_ptr + src_slot * s_state_slot + tile,
                                 state.to(state_ptr.dtype.element_ty), mask=mask_mn)
                    else:
                        dst_slot = tl.load(dst_idx_ptr + pid_r * s_dst_row).to(tl.int64)
                        if is_live_slot(dst_slot, null_block_id, GUARD):
                            tl.store(head_state_ptr + dst_slot * s_state_slot + tile,
                                     state.to(state_ptr.dtype.element_ty), mask=mask_mn)
                elif t < dst_cols:  # the state after token t -> column t
                    dst_slot = tl.load(dst_idx_ptr + pid_r * s_dst_row + t * s_dst_col).to(tl.int64)
                    if is_live_slot(dst_slot, null_block_id, GUARD):
                        tl.store(head_state_ptr + dst_slot * s_state_slot + tile,
                                 state.to(state_ptr.dtype.element_ty), mask=mask_mn)
                tl.store(out_ptr0 + t * s_out_tok + offs_m * s_out_dim, out.to(out_ptr.dtype.element_ty),
                         mask=mask_m)
    else:
        # a request of another length (varlen): _ssu_kernel's token loop, block by block
        for blk in tl.static_range(NB):
            offs_m = (pid_m * NB + blk) * RB + tl.arange(0, RB)
            mask_m = offs_m < dim
            mask_mn = mask_m[:, None] & mask_n[None, :]
            tile = offs_m[:, None] * s_state_dim + offs_n[None, :] * s_state_n
            state = tl.load(head_state_ptr + src_slot * s_state_slot + tile, mask=mask_mn, other=0.0)
            state = state.to(tl.float32)
            if HAS_D:
                D = tl.load(D_ptr + pid_h * s_D_head + offs_m * s_D_dim, mask=mask_m, other=0.0).to(tl.float32)
            else:
                D = 0.0
            t = tl.zeros([], dtype=tl.int32)
            while t < seq_len:
                state, out = _ssu_token(state, x_ptr0 + t * s_x_tok + offs_m * s_x_dim, B_ptrs + t * s_B_tok,
                                        C_ptrs + t * s_C_tok, dt_ptrs + t * s_dt_tok,
                                        z_ptr0 + t * s_z_tok + offs_m * s_z_dim, A, dt_bias, D,
                                        mask_m, mask_n, True, HAS_DT_BIAS, DT_SOFTPLUS, HAS_D, HAS_Z,
                                        FAST_SOFTPLUS)
                if t < dst_cols:
                    dst_slot = tl.load(dst_idx_ptr + pid_r * s_dst_row + t * s_dst_col).to(tl.int64)
                    if is_live_slot(dst_slot, null_block_id, GUARD):
                        tl.store(head_state_ptr + dst_slot * s_state_slot + tile,
                                 state.to(state_ptr.dtype.element_ty), mask=mask_mn)
                tl.store(out_ptr0 + t * s_out_tok + offs_m * s_out_dim, out.to(out_ptr.dtype.element_ty),
                         mask=mask_m)
                t += 1
