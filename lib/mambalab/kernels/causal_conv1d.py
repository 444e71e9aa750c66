"""Decode-time causal depthwise conv update (the short conv of Mamba2 and GDN layers).

Mirrors ``vllm/model_executor/layers/mamba/ops/causal_conv1d.py`` (``causal_conv1d_update`` /
``_causal_conv1d_update_kernel``): same arguments, same state convention, same null-block skip. Written from the
behaviour, not copied; the pure-torch twin is :mod:`mambalab.kernels.causal_conv1d_ref`.

What the conv state is
----------------------
Each request owns one slot of a pool ``conv_state`` with logical shape ``(num_slots, dim, state_len)``. Slot ``s``
keeps, per channel, the most recent inputs of that channel, oldest first. Physically the pool is stored
dim-contiguous, ``(num_slots, state_len, dim)`` in memory (``conv_state.stride(1) == 1``, as upstream), so one state
column of a block of channels is one coalesced load. Make such a pool with :func:`make_conv_state`; ``stride(0)`` may
be larger than ``state_len * dim`` (page-padded pools) and is honoured.

For each new token the kernel convolves the window "last ``width - 1`` inputs + the token" with the channel's
``width`` taps::

    out[t] = act(bias + sum_j weight[:, j] * window_t[j]),   window_t[width - 1] = x[t]

accumulating in fp32 whatever the stored dtype. Inputs are rounded to the state's dtype first (upstream casts ``x``
to the state dtype on the host), so the state keeps exactly the numbers the output was computed from.

Where the history lives (upstream's convention, read off vLLM's kernel)
---------------------------------------------------------------------
Let ``W = width``, ``H = W - 1`` (history length), ``T`` the row's number of new tokens. Without speculative decoding
only columns ``[0, H)`` matter: they hold the last ``H`` inputs; the new state is the last ``H`` of ``history ++ x``;
any further columns are never read or written::

    before   [ h0 h1 h2 | .. ]            W = 4, T = 1
    window    h0 h1 h2 x0         -> out[0]
    after    [ h1 h2 x0 | .. ]            shifted by T

With speculative decoding (``num_accepted_tokens`` given; rows of up to ``T = 1 + num_spec`` tokens; ``state_len >=
H - 1 + T = W - 1 + num_spec``) the previous step wrote ``H - 1`` history inputs followed by all of its ``T``
tokens, of which only ``num_accepted`` were kept. So the request's history is the ``H`` columns ending at its last
accepted token, starting at ``off = num_accepted - 1``; the kernel writes, from column 0, the history minus its
oldest input followed by all ``T`` new tokens (``H - 1 + T`` columns), ready for the next step to pick its own
offset::

    W = 4, num_spec = 2, state_len = 5; previous step wrote [ h1 h2 d0 d1 d2 ]

    num_accepted = 1 -> off 0: history = h1 h2 d0
    num_accepted = 2 -> off 1: history = h2 d0 d1
    num_accepted = 3 -> off 2: history = d0 d1 d2

    e.g. num_accepted = 2, new tokens e0 e1 e2:
    windows   h2 d0 d1 e0 -> out[0];  d0 d1 e0 e1 -> out[1];  d1 e0 e1 e2 -> out[2]
    after    [ d0 d1 e0 e1 e2 ]          (the next step reads from its own num_accepted - 1)

``num_accepted`` counts the bonus token, so it is at least 1; a 0 (or less) is read as 1: ``off = max(num_accepted -
1, 0)``, the clamp the SSU decode kernel applies. (Ours: upstream's conv takes ``num_accepted - 1`` unbounded, but
here it is a token offset inside the request's own slot, not a column of an index tensor, so a 0 never names another
request's slot; the ``zero-accepted`` bug, #48475, is the GDN kernels' column load.) A value above ``state_len - W +
2`` would read past the slot: the caller's contract, not checked (it is an index value).

A row's result depends on its own ``T`` only. Under varlen a row shorter than ``max_query_len`` writes ``H`` columns
(no spec) or ``H - 1 + T`` (spec); columns past those keep stale values nobody reads. (Upstream sizes the non-spec
window with ``max_query_len``, which would leave a short row's state misaligned; vLLM's non-spec decode batches
never mix lengths, so it does not show there. *(inferred from the kernel's arithmetic)*)

Which rows touch state (the bugs of #35431 and #39064)
------------------------------------------------------
Row ``b`` uses slot ``conv_state_indices[b]`` (column 0 of a 2-D ``(batch, k)`` table, as upstream). Without indices
the pool is a dense batch: row ``b`` owns slot ``b`` (row 0 included) and nothing is skipped. Indices are filtered by
a guard, a ``tl.constexpr`` from :func:`mambalab.kernels.common.guard_for` for this kernel's family
(:class:`~mambalab.lab.bugs.KernelFamily` MAMBA):

* fixed (``GuardMode.EQ_NULL``, as vLLM 0.33, which returns on ``== null_block_id``): the null block is padding. The
  program returns before touching state, after copying its input: **a padded row's output is its input**, as
  upstream, whose kernel works in place over ``x`` and returns before writing (the gated-delta-net layer after it
  then sees the padded token's projection, not zeros: what lets a pre-#39064 GDN kernel dirty the null block). A
  negative index is *not* skipped: it reaches the address arithmetic, as upstream.
* ``GuardMode.NEGATIVE`` (only negatives skipped, index 0 reads and writes the null block) is the FLA kernels'
  pre-#39064 guard; ``guard-lt-zero`` does not change this kernel (it compares with the null block since #35431).
  The kernel still honours the mode when launched with it.
* ``pad-minus-one`` world (``GuardMode.NONE``): every index is trusted, so a ``-1`` reaches the address arithmetic:
  ``state - stride(0)``. Under the interpreter :mod:`mambalab.lab.sanitizer` reports it as ``IllegalMemoryAccess``;
  on a GPU it is an illegal address (or silent corruption of whatever precedes the pool).

Index *values* are never checked on the host (that would need a device sync); shapes, dtypes, devices and strides
are, with errors naming the argument.

Launch design
-------------
Grid ``(batch, cdiv(dim, BLOCK_N))``: one program per (row, block of channels), like upstream (the kernels:
:mod:`mambalab.kernels.causal_conv1d_kernels`). A program loads the ``H`` history columns and the row's ``T`` inputs
as one ``[NP2_U, BLOCK_N]`` register tile ``u`` (each column one coalesced 16-byte-per-lane load), loads the ``W``
taps (``evict_last``: every row reads the same weights), computes each token's window from loads of its elements
where they live (the history column or the token: cache hits; with up to ``UNROLL_T`` tokens the token loop is
unrolled, so each load's column is known when compiling), stores the outputs and only then, after a barrier (the
update is in place), stores the shifted tile back into the slot. A padded row costs one small copy of its input.
``BLOCK_N`` and ``num_warps`` come from a rule (:func:`launch_config`), never from autotuning, which would re-run
the kernel on live state: one warp, 256 bytes of each state column per program (measured fastest on an H200; see
docs/benchmarks.md).

Few tokens a row (up to ``WINDOW_MAX_T``: speculative decoding, short varlen rows; width 2 to 4) go to
:func:`_causal_conv1d_window_kernel` instead: the same grid and results (the state bit for bit; tests run both),
without the register tile: every load issued first, the window sliding through ``WIDTH - 1`` registers, the new
state written from them (launch: ``WINDOW_*`` below).

The plain decode step (one token a row, no speculation, width 2 to 4) has a kernel of its own,
:func:`_causal_conv1d_decode_kernel`: grid ``(cdiv(batch, ROWS), cdiv(dim, BLOCK_N))``, ``ROWS`` requests per
program (2 on a GPU; 1 under the interpreter, where the sanitizer reports requests as programs). Each
history column of the ``ROWS`` requests is one ``[ROWS, BLOCK_N]`` load, all issued before any arithmetic; the taps
are loaded once for all the rows; the window needs no row selections. Results are the general kernel's, bit for bit
in the state (tests run both). Under the interpreter the one-request-a-program form of it runs
(:func:`decode_kernel`): no row tile, a padded row gone after its index test and input copy; the same results bit
for bit. A launch whose requests are all live runs them all in one program (:mod:`.causal_conv1d_requests`)."""

