"""Several heads a program: the interpreter's form of :func:`mambalab.kernels.mamba_ssm._ssu_kernel`.

Under Triton's CPU interpreter every op of a program costs tens of microseconds whatever its size
(type checks, broadcasts, tensor construction in Python), so a launch costs programs x ops. This kernel
takes ``BLOCK_H`` heads of one request in one program: their ``BLOCK_M x BLOCK_N`` tiles are stacked as the
rows ``r = head * BLOCK_M + m`` of one tile, and every per-head value (``A``, ``dt``, ``dt_bias``, ``D``,
the group's ``B`` and ``C``) is loaded per row. The arithmetic is the one-head kernel's, element for element
(same operations in the same order), so results are bit-identical; the index is loaded and tested before
anything else, so a padded row costs a handful of ops. On a GPU the launch rule keeps the one-head kernel
(``BLOCK_H == 1``, :func:`mambalab.kernels.mamba_ssm.choose_launch_config`).
"""

from __future__ import annotations

import os

import mambalab  # noqa: F401  (sets TRITON_INTERPRET before any kernel is defined)

import triton
import triton.language as tl

from mambalab.kernels.common import is_live_slot, program_row


@triton.jit
def _ssu_request_head(HEADS_FIRST: tl.constexpr, ZIGZAG: tl.constexpr = False):
    """A one-head program's (request, head) ids: grid ``(row blocks, requests, heads)``, or with ``HEADS_FIRST``
    ``(row blocks, heads, requests)`` (``mamba_ssm.HEADS_FIRST_GRID``: a slot's heads run together), there the
    requests zigzagged with ``ZIGZAG`` (``common.program_row``)."""
    if HEADS_FIRST:
        return program_row(2, ZIGZAG), tl.program_id(1)
    return tl.program_id(1), tl.program_id(2)


@triton.jit
def _ssu_src_slot(src_idx_ptr, num_accepted_ptr, pid_r, s_src_row, s_src_col, src_cols,
                  HAS_NUM_ACCEPTED: tl.constexpr, CLAMP_ACCEPTED: tl.constexpr):
    """The slot request ``pid_r`` reads its initial state from: column ``num_accepted - 1`` of its index row
    under speculative decoding (upstream's ``max(num_accepted - 1, 0)``; the upper bound is ours), else column 0."""
    if HAS_NUM_ACCEPTED:
        num_accepted = tl.load(num_accepted_ptr + pid_r).to(tl.int64)
        if CLAMP_ACCEPTED:
            src_col = tl.minimum(tl.maximum(num_accepted - 1, 0), src_cols - 1)
        else:
            src_col = num_accepted - 1
        src_slot = tl.load(src_idx_ptr + pid_r * s_src_row + src_col * s_src_col).to(tl.int64)
    else:
        src_slot = tl.load(src_idx_ptr + pid_r * s_src_row).to(tl.int64)
    return src_slot


# The softplus of dt on the approximate exp2 / lg2 (``_softplus``'s ``FAST``), on a GPU, with A/dt per element or
# several tokens a request; the interpreter keeps the exact form, so CPU results do not move. It runs once per row and
# token: with A/dt per element for every thread's rows, it was about a sixth of that kernel's instructions (bf16 at
# batch 64: 2,496 -> 2,064 SASS instructions, Triton 3.6, scripts/kernel_resources.py). On an H200 beside vLLM
# (docs/results/issue14-call102-softplus.txt; vLLM's time over ours): per element bf16 64 / 256 / 512 1.082 / 1.063 /
# 1.026 -> 1.159 / 1.087 / 1.051x, bf16 8 1.400 -> 1.446x; speculative +0.1-1% (bf16 T = 2 at 64 1.090 -> 1.101x);
# one token with A/dt per head 808 -> 784 instructions but 1-3.5% slower at bf16 batch 8-16, so not there.
# MAMBALAB_FAST_SOFTPLUS=0: libdevice's form everywhere (A/B).
FAST_SOFTPLUS = os.environ.get("MAMBALAB_FAST_SOFTPLUS", "1") != "0"
# One token with A/dt per head too: an A/B switch, off. Call 110 (with HPG, docs/results/issue14-call110-tied-softplus.txt)
# found it slower still: bf16 batch 8 / 9 / 16 1.070 / 1.084 / 1.045 -> 1.028 / 1.062 / 1.027x, fp32 even.
FAST_SOFTPLUS_TIED_ONE_TOKEN = False


