"""Upstream's own regression tests for the pieces mambalab mirrors, ported as vectors.

Each test names the upstream test (file::name) and the vLLM release it was read from
(docs/upstream-family.md section 4), and asserts the same numbers; the set-up is
rebuilt on mambalab's classes (written here, not copied). Sources:

* ``tests/v1/attention/test_attention_splitting.py`` (v0.33.0): ``split_decodes_and_prefills``
  and ``test_build_attention_metadata_zeros_stale_is_prefilling`` (#41873);
* ``tests/v1/attention/test_batch_reordering.py`` (v0.33.0): the decode-first reorder;
* ``tests/v1/attention/test_mamba_update_block_table.py`` (v0.31.0, the last release that has
  it; mode "all"): the Mamba builder;
* ``tests/v1/worker/test_gpu_block_table.py`` (v0.33.0, #49757 since v0.27.0) and
  ``tests/v1/worker/test_gpu_input_batch.py`` (v0.33.0): block table and input batch.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mambalab.attention.mamba_metadata import MambaAttentionMetadata, MambaAttentionMetadataBuilder
from mambalab.attention.metadata import (
    CommonAttentionMetadata,
    build_attention_metadata,
    reorder_batch_to_split_decodes_and_prefills,
    split_decodes_and_prefills,
)
from mambalab.core.kv_cache_interface import AttentionSpec, MambaSpec
from mambalab.lab.bugs import BugConfig
from mambalab.worker.block_table import BlockTable
from mambalab.worker.input_batch import CachedRequestState, InputBatch
from mambalab.worker.runner_inputs import RunnerBuffers


def create_common_attn_metadata(seq_lens, query_lens, block_size=16, is_prefilling=None):
    """As upstream's ``tests/v1/attention/utils.py`` helper: ``query_start_loc = [0] + cumsum``,
    ``seq_lens_cpu_upper_bound = seq_lens``, an arange block table, no ``is_prefilling``
    unless given."""
    ql = torch.tensor(query_lens, dtype=torch.int32)
    qsl = torch.zeros(len(query_lens) + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(ql, 0)
    seq = torch.tensor(seq_lens, dtype=torch.int32)
    cols = -(-max(seq_lens) // block_size)
    return CommonAttentionMetadata(
        query_start_loc=qsl, query_start_loc_cpu=qsl.clone(), seq_lens=seq,
        num_reqs=len(query_lens), num_actual_tokens=int(ql.sum()),
        max_query_len=int(ql.max()), max_seq_len=int(seq.max()),
        block_table_tensor=torch.arange(len(query_lens) * cols, dtype=torch.int32).view(-1, cols),
        slot_mapping=torch.zeros(int(ql.sum()), dtype=torch.int64), causal=True,
        is_prefilling=None if is_prefilling is None else torch.tensor(is_prefilling),
        seq_lens_cpu_upper_bound=seq,
    )


# -- test_attention_splitting.py (v0.33.0) ------------------------------------------------

def apply_split(query_lens, decode_threshold, require_uniform, padded_num_tokens=None,
                is_prefilling=None, treat_short_extends_as_decodes=True):
    """Upstream's ``apply_split_decodes_and_prefills``: seq_lens 10 * (i + 1), block size 16."""
    cm = create_common_attn_metadata([10 * (i + 1) for i in range(len(query_lens))], query_lens,
                                     is_prefilling=is_prefilling)
    if padded_num_tokens is not None:
        cm.num_actual_tokens = padded_num_tokens
    return split_decodes_and_prefills(cm, decode_threshold=decode_threshold, require_uniform=require_uniform,
                                      treat_short_extends_as_decodes=treat_short_extends_as_decodes)


SPLIT_VECTORS = [  # (upstream test name, query_lens, threshold, require_uniform, extra, expected)
    ("test_split_decodes_and_prefills_nonuniform_all_ones", [1, 1, 1], 1, False, {}, (3, 0, 3, 0)),
    ("test_split_decodes_and_prefills_nonuniform_all_short_decodes", [1, 2, 1, 3, 2, 1, 2], 3, False, {},
     (7, 0, 12, 0)),
    ("test_split_decodes_and_prefills_nonuniform_all_prefills", [4, 5, 6, 7], 3, False, {}, (0, 4, 0, 22)),
    ("test_split_decodes_and_prefills_nonuniform_mixed_batch", [2, 1, 3, 4, 5, 6, 7, 8], 4, False, {},
     (4, 4, 10, 26)),
    ("test_split_decodes_and_prefills_uniform_all_ones", [1, 1, 1], 1, True, {}, (3, 0, 3, 0)),
    ("test_split_decodes_and_prefills_uniform_short_extend", [1, 1], 1, True,
     dict(is_prefilling=[False, True], treat_short_extends_as_decodes=False), (1, 1, 1, 1)),
    ("test_split_decodes_and_prefills_uniform_all_short_decodes", [2, 2, 1, 3, 2, 1, 2], 3, True, {},
     (2, 5, 4, 9)),
    ("test_split_decodes_and_prefills_uniform_all_prefills", [4, 5, 6, 7], 3, True, {}, (0, 4, 0, 22)),
    ("test_split_decodes_and_prefills_uniform_mixed_batch_all_uniform_decodes", [2, 2, 2, 4, 5, 6, 7, 8], 4,
     True, {}, (3, 5, 6, 30)),
    ("test_split_decodes_and_prefills_uniform_mixed_batch_non_uniform_decodes", [2, 1, 2, 4, 5, 6, 7, 8], 4,
     True, {}, (1, 7, 2, 33)),
    ("test_split_decodes_and_prefills_uniform_padded_batch_all_same", [2, 2, 2, 0], 3, True,
     dict(padded_num_tokens=8), (4, 0, 8, 0)),
]


