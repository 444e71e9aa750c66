"""Several requests a program, for ``A``/``dt`` per element: a GPU form of
:func:`mambalab.kernels.mamba_ssm._ssu_kernel` for one decode token a request, state stored back to its own slot.

With ``A`` per element (``(nheads, dim, dstate)``, as vLLM's kernel tests and tuning benchmark pass it) each
program loads an fp32 ``A`` tile as large as its state tile (twice its bytes for a bf16 state), from L2, and the
kernel is issue-bound on that and on one exponential per element (``docs/benchmarks.md``, issue 14). Here a
program takes ``REQS`` consecutive requests of one head and row block: the ``A`` tile, ``dt_bias`` and ``D`` are
loaded once for all of them, and every request's index, state tile and inputs are loaded under masks (no branch),
so the ``REQS`` state loads can be in flight together. The arithmetic per request is ``_ssu_token``'s, so results
are bit-identical to the one-request kernel's. A padded row (the guard rejects its slot) moves no state and gets
zero outputs, as there.

Grid ``(cdiv(dim, BLOCK_M), cdiv(requests, REQS), nheads)``; the launch rule takes it where ``REQS`` divides the
requests, and from :data:`UNTIED_TAIL_MIN` request x heads where it does not: the last group's requests past the
batch's end then read the last request's inputs and store nothing (:data:`UNTIED_REQS`, :func:`untied_reqs`).
"""

from __future__ import annotations

import mambalab  # noqa: F401  (sets TRITON_INTERPRET before any kernel is defined)

import triton
import triton.language as tl

from mambalab.kernels.common import is_live_slot
from mambalab.kernels.mamba_ssm_kernels import _ssu_request_head
from mambalab.kernels.mamba_ssm_token import _ssu_token


@triton.jit
def _ssu_untied_reqs_kernel(
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
    REQS: tl.constexpr,  # requests a program
    USE_PDL: tl.constexpr = False,
    HEADS_FIRST: tl.constexpr = False,  # grid (row blocks, heads, request groups), as _ssu_kernel's
    FAST_SOFTPLUS: tl.constexpr = False,  # as _ssu_kernel's
    HPG: tl.constexpr = 0,  # as _ssu_kernel's
    TAIL: tl.constexpr = False,  # REQS does not divide the requests (UNTIED_TAIL_MIN): the last group has a tail
    num_requests=0,  # with TAIL: the batch's requests
):
    """``_ssu_kernel``'s arguments (one token, indices, ``dst is src``, ``A``/``dt`` per element only), and the
    batch's requests where ``REQS`` does not divide them: a request past its end reads the last one's inputs and
    slot (in range, already in cache) and stores nothing."""
    tl.static_assert(ONE_TOKEN and HAS_INDICES and DST_IS_SRC and not TIE_HDIM and not IS_VARLEN)
    pid_m = tl.program_id(0)
    pid_g, pid_h = _ssu_request_head(HEADS_FIRST)  # pid_g: a group of REQS requests
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    mask_m = offs_m < dim
    mask_n = offs_n < dstate
    mask_mn = mask_m[:, None] & mask_n[None, :]
    tile = offs_m[:, None] * s_state_dim + offs_n[None, :] * s_state_n
    head_state_ptr = state_ptr + pid_h * s_state_head
    # per head and row block: loaded once for the program's REQS requests
    A = tl.load(A_ptr + pid_h * s_A_head + offs_m[:, None] * s_A_dim + offs_n[None, :] * s_A_n,
                mask=mask_mn, other=0.0).to(tl.float32)
    if HAS_DT_BIAS:
        dt_bias = tl.load(dt_bias_ptr + pid_h * s_dtb_head + offs_m * s_dtb_dim, mask=mask_m, other=0.0)
        dt_bias = dt_bias.to(tl.float32)
    else:
        dt_bias = 0.0
    if HAS_D:
        D = tl.load(D_ptr + pid_h * s_D_head + offs_m * s_D_dim, mask=mask_m, other=0.0).to(tl.float32)
    else:
        D = 0.0
    group = pid_h // (HPG if HPG else heads_per_group)  # HPG: a shift, not a runtime division
    for i in tl.static_range(REQS):
        r = pid_g * REQS + i
        if TAIL:  # a request past the batch's end: the last one's index and inputs, nothing stored
            inside = r < num_requests
            r = tl.minimum(r, num_requests - 1)
        tok = r.to(tl.int64)
        slot = tl.load(src_idx_ptr + r * s_src_row).to(tl.int64)
        live = is_live_slot(slot, null_block_id, GUARD)
        if TAIL:
            live = live & inside
        state = tl.load(head_state_ptr + slot * s_state_slot + tile, mask=mask_mn & live, other=0.0)
        x_ptrs = x_ptr + tok * s_x_tok + pid_h * s_x_head + offs_m * s_x_dim
        if HAS_Z:
            z_ptrs = z_ptr + tok * s_z_tok + pid_h * s_z_head + offs_m * s_z_dim
        else:
            z_ptrs = x_ptrs  # never dereferenced (HAS_Z is off)
        state, out = _ssu_token(state.to(tl.float32), x_ptrs,
                                B_ptr + tok * s_B_tok + group * s_B_group + offs_n * s_B_n,
                                C_ptr + tok * s_C_tok + group * s_C_group + offs_n * s_C_n,
                                dt_ptr + tok * s_dt_tok + pid_h * s_dt_head + offs_m * s_dt_dim, z_ptrs,
                                A, dt_bias, D, mask_m, mask_n, TIE_HDIM, HAS_DT_BIAS, DT_SOFTPLUS, HAS_D, HAS_Z,
                                FAST_SOFTPLUS)
        tl.store(head_state_ptr + slot * s_state_slot + tile, state.to(state_ptr.dtype.element_ty),
                 mask=mask_mn & live)
        out = tl.where(live, out, 0.0)  # a padded row's outputs are zeros, as the one-request kernel writes
        out_mask = mask_m
        if TAIL:
            out_mask = out_mask & inside
        tl.store(out_ptr + tok * s_out_tok + pid_h * s_out_head + offs_m * s_out_dim,
                 out.to(out_ptr.dtype.element_ty), mask=out_mask)


