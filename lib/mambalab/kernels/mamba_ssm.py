"""Mamba2's decode step as a Triton kernel: ``selective_state_update``.

Mirrors vLLM's ``vllm/model_executor/layers/mamba/ops/mamba_ssm.py`` (same arguments, same maths, same way of
finding a request's state in the pool), so a learner can swap one for the other. The maths, the index rules and
the guard: :mod:`mambalab.kernels.mamba_ssm_ref`, the pure-torch reference this kernel is tested against.

What the guard does here (one ``tl.constexpr``, from the bug configuration
and this kernel's family, :class:`~mambalab.lab.bugs.KernelFamily` MAMBA):

================  ==========================  ===============================
mode              source index skipped when   a skipped request ...
================  ==========================  ===============================
EQ_NULL (fixed,   ``== null_block_id``        reads nothing, stores nothing,
as vLLM 0.33)                                 output rows are **zeros**; a
                                              negative index is *not* skipped:
                                              it reaches address arithmetic
                                              (upstream masks
                                              ``!= null_block_id``)
NONE (#35431      never                       -- a ``-1`` reaches address
world)                                        arithmetic: on the interpreter
                                              the sanitizer raises
                                              ``IllegalMemoryAccess``, on a
                                              GPU it is an illegal address
================  ==========================  ===============================

(``guard-lt-zero``, #39064, changed only the FLA kernels: the SSU compares with the null block since #35431 itself.
The kernel still honours the other modes when launched with them, for the tests and drawings.)

The initial-state column under speculative decoding is ``max(num_accepted - 1, 0)`` as upstream has always had it
(there is no pre-fix world: ``zero-accepted`` is about the GDN kernels); the upper bound ``min(., C - 1)`` is ours
(the open #50021 adds one upstream).

A store column (``dst_state_batch_indices[r, t]``) the guard rejects skips that one store; the output of the token is
still computed and written.

A plain decode step (one token per request, the state stored back where it was read: ``ONE_TOKEN``,
``DST_IS_SRC``) runs straight through, without the token loop that speculative and varlen calls need.

Launch configuration (no autotune: autotuning would re-run the kernel on live state and apply the update several
times) is chosen by a rule, see :func:`choose_launch_config` (and, where another card measured other shapes than the
H200, :mod:`.mamba_ssm_devices`). Under the CPU interpreter a program takes several heads of a request
(``LaunchConfig.block_h``, :mod:`mambalab.kernels.mamba_ssm_kernels`): the same results, half the programs or fewer.
Where its rule says so (the H200 at a few requests), a decode runs on :mod:`.mamba_ssm_tma`'s CUDA kernel instead."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

import mambalab  # noqa: F401  (sets TRITON_INTERPRET before any kernel is defined)

import torch
import triton
import triton.language as tl

from mambalab.lab import sanitizer
from mambalab.lab.bugs import BugConfig
from mambalab.constants import NULL_BLOCK_ID
from mambalab.device import INTERPRET
from mambalab.kernels.common import (KernelFamily, guard_for, is_live_slot, prefetch_rows_l2, requests_a_program,
                                     use_pdl)
from mambalab.kernels import mamba_ssm_kernels, mamba_ssm_tma
from mambalab.kernels.mamba_ssm_devices import ssu_device_rule, ssu_early_half, ssu_early_slot, ssu_untied_warps
from mambalab.kernels.mamba_ssm_kernels import _ssu_heads_kernel, _ssu_request_head, _ssu_src_slot
from mambalab.kernels.mamba_ssm_requests import _ssu_requests_kernel
from mambalab.kernels.mamba_ssm_spec import _ssu_spec_tokens
from mambalab.kernels.mamba_ssm_token import _ssu_token
from mambalab.kernels.mamba_ssm_untied import _ssu_untied_reqs_kernel, untied_reqs
from mambalab.kernels.mamba_ssm_ref import is_tied, prepare_ssu_inputs

KERNEL_NAME = "selective_state_update"


@triton.jit
def _ssu_kernel(
    # pointers
    state_ptr, x_ptr, dt_ptr, dt_bias_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, out_ptr,
    src_idx_ptr, dst_idx_ptr, num_accepted_ptr, cu_seqlens_ptr,
    # scalars
    null_block_id, src_cols, dst_cols, tokens_per_request,
    dim, dstate, heads_per_group,
    # strides
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
    # compile-time switches
    DT_SOFTPLUS: tl.constexpr,
    TIE_HDIM: tl.constexpr,  # A, dt, dt_bias constant along dim/dstate: one scalar per head
    HAS_DT_BIAS: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_INDICES: tl.constexpr,
    HAS_NUM_ACCEPTED: tl.constexpr,
    IS_VARLEN: tl.constexpr,
    ONE_TOKEN: tl.constexpr,  # one token per request, initial state from column 0: no token loop
    DST_IS_SRC: tl.constexpr,  # the store indices are the load indices (no second index load)
    GUARD: tl.constexpr,  # mambalab.lab.bugs.GuardMode
    CLAMP_ACCEPTED: tl.constexpr,  # always True: the SSU has always clamped num_accepted - 1
    BLOCK_M: tl.constexpr,  # rows of the head dim per program
    BLOCK_N: tl.constexpr,  # next_power_of_2(dstate): the whole state row
    USE_PDL: tl.constexpr = False,  # programmatic dependent launch (GPU, sm_90+; off on the interpreter)
    EARLY_STATE: tl.constexpr = False,  # under PDL: indices and state read before the wait (see below)
    EARLY_HALF: tl.constexpr = False,  # with EARLY_STATE, a GPU only: the odd row blocks' state after the wait
    PREFETCH: tl.constexpr = 0,  # under PDL, one token: an L2 hint for the state tile before the wait (2: evict_last)
    EARLY_DST: tl.constexpr = False,  # several tokens: each store's slot loaded with the token's inputs
    HEADS_FIRST: tl.constexpr = False,  # grid (row blocks, heads, requests): a slot's heads run together
    FAST_SOFTPLUS: tl.constexpr = False,  # softplus on the approximate exp2 / lg2 (a GPU only: FAST_SOFTPLUS)
    HPG: tl.constexpr = 0,  # heads_per_group as a constant (0: the runtime argument): HPG_CONSTEXPR
    SPEC_TOKENS: tl.constexpr = 0,  # > 0: a request of this many tokens runs them unrolled (ssu_kernel_options)
    SPEC_AHEAD: tl.constexpr = 1,  # ... with token t + SPEC_AHEAD's loads issued before token t's update
    ZIGZAG: tl.constexpr = False,  # with HEADS_FIRST, the requests in the order 0, n-1, 1, ... (common.program_row)
    EARLY_SLOT: tl.constexpr = False,  # under PDL without EARLY_STATE: only the source slot read before the wait
):
    # One program: BLOCK_M rows (of the head dim) x all of dstate, for one
    # request (axis 1) and one head (axis 2). It keeps its state tile in
    # registers, in float32, for all the request's tokens.
    pid_m = tl.program_id(0)
    pid_r, pid_h = _ssu_request_head(HEADS_FIRST, ZIGZAG)
    if USE_PDL:
        # Programmatic dependent launch (as vLLM's causal_conv1d does): let the next launch's programs be
        # scheduled now, then wait until every earlier launch has finished and its writes are visible.
        # Without EARLY_STATE nothing is read before the wait, so the order of reads and writes is the one
        # without PDL; what overlaps is the launch of this grid with the tail of the previous one.
        tl.extra.cuda.gdc_launch_dependents()
        # The source slot read before the wait (early_state_load's promise): PREFETCH's hint goes there (the state's
        # slot read again after it; reusing this one was no faster, call 276); under EARLY_SLOT it is the slot used.
        if PREFETCH or EARLY_SLOT:
            slot_early = _ssu_src_slot(src_idx_ptr, num_accepted_ptr, pid_r, s_src_row, s_src_col, src_cols,
                                       HAS_NUM_ACCEPTED, CLAMP_ACCEPTED)
        if PREFETCH:  # an L2 hint for the state tile
            if is_live_slot(slot_early, null_block_id, GUARD):
                rows = tl.minimum(pid_m * BLOCK_M + tl.arange(0, BLOCK_M), dim - 1)
                prefetch_rows_l2(state_ptr + slot_early * s_state_slot + pid_h * s_state_head, rows, s_state_dim,
                                 s_state_n, BLOCK_N, PREFETCH == 2)
        if not EARLY_STATE:
            tl.extra.cuda.gdc_wait()
    # EARLY_STATE (only with USE_PDL): the metadata (indices, num_accepted, cu_seqlens), the state tile and the
    # head's parameters (A, dt_bias, D) are read before the wait, overlapping the previous kernel's tail;
    # everything the previous kernel may have written (x, dt, B, C, z) is read, and every store made, after it.
    # Correct only under the promise the wrapper's ``early_state_load`` takes (no kernel still running writes
    # this state pool or the metadata; the parameters are weights, which no kernel writes).

    # -- which tokens belong to this request --------------------------------
    if IS_VARLEN:
        bos = tl.load(cu_seqlens_ptr + pid_r).to(tl.int64)
        seq_len = tl.load(cu_seqlens_ptr + pid_r + 1).to(tl.int64) - bos
        if seq_len == 0:  # a request with no tokens this step: nothing to read or write
            return
    else:
        bos = pid_r.to(tl.int64) * tokens_per_request
        seq_len = tokens_per_request

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    mask_m = offs_m < dim
    mask_mn = mask_m[:, None] & (offs_n < dstate)[None, :]
    out_ptrs = out_ptr + bos * s_out_tok + pid_h * s_out_head + offs_m * s_out_dim

    # -- where the initial state comes from (and the guard) -------------------
    if HAS_INDICES:
        src_slot = slot_early if EARLY_SLOT else _ssu_src_slot(src_idx_ptr, num_accepted_ptr, pid_r, s_src_row,
                                                               s_src_col, src_cols, HAS_NUM_ACCEPTED, CLAMP_ACCEPTED)
        if not is_live_slot(src_slot, null_block_id, GUARD):
            # A padded row: zero its outputs and leave, before touching state.
            # This is what makes padding cheap (a few bytes per program).
            if USE_PDL:
                if EARLY_STATE:
                    tl.extra.cuda.gdc_wait()
            zeros = tl.zeros([BLOCK_M], dtype=tl.float32).to(out_ptr.dtype.element_ty)
            t = tl.zeros([], dtype=tl.int32)
            while t < seq_len:
                tl.store(out_ptrs + t * s_out_tok, zeros, mask=mask_m)
                t += 1
            return
    else:
        src_slot = pid_r.to(tl.int64)

    tile = offs_m[:, None] * s_state_dim + offs_n[None, :] * s_state_n
    head_state_ptr = state_ptr + pid_h * s_state_head
    if EARLY_HALF:  # the even row blocks now, the odd ones after the wait (mamba_ssm_devices.SSU_EARLY_HALF)
        state = tl.load(head_state_ptr + src_slot * s_state_slot + tile, mask=mask_mn & (pid_m % 2 == 0), other=0.0)
    else:
        state = tl.load(head_state_ptr + src_slot * s_state_slot + tile, mask=mask_mn, other=0.0).to(tl.float32)

    # -- per-head parameters (constant over the tokens) ------------------------
    group = pid_h // (HPG if HPG else heads_per_group)  # HPG: a shift, not a runtime division
    B_ptrs = B_ptr + bos * s_B_tok + group * s_B_group + offs_n * s_B_n
    C_ptrs = C_ptr + bos * s_C_tok + group * s_C_group + offs_n * s_C_n
    x_ptrs = x_ptr + bos * s_x_tok + pid_h * s_x_head + offs_m * s_x_dim
    mask_n = offs_n < dstate
    if TIE_HDIM:
        A = tl.load(A_ptr + pid_h * s_A_head).to(tl.float32)
        dt_ptrs = dt_ptr + bos * s_dt_tok + pid_h * s_dt_head
        if HAS_DT_BIAS:
            dt_bias = tl.load(dt_bias_ptr + pid_h * s_dtb_head).to(tl.float32)
        else:
            dt_bias = 0.0  # unused (HAS_DT_BIAS is off): only so every name is bound
    else:
        A_ptrs = A_ptr + pid_h * s_A_head + offs_m[:, None] * s_A_dim + offs_n[None, :] * s_A_n
        A = tl.load(A_ptrs, mask=mask_mn, other=0.0).to(tl.float32)
        dt_ptrs = dt_ptr + bos * s_dt_tok + pid_h * s_dt_head + offs_m * s_dt_dim
        if HAS_DT_BIAS:
            dt_bias_ptrs = dt_bias_ptr + pid_h * s_dtb_head + offs_m * s_dtb_dim
            dt_bias = tl.load(dt_bias_ptrs, mask=mask_m, other=0.0).to(tl.float32)
        else:
            dt_bias = 0.0
    if HAS_D:
        D = tl.load(D_ptr + pid_h * s_D_head + offs_m * s_D_dim, mask=mask_m, other=0.0)
        D = D.to(tl.float32)
    else:
        D = 0.0
    if USE_PDL:
        if EARLY_STATE:  # the parameters went out with the state (call 73: A per element, batch 1 0.91 -> 1.23x)
            tl.extra.cuda.gdc_wait()
    if EARLY_HALF:
        if pid_m % 2 == 1:
            state = tl.load(head_state_ptr + src_slot * s_state_slot + tile, mask=mask_mn, other=0.0)
        state = state.to(tl.float32)
    if HAS_Z:
        z_ptrs = z_ptr + bos * s_z_tok + pid_h * s_z_head + offs_m * s_z_dim
    else:
        z_ptrs = x_ptrs  # never dereferenced (HAS_Z is off)

    # -- the recurrence ------------------------------------------------------------
    if ONE_TOKEN:
        # The decode step proper (one token, its state back to its own slot): no
        # loop, so the compiler keeps one register layout from load to store.
        state, out = _ssu_token(state, x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs, A, dt_bias, D,
                                mask_m, mask_n, TIE_HDIM, HAS_DT_BIAS, DT_SOFTPLUS, HAS_D, HAS_Z, FAST_SOFTPLUS)
        if DST_IS_SRC:
            dst_slot = src_slot  # the same index tensor: the guard already passed it
            dst_live = True
        elif HAS_INDICES:
            dst_slot = tl.load(dst_idx_ptr + pid_r * s_dst_row).to(tl.int64)
            dst_live = is_live_slot(dst_slot, null_block_id, GUARD)
        else:
            dst_slot = src_slot
            dst_live = True
        if dst_live:
            tl.store(head_state_ptr + dst_slot * s_state_slot + tile,
                     state.to(state_ptr.dtype.element_ty), mask=mask_mn)
        tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask_m)
    else:
        # Several tokens (speculative decoding, varlen): the state stays in
        # float32 registers from token to token.
        # (``while``, not ``for t in range(seq_len)``: Triton 3.6's interpreter
        # cannot take a runtime loop bound under NumPy 2.)
        t = tl.zeros([], dtype=tl.int32)
        if SPEC_TOKENS > 0:  # a speculative step's request: tokens unrolled, loads ahead (mamba_ssm_spec.py)
            if seq_len == SPEC_TOKENS:
                state = _ssu_spec_tokens(state, x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs,
                                         dst_idx_ptr + pid_r * s_dst_row, head_state_ptr + tile, out_ptrs, s_x_tok,
                                         s_B_tok, s_C_tok, s_dt_tok, s_z_tok, s_dst_col, s_state_slot, s_out_tok, A,
                                         dt_bias, D, mask_m, mask_n, mask_mn, null_block_id, SPEC_TOKENS, SPEC_AHEAD,
                                         TIE_HDIM, HAS_DT_BIAS, DT_SOFTPLUS, HAS_D, HAS_Z, FAST_SOFTPLUS, GUARD)
                t += SPEC_TOKENS
        while t < seq_len:
            if EARLY_DST:  # the store's slot loaded with the token's inputs, masked to the index row
                dst_early = tl.load(dst_idx_ptr + pid_r * s_dst_row + t * s_dst_col, mask=t < dst_cols, other=0)
            state, out = _ssu_token(state, x_ptrs + t * s_x_tok, B_ptrs + t * s_B_tok, C_ptrs + t * s_C_tok,
                                    dt_ptrs + t * s_dt_tok, z_ptrs + t * s_z_tok, A, dt_bias, D,
                                    mask_m, mask_n, TIE_HDIM, HAS_DT_BIAS, DT_SOFTPLUS, HAS_D, HAS_Z, FAST_SOFTPLUS)
            # Store the state after token t: in place (no indices), or to column t.
            if HAS_INDICES:
                if t < dst_cols:
                    if EARLY_DST:
                        dst_slot = dst_early.to(tl.int64)
                    else:
                        dst_slot = tl.load(dst_idx_ptr + pid_r * s_dst_row + t * s_dst_col).to(tl.int64)
                    if is_live_slot(dst_slot, null_block_id, GUARD):
                        tl.store(head_state_ptr + dst_slot * s_state_slot + tile,
                                 state.to(state_ptr.dtype.element_ty), mask=mask_mn)
            else:
                tl.store(head_state_ptr + src_slot * s_state_slot + tile,
                         state.to(state_ptr.dtype.element_ty), mask=mask_mn)
            tl.store(out_ptrs + t * s_out_tok, out.to(out_ptr.dtype.element_ty), mask=mask_m)
            t += 1


# -- launch configuration ------------------------------------------------------


@dataclass(frozen=True)
class LaunchConfig:
    """Tile height (rows of the head dim per program), warps per program and heads per program.

    ``block_h``: 1 is the one-head kernel (every GPU launch); more stacks that many heads of a request in
    one program (:mod:`mambalab.kernels.mamba_ssm_kernels`, the interpreter's launch); it must divide nheads.
    """

    block_m: int
    num_warps: int
    block_h: int = 1

    def __post_init__(self) -> None:
        if self.block_m < 1 or self.block_m & (self.block_m - 1):
            raise ValueError(f"block_m must be a power of two, got {self.block_m}")
        if self.block_h < 1 or self.block_h & (self.block_h - 1):
            raise ValueError(f"block_h must be a power of two, got {self.block_h}")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ValueError(f"num_warps must be 1, 2, 4, 8 or 16, got {self.num_warps}")


# The launch table (no autotune: it would re-run the kernel on live state), measured on an H200 at the
# kernels.md shapes against vLLM 0.33's tuned kernel in the same process (scripts/tune_launch.py;
# docs/benchmarks.md, issue 14). One warp per program everywhere: many small independent programs keep
# more loads in flight per SM than fewer wide ones. Rows of the head dim per program (BLOCK_M):
#   one token a request, A/dt per head (mamba_mixer2's decode call, "tied"):
#       16 rows (4 KiB bf16); fp32 state 8 rows while requests x heads < TIED_SMALL_EFFECTIVE_BATCH (batch 1 at 128
#       heads; with the heads-first grid, calls 71 and 74: batch 1 8 rows 1.31x, 16 1.27x, 4 rows 1.24x; batch 2 / 3 /
#       4 / 6 16 rows 1.22 / 1.14 / 1.07 / 1.06x against 8 rows' 1.15 / 0.99 / 1.00 / 1.06x); fp32 activations too
#       (call 74: 8 rows lost padded batches under the heads-first grid, 9 -> 16 0.867x against 16 rows' 1.033x)
#   several tokens a request (speculative decoding, varlen): fp32 8 rows, bf16 16 rows
#   A/dt per element ("untied": a full A tile and one exp per element, more registers): UNTIED_BLOCK_M
BLOCK_M_TIED, BLOCK_M_TIED_SMALL, BLOCK_M_MULTI_TOKEN = {4: 16, 2: 16}, {4: 8, 2: 16}, {4: 8, 2: 16}
# One token, A/dt per head, fp32 state, requests x heads in [lo, hi]: (rows, warps). Call 143 (beside vLLM, in the
# bench / after a torch kernel; issue14-call143-tiles.txt): batch 4 1.036 / 0.968 -> 1.083 / 0.985x (fp32 activations
# 1.071 / 0.966 -> 1.081 / 0.994x), 8 with z 1.024 / 0.986 -> 1.067 / 1.033x, 8 without even; 2 and 9 -> 16 slower.
TIED_MID_FP32 = (3 * 128, 8 * 128, 8, 2)
# Several tokens, requests x heads < SMALL_EFFECTIVE_BATCH: as above (4 rows lose at batch 8, call 10), 4 rows up to
# MULTI_TOKEN_TINY (batch 1: T = 2-4 +3-18%, call 47; docs/benchmarks.md, issue14-call{10,47}-*.txt).
BLOCK_M_MULTI_TOKEN_SMALL = {4: 8, 2: 16}
BLOCK_M_MULTI_TOKEN_TINY, MULTI_TOKEN_TINY = {4: 4, 2: 4}, 128
UNTIED_BLOCK_M = {4: 4, 2: 8}
# A/dt per element, small: fp32 4 rows (calls 60-61: batch 2 / 4 / 9 +4-6% over 2 rows), bf16 8 (2 / 4 / 16 slower);
# tiny (rows, up to request x heads; call 72): fp32 8 at batch 1 / 2 (0.963 / 0.993 -> 0.989 / 1.060x), bf16 4 at 1.
UNTIED_BLOCK_M_SMALL, UNTIED_BLOCK_M_TINY = {4: 4, 2: 8}, {4: (8, 2 * 128), 2: (4, 128)}
UNTIED_NUM_WARPS = {4: 1, 2: 1}  # warps a program, A/dt per element (not SMALL), by state element size
SMALL_EFFECTIVE_BATCH, TIED_SMALL_EFFECTIVE_BATCH, NUM_WARPS = 8 * 128, 2 * 128, 1
# The early state load (``early_state_load``: indices, state and the head's parameters read before PDL's wait): a gain
# only while the launch is a latency-bound chain, so up to these request x heads (batch 4 one token, 8 speculative).
# One token bf16 batch 1 1.04 -> 1.60x, fp32 0.95 -> 1.14x (call 15). A/dt per element (call 73, with the parameters
# early; without them to 0.72x): fp32 batch 1 / 2 0.913 / 1.046 -> 1.225 / 1.115x (4: 1.017 -> 1.006x, so not), bf16
# 2 / 4 0.987 / 1.222 -> 1.289 / 1.398x. Parameters early, A/dt per head: T = 2 / 4 at 8 bf16 +2%, fp32 batch 2 -2.5%.
EARLY_STATE_LOAD = True  # honour early_state_load (False: every launch waits first, as without the promise)
EARLY_STATE_MAX_REQUEST_HEADS, EARLY_STATE_MAX_REQUEST_HEADS_MULTI_TOKEN = 4 * 128, 8 * 128
EARLY_STATE_MAX_UNTIED = {4: 2 * 128, 2: 4 * 128}  # A/dt per element, one token, by state element size
# The grid's order (calls 69-78, beside vLLM): (row blocks, heads, requests) where a program takes one head, so
# programs running together walk one slot's heads in order: fp32 state everywhere (H200 batch 16-256 +4-6%, T = 2 / 4
# at 64 +6%) and bf16 with A/dt per element (one token: H100 64 / 256 / 512 0.993 / 0.979 / 0.978 -> 1.026 / 1.003 /
# 1.026x, 9 -> 16 1.060 -> 0.977x, call 79). Not bf16's one-token kernel otherwise: +1-2.5%
# unpadded (64 / 256), but a CUDA graph's padded rows (the batch's end) then run as a tail after the live ones: 9 -> 16
# 1.408 -> 1.140x (H200), 1.106 -> 0.933x (H100); nor its token loop (T = 3 at 64 -2%). docs/benchmarks.md, "Heads
# before requests". With the zigzag below, an H100 takes it for bf16's one-token kernel too (mamba_ssm_devices).
HEADS_FIRST_GRID = True
# With it, on a GPU, the requests zigzagged (common.program_row): padded rows not a tail (call 126,
# issue14-call126-zigzag.txt): fp32 9 -> 16 1.057 / 1.059 -> 1.067 / 1.081x, 257 -> 272 +1%, unpadded even.
ZIGZAG_ROWS = True
SPEC_EARLY_DST_MAX = 8 * 128  # several tokens: store slots loaded with the inputs up to this request x heads (call 64)
EARLY_STATE_PDL_SMALL_FP32 = True  # with the promise, the small fp32 tiles launch with PDL too
PDL_FP32_NO_PDL_BLOCK_M = 4  # fp32 state: tiles of this many rows or fewer launch without PDL (per element: call 112)
# The L2 hint before PDL's wait (PREFETCH: kernels.common.prefetch_rows_l2), one token a request with indices, under
# the early_state_load promise, by state element size: (mode, fewest, most request x heads); mode 1 plain, 2
# L2::evict_last. bf16 mode 2 on an H200: batch 32-512 +2-4% (64 1.043 -> 1.075x); fp32 1-3% slower, so not
# (calls 41-42, issue14-call4{1,2}-*.txt; docs/benchmarks.md, "The SSU's L2 hint before PDL's wait"). It pays in the
# bench only at 8-16: after the conv (a layer) 1.3-2.2% slower, from 64 2-3.5% faster (calls 189-190, H200). From
# 17 x 128 (call 191, issue14-call191-ssu-hint-range.txt): layer pairs at 8 / 16 1.143 / 1.125 -> 1.164 / 1.144x (z
# 1.105 -> 1.165x), after a torch kernel 8 0.933 -> 0.978x; the bench at 8 / 9 -> 16 1.071 / 1.416 -> 1.055 / 1.381x.
# An H100 keeps it from 1 (call 193; its rule's prefetch_min, mamba_ssm_devices).
PREFETCH_STATE: dict[int, tuple[int, int, int]] = {2: (2, 17 * 128, 1 << 30)}
# Several tokens (call 43, H200, issue14-call43-ab-spec-hint.txt): bf16 T = 3 / 4 at 16-256 0.2-0.9% faster, mode 1.
PREFETCH_STATE_MULTI_TOKEN: dict[int, tuple[int, int, int]] = {2: (1, 1, 1 << 30)}
# A/dt per element (call 44, issue14-call44-ab-untied-hint.txt): bf16 batch 8 1.165 -> 1.239x, 16-512 slower.
PREFETCH_STATE_UNTIED: dict[int, tuple[int, int, int]] = {2: (2, 1, 8 * 128)}


_override: LaunchConfig | None = None


def choose_launch_config(
    nheads: int, dim: int, dstate: int, num_requests: int, state_dtype: torch.dtype,
    device: torch.device | None = None, *, tied: bool = True, multi_token: bool = False,
) -> LaunchConfig:
    """The launch rule (the table above; no autotune: it would re-run the kernel on live state).

    * The tile covers the whole (padded) ``dstate`` row, so a warp reads
      contiguous, 16-byte-vectorised state rows (``stride(-1) == 1``).
    * ``BLOCK_M`` rows of the head dim per program, one warp, from the table:
      by state element size, by whether ``A``/``dt`` are per head (``tied``),
      by one token or several a request (``multi_token``), and for fp32 by the
      effective batch (requests x heads).

    On the interpreter (no GPU) the whole head is one tile and a program
    takes the largest power of two of heads that divides ``nheads`` (all of
    them for a power of two): its cost is programs x ops, whatever a tile's
    size (a one-token launch whose requests are all live takes them all in
    one: :mod:`.mamba_ssm_requests`). :func:`launch_config_override` pins a configuration (benchmarks,
    tests of the multi-tile and one-head paths).
    """
    if _override is not None:
        return _override
    elem = torch.empty((), dtype=state_dtype).element_size()
    dim_p2 = triton.next_power_of_2(dim)
    if INTERPRET or device is None or device.type != "cuda":
        return LaunchConfig(block_m=dim_p2, num_warps=4, block_h=nheads & -nheads)
    size = 4 if elem >= 4 else 2
    small = num_requests * nheads < SMALL_EFFECTIVE_BATCH
    if not tied:
        block_m, warps = (UNTIED_BLOCK_M_SMALL[size], NUM_WARPS) if small else (UNTIED_BLOCK_M[size],
                                                                                 UNTIED_NUM_WARPS[size])
        block_m = UNTIED_BLOCK_M_TINY[size][0] if num_requests * nheads <= UNTIED_BLOCK_M_TINY[size][1] else block_m
        return LaunchConfig(block_m=min(block_m, dim_p2), num_warps=warps)
    elif multi_token:
        table = BLOCK_M_MULTI_TOKEN_SMALL if small else BLOCK_M_MULTI_TOKEN
        block_m = (BLOCK_M_MULTI_TOKEN_TINY if num_requests * nheads <= MULTI_TOKEN_TINY else table)[size]
    elif size == 4 and TIED_MID_FP32[0] <= num_requests * nheads <= TIED_MID_FP32[1]:
        return LaunchConfig(block_m=min(TIED_MID_FP32[2], dim_p2), num_warps=TIED_MID_FP32[3])
    else:
        block_m = (BLOCK_M_TIED_SMALL if num_requests * nheads < TIED_SMALL_EFFECTIVE_BATCH else BLOCK_M_TIED)[size]
    return LaunchConfig(block_m=min(block_m, dim_p2), num_warps=NUM_WARPS)


@contextlib.contextmanager
def launch_config_override(config: LaunchConfig) -> Iterator[LaunchConfig]:
    """Use ``config`` for every launch inside the block (benchmark sweeps, tests)."""
    global _override
    if not isinstance(config, LaunchConfig):
        raise TypeError(f"launch_config_override takes a LaunchConfig, got {type(config).__name__}")
    previous, _override = _override, config
    try:
        yield config
    finally:
        _override = previous


def _gpu_rules_on(device: torch.device) -> bool:
    """Whether the GPU's launch rules apply on ``device`` (the interpreter keeps its heads kernel)."""
    return device.type == "cuda"


def selective_state_update(
    state, x, dt, A, B, C, D=None, dt_bias=None, z=None, dt_softplus=False,
    state_batch_indices=None, dst_state_batch_indices=None, null_block_id=NULL_BLOCK_ID, out=None,
    num_accepted_tokens=None, cu_seqlens=None,
    *,
    bugs: BugConfig | None = None,
    early_state_load: bool = False,
) -> torch.Tensor:
    """One Mamba2 decode step (or a few speculative tokens) for a batch of requests.

    Updates ``state`` in place and returns ``out`` (allocated if None).

    Args:
        state: ``(slots, nheads, dim, dstate)`` float32/bf16/fp16 state pool (any strides: a page-padded view of a
            bigger buffer is fine).
        x, dt, z, out: ``(tokens, nheads, dim)``; x, z, out (and B, C) share a dtype.
        A: ``(nheads, dim, dstate)``; D, dt_bias: ``(nheads, dim)``. When A, dt and dt_bias are broadcast along
            dim/dstate (stride 0, as vLLM's decode path passes them) one scalar per head is loaded.
        B, C: ``(tokens, ngroups, dstate)``; head h uses group ``h // (nheads // ngroups)``.
        dt_softplus: apply ``softplus`` (threshold 20) to ``dt + dt_bias``.
        state_batch_indices: None (row r uses slot r), ``(N,)`` or ``(N, C)`` (speculative decoding: read column
            ``num_accepted_tokens - 1``).
        dst_state_batch_indices: where the new state goes (default: the same indices); with 2-D indices token t's
            state goes to column t.
        null_block_id: the padding index (vLLM's ``NULL_BLOCK_ID``, 0).
        num_accepted_tokens: ``(N,)``: picks the initial-state column.
        cu_seqlens: ``(N + 1,)``: request r owns tokens
            ``cu_seqlens[r]:cu_seqlens[r+1]`` (needs 2-D indices).
        early_state_load: a promise that no kernel still running when this one starts writes ``state`` or the
            index tensors (``state_batch_indices``, ``num_accepted_tokens``, ``cu_seqlens``): the kernel launched
            just before, and, where that one lets its dependents start before its own PDL wait (our conv, this
            kernel), the ones before it, back to the first launched without PDL. Under PDL the indices, the
            state tile and ``A``, ``dt_bias``, ``D`` (weights) are then read before the wait (overlapping the
            previous kernel's tail); ``x``, ``dt``, ``B``, ``C``, ``z`` after it, and every store. Broken promise:
            a stale state. Taken where faster (small batches: ``EARLY_STATE_MAX_*``; elsewhere, where a card's rule
            says so, the source slot alone: :mod:`.mamba_ssm_devices`); no effect without PDL (interpreter,
            ``MAMBALAB_PDL=0``, pre-Hopper). A Mamba2 layer keeps it (``model/mamba_mixer2.py``).
        bugs: a :class:`~mambalab.lab.bugs.BugConfig` (default: the active one); only its ``kernel_guard`` matters
            here (see the module docstring: a skipped request's output rows are zeros).

    Also accepted: vLLM's head-less forms (``state (slots, dim, dstate)``, ``x (batch, dim)``, ...) and a batched
    speculative form (``x (N, T, nheads, dim)``, ``B (N, T, ngroups, dstate)``, 2-D indices). Argument errors are
    ``TypeError``/``ValueError`` naming the argument; index *values* are never checked on the host (that would
    synchronise with the device): a bad one is the guard's business, and the sanitizer's on the interpreter.
    """
    p = prepare_ssu_inputs(state, x, dt, A, B, C, D, dt_bias, z, dt_softplus,
                           state_batch_indices, dst_state_batch_indices, null_block_id, out,
                           num_accepted_tokens, cu_seqlens)
    guard = guard_for(bugs, KernelFamily.MAMBA)  # the SSU's own guard: skip == null_block_id
    if p.num_requests == 0 or p.x.shape[0] == 0:
        return p.finish()
    tied = is_tied(p.A, p.dt, p.dt_bias)
    one_token = (p.cu_seqlens is None and p.num_accepted_tokens is None and p.tokens_per_request == 1)
    if _override is None and (rows := mamba_ssm_tma.routed_rows(p, guard, tied, one_token, early_state_load)):
        return mamba_ssm_tma.launch(p, rows, dt_softplus, null_block_id)  # the CUDA kernel (mamba_ssm_tma.RULES)
    cfg = choose_launch_config(p.nheads, p.dim, p.dstate, p.num_requests, p.state.dtype,
                               p.state.device, tied=tied, multi_token=not one_token)
    if p.nheads % cfg.block_h:
        raise ValueError(f"block_h={cfg.block_h} does not divide nheads={p.nheads}")
    rh = p.num_requests * p.nheads  # the rules' effective batch: request x heads
    # a card whose measured shapes differ from the H200's (mamba_ssm_devices): one token, A/dt per head
    card_rules = _override is None and _gpu_rules_on(p.state.device)
    card = ssu_device_rule(p.state.device, p.state.element_size(), tied, one_token) if card_rules else None
    card_small = card is not None and card.small(rh)
    if card_small:
        cfg = LaunchConfig(min(card.small_rows, triton.next_power_of_2(p.dim)), card.small_warps)
    elif card_rules and (warps := ssu_untied_warps(p.state.device, p.state.element_size(), tied, one_token, rh)):
        cfg = LaunchConfig(cfg.block_m, warps)  # the table's tile on more warps (mamba_ssm_devices)
    # PDL helps the 16-bit state and the larger fp32 launches; fp32 tiles of 4 rows or fewer ran slower with it.
    small_fp32 = p.state.element_size() >= 4 and cfg.block_m <= PDL_FP32_NO_PDL_BLOCK_M
    half = card_rules and ssu_early_half(p.state.device, p.state.element_size(), tied, one_token, rh)
    early = (early_state_load and EARLY_STATE_LOAD and ((card_small and card.small_early) or half or rh <= (
        EARLY_STATE_MAX_REQUEST_HEADS if one_token else EARLY_STATE_MAX_REQUEST_HEADS_MULTI_TOKEN))
             and (tied or rh <= EARLY_STATE_MAX_UNTIED.get(p.state.element_size(), 0)))
    pdl = use_pdl(p.state.device) and (not small_fp32 or (early and EARLY_STATE_PDL_SMALL_FP32))
    cfg = LaunchConfig(mamba_ssm_kernels.wide_state_rows(cfg.block_m, p.dstate), cfg.num_warps) if card_rules else cfg
    kernel, heads, reqs_a_program = _ssu_kernel, {}, 0
    if cfg.block_h > 1:
        exact = cfg.block_m == p.dim and triton.next_power_of_2(p.dstate) == p.dstate
        kernel, heads, pdl = _ssu_heads_kernel, {"BLOCK_H": cfg.block_h, "MASKED": not exact}, False
        # every request in one program where all are live (mamba_ssm_requests.py); is_live_slot: this module's,
        # planted with the kernels'
        if one_token and (reqs_a_program := requests_a_program(p.num_requests, guard, null_block_id, p.src, p.dst,
                                                                live_test=is_live_slot)):
            kernel, heads["REQS"] = _ssu_requests_kernel, reqs_a_program
    has_idx = p.src is not None
    reqs, rows = (0, 0) if cfg.block_h > 1 or _override is not None else untied_reqs(
        p.num_requests, p.nheads, p.state.element_size(), tied=tied, one_token=one_token,
        dst_is_src=has_idx and p.dst is p.src, on_gpu=_gpu_rules_on(p.state.device))
    if reqs:  # A/dt per element: several requests a program share its A tile (mamba_ssm_untied.py)
        kernel, cfg = _ssu_untied_reqs_kernel, LaunchConfig(rows or cfg.block_m, cfg.num_warps)
        heads = {"REQS": reqs, **({"TAIL": True, "num_requests": p.num_requests} if p.num_requests % reqs else {})}
    zero2 = (0, 0)
    dtb_s, D_s = (t.stride() if t is not None else zero2 for t in (p.dt_bias, p.D))
    z_s = p.z.stride() if p.z is not None else (0, 0, 0)
    src_s = p.src.stride() if has_idx else zero2
    dst_s = p.dst.stride() if has_idx else zero2
    grid = (triton.cdiv(p.dim, cfg.block_m), 1 if reqs_a_program else triton.cdiv(p.num_requests, max(reqs, 1)),
            p.nheads // cfg.block_h)
    launch_opts = {"USE_PDL": True, "launch_pdl": True, **({"EARLY_STATE": True} if early else {})} if pdl else {}
    heads_first = HEADS_FIRST_GRID and cfg.block_h == 1 and (  # a slot's heads walked together (the rule above)
        p.state.element_size() >= 4 or (one_token and not tied) or (card is not None and card.heads_first(rh)))
    if heads_first:
        grid, launch_opts["HEADS_FIRST"] = (grid[0], grid[2], grid[1]), True
        if ZIGZAG_ROWS and kernel is _ssu_kernel and _gpu_rules_on(p.state.device):
            launch_opts["ZIGZAG"] = True
    hint = (PREFETCH_STATE_MULTI_TOKEN if not one_token else PREFETCH_STATE if tied
            else PREFETCH_STATE_UNTIED).get(p.state.element_size())
    if hint and card is not None and card.prefetch_min is not None:  # the card's own range (mamba_ssm_devices)
        hint = (hint[0], card.prefetch_min, hint[2])
    # under PDL, the state read after the wait: the source slot may be read before it (early_state_load's promise)
    slot_before_wait = pdl and not early and early_state_load and kernel is _ssu_kernel and has_idx
    if slot_before_wait and hint and hint[1] <= rh <= hint[2]:
        launch_opts["PREFETCH"] = hint[0]
    launch_opts.update({"EARLY_HALF": True} if half and early and pdl and kernel is _ssu_kernel else {})
    if (slot_before_wait and card_rules and "PREFETCH" not in launch_opts
            and ssu_early_slot(p.state.device, p.state.element_size(), tied, rh)):
        launch_opts["EARLY_SLOT"] = True  # the source slot alone before PDL's wait (mamba_ssm_devices)
    if rh <= SPEC_EARLY_DST_MAX and not one_token and kernel is _ssu_kernel and has_idx:
        launch_opts["EARLY_DST"] = True
    if kernel is _ssu_kernel and _override is None:  # the unrolled speculative step, the register cap
        launch_opts.update(mamba_ssm_kernels.ssu_kernel_options(p, one_token, _gpu_rules_on(p.state.device)))
    if cfg.block_h == 1:  # the GPU's one-head kernels: mamba_ssm_kernels.py, FAST_SOFTPLUS and HPG_CONSTEXPR
        launch_opts.update(mamba_ssm_kernels.one_head_options(p, tied, one_token, dt_softplus))
    sanitizer.launch(
        kernel, grid,
        p.state, p.x, p.dt, p.dt_bias, p.A, p.B, p.C, p.D, p.z, p.out,
        p.src, p.dst, p.num_accepted_tokens, p.cu_seqlens,
        int(null_block_id),
        p.src.shape[1] if has_idx else 1,
        p.dst.shape[1] if has_idx else 1,
        max(p.tokens_per_request, 1),
        p.dim, p.dstate, p.nheads // p.ngroups,
        *p.state.stride(), *p.x.stride(), *p.dt.stride(), *dtb_s, *p.A.stride(), *p.B.stride(), *p.C.stride(),
        *D_s, *z_s, *p.out.stride(), *src_s, *dst_s,
        name=KERNEL_NAME,
        row_axis=2 if heads_first else 1,
        rows_per_program=max(reqs_a_program, 1),
        DT_SOFTPLUS=bool(dt_softplus),
        TIE_HDIM=tied,
        HAS_DT_BIAS=p.dt_bias is not None,
        HAS_D=p.D is not None,
        HAS_Z=p.z is not None,
        HAS_INDICES=has_idx,
        HAS_NUM_ACCEPTED=p.num_accepted_tokens is not None,
        IS_VARLEN=p.cu_seqlens is not None,
        ONE_TOKEN=one_token,
        DST_IS_SRC=has_idx and p.dst is p.src,
        GUARD=guard,
        CLAMP_ACCEPTED=True,  # no switch: the clamp predates every release the lab mirrors
        BLOCK_M=cfg.block_m,
        BLOCK_N=triton.next_power_of_2(p.dstate),
        num_warps=cfg.num_warps,
        **launch_opts,
        **heads,
    )
    return p.finish()


__all__ = ["selective_state_update", "LaunchConfig", "choose_launch_config", "launch_config_override", "use_pdl",
           "KERNEL_NAME"]