@pytest.mark.parametrize("name, query_lens, threshold, uniform, extra, expected", SPLIT_VECTORS,
                         ids=[v[0] for v in SPLIT_VECTORS])
def test_split_decodes_and_prefills(name, query_lens, threshold, uniform, extra, expected):
    """tests/v1/attention/test_attention_splitting.py::<name> (v0.33.0; ``uniform_short_extend``
    since v0.26.0)."""
    assert apply_split(query_lens, threshold, uniform, **extra) == expected


def _batch(rows, max_model_len=512, max_num_reqs=None, bugs=None):
    """An InputBatch holding ``rows`` = (num_computed, num_prompt) per row, ids r0, r1, ..."""
    ib = InputBatch(max_num_reqs or max(len(rows), 1), max_model_len, 1024, [MambaSpec(max_model_len)],
                    device="cpu", bugs=bugs)
    for i, (nc, np_) in enumerate(rows):
        ib.add_request(CachedRequestState(f"r{i}", list(range(np_)), ([i + 1],), num_computed_tokens=nc))
    return ib


@pytest.mark.parametrize("bugs, expected", [
    (BugConfig(), [False, True, False, False, False]),
    (BugConfig.with_bugs("stale-is-prefilling"), [False, True, False, True, True]),
], ids=["fixed", "stale-is-prefilling"])
def test_build_attention_metadata_zeros_stale_is_prefilling(bugs, expected):
    """tests/v1/attention/test_attention_splitting.py::test_build_attention_metadata_zeros_stale_is_prefilling
    (#41873, v0.22.0+): num_reqs 3 padded to 5, computed [50, 100, 200, 10, 20] and prompt
    [50, 200, 200, 100, 200]: rows 3 and 4 are stale (10 < 100, 20 < 200) and must read False.
    Upstream captures the keyword passed to CommonAttentionMetadata; here the stale rows are
    real leftovers of removed requests."""
    ib = _batch([(50, 50), (100, 200), (200, 200), (10, 100), (20, 200)], bugs=bugs)
    ib.remove_request("r3")
    ib.remove_request("r4")  # counts stay: what condense / remove_request leave behind
    buffers = RunnerBuffers(5, 16, device="cpu")
    (cm,) = build_attention_metadata(ib, buffers, num_reqs=3, num_reqs_padded=5, num_tokens_padded=5,
                                     max_query_len=1, bugs=bugs)
    assert cm.is_prefilling.tolist() == expected


# -- test_batch_reordering.py (v0.33.0) ----------------------------------------------------

