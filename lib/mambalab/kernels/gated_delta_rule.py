"""Gated delta rule decode step (GDN, Qwen3-Next) as one Triton kernel.

Mirrors the behaviour of vLLM's copy of flash-linear-attention's ``fused_recurrent_gated_delta_rule``
(``vllm/model_executor/layers/fla/ops/fused_recurrent.py``, moved to
``vllm/third_party/flash_linear_attention/ops/`` in 0.26) and of ``fused_sigmoid_gating_delta_rule_update`` next to
it. The maths, the state layout and the meaning of every argument are documented in the pure-torch reference
:mod:`mambalab.kernels.gated_delta_rule_ref`; this file is about *how* the kernel runs.

Launch design
-------------
* Grid ``(cdiv(V, BV), HV, N)``: one program per (block of ``BV`` value rows, value head, sequence). The rows of
  ``h`` (``V x K``) never mix in the delta rule (``h @ k``, the rank-1 update and ``h @ q`` are all row-wise), so
  the value dimension splits freely across programs while each program keeps its ``BV x BK`` tile of the state in
  registers for all the tokens of its sequence. ``BK = next_pow2(K)`` (the whole key dimension: the two reductions
  over K stay inside a program). Grid axis 2 is the request row (``row_axis=2`` for the sanitizer's reports).
* The state is ``[slots, HV, V, K]`` with K innermost: each tile row is one contiguous run of ``K`` elements, so a
  warp's load covers consecutive bytes (128-bit vector loads when ``stride(-1) == 1`` and the other strides are
  multiples of 16 elements, which Triton detects by specialisation). Programs of one (sequence, head) are adjacent
  on axis 0, so consecutive CTAs stream one contiguous ``V x K`` block.
* Block sizes by rule, never autotuned (autotuning would re-run an in-place kernel on live state): ``BV`` so that a
  program moves about 4 KiB of fp32 state (8 rows of 128) or 8 KiB of bf16 state (32 rows, loaded at once and worked
  on in two halves, ``SPLIT``), and ``BV`` halved while the grid would be too small to occupy the GPU (small batches
  are latency-bound: more, smaller programs); one warp per program (fastest on an H200). See :func:`launch_config`;
  where another card measured other shapes, :mod:`.gated_delta_rule_devices`.
* A sequence whose load index is not live (the guard) costs one index load and a few output stores: programs return
  before touching the state. Where :data:`EARLY_INDEX` says so, the index's loads go out with ``cu_seqlens``'.
* All strides are honoured (q/k/v/g/beta views into a packed projection, a page-padded pool, a column slice of a
  block table as indices). Everything accumulates in float32; only stores round to the state dtype.
* On a GPU, one token a sequence (:data:`STREAM`'s batches) runs :mod:`.gated_delta_rule_kernels`' streaming
  kernel: blocks of rows in a pipelined loop, or, with the layer's ``early_state_load`` (:data:`STREAM_EARLY_STATE`),
  one or two blocks read before PDL's wait. Two tokens a sequence (:data:`SPEC_STREAM`) run the walk of
  :mod:`.gated_delta_rule_stream`; longer ones the general kernel (its token loop pipelined: :data:`SPEC_TOKEN_STAGES`).
* Under the CPU interpreter (which costs programs x ops, whatever a tile's size) a program takes the largest power of
  two of value heads dividing ``HV`` and the whole ``V`` (:func:`heads_per_program`, ``_gdn_heads_kernel``): grid
  ``(1, HV // heads, N)``, the same bits; a one-token launch of live sequences, all (:mod:`.gated_delta_rule_requests`).

Guards: ``common.is_live_slot`` with ``GUARD`` from ``common.guard_for`` (FLA: ``<= 0`` / ``> 0`` of #39064, as 0.33).

Spec decode column (``zero-accepted``, #48475 / #50021, both open): upstream's FLA kernels load column
``num_accepted - 1`` unbounded in every release up to 0.33 (``BOUND_ACCEPTED`` off): a 0 reads column -1, the previous
row's last column (row 0: before the tensor). Fixed here as #50021 proposes: the load is masked to ``0 <= col < C``
and an out-of-row column reads as the null block, so the guard skips the row (it is not clamped to column 0).
"""

from __future__ import annotations

import functools

import mambalab  # noqa: F401  (sets TRITON_INTERPRET before any kernel is defined)

import torch
import triton
import triton.language as tl

from mambalab.lab import sanitizer
from mambalab.lab.bugs import BugConfig
from mambalab.constants import NULL_BLOCK_ID
from mambalab.kernels.common import (KernelFamily, bound_accepted_for, guard_for, is_live_slot, program_row,
                                     requests_a_program, use_pdl)  # use_pdl: PDL where the SSU and the conv take it
from mambalab.kernels.gated_delta_rule_kernels import (_gdn_heads_kernel, _gdn_rows, _gdn_slot, _gdn_stream_kernel,
                                                       _load_rows)