# The group of a head (``B``/``C`` are per group) as ``head // HPG`` with the ratio a compile-time constant: a shift,
# where the runtime argument ``heads_per_group`` costs an integer division (about fifteen instructions ahead of the
# ``B``/``C`` loads: one token bf16 at batch 8 808 -> 784 SASS instructions, Triton 3.6). Set per launch; the
# interpreter's several-heads kernels keep the runtime argument. On an H200 beside vLLM (call 106,
# docs/results/issue14-call106-hpg.txt; vLLM's time over ours, runtime -> constant): one token bf16 batch 8 / 9 / 8 fresh
# 1.095 / 1.069 / 1.094 -> 1.106 / 1.082 / 1.108x, fp32 4 1.019 -> 1.029x; the other 29 rows within +-0.4%.
HPG_CONSTEXPR = True


# Several tokens, the index row 2-4 wide: _ssu_kernel runs a request of that many tokens unrolled, the loads
# ahead (mamba_ssm_spec.py), by state element size: (fewest, most request x heads, tokens loaded ahead). H200 beside
# vLLM (calls 113-115, issue14-call11{3,4,5}-*.txt), every load first: bf16 batch 1-4 T = 2-4 1.15-1.42 -> 1.29-1.52x,
# fp32 batch 1-2 +0-14%; from batch 8 even to 5% slower (bf16 64 / 256 T = 3 1.08 -> 0.95x: ~210 registers, not 148).
SPEC_UNROLL: dict[int, tuple[int, int, int]] = {2: (1, 4 * 128, 3), 4: (1, 2 * 128, 3)}
# Register caps of _ssu_kernel on a GPU (ptxas ``maxnreg``), by (state element size, several tokens a request), where
# the unrolled step does not run: ptxas spreads into what it is given (no spill at any cap down to 80 in the local
# compile, scripts/kernel_resources.py), and fewer registers a thread fit more one-warp programs on an SM. H200 beside
# vLLM (calls 117-119, issue14-call11{7,8,9}-*.txt): bf16 token loop 148 -> 128 (13 -> 16 programs an SM), T = 2-4 at
# batch 8-256 1.08-1.11 -> 1.10-1.18x (136 alike, 120 and below slower). Not taken: one token bf16 128 -> 112 (batch
# 4-16 +1-2%, 32-512 even, with z at 8 1% slower; 96 and below slower); fp32 (159 one token, 95 several) at any cap.
MAXNREG: dict[tuple[int, bool], int] = {(2, True): 128}
# The one-token load order is ptxas': it issues 4 of the fp32 16-row tile's 16 state loads, then the softplus (which
# waits on dt), then the other 12. A scheduling fence (``tl.debug_barrier``) that issues all 16 together ran 1-2% faster
# alone under Nsight Compute, but beside vLLM with bf16 activations 1-5% slower in the bench and as a layer runs it (fp32
# activations, the bf16 state: 0-1.6% slower), dt and the head's scalars first or not (calls 272-274,
# docs/results/issue14-call27{2,3,4}-*.txt): not taken.
# Under the L2 hint (PREFETCH) a program reads its slot before the wait for the hint and again after it; the state
# read from the first (EARLY_SLOT with PREFETCH: the index's load after the wait gone in the sm_90 SASS) was within
# 0.1% one token at 17-512 and as a layer runs it, 0.1-0.7% slower at 17 and speculative at 64-256 on an H200 (call
# 276, docs/results/issue14-call276-ssu-hint-slot.txt): not taken.
# A CUDA graph's padded rows: with the slot read before the wait everywhere it may be, a padded row's programs but
# its first leaving before the wait (the first zeroing the head's outputs) was 3-5% slower with an fp32 state and bf16
# activations at 9 -> 16 / 16 (unpadded too) and as a layer runs it, even to +1% with fp32 activations or a bf16 state
# (call 279, docs/results/issue14-call279-ssu-pad-exit.txt): not taken.