REORDER_VECTORS = [  # (case, rows as (num_scheduled, num_computed, num_prompt), threshold, order, modified)
    ("all_decodes", [(1, 10, 10), (1, 20, 20), (1, 30, 30)], 1, [0, 1, 2], False),
    ("all_long_extends", [(100, 100, 100), (200, 200, 200), (300, 300, 300)], 1, [0, 1, 2], False),
    ("mixed_decodes_long_extends", [(100, 100, 100), (1, 10, 10), (200, 200, 200), (1, 20, 20)], 1,
     [3, 1, 2, 0], True),
    ("already_ordered", [(1, 10, 10), (1, 20, 20), (100, 100, 100), (200, 0, 200)], 1, [0, 1, 2, 3], False),
    ("single_request", [(1, 10, 10)], 1, [0], False),
    ("higher_threshold", [(2, 10, 10), (3, 20, 20), (5, 30, 30), (6, 40, 40)], 4, [0, 1, 2, 3], False),
    ("decodes_at_end", [(100, 100, 100), (200, 200, 200), (1, 10, 10), (1, 20, 20)], 1, [2, 3, 0, 1], True),
    ("decode_long_extend_prefill", [(100, 0, 100), (10, 50, 50), (1, 10, 10)], 1, [2, 1, 0], True),
    ("long_extend_prefill_only", [(100, 0, 100), (10, 50, 50), (200, 0, 200), (20, 75, 75)], 1,
     [3, 1, 2, 0], True),
    ("complicated_mixed", [(1, 20, 20), (1, 50, 50), (374, 0, 374), (300, 20, 20), (1, 20, 20), (256, 0, 256),
                           (1, 5, 5), (27, 0, 27), (1, 4, 4)], 1, [0, 1, 6, 8, 4, 3, 2, 7, 5], True),
    ("new_request_single_token_prefill", [(100, 0, 100), (1, 0, 1), (50, 100, 100), (1, 10, 10)], 1,
     [3, 2, 0, 1], True),
    ("multiple_new_requests_single_token_prefill", [(1, 0, 1), (1, 0, 1), (1, 50, 50), (200, 0, 200)], 1,
     [2, 1, 0, 3], True),
    ("four_way_already_ordered", [(1, 100, 100), (1, 50, 100), (10, 50, 100), (100, 0, 100)], 1,
     [0, 1, 2, 3], False),
    ("four_way_needs_reorder", [(100, 0, 100), (1, 50, 100), (1, 100, 100), (10, 50, 100)], 1,
     [2, 1, 3, 0], True),
    ("four_way_multiple_short_extends", [(2, 100, 100), (2, 50, 200), (2, 75, 150), (2, 200, 200)], 2,
     [0, 3, 2, 1], True),
    ("four_way_spec_decode_threshold", [(5, 100, 100), (5, 50, 100), (5, 0, 100), (10, 50, 100)], 5,
     [0, 1, 3, 2], True),
]


@pytest.mark.parametrize("case, rows, threshold, order, modified", REORDER_VECTORS,
                         ids=[v[0] for v in REORDER_VECTORS])
def test_reorder_batch_to_split_decodes_and_prefills(case, rows, threshold, order, modified):
    """tests/v1/attention/test_batch_reordering.py (v0.33.0), case <case>: the final order of
    the original rows, and whether anything moved (not a stable sort: see the docstring)."""
    ib = _batch([(nc, np_) for _, nc, np_ in rows])
    sched = np.array([ns for ns, _, _ in rows], dtype=np.int32)
    assert reorder_batch_to_split_decodes_and_prefills(ib, sched, threshold) is modified
    assert ib.req_ids == [f"r{i}" for i in order]
    assert sched.tolist() == [rows[i][0] for i in order]  # permuted with the rows
    assert ib.num_computed_tokens_cpu[: len(rows)].tolist() == [rows[i][1] for i in order]


# -- test_mamba_update_block_table.py (v0.31.0, mamba_cache_mode="all") ---------------------

def _builder(max_num_seqs, num_spec=1, nsb=2, max_model_len=256, block_size=16):
    spec = MambaSpec(block_size, "all", nsb)
    return MambaAttentionMetadataBuilder(spec, max_model_len, max_num_seqs, max_num_seqs, num_spec,
                                         full_cudagraph=True, device="cpu")


def test_mamba_single_token_prompt_runs_as_prefill():
    """tests/v1/attention/test_mamba_update_block_table.py::test_mamba_single_token_prompt_runs_as_prefill
    (v0.31.0; #42430): seq_lens [8, 9, 1], query_lens [1, 1, 1], is_prefilling [F, F, T]: a
    one-token *first* chunk has no prior state and stays a prefill."""
    b = MambaAttentionMetadataBuilder(MambaSpec(16, "all", 0), 256, 4, 4, 0, full_cudagraph=True, device="cpu")
    cm = create_common_attn_metadata([8, 9, 1], [1, 1, 1], is_prefilling=[False, False, True])
    md = b.build(cm)
    assert (md.num_decodes, md.num_prefills) == (2, 1)
    assert md.has_initial_states_p.tolist() == [False]