from __future__ import annotations


import torch
import triton

from mambalab.lab import sanitizer
from mambalab.lab.bugs import BugConfig
from mambalab.constants import NULL_BLOCK_ID
from mambalab.device import DEVICE
from mambalab.kernels.causal_conv1d_ref import parse_activation
from mambalab.kernels.causal_conv1d_kernels import (
    _causal_conv1d_decode_kernel, _causal_conv1d_update_kernel, _causal_conv1d_window_kernel, rule_batch,
)
from mambalab.kernels.causal_conv1d_row_kernels import (_causal_conv1d_decode_row_kernel,
                                                     _causal_conv1d_window_row_kernel)
from mambalab.kernels import causal_conv1d_row_kernels
from mambalab.kernels.causal_conv1d_requests import _causal_conv1d_decode_requests_kernel
from mambalab.kernels.common import KernelFamily, device_name, guard_for, requests_a_program

_FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_INDEX_DTYPES = (torch.int32, torch.int64)


# ---------------------------------------------------------------------------
# The pool
# ---------------------------------------------------------------------------
def make_conv_state(
    num_slots: int,
    dim: int,
    state_len: int,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    *,
    slot_stride: int | None = None,
) -> torch.Tensor:
    """A zeroed conv-state pool in the layout the kernel wants.

    Returns the logical ``(num_slots, dim, state_len)`` view of a buffer laid
    out ``(num_slots, state_len, dim)`` (so ``stride(1) == 1``). ``slot_stride``
    (elements between consecutive slots, default ``state_len * dim``) makes a
    page-padded pool; the padding belongs to nobody and no kernel touches it.
    The flat backing buffer is ``result._base``.
    """
    for name, v in (("num_slots", num_slots), ("dim", dim), ("state_len", state_len)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"make_conv_state: {name}={v!r} must be a positive int")
    per_slot = state_len * dim
    stride0 = per_slot if slot_stride is None else int(slot_stride)
    if stride0 < per_slot:
        raise ValueError(
            f"make_conv_state: slot_stride={stride0} is smaller than one slot (state_len * dim = {per_slot})"
        )
    device = DEVICE if device is None else torch.device(device)
    buf = torch.zeros(num_slots * stride0, dtype=dtype, device=device)
    return buf.as_strided((num_slots, dim, state_len), (stride0, 1, dim))