# Rows a program where the state row is wider than the launch table's 128 (Falcon-H1's dstate 256,
# mambalab.gpu.model_shapes): the table's rows were measured at dstate 128, so there its fp32 16-row tile is 16 KiB on
# one warp (255 registers a thread in the local sm_90 compile, bf16 195-241; scripts/kernel_resources.py).
# WIDE_STATE_DIV: 0 keeps the table's rows, d > 0 divides them by d x (BLOCK_N / 128). H200 beside vLLM 0.33 (call 281,
# docs/results/issue14-call281-model-shapes.txt; vLLM's default tile there, 4 rows on 8 warps), Falcon-H1 1.5B / 7B,
# vLLM's time over ours, table -> halved (1) / quartered (2): fp32 state, bf16 activations, 1 / 8 / 64 / 256
# 1.43 / 1.25 / 1.25 / 1.27 -> 1.48 / 1.29 / 1.28 / 1.28x (2: 1.35 / 1.18 / 1.30 / 1.31x), 9 -> 16 2.09 -> 2.04x (2:
# 1.11x); bf16 1 / 8 / 64 / 256 1.86-1.89 / 2.15 / 2.43 / 2.53-2.56 -> 2.18-2.21 / 2.19-2.20 / 2.43-2.54 / 2.65x; after
# a torch kernel fp32 at 1 0.96 -> 1.02x (behind -> ahead), bf16 at 1 1.06 -> 1.18-1.20x. Halved: 24 of 28 rows
# faster, fp32 9 -> 16 2% slower, bf16 9 -> 16 (1.5B) and 64 (7B) 0.5-0.6%.
WIDE_STATE_DIV = 1