from mambalab.kernels.gated_delta_rule_devices import device_rule
from mambalab.kernels.gated_delta_rule_requests import _gdn_requests_kernel
from mambalab.kernels.gated_delta_rule_stream import _gdn_spec_stream_kernel
from mambalab.kernels.gated_delta_rule_ref import validate_gdn_inputs

KERNEL_NAME = "fused_recurrent_gated_delta_rule"

# Launch rule constants (see launch_config). State bytes per program by element size: 4 KiB fp32 (8 rows of 128), 8 KiB
# bf16/fp16 (32 rows, worked on in two halves: SPLIT_BY_ELEMENT_SIZE); 4 KiB for any other element size.
_STATE_BYTES_BY_ELEMENT_SIZE, _STATE_BYTES_PER_PROGRAM, _NUM_WARPS, _MIN_BV = {4: 4096, 2: 8192}, 4096, 1, 4
# Row blocks per tile by state element size (_gdn_decode_kernel): a 2-byte state loaded whole, worked on in halves.
SPLIT_BY_ELEMENT_SIZE = {2: 2}


@triton.jit
def _gdn_decode_kernel(
    # activations
    q, k, v, g, beta, o,
    # state: h0 is read, ht is written (the same tensor when in place)
    h0, ht,
    # indexing
    cu_seqlens, state_indices, num_accepted_tokens,
    # fused sigmoid gating (only with SIGMOID_GATING)
    A_log, dt_bias,
    # scalars
    scale, softplus_beta, softplus_threshold,
    T,  # q.shape[1]: tokens per sequence, or all tokens with cu_seqlens
    num_cols,  # columns of 2-D state_indices
    null_block_id,
    # strides (elements)
    s_q_b, s_q_t, s_q_h, s_q_k,
    s_k_b, s_k_t, s_k_h, s_k_k,
    s_v_b, s_v_t, s_v_h, s_v_v,
    s_g_b, s_g_t, s_g_h,
    s_beta_b, s_beta_t, s_beta_h,
    s_h0_n, s_h0_h, s_h0_v, s_h0_k,
    s_ht_n, s_ht_h, s_ht_v, s_ht_k,
    s_idx_n, s_idx_c,
    # shapes and switches
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr,
    HAS_INITIAL_STATE: tl.constexpr,
    INPLACE: tl.constexpr,  # store into the pool (else into a fresh per-token tensor)
    IS_VARLEN: tl.constexpr,
    INDEXED: tl.constexpr,  # 0: none, 1: (N,), 2: (N, C), one slot per token
    IS_SPEC: tl.constexpr,  # num_accepted_tokens given (only with INDEXED == 2)
    BOUND_ACCEPTED: tl.constexpr,  # mask the column load to 0 <= col < C (fixed: #50021's bound)
    HAS_BETA: tl.constexpr,
    USE_L2NORM: tl.constexpr,
    SIGMOID_GATING: tl.constexpr,  # g <- -exp(A_log) softplus(g + dt_bias), beta <- sigmoid(beta)
    GUARD: tl.constexpr,
    SPLIT: tl.constexpr,  # 1 or 2 row blocks per tile (see below)
    USE_PDL: tl.constexpr = False,  # programmatic dependent launch (GPU, sm_90+), only with EARLY_STATE
    EARLY_STATE: tl.constexpr = False,  # indices and state read before the wait (the caller's promise)
    TOKEN_STAGES: tl.constexpr = 0,  # > 0: the token loop pipelined (gated_delta_rule_kernels._gdn_rows)
    EARLY_INDEX: tl.constexpr = False,  # the slot's loads issued before cu_seqlens' test (INDEXED > 0)
    EARLY_DST: tl.constexpr = False,  # INDEXED == 2: a token's store slot loaded with its inputs
    ZIGZAG: tl.constexpr = False,  # the sequences in the order 0, n-1, 1, ... (common.program_row; a GPU only)
):
    i_v = tl.program_id(0)
    i_hv = tl.program_id(1)
    i_n = program_row(2, ZIGZAG).to(tl.int64)
    i_h = i_hv // (HV // H)  # grouped value attention
    if USE_PDL:
        # As the SSU's early_state_load (mamba_ssm.py): the metadata and the state tile are read before
        # waiting for the previous kernel, q/k/v/g/beta after it, and every store is made after it.
        tl.extra.cuda.gdc_launch_dependents()
        if not EARLY_STATE:
            tl.extra.cuda.gdc_wait()

    if EARLY_INDEX:  # the slot does not depend on the sequence's length: its loads go out with cu_seqlens'
        slot_early = _gdn_slot(state_indices, num_accepted_tokens, i_n, num_cols, s_idx_n, s_idx_c,
                               IS_SPEC, BOUND_ACCEPTED)

    # -- which tokens belong to this sequence -----------------------------------
    if IS_VARLEN:
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        seq_len = tl.load(cu_seqlens + i_n + 1).to(tl.int64) - bos
        if not EARLY_INDEX:  # (with it, an empty sequence is not live below: nothing read or written either)
            if seq_len <= 0:
                return  # an empty sequence reads and writes nothing
        i_b = 0  # the batch dimension is 1
    else:
        bos = 0
        seq_len = T
        i_b = i_n
    flat0 = i_b * T + bos  # flat index of the first token on the [B * T] axis

    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    mask_k = o_k < K
    mask_v = o_v < V
    mask_h = mask_v[:, None] & mask_k[None, :]
    # offsets of this program's tile inside one [HV, V, K] state
    tile_ht = i_hv * s_ht_h + o_v[:, None] * s_ht_v + o_k[None, :] * s_ht_k

    p_o = o + (flat0 * HV + i_hv) * V + o_v  # o is a fresh contiguous [B, T, HV, V]

    # -- where the state comes from: the load guard -----------------------------
    if INDEXED == 0:
        slot = i_n
        live = True
    else:
        if EARLY_INDEX:
            slot = slot_early
        else:
            slot = _gdn_slot(state_indices, num_accepted_tokens, i_n, num_cols, s_idx_n, s_idx_c,
                             IS_SPEC, BOUND_ACCEPTED)
        live = is_live_slot(slot, null_block_id, GUARD)
        if EARLY_INDEX:  # one branch on both loads (an early return on the length alone lets the slot's sink)
            live = live & (seq_len > 0)

    if not live:
        # Skipped sequence (with the fixed guard: null block or negative).
        # Nothing is read or written in the pool; the outputs (and the rows of
        # a fresh final state) are zero-filled so every result is defined.
        if USE_PDL:
            if EARLY_STATE:
                tl.extra.cuda.gdc_wait()
        zero_v = tl.zeros([BV], dtype=tl.float32).to(o.dtype.element_ty)
        zero_h = tl.zeros([BV, BK], dtype=tl.float32).to(ht.dtype.element_ty)
        p_z = ht + flat0 * s_ht_n + tile_ht
        t_skip = tl.zeros([], dtype=tl.int32)
        while t_skip < seq_len:  # not range(): Triton 3.6's interpreter under NumPy 2.4
            tl.store(p_o, zero_v, mask=mask_v)
            if not INPLACE:
                tl.store(p_z, zero_h, mask=mask_h)
            p_o += HV * V
            p_z += s_ht_n
            t_skip += 1
        return

    # -- the state tile, in SPLIT blocks of BV // SPLIT rows ----------------------
    # The rows of h never mix, so a block of rows runs all its tokens on its
    # own. With SPLIT == 2 both blocks are *loaded* first (the whole tile's
    # bytes in flight at once) but the second stays in its stored dtype while
    # the first is converted and worked on: a bf16 tile in flight costs the
    # registers of half its fp32 values. That is what lets an 8 KiB bf16 tile
    # run with the registers of about 6 KiB (docs/benchmarks.md).
    RB: tl.constexpr = BV // SPLIT
    o_v0 = i_v * BV + tl.arange(0, RB)
    h_a = _load_rows(h0, slot, i_hv, o_v0, o_k, s_h0_n, s_h0_h, s_h0_v, s_h0_k, V, K,
                     HAS_INITIAL_STATE, RB, BK)
    if SPLIT == 2:  # the second block's load is issued before any work on the first
        h_b = _load_rows(h0, slot, i_hv, o_v0 + RB, o_k, s_h0_n, s_h0_h, s_h0_v, s_h0_k, V, K,
                         HAS_INITIAL_STATE, RB, BK)
    if USE_PDL:
        if EARLY_STATE:
            tl.extra.cuda.gdc_wait()
    for half in tl.static_range(SPLIT):
        _gdn_rows(h_a if half == 0 else h_b, o_v0 + half * RB, q, k, v, g, beta, o, ht, state_indices,
                  A_log, dt_bias, scale, softplus_beta, softplus_threshold, num_cols, null_block_id,
                  i_b, i_h, i_hv, i_n, bos, flat0, seq_len, slot,
                  s_q_b, s_q_t, s_q_h, s_q_k, s_k_b, s_k_t, s_k_h, s_k_k, s_v_b, s_v_t, s_v_h, s_v_v,
                  s_g_b, s_g_t, s_g_h, s_beta_b, s_beta_t, s_beta_h,
                  s_ht_n, s_ht_h, s_ht_v, s_ht_k, s_idx_n, s_idx_c,
                  HV, K, V, BK, INPLACE, INDEXED, HAS_BETA, USE_L2NORM, SIGMOID_GATING, GUARD, TOKEN_STAGES,
                  EARLY_DST)