# ---------------------------------------------------------------------------
# Launch parameters by rule
# ---------------------------------------------------------------------------
def launch_config(dim: int, batch: int, dtype: torch.dtype, device: torch.device) -> tuple[int, int]:
    """``(BLOCK_N, num_warps)`` for a launch, by rule (no autotuning on live state).

    One warp per program covering 256 bytes of each state column (64 fp32 or
    128 bf16 channels, 8 bytes a lane), never wider than the next power of two
    of ``dim``. Measured on an H200 (scripts/tune_launch.py, BLOCK_N 32..2048 x
    1..8 warps): many small programs per SM beat wide ones (73% of copy fp32,
    50% bf16 at batch 512, against 68% / 40% for 4 warps x 16 bytes a lane).
    """
    itemsize = dtype.itemsize
    block_n = max(32, min(GENERAL_COLUMN_BYTES // itemsize, triton.next_power_of_2(dim)))
    num_warps = GENERAL_WARPS if device.type == "cuda" else 1
    return block_n, num_warps


# The general kernel's rule (speculative decoding, varlen, several tokens): bytes of each state column
# per program and warps per program (scripts/tune_launch.py --conv-general).
GENERAL_COLUMN_BYTES = 256
GENERAL_WARPS = 1

# Few tokens a row (up to WINDOW_MAX_T, width 2..4: speculative decoding): the window kernel (WINDOW_KERNEL
# False: the general one). Its rule, measured on an H200 against vLLM 0.33 in one process (T = 2 and 4,
# batch 1 / 8 / 64 / 256, fp32 and bf16; 256 / 512 / 1024 bytes a column x 1 / 2 / 4 warps x PDL off /
# trigger first / trigger after the state is written; docs/benchmarks.md): 256 channels a program on 4
# warps (vLLM's own block), PDL at every batch with the trigger after the state's stores (mode 2; mode 1,
# the trigger first, ran 0.63x of vLLM at batch 8, mode 2 1.13-1.21x). Over the general kernel 1.2-1.45x
# fp32, 1.4-1.9x bf16 from batch 8.
WINDOW_KERNEL = True
WINDOW_MAX_T = 8
WINDOW_BLOCK_N = 256
WINDOW_WARPS = 4
WINDOW_PDL_MODE = 2
WINDOW_PDL_MAX_BATCH = 1 << 30
# Rows of up to 4 tokens: every token loaded with the history, before any store (otherwise each token's
# load waits behind the stores of the one before: a memory round trip a token). H200, beside vLLM, 12 rows
# (T = 2/4, batch 8/64/256, fp32 and bf16): geometric mean 7.83 -> 6.96 us, no row slower; fp32 T = 2 at
# batch 256 30.6 -> 24.5 us (vLLM 29.4), bf16 T = 4 at 256 25.0 -> 20.2 (vLLM 27.2).
WINDOW_PRELOAD_X = True
# fp32 state, rows of at least WINDOW_WIDE_MIN_T tokens, from WINDOW_WIDE_MIN_BATCH requests: 512 channels a
# program (4 warps). H200 beside vLLM, A/B interleaved (docs/results/issue14-call28-ab-conv.txt, call29): T = 3
# at batch 64 / 256 1.17 / 1.09 -> 1.22 / 1.13x, T = 4 1.19 / 1.06 -> 1.21 / 1.08x; T = 2 slower (batch 64
# 1.11 -> 0.99x, 256 1.20 -> 1.02x), batch 1 and 8 slower (1.27-1.46 -> 1.11-1.39x), bf16 mixed (-2% .. +1%).
WINDOW_WIDE_BLOCK_N = 512
WINDOW_WIDE_MIN_T = 3
WINDOW_WIDE_MIN_BATCH = 64
# By device name: the wide block up to this many requests, the narrow one above (PDL mode unchanged). H200 beside vLLM
# (issue14-call21{3,4}-conv-wide*.txt): T = 3 / 4 at 128 1.23 / 1.18 -> 1.35 / 1.24x, 256 1.14 / 1.09 -> 1.18 / 1.13x;
# at 64 behind (T = 3 1.21 -> 1.18x); layer pairs within 0.1% from 128. Other cards keep it (not measured).
WINDOW_WIDE_MAX_BATCH: dict[str, int] = {"NVIDIA H200": 95}
# The wide launches from this many requests trigger their dependents first (PDL mode 1; window_pdl_mode). H200
# beside vLLM, A/B interleaved (docs/results/issue14-call32-ab-prologue.txt, call33-ab-confirm.txt; call 33): T = 4
# at 128 / 256 / 512 1.16 / 1.08 / 1.08 -> 1.19 / 1.11 / 1.11x, T = 3 1.23 / 1.13 / 1.14 -> 1.24 / 1.15 / 1.16x;
# at 64 slower in calls 31-32 (T = 3 1.21 -> 1.14x), so from 128.
WINDOW_WIDE_PDL1_MIN_BATCH = 128

# The decode kernel's rule (decode_launch_config): bytes of each state column and requests a program (H200).
DECODE_COLUMN_BYTES = 256
DECODE_ROWS = 2
# By state element size, (requests a program, fewest, most requests): those batches take that many requests a
# program and PDL whatever PDL_MAX_BATCH_DECODE says. H200 beside vLLM (issue14-call31-ab-rules.txt, call32, call33):
# fp32 at 128 1.10 / 1.10 / 1.11 -> 1.13 / 1.14 / 1.14x, 112 / 120 1.08 / 1.10 -> 1.09 / 1.11x; slower at 96 (1.07
# -> 1.03x), 136-160 (1.15 -> 1.09x at 136) and 57 (1.20 -> 1.16x), 4 rows without PDL slower everywhere.
DECODE_DEEP: dict[int, tuple[int, int, int]] = {4: (4, 112, 128)}
# Programmatic dependent launch up to this many requests (0: never; for the decode kernel its rules' batch,
# causal_conv1d_kernels.rule_batch), per kernel. H200, PDL off / on: the decode kernel 1.07-1.5x faster at 1..8; at
# 9..16 fp32 1.2-1.3x (2.47 -> 1.85 us at 9), bf16 0.65-0.8x; fp32 to 24 (call 283, 8192 channels, beside vLLM: 20 /
# 24 1.146 / 1.202 -> 1.316 / 1.278x; after a torch kernel 1.38 / 1.29 -> 1.17 / 1.20x; layer +0.5%). The general
# kernel (speculative rows of width > 4 or more than WINDOW_MAX_T tokens) 1.2-1.4x at batch 1, 0.4-0.75x at 8.
PDL_MAX_BATCH_DECODE = {4: 24, 2: 8}
PDL_MAX_BATCH_GENERAL = 1
# Where PDL_MAX_BATCH_DECODE leaves it off, the decode kernel still lets its dependents start at once (TRIGGER; the
# kernel after it in a layer waits for it with PDL's wait), up to this many requests by state element size. H200,
# layer pairs after a torch kernel, bf16 conv state (call 151, issue14-call151-conv-trigger.txt): conv + GDN fp32 16 /
# 64 1.225 / 1.112 -> 1.290 / 1.131x, conv + SSU bf16 16 1.079 -> 1.118x, fp32 1.090 -> 1.107x, the rest within 0.5%;
# the conv alone at every batch (calls 153-154) bf16 256 / 512 -8 / -18%, fp32 57-512 -11-33%, so not there.
DECODE_TRIGGER: dict[int, int] = {2: 128, 4: 32}


def _pdl_opts(batch: int, device: torch.device, max_batch: int) -> dict:
    """The launch options for PDL where the rule above and the GPU allow it (never on the interpreter)."""
    from mambalab.kernels.common import use_pdl

    return {"USE_PDL": True, "launch_pdl": True} if batch <= max_batch and use_pdl(device) else {}


def decode_launch_config(dim: int, batch: int, dtype: torch.dtype, device: torch.device) -> tuple[int, int, int]:
    """``(BLOCK_N, num_warps, ROWS)`` for the plain decode kernel, by rule.

    On a GPU: one warp, ``DECODE_COLUMN_BYTES`` of each state column (8 bytes
    a lane) and ``DECODE_ROWS`` requests per program, so a program has
    ``ROWS x (width - 1)`` state loads in flight and loads the taps once for
    all of them. Measured on an H200 (scripts/tune_launch.py, 256/512 bytes x
    1..8 rows): 256 bytes x 2 rows gives 88% of copy fp32 and 89% bf16 at
    batch 512, where one row a program gave 74% / 65%. On the interpreter: one
    request and every channel per program (its cost is programs x ops; all of a
    launch's requests in one where all are live, ``causal_conv1d_requests.py``).
    """
    if device.type != "cuda":
        return triton.next_power_of_2(dim), 1, 1
    block_n = max(32, min(DECODE_COLUMN_BYTES // dtype.itemsize, triton.next_power_of_2(dim)))
    deep = _decode_deep(rule_batch(batch, dim), dtype.itemsize)  # the rules' batch: causal_conv1d_kernels
    rows = max(1, min(deep or DECODE_ROWS, triton.next_power_of_2(batch)))
    return block_n, 1, rows


def _decode_deep(batch: int, itemsize: int) -> int:
    """:data:`DECODE_DEEP`'s requests a program where its batches take ``batch``, else 0."""
    rows, lo, hi = DECODE_DEEP.get(itemsize, (0, 1, 0))
    return rows if lo <= batch <= hi else 0


def _window_wide(batch: int, max_t: int, state_element_size: int) -> bool:
    return state_element_size >= 4 and max_t >= WINDOW_WIDE_MIN_T and batch >= WINDOW_WIDE_MIN_BATCH


def window_launch_config(dim: int, batch: int, max_t: int, state_element_size: int,
                         device: torch.device | None = None) -> tuple[int, int]:
    """``(BLOCK_N, num_warps)`` of the window kernel on a GPU: ``WINDOW_BLOCK_N`` channels a program,
    ``WINDOW_WIDE_BLOCK_N`` for an fp32 state with rows of several tokens from 64 to ``device``'s cap (above)."""
    cap = WINDOW_WIDE_MAX_BATCH.get((device_name(device) if device is not None else None) or "", 1 << 30)
    wide = _window_wide(batch, max_t, state_element_size) and batch <= cap
    return max(32, min(WINDOW_WIDE_BLOCK_N if wide else WINDOW_BLOCK_N, triton.next_power_of_2(dim))), WINDOW_WARPS


def window_pdl_mode(batch: int, max_t: int, state_element_size: int) -> int:
    """The window kernel's PDL mode where PDL is on: 1 for the wide launches from
    :data:`WINDOW_WIDE_PDL1_MIN_BATCH` requests, else :data:`WINDOW_PDL_MODE`."""
    wide = _window_wide(batch, max_t, state_element_size)
    return 1 if wide and batch >= WINDOW_WIDE_PDL1_MIN_BATCH else WINDOW_PDL_MODE


def decode_kernel(rows: int, device: torch.device):
    """The plain decode step's kernel: one request a program without a row tile under the interpreter
    (:func:`~mambalab.kernels.causal_conv1d_row_kernels._causal_conv1d_decode_row_kernel`, the fewest ops: the
    interpreter's cost is programs x ops), else ``ROWS`` requests a program (every GPU launch)."""
    if device.type != "cuda" and rows == 1:
        return _causal_conv1d_decode_row_kernel
    return _causal_conv1d_decode_kernel


def window_kernel(device: torch.device):
    """The few-tokens step's kernel: under the interpreter one request and every channel a program
    (:func:`~mambalab.kernels.causal_conv1d_row_kernels._causal_conv1d_window_row_kernel`: tokens past a
    row's length skipped, not masked), else :func:`_causal_conv1d_window_kernel` (every GPU launch)."""
    if device.type != "cuda":
        return _causal_conv1d_window_row_kernel
    return _causal_conv1d_window_kernel


# ---------------------------------------------------------------------------
# The wrapper
# ---------------------------------------------------------------------------
def _check_tensor(name: str, t, device: torch.device, dtypes, what: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but x is on {device}: all tensors must share a device")
    if t.dtype not in dtypes:
        raise TypeError(f"{name} has dtype {t.dtype}; expected {what}")


def causal_conv1d_update(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation=None,
    conv_state_indices: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    query_start_loc: torch.Tensor | None = None,
    max_query_len: int = -1,
    null_block_id: int = NULL_BLOCK_ID,
    out: torch.Tensor | None = None,
    *,
    bugs: BugConfig | None = None,
) -> torch.Tensor:
    """One decode step of the causal depthwise conv; updates ``conv_state`` in place.

    Args:
        x: ``(batch, dim)`` one token per row, ``(batch, dim, seqlen)``, or
            varlen ``(num_tokens, dim)`` with ``query_start_loc``. fp32/bf16/fp16.
        conv_state: pool, logical ``(num_slots, dim, state_len)``, dim-contiguous
            (``stride(1) == 1``, see :func:`make_conv_state`), ``state_len >=
            width - 1`` (``>= width - 2 + seqlen`` under speculative decoding).
        weight: ``(dim, width)``, ``width >= 2``. bias: ``(dim,)`` or None.
        activation: None, ``"silu"`` or ``"swish"`` (the same), or a bool.
        conv_state_indices: ``(batch,)`` or ``(batch, k)`` (column 0 used),
            int32/int64, filtered by the guard; None means a dense batch, row
            ``b`` using slot ``b`` (no row is padding).
        num_accepted_tokens: ``(batch,)`` int, turns on speculative decoding:
            the history is read from column ``num_accepted - 1`` (module doc).
        query_start_loc: ``(batch + 1,)`` int, varlen row boundaries into
            ``x``; needs ``max_query_len >= 1`` bounding every row's length
            (a longer row is cut to ``max_query_len`` tokens).
        null_block_id: the padding index (vLLM's ``NULL_BLOCK_ID``, 0).
        out: optional output, same shape as ``x``, float; must not overlap ``x``
            or ``conv_state``.
        bugs: which pre-fix behaviours to run (default: the active config);
            only its state-index guard matters here.

    Returns:
        ``out``: same shape as ``x``; a padded row's output is its input.
    """
    silu = parse_activation(activation)
    # ---- x and the row structure --------------------------------------
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    device = x.device
    _check_tensor("x", x, device, _FLOAT_DTYPES, "float32, bfloat16 or float16")
    is_varlen = query_start_loc is not None
    if is_varlen:
        if x.dim() != 2:
            raise ValueError(
                f"x has shape {tuple(x.shape)}; with query_start_loc it must be varlen (num_tokens, dim)"
            )
        _check_tensor("query_start_loc", query_start_loc, device, _INDEX_DTYPES, "int32 or int64")
        if query_start_loc.dim() != 1 or query_start_loc.shape[0] < 1:
            raise ValueError(
                f"query_start_loc has shape {tuple(query_start_loc.shape)}; expected (batch + 1,)"
            )
        if not isinstance(max_query_len, int) or max_query_len < 1:
            raise ValueError(
                f"max_query_len={max_query_len!r}: with query_start_loc it must be an int >= 1 "
                "bounding every row's query length"
            )
        batch = query_start_loc.shape[0] - 1
        dim = x.shape[1]
        max_t = max_query_len
        stride_x_row, stride_x_tok, stride_x_dim = 0, x.stride(0), x.stride(1)
    elif x.dim() == 2:
        batch, dim = x.shape
        max_t = 1
        stride_x_row, stride_x_dim, stride_x_tok = x.stride(0), x.stride(1), 0
    elif x.dim() == 3:
        batch, dim, max_t = x.shape
        if max_t < 1:
            raise ValueError(f"x has shape {tuple(x.shape)}: seqlen must be >= 1")
        stride_x_row, stride_x_dim, stride_x_tok = x.stride()
    else:
        raise ValueError(
            f"x has shape {tuple(x.shape)}; expected (batch, dim), (batch, dim, seqlen) "
            "or varlen (num_tokens, dim) with query_start_loc"
        )
    if dim < 1:
        raise ValueError(f"x has shape {tuple(x.shape)}: dim must be >= 1")

    # ---- weight, bias ---------------------------------------------------
    _check_tensor("weight", weight, device, _FLOAT_DTYPES, "float32, bfloat16 or float16")
    if weight.dim() != 2 or weight.shape[0] != dim:
        raise ValueError(f"weight has shape {tuple(weight.shape)}; expected (dim={dim}, width)")
    width = weight.shape[1]
    if width < 2:
        raise ValueError(f"weight has width {width}; the conv needs width >= 2")
    if bias is not None:
        _check_tensor("bias", bias, device, _FLOAT_DTYPES, "float32, bfloat16 or float16")
        if tuple(bias.shape) != (dim,):
            raise ValueError(f"bias has shape {tuple(bias.shape)}; expected (dim={dim},)")

    # ---- the pool -------------------------------------------------------
    _check_tensor("conv_state", conv_state, device, _FLOAT_DTYPES, "float32, bfloat16 or float16")
    if conv_state.dim() != 3 or conv_state.shape[1] != dim:
        raise ValueError(
            f"conv_state has shape {tuple(conv_state.shape)}; expected (num_slots, dim={dim}, state_len)"
        )
    num_slots, _, state_len = conv_state.shape
    if conv_state.stride(1) != 1 and dim > 1:
        raise ValueError(
            f"conv_state has strides {conv_state.stride()}; it must be dim-contiguous (stride(1) == 1), "
            "i.e. physically (num_slots, state_len, dim): allocate it with make_conv_state()"
        )
    is_spec = num_accepted_tokens is not None
    need = width - 2 + max_t if is_spec else width - 1
    if state_len < need:
        why = (
            f"width - 2 + seqlen = {need} (speculative decoding: width - 1 + num_spec)"
            if is_spec
            else f"width - 1 = {need}"
        )
        raise ValueError(f"conv_state has state_len {state_len}; it needs at least {why}")

    # ---- indices --------------------------------------------------------
    if conv_state_indices is not None:
        _check_tensor("conv_state_indices", conv_state_indices, device, _INDEX_DTYPES, "int32 or int64")
        if conv_state_indices.dim() not in (1, 2) or conv_state_indices.shape[0] != batch or (
            conv_state_indices.dim() == 2 and conv_state_indices.shape[1] < 1
        ):
            raise ValueError(
                f"conv_state_indices has shape {tuple(conv_state_indices.shape)}; "
                f"expected (batch={batch},) or (batch={batch}, k)"
            )
        stride_idx_row = conv_state_indices.stride(0)
    else:
        if num_slots < batch:
            raise ValueError(
                f"conv_state has {num_slots} slots but there are {batch} rows and no "
                "conv_state_indices (row b uses slot b)"
            )
        stride_idx_row = 0
    if is_spec:
        _check_tensor("num_accepted_tokens", num_accepted_tokens, device, _INDEX_DTYPES, "int32 or int64")
        if tuple(num_accepted_tokens.shape) != (batch,):
            raise ValueError(
                f"num_accepted_tokens has shape {tuple(num_accepted_tokens.shape)}; expected (batch={batch},)"
            )

    # ---- out --------------------------------------------------------------
    fresh = ()  # an output allocated here: its uninitialised bytes are no input (lab/launch_memo.py)
    if out is None:
        out = torch.empty_like(x)
        fresh = (out,)
    else:
        _check_tensor("out", out, device, _FLOAT_DTYPES, "float32, bfloat16 or float16")
        if out.shape != x.shape:
            raise ValueError(f"out has shape {tuple(out.shape)}; expected x's shape {tuple(x.shape)}")
    if is_varlen:
        stride_out_row, stride_out_tok, stride_out_dim = 0, out.stride(0), out.stride(1)
    elif out.dim() == 2:
        stride_out_row, stride_out_dim, stride_out_tok = out.stride(0), out.stride(1), 0
    else:
        stride_out_row, stride_out_dim, stride_out_tok = out.stride()

    if batch == 0 or x.numel() == 0:
        return out

    if not is_spec and not is_varlen and max_t == 1 and width <= 4:
        # The plain decode step: the kernel built for it (several requests a program).
        block_n, num_warps, rows = decode_launch_config(dim, batch, conv_state.dtype, device)
        kernel, guard, reqs = decode_kernel(rows, device), guard_for(bugs, KernelFamily.MAMBA), 1
        if kernel is _causal_conv1d_decode_row_kernel:
            opts = {"MASKED": block_n != dim}
            reqs = requests_a_program(batch, guard, null_block_id, conv_state_indices,
                                      live_test=causal_conv1d_row_kernels.is_live_slot) or 1
            if reqs > 1:  # every request in one program where all are live (causal_conv1d_requests.py)
                kernel, opts["REQS"] = _causal_conv1d_decode_requests_kernel, reqs
        else:
            rb = rule_batch(batch, dim)  # the batch as the rules see it (causal_conv1d_kernels.CONV_RULE_DIM)
            deep = _decode_deep(rb, conv_state.dtype.itemsize)  # PDL there whatever PDL_MAX_BATCH_DECODE says
            opts = _pdl_opts(rb, device, rb if deep else PDL_MAX_BATCH_DECODE.get(conv_state.dtype.itemsize, 8))
            if not opts and _pdl_opts(rb, device, DECODE_TRIGGER.get(conv_state.dtype.itemsize, 0)):
                opts = {"TRIGGER": True}
        sanitizer.launch(
            kernel,
            (triton.cdiv(batch, rows * reqs), triton.cdiv(dim, block_n)),
            x if x.dim() == 2 else x[:, :, 0], weight, bias, conv_state, conv_state_indices,
            out if out.dim() == 2 else out[:, :, 0],
            batch, dim, int(null_block_id),
            stride_x_row, stride_x_dim, weight.stride(0), weight.stride(1),
            bias.stride(0) if bias is not None else 0, conv_state.stride(0), conv_state.stride(2),
            stride_idx_row, stride_out_row, stride_out_dim,
            name="causal_conv1d_update",
            row_axis=0,
            rows_per_program=reqs,
            fresh_outputs=fresh,
            WIDTH=width,
            HAS_BIAS=bias is not None,
            HAS_INDICES=conv_state_indices is not None,
            SILU=silu,
            GUARD=guard,
            ROWS=rows,
            BLOCK_N=block_n,
            num_warps=num_warps,
            **opts,
        )
        return out

    window = WINDOW_KERNEL and width <= 4 and max_t <= WINDOW_MAX_T
    if window and window_kernel(device) is _causal_conv1d_window_row_kernel:
        block_n, num_warps = triton.next_power_of_2(dim), 1
        kernel_opts = dict(kernel=_causal_conv1d_window_row_kernel, MASKED=block_n != dim)
    elif window:
        block_n, num_warps = launch_config(dim, batch, conv_state.dtype, device)
        if device.type == "cuda":
            block_n, num_warps = window_launch_config(dim, batch, max_t, conv_state.element_size(), device)
        pdl = _pdl_opts(batch, device, WINDOW_PDL_MAX_BATCH)
        if pdl:
            pdl["USE_PDL"] = window_pdl_mode(batch, max_t, conv_state.element_size())
        kernel_opts = dict(kernel=_causal_conv1d_window_kernel, PRELOAD_X=WINDOW_PRELOAD_X and max_t <= 4, **pdl)
    else:
        block_n, num_warps = launch_config(dim, batch, conv_state.dtype, device)
        kernel_opts = dict(kernel=_causal_conv1d_update_kernel, NP2_U=triton.next_power_of_2(width - 1 + max_t),
                           CLAMP_ACCEPTED=True, **_pdl_opts(batch, device, PDL_MAX_BATCH_GENERAL))
    kernel = kernel_opts.pop("kernel")
    grid = (batch, triton.cdiv(dim, block_n))
    sanitizer.launch(
        kernel,
        grid,
        x,
        weight,
        bias,  # absent optional tensors go in as None (never dereferenced: HAS_* are False)
        conv_state,
        conv_state_indices,
        num_accepted_tokens,
        query_start_loc,
        out,
        dim,
        int(null_block_id),
        stride_x_row,
        stride_x_dim,
        stride_x_tok,
        weight.stride(0),
        weight.stride(1),
        bias.stride(0) if bias is not None else 0,
        conv_state.stride(0),
        conv_state.stride(2),
        stride_idx_row,
        num_accepted_tokens.stride(0) if is_spec else 0,
        query_start_loc.stride(0) if is_varlen else 0,
        stride_out_row,
        stride_out_dim,
        stride_out_tok,
        name="causal_conv1d_update",
        row_axis=0,
        fresh_outputs=fresh,
        WIDTH=width,
        MAX_T=max_t,
        HAS_BIAS=bias is not None,
        HAS_INDICES=conv_state_indices is not None,
        IS_SPEC=is_spec,
        IS_VARLEN=is_varlen,
        SILU=silu,
        GUARD=guard_for(bugs, KernelFamily.MAMBA),
        BLOCK_N=block_n,
        num_warps=num_warps,
        **kernel_opts,
    )
    return out


__all__ = ["causal_conv1d_update", "make_conv_state", "launch_config", "decode_launch_config", "decode_kernel",
           "window_kernel"]