def test_state_indices_tensor_d_includes_num_speculative_blocks():
    """...::test_state_indices_tensor_d_includes_num_speculative_blocks (v0.31.0; #41233 part 1):
    block 16, max_model_len 256, max_num_seqs 4, 1 spec token, 2 speculative blocks."""
    assert tuple(_builder(4).state_indices_tensor_d.shape) == (4, 256 // 16 + 2) == (4, 18)


@pytest.mark.parametrize("prev_step", [False, True])
def test_block_idx_cudagraph_capture_padded_by_num_reqs(prev_step):
    """...::test_block_idx_cudagraph_capture_padded_by_num_reqs and
    ...::test_block_idx_prev_step_cudagraph_capture_uses_persistent_buffer (v0.31.0; #41233
    part 2): max_num_seqs 8, persistent block_idx_* pre-filled with -1, 2 decodes of 3 requests
    (4 decode tokens), block idx [3, 5] (prev step [2, 4]) -> shape (3,), [3, 5, 0] ([2, 4, 0]),
    in the builder's own storage."""
    b = _builder(8)
    names = ["block_idx_last_scheduled_token", "block_idx_last_computed_token"]
    if prev_step:
        names.append("block_idx_last_scheduled_token_prev_step")
    for n in names:
        getattr(b, n).fill_(-1)
    md = MambaAttentionMetadata(
        num_prefills=0, num_prefill_tokens=0, num_decodes=2, num_decode_tokens=4, num_reqs=3,
        has_initial_states_p=None, query_start_loc_p=None, num_computed_tokens_p=None,
        state_indices_tensor_p=None, state_indices_tensor_d=torch.zeros(2, 18, dtype=torch.int32),
        query_start_loc_d=torch.tensor([0, 2, 4], dtype=torch.int32),
        num_accepted_tokens=torch.tensor([1, 1], dtype=torch.int32),
        block_idx_last_scheduled_token=torch.tensor([3, 5], dtype=torch.int32),
        block_idx_last_computed_token=torch.tensor([3, 5], dtype=torch.int32),
        block_idx_last_scheduled_token_prev_step=torch.tensor([2, 4], dtype=torch.int32) if prev_step else None,
    )
    b._update_metadata_for_cudagraph_capture(md, padded_bs=3)
    for n in names[:2]:
        t = getattr(md, n)
        assert tuple(t.shape) == (3,) and t.tolist() == [3, 5, 0]
        assert t.untyped_storage().data_ptr() == getattr(b, n).untyped_storage().data_ptr()
    if prev_step:
        t = md.block_idx_last_scheduled_token_prev_step
        assert t.tolist() == [2, 4, 0]
        assert t.untyped_storage().data_ptr() == b.block_idx_last_scheduled_token_prev_step.untyped_storage().data_ptr()


def test_block_idx_prev_step_persistent_buffer():
    """...::test_block_idx_prev_step_persistent_buffer_allocated / ..._skipped_without_spec_decode
    (v0.31.0): with spec decode an int32 buffer of (max_num_seqs,) = (8,); without, none."""
    b = _builder(8)
    assert tuple(b.block_idx_last_scheduled_token_prev_step.shape) == (8,)
    assert b.block_idx_last_scheduled_token_prev_step.dtype == torch.int32
    assert _builder(8, num_spec=0, nsb=0).block_idx_last_scheduled_token_prev_step is None


# -- tests/v1/worker/test_gpu_block_table.py, test_gpu_input_batch.py (v0.33.0) ------------

def test_v1_block_table_move_row_clears_vacated_row():
    """tests/v1/worker/test_gpu_block_table.py::test_v1_block_table_move_row_clears_vacated_row
    (#49757, v0.27.0+): block size 16, 4 requests, 8 blocks each, 64 batched tokens."""
    bt = BlockTable(16, 4, 8, 64, device="cpu")
    bt.add_row([7, 8, 9], 0)
    bt.add_row([4, 5], 1)
    bt.move_row(1, 0)
    np_ = bt.block_table.np
    assert np_[0, :2].tolist() == [4, 5]
    assert bt.num_blocks_per_row[0] == 2 and bt.num_blocks_per_row[1] == 0
    assert (np_[1] == 0).all()
    assert np_[0, 2] == 9  # the target's stale tail: only the count says 2 (#39591 unmerged)


def _full_batch(order, n=32):
    ib = InputBatch(n, 1024, 1024, [AttentionSpec(1)], device="cpu")
    rng = np.random.default_rng(0)
    prompts = [[int(x) for x in rng.integers(0, 1000, size=int(rng.integers(1, 64)))] for _ in range(n)]
    for i in order:  # each request's contents depend on its id only, not on the order
        ib.add_request(CachedRequestState(f"r{i}", prompts[i], (list(range(1, len(prompts[i]) + 1)),),
                                          num_computed_tokens=i % 3))
    return ib


def test_swap_states_in_input_batch():
    """tests/v1/worker/test_gpu_input_batch.py::test_swap_states_in_input_batch (v0.33.0): 32
    requests, block size 1, 1024 blocks per request; swap rows 0 and 1 and compare every
    per-row array (block tables included) with a batch built in the swapped order."""
    n = 32
    swapped = [1, 0] + list(range(2, n))
    a = _full_batch(range(n))
    a.swap_states(0, 1)
    b = _full_batch(swapped)
    assert a.req_ids == b.req_ids == [f"r{i}" for i in swapped]
    for name in ("token_ids_cpu", "num_tokens_no_spec", "num_prompt_tokens", "num_computed_tokens_cpu",
                 "num_accepted_tokens_cpu"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    for ta, tb in zip(a.block_table.block_tables, b.block_table.block_tables):
        assert np.array_equal(ta.block_table.np, tb.block_table.np)
        assert np.array_equal(ta.num_blocks_per_row, tb.num_blocks_per_row)