def wide_state_rows(rows: int, dstate: int) -> int:
    """A GPU tile's rows for a state ``dstate`` wide, from the table's ``rows`` (:data:`WIDE_STATE_DIV`)."""
    wide = triton.next_power_of_2(dstate) // 128
    return rows if wide <= 1 or not WIDE_STATE_DIV else max(1, rows // (wide * WIDE_STATE_DIV))


def ssu_kernel_options(p, one_token: bool, on_gpu: bool) -> dict:
    """``_ssu_kernel``'s options for the launch of ``p`` (``mamba_ssm_ref.prepare_ssu_inputs``' result): a speculative
    step's tokens unrolled where :data:`SPEC_UNROLL` takes it (interpreter too), else the :data:`MAXNREG` cap on a
    GPU."""
    opts, size = {}, p.state.element_size()
    rule = SPEC_UNROLL.get(size)
    width = p.dst.shape[1] if p.src is not None else 0
    if rule and not one_token and 2 <= width <= 4 and rule[0] <= p.num_requests * p.nheads <= rule[1]:
        opts.update(SPEC_TOKENS=width, SPEC_AHEAD=min(rule[2], width - 1))
    cap = MAXNREG.get((size, not one_token))
    if cap and on_gpu and not opts:
        opts["maxnreg"] = cap
    return opts


def fast_softplus_on(device) -> bool:
    """Whether a launch on ``device`` takes the fast softplus: :data:`FAST_SOFTPLUS`, on a GPU."""
    return FAST_SOFTPLUS and device.type == "cuda"


def one_head_options(p, tied: bool, one_token: bool, dt_softplus: bool) -> dict:
    """The one-head kernels' options for the launch of ``p`` (``mamba_ssm_ref.prepare_ssu_inputs``' result): the fast
    softplus with ``A``/``dt`` per element or several tokens (one token with them per head: 1-3.5% slower with it at
    bf16 batch 8-16, call 102), the group ratio as a constant."""
    opts = {}
    if dt_softplus and (FAST_SOFTPLUS_TIED_ONE_TOKEN or not (tied and one_token)) and fast_softplus_on(p.state.device):
        opts["FAST_SOFTPLUS"] = True
    if HPG_CONSTEXPR:
        opts["HPG"] = p.nheads // p.ngroups
    return opts


@triton.jit
def _softplus(x, FAST: tl.constexpr = False):
    """``log(1 + exp(x))``, linear above 20 (torch's and upstream's threshold).

    The exp sees at most 20, so the branch ``tl.where`` discards cannot overflow. ``FAST`` (a GPU only: inline
    PTX) takes the hardware's approximate ``exp2`` and ``lg2``, one ``MUFU`` instruction each (relative error near
    2**-22), for libdevice's ``logf``, a polynomial of about twenty instructions (``tl.math.log2`` is libdevice's
    too): :data:`FAST_SOFTPLUS`, :func:`one_head_options`.
    """
    if FAST:
        e = 1.0 + tl.math.exp2(tl.minimum(x, 20.0) * 1.4426950408889634)  # >= 1: nothing for ftz to flush
        y = tl.inline_asm_elementwise("lg2.approx.ftz.f32 $0, $1;", "=r,r", [e], dtype=tl.float32, is_pure=True,
                                      pack=1) * 0.6931471805599453
    else:
        y = tl.log(1.0 + tl.exp(tl.minimum(x, 20.0)))
    return tl.where(x <= 20.0, y, x)


@triton.jit
def _ssu_heads_kernel(
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
    MASKED: tl.constexpr = True,  # False where BLOCK_M == dim and BLOCK_N == dstate: no lane to mask
):
    """``_ssu_kernel``'s arguments and results; grid ``(cdiv(dim, BLOCK_M), requests, nheads // BLOCK_H)``."""
    pid_r = tl.program_id(1)
    if IS_VARLEN:
        bos = tl.load(cu_seqlens_ptr + pid_r).to(tl.int64)
        seq_len = tl.load(cu_seqlens_ptr + pid_r + 1).to(tl.int64) - bos
        if seq_len == 0:
            return
    elif ONE_TOKEN:
        bos = pid_r.to(tl.int64)
        seq_len = 1
    else:
        bos = pid_r.to(tl.int64) * tokens_per_request
        seq_len = tokens_per_request
    if HAS_INDICES:
        src_slot = _ssu_src_slot(src_idx_ptr, num_accepted_ptr, pid_r, s_src_row, s_src_col, src_cols,
                                 HAS_NUM_ACCEPTED, CLAMP_ACCEPTED)
        live = is_live_slot(src_slot, null_block_id, GUARD)
    else:
        src_slot = pid_r.to(tl.int64)
        live = True

    rows = tl.arange(0, BLOCK_H * BLOCK_M)
    heads = tl.program_id(2) * BLOCK_H + rows // BLOCK_M
    offs_m = tl.program_id(0) * BLOCK_M + rows % BLOCK_M
    if MASKED:
        mask_m = offs_m < dim
        other = 0.0
    else:  # every lane is an element: loads and stores without a mask (the interpreter's cheapest)
        mask_m = None
        other = None
    out_ptrs = out_ptr + bos * s_out_tok + heads * s_out_head + offs_m * s_out_dim
    if not live:  # a padded row: zero outputs, no state traffic
        zeros = tl.zeros([BLOCK_H * BLOCK_M], dtype=out_ptr.dtype.element_ty)
        if ONE_TOKEN:
            tl.store(out_ptrs, zeros, mask=mask_m)
        else:
            t = tl.zeros([], dtype=tl.int32)
            while t < seq_len:
                tl.store(out_ptrs + t * s_out_tok, zeros, mask=mask_m)
                t += 1
        return

    offs_n = tl.arange(0, BLOCK_N)
    if MASKED:
        mask_mn = mask_m[:, None] & (offs_n < dstate)[None, :]
    else:
        mask_mn = None
    tile = (heads * s_state_head + offs_m * s_state_dim)[:, None] + (offs_n * s_state_n)[None, :]
    state = tl.load(state_ptr + src_slot * s_state_slot + tile, mask=mask_mn, other=other).to(tl.float32)

    x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs, A, dt_bias, D = _ssu_rows_inputs(
        x_ptr, dt_ptr, dt_bias_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, bos, heads, offs_m, offs_n, heads_per_group,
        s_x_tok, s_x_head, s_x_dim, s_dt_tok, s_dt_head, s_dt_dim, s_dtb_head, s_dtb_dim, s_A_head, s_A_dim, s_A_n,
        s_B_tok, s_B_group, s_B_n, s_C_tok, s_C_group, s_C_n, s_D_head, s_D_dim, s_z_tok, s_z_head, s_z_dim,
        mask_m, mask_mn, other, TIE_HDIM, HAS_DT_BIAS, HAS_D, HAS_Z)

    if ONE_TOKEN:
        state, out = _ssu_rows_token(state, x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs, A, dt_bias, D,
                                     mask_m, mask_mn, other, TIE_HDIM, HAS_DT_BIAS, DT_SOFTPLUS, HAS_D, HAS_Z)
        if DST_IS_SRC:
            dst_slot = src_slot
            dst_live = True
        elif HAS_INDICES:
            dst_slot = tl.load(dst_idx_ptr + pid_r * s_dst_row).to(tl.int64)
            dst_live = is_live_slot(dst_slot, null_block_id, GUARD)
        else:
            dst_slot = src_slot
            dst_live = True
        if dst_live:
            tl.store(state_ptr + dst_slot * s_state_slot + tile, state.to(state_ptr.dtype.element_ty), mask=mask_mn)
        tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask_m)
    else:
        t = tl.zeros([], dtype=tl.int32)
        while t < seq_len:  # not range(): Triton 3.6's interpreter under NumPy 2
            state, out = _ssu_rows_token(state, x_ptrs + t * s_x_tok, B_ptrs + t * s_B_tok, C_ptrs + t * s_C_tok,
                                         dt_ptrs + t * s_dt_tok, z_ptrs + t * s_z_tok, A, dt_bias, D,
                                         mask_m, mask_mn, other, TIE_HDIM, HAS_DT_BIAS, DT_SOFTPLUS, HAS_D, HAS_Z)
            if HAS_INDICES:
                if t < dst_cols:
                    dst_slot = tl.load(dst_idx_ptr + pid_r * s_dst_row + t * s_dst_col).to(tl.int64)
                    if is_live_slot(dst_slot, null_block_id, GUARD):
                        tl.store(state_ptr + dst_slot * s_state_slot + tile,
                                 state.to(state_ptr.dtype.element_ty), mask=mask_mn)
            else:
                tl.store(state_ptr + src_slot * s_state_slot + tile,
                         state.to(state_ptr.dtype.element_ty), mask=mask_mn)
            tl.store(out_ptrs + t * s_out_tok, out.to(out_ptr.dtype.element_ty), mask=mask_m)
            t += 1