def _num_sms(device: torch.device) -> int:
    """The GPU's SMs; 1 on the interpreter, which runs programs one after another (the fewest is fastest)."""
    if device.type != "cuda":
        return 1
    return _cuda_sms(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _cuda_sms(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


# Several tokens a request: rows of the state a program, by element size, one piece. H200 beside vLLM 0.33 (scripts/
# tune_launch.py --wide, T = 2 / 4, batch 8-256): bf16 16 rows 57-79% of copy (vLLM 56-74%), fp32 4 71-90% (56-88%).
MULTI_TOKEN_BV = {4: 4, 2: 16}
# One token, at most this many sequences, on a GPU: rows a program (calls 140-141: 2 sequences, 8 -> 4 rows, bf16 /
# fp32 +21 / +8% beside vLLM's packed decode, +13 / +12% after a torch kernel; batch 1 takes 4 by the halving rule).
SMALL_N_BV = (2, 4)
# One token a sequence, one slot, in place (gates given or from a/b): the streaming kernel (gated_delta_rule_kernels.
# _gdn_stream_kernel), by state element size: (rows a block, blocks a program, num_stages, fewest, most sequences).
# H200 beside vLLM 0.33 (benchmarks.md, issue 14, calls 12-13, 114-115): bf16 from 16, 2 blocks of 16 rows, 2 stages
# (8 x 4 x 4: 72 -> 80% of copy at 64; 16 x 2: 16 / 32 / 64 +3 / +8 / +1.3%); fp32 4 x 2 x 2, 8 to 32.
STREAM: dict[int, tuple[int, int, int, int, int]] = {2: (16, 2, 2, 16, 1 << 30), 4: (4, 2, 2, 8, 32)}
# The general kernel's sequences zigzagged on a GPU (common.program_row), padded ones not a tail (call 126): fp32 57 ->
# 64 1.084 -> 1.121x, 9 -> 16 +1-2%, unpadded even; the streaming kernel's (an A/B switch) bf16 9 -> 16 1.148 -> 1.100x.
ZIGZAG_ROWS, ZIGZAG_STREAM = True, False
# The streaming kernel's blocks read with its slot, before PDL's wait (EARLY_STATE, the layer's early_state_load), by
# state element size: (fewest, most sequences, zigzag under PDL, the first only: EARLY_ONE, capped: STREAM_ONE_MAXNREG)
# H200: fp32 8-32 +2-9% (calls 129-136); bf16 both 168 registers, 12 programs an SM (152), the first only: layer pairs 9
# -> 16 / 16 / 32 / 64 +7 / +4 / +3 / +2% (156); its second block read before the first's store, capped +1-4% (158).
STREAM_EARLY_STATE: dict[int, tuple] = {4: (1, 1 << 30, True, False), 2: (16, 1 << 30, False, True)}
STREAM_ONE_MAXNREG = 128  # 112 / 96 / 80 (no spill locally): 1.15-3.0x the time (call 161)
# The streaming kernel's one-token step with q / k as loaded, their norms applied after the state's reductions (RAW_QK),
# by state element size. H200 (call 162, issue14-call162-gdn-raw-qk.txt): fp32 8-32 +0-8% (fp32 activations at 9
# 1.024 -> 1.104x), after a torch kernel -0.3-+12%, layer pairs 8 / 16 / 32 +8 / +2 / +2%; bf16 -1-+2%, not taken.
STREAM_RAW_QK = frozenset({4})
# Several tokens a sequence (2-D indices, in place, either gating): the streaming kernel for speculation
# (gated_delta_rule_stream._gdn_spec_stream_kernel), by state element size: (rows a block, blocks, num_stages, fewest,
# most sequences, warps); index rows of at most SPEC_STREAM_MAX_TOKENS columns (unrolled). H200 beside vLLM 0.33, A/B
# interleaved (docs/results/issue14-call22-ab-stream.txt, call23-ab-stream2.txt; vLLM's time over ours):
#   bf16 T = 2, 8 x 4 rows, 3 stages: batch 64 1.09 -> 1.13x, 128 1.07 -> 1.14x, 256 1.07 -> 1.15x; 32 even,
#   16 1.13 -> 1.10x, 8 1.14 -> 0.87x (the early state load wins there), so from 64;
#   bf16 T = 3 / 4: every shape slower (0.98-1.01x / 0.82x at best, against 1.07-1.09x; the unrolled tokens cost
#   227-255 registers, 2 or 4 warps slower still), so two columns at most; fp32: slower or even (T = 2-4, 8-256).
SPEC_STREAM: dict[int, tuple[int, int, int, int, int, int]] = {2: (8, 4, 3, 64, 1 << 30, 1)}
SPEC_STREAM_MAX_TOKENS = 2
# Several tokens a sequence, the general kernel (what SPEC_STREAM leaves): its token loop pipelined (the next token's
# q/k/v/g/beta loads in flight; num_stages by state element size, 0: plain) from this many sequences. H200 beside vLLM
# (issue14-call24-ab-tokstages.txt, call31-33): bf16 3 stages, T = 3 / 4 at 128-256 1.06-1.08 -> 1.11x (1.14 with
# EARLY_INDEX); 64 even (1.085-1.10x), 8 0.5-1% slower; fp32 0.3-5% slower at 8-64, even at 256.
SPEC_TOKEN_STAGES: dict[int, int] = {2: 3}
SPEC_TOKEN_STAGES_MIN_N = 128
# EARLY_DST (one slot a token, each store's slot loaded with the inputs) up to this many sequences, by element size
# (call 64, issue14-call64-early-dst.txt: bf16 T = 3 / 4 at 1-64 +0.7-8%, 256 even; fp32 at 8 +0.5-1.3%, 64 even).
SPEC_EARLY_DST: dict[int, int] = {2: 64, 4: 8}
# The general kernel's slot loads issued with cu_seqlens' (EARLY_INDEX: one memory round trip fewer before the state
# load) on a GPU, by state element size: (fewest, most sequences). H200 beside vLLM (issue14-call32-ab-prologue.txt,
# call33-ab-confirm.txt): fp32 one token 57 / 57 -> 64 / 64 1.090 / 1.082 / 1.092 -> 1.094 / 1.089 / 1.095x (fp32
# activations +0.6-0.8%), 128-512 +0.1-0.4%, speculative fp32 at 64 / 256 even or faster; bf16 T = 3 / 4 at 256 1.11 ->
# 1.14x. Not taken: bf16 below 128 (one token at 4 1.46 -> 1.31x, 8 1.30 -> 1.38x; T = 3 / 4 at 8 -0.5%), fp32 below 33.
EARLY_INDEX: dict[int, tuple[int, int]] = {4: (33, 1 << 30), 2: (128, 1 << 30)}


def launch_config(
    K: int, V: int, HV: int, N: int, state_element_size: int, num_sms: int = 132,
    multi_token: bool = False, state_bytes: int | None = None,
) -> tuple[int, int, int]:
    """``(BK, BV, num_warps)`` for a launch, by rule (never autotuned).

    * ``BK = next_pow2(K)``: the whole key dimension in one program.
    * ``BV``: the power of two that gives about 4 KiB of fp32 state or 8 KiB
      of bf16/fp16 state per program (Qwen3-Next K=V=128: 8 rows fp32, 32
      rows bf16, the latter worked on in two halves, :func:`split_rows`; or
      ``state_bytes``, a device rule's), at most ``next_pow2(V)``, at least 4 (or V's).
    * While the grid has fewer than 4 programs per SM, halve BV (down to 4):
      at small batch the step is latency-bound and more programs overlap the
      load-compute-store chain; on a GPU (the interpreter passes 1 SM) at most
      ``SMALL_N_BV[1]`` rows for up to ``SMALL_N_BV[0]`` sequences.
    * ``num_warps = 1``: many small programs per SM, so many load-compute-store
      chains overlap. Measured on an H200 (scripts/tune_launch.py; a first
      sweep of BV 4..64 x 1..8 warps, then BV x SPLIT): 95% of copy bandwidth
      fp32 and 86% bf16 at batch 512; bf16 was 79% with 4 KiB tiles in one
      piece (128 registers a thread, 24% of warps active).
    """
    BK = triton.next_power_of_2(K)
    bv_cap = triton.next_power_of_2(V)
    if multi_token and state_element_size in MULTI_TOKEN_BV:
        return BK, min(bv_cap, MULTI_TOKEN_BV[state_element_size]), _NUM_WARPS
    nbytes = state_bytes or _STATE_BYTES_BY_ELEMENT_SIZE.get(state_element_size, _STATE_BYTES_PER_PROGRAM)
    rows = max(1, nbytes // (BK * state_element_size))
    BV = min(bv_cap, 1 << (rows.bit_length() - 1))  # largest power of two <= rows
    BV = max(min(_MIN_BV, bv_cap), BV)
    while BV > _MIN_BV and triton.cdiv(V, BV) * HV * N < 4 * num_sms:
        BV //= 2
    if num_sms > 1 and N <= SMALL_N_BV[0]:
        BV = min(BV, SMALL_N_BV[1])
    return BK, BV, _NUM_WARPS


def split_rows(BV: int, state_element_size: int) -> int:
    """Row blocks per tile: 2 for a 2-byte state with at least 8 rows, else 1 (by rule). H200, batch 512, bf16:
    32 rows in two halves 86% of copy, 16 in one piece 79%, in two halves 71% (only full 4 KiB halves pay)."""
    split = SPLIT_BY_ELEMENT_SIZE.get(state_element_size, 1)
    return split if BV >= 4 * split else 1


def heads_per_program(HV: int, device: torch.device) -> int:
    """Value heads a program: 1 on a GPU (the one-head kernels); on the interpreter the largest power of two
    that divides ``HV`` (all of them for a power of two), with the whole ``V`` in one block: the interpreter's
    cost is programs x ops, whatever a tile's size (:func:`.gated_delta_rule_kernels._gdn_heads_kernel`)."""
    return 1 if device.type == "cuda" else HV & -HV


# The early state load (early_state_load) of the general kernel (the streaming kernel's: STREAM_EARLY_STATE), up to
# these sequences x value heads. H200 beside vLLM (32 value heads, issue14-call17-ab-gdn-early.txt): bf16 batch 1 / 2 /
# 4 / 8 1.27 / 1.05 / 1.04 / 1.00 -> 1.84 / 1.20 / 1.46 / 1.30x; fp32 1-4 1.42-1.88 -> 1.67-2.95x; speculative T = 2 / 4
# at 8 bf16 1.01 / 1.04 -> 1.17 / 1.13x; at 64 0.3-1.5% faster; fp32 T = 4 at 1 2.78 -> 2.72x. Not measured above 64.
EARLY_STATE_LOAD, EARLY_STATE_MAX_SEQ_HEADS = True, 64 * 32  # one token or several a sequence alike


def _gpu_rules_on(device: torch.device) -> bool:
    """Whether the GPU's launch rules (:data:`STREAM`, :data:`SMALL_N_BV`, ...) apply on ``device``: a GPU."""
    return device.type == "cuda"


def _launch(
    q, k, v, g, beta, scale, initial_state, inplace_final_state, cu_seqlens,
    ssm_state_indices, num_accepted_tokens, use_qk_l2norm_in_kernel,
    null_block_id, bugs, A_log=None, dt_bias=None, softplus_beta=1.0, threshold=20.0,
    block_v=None, num_warps=None, block_h=None, early_state_load=False, out=None, name=KERNEL_NAME,
):
    shapes = validate_gdn_inputs(q, k, v, g, beta, scale, initial_state, inplace_final_state,
                                 cu_seqlens, ssm_state_indices, num_accepted_tokens)
    B, T, H, HV, K, V, N = shapes.B, shapes.T, shapes.H, shapes.HV, shapes.K, shapes.V, shapes.N
    if bugs is not None and not isinstance(bugs, BugConfig):
        raise TypeError(f"bugs must be a mambalab.BugConfig or None, got {type(bugs).__name__}")
    guard = guard_for(bugs, KernelFamily.FLA)
    scale = K ** -0.5 if scale is None else float(scale)

    o = torch.empty((B, T, HV, V), dtype=v.dtype, device=v.device) if out is None else out.view(B, T, HV, V)
    in_place = bool(inplace_final_state) and initial_state is not None
    if in_place:
        final_state = initial_state
    else:
        dtype = initial_state.dtype if initial_state is not None else torch.float32
        final_state = torch.empty((B * T, HV, V, K), dtype=dtype, device=q.device)
    if N == 0 or T == 0:
        return o, final_state

    state_in = initial_state if initial_state is not None else final_state
    idx = ssm_state_indices
    if idx is None:
        indexed, s_idx = 0, (0, 0)
    else:  # (N,) one slot a sequence, or (N, C) one a token
        indexed, s_idx = (1, (idx.stride(0), 0)) if idx.dim() == 1 else (2, tuple(idx.stride()))
    num_cols = shapes.index_columns

    multi_token = B * T > N  # more tokens than requests: speculative decoding (or varlen prefill)
    # a card whose measured shapes differ from the H200's (gated_delta_rule_devices), one token a sequence
    card = None if multi_token or block_v is not None else device_rule(q.device, state_in.element_size(), N)
    BK, BV, nw = launch_config(K, V, HV, N, state_in.element_size(), _num_sms(q.device), multi_token=multi_token
                               and q.device.type == "cuda", state_bytes=card.state_bytes if card else None)
    nw = card.num_warps if card else nw
    heads = heads_per_program(HV, q.device) if block_h is None else block_h
    if heads < 1 or heads & (heads - 1) or HV % heads:
        raise ValueError(f"block_h must be a power of two dividing HV={HV}, got {heads}")
    if heads > 1:
        BV = triton.next_power_of_2(V)
    if block_v is not None:
        if block_v <= 0 or block_v & (block_v - 1):
            raise ValueError(f"block_v must be a positive power of two, got {block_v}")
        BV = block_v
    nw = nw if num_warps is None else num_warps
    grid = (triton.cdiv(V, BV), HV, N)
    kernel, extra = _gdn_decode_kernel, {}
    if heads > 1:
        kernel, extra = _gdn_heads_kernel, {"BLOCK_H": heads, "ONE_TOKEN": cu_seqlens is None and T == 1,
                                            "MASKED": not (BV == V and BK == K)}
        one_seq_token = extra["ONE_TOKEN"] and num_accepted_tokens is None  # (is_live_slot: planted as the kernels')
        reqs = requests_a_program(N, guard, null_block_id, idx, live_test=is_live_slot) if one_seq_token else 0
        if reqs:  # every sequence in one program where all are live (gated_delta_rule_requests.py)
            kernel, extra = _gdn_requests_kernel, dict(extra, REQS=reqs)
        grid = (triton.cdiv(V, BV), HV // heads, 1 if reqs else N)
    stream = STREAM.get(state_in.element_size()) if (
        _gpu_rules_on(q.device) and in_place and indexed == 1 and not multi_token and block_v is None) else None
    if stream and stream[3] <= N <= stream[4] and heads == 1 and card is None:
        kernel, extra = _gdn_stream_kernel, dict(zip(("RB", "NB", "STAGES"), stream[:3]))
        grid = (triton.cdiv(V, stream[0] * stream[1]), HV, N)
        lo, hi, zz, one = STREAM_EARLY_STATE.get(state_in.element_size(), (1, 0, False, False))
        early = early_state_load and lo <= N <= hi and stream[1] == 2
        pdl = early and use_pdl(q.device)  # PDL with the early blocks only (and their zigzag, zz)
        extra = dict(extra, EARLY_STATE=early, EARLY_ONE=early and one, USE_PDL=pdl, ZIGZAG=ZIGZAG_STREAM or zz and pdl,
                     **({"launch_pdl": True} if pdl else {}))
        extra.update({"maxnreg": STREAM_ONE_MAXNREG} if early and one else {},
                     RAW_QK=state_in.element_size() in STREAM_RAW_QK)
    spec = SPEC_STREAM.get(state_in.element_size()) if (
        _gpu_rules_on(q.device) and in_place and indexed == 2 and multi_token and block_v is None and heads == 1
        and num_cols <= SPEC_STREAM_MAX_TOKENS) else None
    if spec and spec[3] <= N <= spec[4]:
        kernel = _gdn_spec_stream_kernel
        extra = dict(zip(("RB", "NB", "STAGES"), spec[:3]), TOKENS=num_cols)
        grid = (triton.cdiv(V, spec[0] * spec[1]), HV, N)
        nw = spec[5]

    if kernel is _gdn_decode_kernel and multi_token and _gpu_rules_on(q.device):
        stages = SPEC_TOKEN_STAGES.get(state_in.element_size(), 0) if N >= SPEC_TOKEN_STAGES_MIN_N else 0
        extra = dict(extra, TOKEN_STAGES=stages) if stages else extra
        early_dst = N <= SPEC_EARLY_DST.get(state_in.element_size(), 0) and indexed == 2 and in_place
        extra = dict(extra, EARLY_DST=True) if early_dst else extra
    early_index = EARLY_INDEX.get(state_in.element_size(), (1, 0))
    if kernel is _gdn_decode_kernel and indexed and _gpu_rules_on(q.device) and early_index[0] <= N <= early_index[1]:
        extra = dict(extra, EARLY_INDEX=True)
    if (kernel is _gdn_decode_kernel and early_state_load and EARLY_STATE_LOAD and use_pdl(q.device)
            and N * HV <= EARLY_STATE_MAX_SEQ_HEADS):
        extra = dict(extra, USE_PDL=True, EARLY_STATE=True, launch_pdl=True)
    if ZIGZAG_ROWS and kernel is _gdn_decode_kernel and _gpu_rules_on(q.device):
        extra = dict(extra, ZIGZAG=True)  # padded sequences among the first live ones, not a tail (a GPU only)
    dummy = q  # stands in for absent pointer arguments (never dereferenced)
    sanitizer.launch(
        kernel, grid,
        q, k, v, g, beta if beta is not None else dummy, o, state_in, final_state,
        cu_seqlens if cu_seqlens is not None else dummy,
        idx if idx is not None else dummy,
        num_accepted_tokens if num_accepted_tokens is not None else dummy,
        A_log if A_log is not None else dummy,
        dt_bias if dt_bias is not None else dummy,
        scale, float(softplus_beta), float(threshold),
        T, num_cols, int(null_block_id),
        *q.stride(), *k.stride(), *v.stride(),
        *g.stride(), *(beta.stride() if beta is not None else (0, 0, 0)),
        *state_in.stride(), *final_state.stride(), *s_idx,
        H=H, HV=HV, K=K, V=V, BK=BK, BV=BV,
        HAS_INITIAL_STATE=initial_state is not None,
        INPLACE=in_place,
        IS_VARLEN=cu_seqlens is not None,
        INDEXED=indexed,
        IS_SPEC=num_accepted_tokens is not None,
        HAS_BETA=beta is not None,
        USE_L2NORM=bool(use_qk_l2norm_in_kernel),
        SIGMOID_GATING=A_log is not None,
        GUARD=guard,
        BOUND_ACCEPTED=bound_accepted_for(bugs),
        num_warps=nw,
        num_stages=1,
        **extra,
        **({} if heads > 1 else {"SPLIT": 1 if (multi_token and q.device.type == "cuda")
                                 else card.split if card else split_rows(BV, state_in.element_size())}),
        name=name,  # the entry point's name, as upstream's traces name its kernel
        row_axis=2,
        rows_per_program=extra.get("REQS", 1),
        fresh_outputs=(o,) if in_place else (o, final_state),
    )
    return o, final_state


def fused_recurrent_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor | None = None,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    inplace_final_state: bool = True,
    cu_seqlens: torch.Tensor | None = None,
    ssm_state_indices: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    *,
    null_block_id: int = NULL_BLOCK_ID,
    bugs: BugConfig | None = None,
    block_v: int | None = None,
    num_warps: int | None = None,
    block_h: int | None = None,
    early_state_load: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One gated-delta-rule step (or a few, for speculative decoding) on a state pool.

    Args:
        q, k: ``[B, T, H, K]``. v: ``[B, T, HV, V]`` (HV a multiple of H).
        g: ``[B, T, HV]`` log-decays (<= 0). beta: ``[B, T, HV]`` in (0, 1); None: ones.
        scale: query scale, default ``K ** -0.5``.
        initial_state: the pool ``[slots, HV, V, K]`` (K innermost), float32,
            bfloat16 or float16; any ``stride(0)``. None: start from zeros.
        inplace_final_state: write the new state into the pool (True) or return
            a fresh ``[B * T, HV, V, K]`` tensor, one row per token (False).
        cu_seqlens: ``(N + 1,)`` token offsets of N packed sequences (B == 1).
        ssm_state_indices: None (sequence n uses row n), ``(N,)`` one slot per
            sequence, or ``(N, C)`` one slot per token (spec decode).
        num_accepted_tokens: ``(N,)``: the initial state is read from column
            ``num_accepted_tokens[n] - 1``; a column outside ``0..C-1`` skips the
            row (#50021's bound; unbounded under the ``zero-accepted`` pre-fix
            behaviour: a 0 reads column -1).
        use_qk_l2norm_in_kernel: L2-normalise q and k per head first.
        null_block_id: the null block (0); which indices are skipped follows
            ``bugs`` (default: the active :class:`BugConfig`): fixed skips
            ``<= null_block_id`` (the FLA kernels' guard), ``guard-lt-zero`` only ``< 0``,
            ``pad-minus-one`` nothing.
        block_v, num_warps: override :func:`launch_config` (benchmarking only).
        block_h: value heads a program, overriding :func:`heads_per_program` (tests, benchmarking).
        early_state_load: the caller's promise that no kernel still running when this one starts writes
            the state pool or the index tensors (``cu_seqlens``, ``ssm_state_indices``,
            ``num_accepted_tokens``): the kernel launched just before, and, where that one lets its
            dependents start before its own PDL wait, the ones before it, back to the first launched
            without PDL; as in a gated-delta-net layer; under PDL they are then read before waiting for it
            (:func:`mambalab.kernels.mamba_ssm.selective_state_update` has the same argument). Broken
            promise: a stale state. Taken by the general kernel at small batches (``EARLY_STATE_MAX_SEQ_HEADS``).

    Returns:
        ``(o, final_state)``: ``o`` ``[B, T, HV, V]`` in v's dtype (zeros for
        skipped sequences); ``final_state`` is ``initial_state`` itself when in
        place, else the fresh per-token tensor (zeros for skipped sequences).

    Index values are never checked on the host: the kernel's guard decides.
    With cu_seqlens, tokens outside ``[cu_seqlens[0], cu_seqlens[-1])`` are
    not written.
    """
    return _launch(q, k, v, g, beta, scale, initial_state, inplace_final_state, cu_seqlens,
                   ssm_state_indices, num_accepted_tokens, use_qk_l2norm_in_kernel,
                   null_block_id, bugs, block_v=block_v, num_warps=num_warps, block_h=block_h,
                   early_state_load=early_state_load)


def fused_sigmoid_gating_delta_rule_update(
    A_log: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    dt_bias: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: float = 1.0,
    threshold: float = 20.0,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    inplace_final_state: bool = True,
    cu_seqlens: torch.Tensor | None = None,
    ssm_state_indices: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    *,
    null_block_id: int = NULL_BLOCK_ID,
    bugs: BugConfig | None = None,
    block_v: int | None = None,
    num_warps: int | None = None,
    block_h: int | None = None,
    early_state_load: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same step with Qwen3-Next's gates computed in the kernel.

    ``g = -exp(A_log) * softplus(a + dt_bias)`` (softplus with sharpness
    ``beta`` and linear above ``threshold``, upstream's names) and the delta
    rule's ``beta = sigmoid(b)``. ``A_log, dt_bias: (HV,)``; ``a, b: [B, T, HV]``.
    Everything else as :func:`fused_recurrent_gated_delta_rule`.
    """
    HV = v.shape[2] if v.dim() == 4 else -1
    BT = tuple(q.shape[:2]) if q.dim() == 4 else ()
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor) or not t.dtype.is_floating_point:
            raise TypeError(f"{name} must be a floating-point torch.Tensor")
        if t.shape != (*BT, HV):
            raise ValueError(f"{name} must be [B, T, HV] = {[*BT, HV]}, got {tuple(t.shape)}")
    for name, t in (("A_log", A_log), ("dt_bias", dt_bias)):
        if not isinstance(t, torch.Tensor) or t.shape != (HV,):
            raise ValueError(f"{name} must be a tensor of shape (HV,) = ({HV},), "
                             f"got {tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    if float(beta) <= 0:
        raise ValueError(f"beta (softplus sharpness) must be positive, got {beta}")
    A_log, dt_bias = A_log.contiguous(), dt_bias.contiguous()
    return _launch(q, k, v, a, b, scale, initial_state, inplace_final_state, cu_seqlens,
                   ssm_state_indices, num_accepted_tokens, use_qk_l2norm_in_kernel,
                   null_block_id, bugs, A_log=A_log, dt_bias=dt_bias, softplus_beta=beta,
                   threshold=threshold, block_v=block_v, num_warps=num_warps, block_h=block_h,
                   early_state_load=early_state_load, name="fused_sigmoid_gating_delta_rule_update")


__all__ = ["fused_recurrent_gated_delta_rule", "fused_sigmoid_gating_delta_rule_update", "launch_config",
           "KERNEL_NAME"]