# The launch rule, by state element size: (requests a program, fewest, most requests x heads, rows of the head
# dim a program, 0: the launch table's), the first whose REQS divides the requests (or any, UNTIED_TAIL_MIN below);
# none: the one-request kernel.
# A GPU only (the interpreter keeps its heads kernel), never under a pinned launch configuration. Chosen on an H200
# beside vLLM 0.33, A/B interleaved (docs/results/issue14-call58-untied-reqs.txt, call61-untied-small.txt; vLLM's
# time over ours, 128 heads, one-request kernel -> this):
#   bf16: batch 8 1.213 -> 1.401x (4), 16 0.977 -> 1.085x (4), 64 1.014 -> 1.061x (4), 256 0.996 -> 1.030x (2),
#   512 0.960 -> 0.994x (2); 8 requests slower from 16 (0.84-0.95x);
#   fp32: batch 8 0.918 -> 1.014x (8 requests on 2-row tiles; 4 rows: 0.972x), from 16 even (2) or 2-4% slower.
# With the fast softplus (mamba_ssm_kernels.FAST_SOFTPLUS, call 102) the same sweep again (calls 103-104,
# docs/results/issue14-call103-untied-shapes.txt, issue14-call104-untied-confirm.txt): bf16 4 requests on 8 rows
# wins from batch 128 too (128 / 256 / 512: 2 requests 1.061 / 1.083 / 1.046x, 4 requests 1.120 / 1.149 / 1.112x;
# 8 requests 1.089 / 1.099 / 1.062x; 16-row or 4-row tiles slower), so 4 from batch 8 up; fp32: the one-request
# kernel is even or ahead of 8 requests on 2 rows at batch 8 (1.049 / 1.052x against 1.031 / 1.040x; 2 or 4
# requests within 0.6% of it at 8-32), so none.
UNTIED_REQS: dict[int, list[tuple[int, int, int, int]]] = {
    2: [(4, 8 * 128, 1 << 30, 0)],
}
# From this many request x heads a tier also takes a batch its REQS does not divide, the last group's requests past
# the batch's end masked (below it, and 1 << 30 for never: the one-request kernel there). H200 beside vLLM, bf16
# state, 128 heads, the bench / after a torch kernel (call 292, docs/results/issue14-call292-ssu-untied-tail.txt):
# 13 / 15 0.967 / 0.993 -> 1.103 / 1.163x, 57 / 63 / 65 1.044 / 1.041 / 1.039 -> 1.136 / 1.156 / 1.130x, 255 / 257
# 1.022 -> 1.137 / 1.135x, 11 1.193 / 1.212 -> 1.313 / 1.244x; 9 / 10 after a torch kernel 1.145 / 1.244 -> 1.050 /
# 1.208x, so from 11; the batches it divides unchanged (8, 12, 16, 64, 256 within 0.2%).
UNTIED_TAIL_MIN = 11 * 128


def untied_reqs(num_requests: int, nheads: int, state_element_size: int, *, tied: bool, one_token: bool,
                dst_is_src: bool, on_gpu: bool) -> tuple[int, int]:
    """``(requests a program, rows a program or 0)`` of :func:`_ssu_untied_reqs_kernel` for this launch, or
    ``(0, 0)`` for the one-request kernel."""
    if tied or not one_token or not dst_is_src or not on_gpu:
        return 0, 0
    for reqs, fewest, most, rows in UNTIED_REQS.get(4 if state_element_size >= 4 else 2, ()):
        fits = num_requests % reqs == 0 or (num_requests > reqs and num_requests * nheads >= UNTIED_TAIL_MIN)
        if reqs > 1 and fits and fewest <= num_requests * nheads <= most:
            return reqs, rows
    return 0, 0