@triton.jit
def _ssu_rows_inputs(x_ptr, dt_ptr, dt_bias_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, bos, heads, offs_m, offs_n,
                     heads_per_group, s_x_tok, s_x_head, s_x_dim, s_dt_tok, s_dt_head, s_dt_dim, s_dtb_head, s_dtb_dim,
                     s_A_head, s_A_dim, s_A_n, s_B_tok, s_B_group, s_B_n, s_C_tok, s_C_group, s_C_n, s_D_head, s_D_dim,
                     s_z_tok, s_z_head, s_z_dim, mask_m, mask_mn, other,
                     TIE_HDIM: tl.constexpr, HAS_DT_BIAS: tl.constexpr, HAS_D: tl.constexpr, HAS_Z: tl.constexpr):
    """A stacked tile's token pointers (``x``, ``B``, ``C``, ``dt``, ``z``) and per-row weights (``A``, ``dt_bias``,
    ``D``, loaded): row r is head ``heads[r]``, dim ``offs_m[r]`` of the request at token ``bos`` (a scalar, or a
    value per row where several requests share the tile, ``mamba_ssm_requests.py``)."""
    group = heads // heads_per_group
    B_ptrs = B_ptr + (bos * s_B_tok + group * s_B_group)[:, None] + (offs_n * s_B_n)[None, :]
    C_ptrs = C_ptr + (bos * s_C_tok + group * s_C_group)[:, None] + (offs_n * s_C_n)[None, :]
    x_ptrs = x_ptr + bos * s_x_tok + heads * s_x_head + offs_m * s_x_dim
    if TIE_HDIM:
        A = tl.load(A_ptr + heads * s_A_head).to(tl.float32)
        dt_ptrs = dt_ptr + bos * s_dt_tok + heads * s_dt_head
        if HAS_DT_BIAS:
            dt_bias = tl.load(dt_bias_ptr + heads * s_dtb_head).to(tl.float32)
        else:
            dt_bias = 0.0
    else:
        A_ptrs = A_ptr + (heads * s_A_head + offs_m * s_A_dim)[:, None] + (offs_n * s_A_n)[None, :]
        A = tl.load(A_ptrs, mask=mask_mn, other=other).to(tl.float32)
        dt_ptrs = dt_ptr + bos * s_dt_tok + heads * s_dt_head + offs_m * s_dt_dim
        if HAS_DT_BIAS:
            dt_bias = tl.load(dt_bias_ptr + heads * s_dtb_head + offs_m * s_dtb_dim, mask=mask_m, other=other)
            dt_bias = dt_bias.to(tl.float32)
        else:
            dt_bias = 0.0
    if HAS_D:
        D = tl.load(D_ptr + heads * s_D_head + offs_m * s_D_dim, mask=mask_m, other=other).to(tl.float32)
    else:
        D = 0.0
    if HAS_Z:
        z_ptrs = z_ptr + bos * s_z_tok + heads * s_z_head + offs_m * s_z_dim
    else:
        z_ptrs = x_ptrs
    return x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs, A, dt_bias, D


