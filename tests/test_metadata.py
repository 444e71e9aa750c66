import numpy as np
import pytest
import torch

from mambalab.lab.bugs import BugConfig
from mambalab.constants import NULL_BLOCK_ID, PAD_SLOT_ID
from mambalab.worker.input_batch import CachedRequestState, InputBatch
from mambalab.core.kv_cache_interface import AttentionSpec, MambaSpec
from mambalab.attention.metadata import (
    CommonAttentionMetadata,
    build_attention_metadata,
    reorder_batch_to_split_decodes_and_prefills,
    split_decodes_and_prefills,
)
from mambalab.worker.runner_inputs import RunnerBuffers


def cm_from(query_lens, num_tokens=None, is_prefilling=None, seq_lens=None):
    ql = torch.tensor(query_lens, dtype=torch.int32)
    qsl = torch.zeros(len(ql) + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(ql, 0)
    seq = torch.tensor(seq_lens if seq_lens is not None else [int(x) + 10 for x in ql], dtype=torch.int32)
    return CommonAttentionMetadata(
        query_start_loc=qsl, query_start_loc_cpu=qsl, seq_lens=seq, seq_lens_cpu_upper_bound=seq,
        num_reqs=len(ql), num_actual_tokens=num_tokens if num_tokens is not None else int(ql.sum()),
        max_query_len=int(ql.max()), max_seq_len=int(seq.max()),
        block_table_tensor=torch.zeros(len(ql), 1, dtype=torch.int32),
        slot_mapping=torch.zeros(int(ql.sum()), dtype=torch.int64),
        is_prefilling=None if is_prefilling is None else torch.tensor(is_prefilling),
    )


# -- upstream's vectors (tests/v1/attention/test_attention_splitting.py) --------

def test_short_extend_counts_as_prefill_when_flag_is_false():
    cm = cm_from([1, 1], is_prefilling=[False, True])
    assert split_decodes_and_prefills(cm, 1, treat_short_extends_as_decodes=False) == (1, 1, 1, 1)
    assert split_decodes_and_prefills(cm, 1) == (2, 0, 2, 0)


def test_require_uniform_with_padding_row():
    cm = cm_from([2, 2, 2, 0], num_tokens=8)
    assert split_decodes_and_prefills(cm, decode_threshold=3, require_uniform=True) == (4, 0, 8, 0)


@pytest.mark.parametrize(
    "query_lens, threshold, expect",
    [
        ([1, 1, 1], 1, (3, 0, 3, 0)),
        ([1, 1, 5, 7], 1, (2, 2, 2, 12)),
        ([4, 1, 1], 1, (0, 3, 0, 6)),  # first row long: all prefills
        ([2, 2, 3], 2, (2, 1, 4, 3)),
        ([1, 0, 0], 1, (3, 0, 1, 0)),  # padded rows are decodes
    ],
)
def test_split_semantics(query_lens, threshold, expect):
    assert split_decodes_and_prefills(cm_from(query_lens), threshold) == expect


def test_require_uniform_non_uniform_rows_are_prefills():
    cm = cm_from([2, 2, 1, 3])
    assert split_decodes_and_prefills(cm, 3, require_uniform=True) == (2, 2, 4, 4)


def test_stale_is_prefilling_turns_padded_rows_into_prefills():
    cm = cm_from([1, 1, 1, 0, 0], num_tokens=5, is_prefilling=[False, False, False, True, False])
    assert split_decodes_and_prefills(cm, 1, treat_short_extends_as_decodes=False) == (3, 2, 3, 2)


def test_missing_is_prefilling_is_a_clear_error():
    with pytest.raises(ValueError, match="is_prefilling"):
        split_decodes_and_prefills(cm_from([1, 1]), 1, treat_short_extends_as_decodes=False)


# -- _build_attention_metadata -----------------------------------------------

def batch_with_stale_rows(bugs):
    ib = InputBatch(8, 256, 64, [AttentionSpec(16), MambaSpec(256)], bugs=bugs)
    for i in range(5):
        ib.add_request(CachedRequestState(f"r{i}", [1] * 8, ([i + 1], [i + 11])))
    # upstream's vector: rows 3 and 4 are stale (num_reqs = 3)
    ib.num_computed_tokens_cpu[:5] = [50, 100, 200, 10, 20]
    ib.num_prompt_tokens[:5] = [50, 200, 200, 100, 200]
    return ib


def build(bugs, num_reqs=3, num_reqs_padded=5):
    ib = batch_with_stale_rows(bugs)
    buf = RunnerBuffers(8, 64)
    ib.block_table.commit_block_table(5)
    return ib, build_attention_metadata(ib, buf, num_reqs, num_reqs_padded, 8, 1, bugs)


def test_is_prefilling_padded_rows_zeroed_after_fix():
    _, cms = build(BugConfig())
    assert cms[0].is_prefilling.tolist() == [False, True, False, False, False]


def test_is_prefilling_stale_with_bug():
    _, cms = build(BugConfig.with_bugs("stale-is-prefilling"))
    assert cms[0].is_prefilling.tolist() == [False, True, False, True, True]


@pytest.mark.parametrize("bugs, pad", [(BugConfig(), NULL_BLOCK_ID), (BugConfig.with_bugs("pad-minus-one"), PAD_SLOT_ID)])
def test_padded_block_table_rows_filled(bugs, pad):
    ib, cms = build(bugs)
    for g, cm in enumerate(cms):
        assert cm.block_table_tensor.shape[0] == 5 and cm.num_reqs == 5
        assert (cm.block_table_tensor[3:] == pad).all()
        # the fill lands in the persistent device table (a view), not in the CPU mirror
        assert (ib.block_table[g].block_table.gpu[3:5] == pad).all()
        assert ib.block_table[g].block_table.np[3, 0] != pad
        assert cm.block_table_tensor[:3, 0].tolist() == ib.block_table[g].block_table.np[:3, 0].tolist()


def test_dummy_shape_has_no_null_fill():
    ib, cms = build(BugConfig(), num_reqs=5, num_reqs_padded=5)
    assert cms[1].block_table_tensor[:, 0].tolist() == [11, 12, 13, 14, 15]


def test_build_bad_sizes():
    ib = batch_with_stale_rows(BugConfig())
    with pytest.raises(ValueError, match="num_reqs_padded"):
        build_attention_metadata(ib, RunnerBuffers(8, 64), 4, 3, 8, 1)
    with pytest.raises(ValueError, match="num_tokens_padded"):
        build_attention_metadata(ib, RunnerBuffers(8, 64), 3, 3, 999, 1)


# -- decode-first reorder ---------------------------------------------------------

def test_reorder_puts_decodes_first():
    ib = InputBatch(8, 64, 64, [MambaSpec(64)])
    kinds = [("p", 0, 8), ("d", 8, 1), ("e", 4, 4), ("d", 8, 1), ("s", 2, 1)]
    for i, (_, computed, _) in enumerate(kinds):
        ib.add_request(CachedRequestState(f"{kinds[i][0]}{i}", [1] * 8, ([i + 1],), computed))
    ib.num_prompt_tokens[:5] = [8, 8, 8, 8, 8]
    sched = np.array([k[2] for k in kinds])
    assert reorder_batch_to_split_decodes_and_prefills(ib, sched, 1, treat_short_extends_as_decodes=False)
    order = [r[0] for r in ib.req_ids]
    # decode, short extend (1 token while still prefilling), long extend, prefill
    assert order[:2] == ["d", "d"] and order[2:] == ["s", "e", "p"]
    assert sched.tolist() == [1, 1, 1, 4, 8]
    # rows travelled with their state
    for rid, row in ib.req_id_to_index.items():
        assert ib.block_table[0].row(row) == [int(rid[1:]) + 1]
    assert not reorder_batch_to_split_decodes_and_prefills(ib, sched, 1, False)


# -- CommonAttentionMetadata takes exactly vLLM 0.33's constructor arguments ----------------

V033_FIELDS = [
    "query_start_loc", "query_start_loc_cpu", "seq_lens", "num_reqs", "num_actual_tokens",
    "max_query_len", "max_seq_len", "block_table_tensor", "slot_mapping", "causal",
    "logits_indices_padded", "num_logits_indices", "max_logits_per_req", "encoder_seq_lens",
    "encoder_seq_lens_cpu", "dcp_local_seq_lens", "dcp_local_seq_lens_cpu_upper_bound",
    "positions", "is_prefilling", "seq_lens_cpu_upper_bound", "req_idx", "mm_req_doc_ranges",
    "rswa_prefix_lens", "replayssm_decode_base_cpu", "_num_computed_tokens_cache",
    "_token_to_req_indices_cache",
]


def test_common_attention_metadata_has_v033_fields():
    """``vllm/v1/attention/backend.py`` at v0.33: nine required fields, the rest optional; no
    ``seq_lens_cpu`` (a learner building one the upstream way must not get a TypeError)."""
    import dataclasses

    fields = dataclasses.fields(CommonAttentionMetadata)
    assert [f.name for f in fields] == V033_FIELDS
    required = [f.name for f in fields if f.default is dataclasses.MISSING]
    assert required == V033_FIELDS[:9]
    qsl = torch.tensor([0, 1, 3], dtype=torch.int32)
    seq = torch.tensor([5, 7], dtype=torch.int32)
    cm = CommonAttentionMetadata(qsl, qsl, seq, 2, 3, 2, 7, torch.zeros(2, 1, dtype=torch.int32),
                                 torch.zeros(3, dtype=torch.int64))
    assert cm.seq_lens_cpu.tolist() == [5, 7]  # derived from seq_lens
    assert cm.num_computed_tokens_cpu.tolist() == [4, 5] and cm.batch_size() == 2
    with pytest.raises(TypeError):
        CommonAttentionMetadata(qsl, qsl, seq, 2, 3, 2, 7, torch.zeros(2, 1), torch.zeros(3), seq_lens_cpu=seq)