@triton.jit
def _ssu_rows_token(state, x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs, A, dt_bias, D, mask_m, mask_mn, other,
                    TIE_HDIM: tl.constexpr, HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr,
                    HAS_D: tl.constexpr, HAS_Z: tl.constexpr):
    """One token on the stacked tile: ``mambalab.kernels.mamba_ssm._ssu_token`` with a head per row."""
    x = tl.load(x_ptrs, mask=mask_m, other=other).to(tl.float32)
    B = tl.load(B_ptrs, mask=mask_mn, other=other).to(tl.float32)
    C = tl.load(C_ptrs, mask=mask_mn, other=other).to(tl.float32)
    if TIE_HDIM:
        dt = tl.load(dt_ptrs).to(tl.float32)  # the row's head's scalar
        if HAS_DT_BIAS:
            dt += dt_bias
        if DT_SOFTPLUS:
            dt = _softplus(dt)
        dA = tl.exp(A * dt)[:, None]
        dBx = (B * dt[:, None]) * x[:, None]
    else:
        dt = tl.load(dt_ptrs, mask=mask_m, other=other).to(tl.float32)
        if HAS_DT_BIAS:
            dt += dt_bias
        if DT_SOFTPLUS:
            dt = _softplus(dt)
        dA = tl.math.exp2(A * (dt * 1.4426950408889634)[:, None])
        dBx = B * (dt * x)[:, None]
    state = state * dA + dBx
    out = tl.sum(state * C, axis=1)
    if HAS_D:
        out += D * x
    if HAS_Z:
        z = tl.load(z_ptrs, mask=mask_m, other=other).to(tl.float32)
        out *= z * tl.sigmoid(z)
    return state, out
