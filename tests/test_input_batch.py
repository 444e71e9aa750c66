import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mambalab.core.block_pool import BlockPool
from mambalab.lab.bugs import BugConfig
from mambalab.constants import NULL_BLOCK_ID
from mambalab.worker.input_batch import CachedRequestState, InputBatch
from mambalab.core.kv_cache_interface import AttentionSpec, MambaSpec


def make_batch(bugs=None, rows=6, num_blocks=None):
    return InputBatch(rows, 32, 64, [AttentionSpec(8), MambaSpec(32)], bugs=bugs, num_blocks=num_blocks)


def req(i, prompt=3, computed=0, attn=None, mamba=None):
    return CachedRequestState(
        f"r{i}", list(range(100 + i, 100 + i + prompt)),
        (attn if attn is not None else [10 + i], mamba if mamba is not None else [20 + i]),
        num_computed_tokens=computed,
    )


def test_add_reuses_lowest_hole():
    ib = make_batch()
    for i in range(4):
        assert ib.add_request(req(i)) == i
    ib.remove_request("r2")
    ib.remove_request("r1")
    assert ib.add_request(req(7)) == 1
    assert ib.add_request(req(8)) == 2
    assert ib.add_request(req(9)) == 4


def test_remove_leaves_counts_stale_and_clears_row_after_fix():
    ib = make_batch()
    ib.add_request(req(0, prompt=10, computed=4))  # aborted mid-prefill below
    ib.add_request(req(1))
    row = ib.remove_request("r0")
    assert row == 0 and ib._req_ids[0] is None
    assert ib.num_computed_tokens_cpu[0] == 4 and ib.num_prompt_tokens[0] == 10  # stale (#41873)
    assert ib.block_table[0].block_table.np[0, 0] == NULL_BLOCK_ID  # cleared (#37728)
    assert ib.block_table[1].block_table.np[0, 0] == NULL_BLOCK_ID
    assert ib.remove_request("nope") is None


def test_stale_rows_bug_keeps_finished_rows():
    ib = make_batch(BugConfig.with_bugs("stale-rows"))
    ib.add_request(req(0))
    ib.remove_request("r0")
    ib.condense()
    assert ib.num_reqs == 0
    assert ib.block_table[1].block_table.np[0, 0] == 20  # a freed block, still in the table


def test_condense_clears_the_vacated_row_after_the_fix():
    ib = make_batch()
    for i in range(4):
        ib.add_request(req(i, prompt=3 + i, computed=i))
    ib.remove_request("r1")
    ib.condense()
    assert ib.block_table[1].block_table.np[3, 0] == NULL_BLOCK_ID  # #49757
    assert ib.block_table[1].num_blocks_per_row[3] == 0
    assert ib.num_prompt_tokens[3] == 6  # counts still stale (#41873 lives on them)


def test_condense_moves_highest_into_lowest_and_leaves_source_stale():
    ib = make_batch(BugConfig.with_bugs("move-row-stale-source"))
    for i in range(4):
        ib.add_request(req(i, prompt=3 + i, computed=i))
    ib.remove_request("r1")
    ib.condense()
    assert ib.req_ids == ["r0", "r3", "r2"]
    assert ib.req_id_to_index == {"r0": 0, "r3": 1, "r2": 2}
    # row 3 keeps r3's counts and (before #49757) its block-table row
    assert ib.num_prompt_tokens[3] == 6 and ib.num_computed_tokens_cpu[3] == 3
    assert ib.block_table[1].row(1) == [23]
    assert ib.block_table[1].block_table.np[3, 0] == 23
    assert ib.token_ids_cpu[1, :6].tolist() == list(range(103, 109))


def test_condense_with_trailing_holes_and_empty_batch():
    ib = make_batch()
    for i in range(3):
        ib.add_request(req(i))
    ib.remove_request("r2")
    ib.remove_request("r1")
    ib.condense()
    assert ib.req_ids == ["r0"] and len(ib._req_ids) == 1
    ib.remove_request("r0")
    ib.condense()
    assert ib.num_reqs == 0 and ib._req_ids == []
    assert ib.add_request(req(5)) == 0


def test_swap_states_swaps_everything():
    ib = make_batch()
    ib.add_request(req(0, prompt=2))
    ib.add_request(req(1, prompt=5, computed=3))
    ib.num_accepted_tokens_cpu[1] = 2
    ib.swap_states(0, 1)
    assert ib.req_ids == ["r1", "r0"]
    assert ib.num_prompt_tokens[:2].tolist() == [5, 2]
    assert ib.num_computed_tokens_cpu[:2].tolist() == [3, 0]
    assert ib.num_accepted_tokens_cpu[:2].tolist() == [2, 1]
    assert ib.block_table[0].row(0) == [11]
    assert ib.token_ids_cpu[0, :5].tolist() == list(range(101, 106))
    with pytest.raises(IndexError, match="row 4"):
        ib.swap_states(0, 4)


def test_append_output_token():
    ib = make_batch()
    ib.add_request(req(0, prompt=2))
    ib.append_output_token("r0", 42)
    assert ib.token_ids_cpu[0, :3].tolist() == [100, 101, 42]
    assert ib.num_tokens_no_spec[0] == 3


@pytest.mark.parametrize(
    "make_req, match",
    [
        (lambda: req(0, prompt=40), "max_model_len"),
        (lambda: req(0, computed=9), "num_computed_tokens"),
        (lambda: CachedRequestState("x", [1], ([1],)), "groups"),
        (lambda: req(0, mamba=[-1]), "PAD_SLOT_ID"),
        (lambda: req(0, attn=[99]), "out of range"),
    ],
)
def test_bad_requests(make_req, match):
    ib = make_batch(num_blocks=64)
    with pytest.raises(ValueError, match=match):
        ib.add_request(make_req())
    assert ib.num_reqs == 0


def test_duplicate_and_full():
    ib = make_batch(rows=1)
    ib.add_request(req(0))
    with pytest.raises(ValueError, match="already"):
        ib.add_request(req(0))
    with pytest.raises(ValueError, match="full"):
        ib.add_request(req(1))


# -- properties under random add / remove / condense / swap -----------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 12), st.integers(0, 12)),
        st.tuples(st.just("remove"), st.integers(0, 50)),
        st.tuples(st.just("condense")),
        st.tuples(st.just("swap"), st.integers(0, 50), st.integers(0, 50)),
    ),
    max_size=40,
)


def run_ops(sequence, bugs):
    pool = BlockPool(64)
    ib = InputBatch(6, 32, 64, [AttentionSpec(8), MambaSpec(32)], bugs=bugs, num_blocks=64)
    blocks: dict[str, tuple[list[int], list[int]]] = {}
    counter = 0
    for op in sequence:
        live = list(ib.req_id_to_index)
        if op[0] == "add":
            if ib.num_reqs >= 6:
                continue
            rid = f"q{counter}"
            counter += 1
            prompt, computed = op[1], min(op[2], op[1])
            ids = (pool.allocate(-(-prompt // 8), rid), pool.allocate(1, rid))
            blocks[rid] = ids
            ib.add_request(CachedRequestState(rid, list(range(prompt)), ids, computed))
        elif op[0] == "remove" and live:
            rid = live[op[1] % len(live)]
            row = ib.remove_request(rid)
            pool.free(blocks[rid][0] + blocks[rid][1])
            yield "removed", ib, row, blocks.pop(rid)
        elif op[0] == "condense":
            ib.condense()
            yield "condensed", ib, None, None
        elif op[0] == "swap" and not ib._removed and ib.num_reqs >= 2:
            a, b = op[1] % ib.num_reqs, op[2] % ib.num_reqs
            if a != b:
                ib.swap_states(a, b)
        yield "step", ib, None, blocks


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_live_rows_hold_their_blocks_and_removed_rows_are_cleared(sequence):
    blocks_now = {}
    for kind, ib, row, extra in run_ops(sequence, BugConfig()):
        if kind == "step":
            blocks_now = extra
            for rid, r in ib.req_id_to_index.items():
                assert ib._req_ids[r] == rid
                for g in range(2):
                    assert ib.block_table[g].row(r) == blocks_now[rid][g]
        elif kind == "removed":
            # clear_row zeroes the entries the request used (#37728); entries past them
            # may be stale leftovers of an earlier, longer tenant, exactly as in vLLM.
            removed_blocks = extra
            for g in range(2):
                bt = ib.block_table[g]
                assert bt.num_blocks_per_row[row] == 0
                assert (bt.block_table.np[row, : len(removed_blocks[g])] == NULL_BLOCK_ID).all()
        elif kind == "condensed":
            assert None not in ib._req_ids and len(ib._req_ids) == ib.num_reqs
            assert sorted(ib.req_id_to_index.values()) == list(range(ib.num_reqs))


@settings(max_examples=100, deadline=None)
@given(ops)
def test_with_stale_rows_bug_removed_rows_keep_freed_blocks(sequence):
    for kind, ib, row, _ in run_ops(sequence, BugConfig.with_bugs("stale-rows")):
        if kind == "removed":
            assert ib.block_table[1].block_table.np[row, 0] != NULL_BLOCK_ID


def test_add_row_leaves_the_tail_of_a_longer_former_tenant():
    """vLLM's add_row resets the count, not the row: a later clear_row zeroes only [:n]."""
    ib = make_batch(BugConfig.with_bugs("move-row-stale-source"))
    ib.add_request(req(0))
    ib.add_request(req(1, attn=[5, 6, 7]))
    ib.remove_request("r0")
    ib.condense()  # r1 moves to row 0; row 1 keeps a copy of [5, 6, 7]
    assert ib.add_request(req(2, attn=[9])) == 1
    ib.remove_request("r2")
    assert ib.block_table[0].block_table.np[1, :3].tolist() == [0, 6, 7]


@pytest.mark.parametrize("bugs", [BugConfig(), BugConfig.with_bugs("zero-accepted")], ids=["fixed", "zero-accepted"])
def test_num_accepted_starts_at_one_and_add_request_resets_it(bugs):
    """Upstream V1 (every release the lab mirrors): ``torch.ones`` and a reset to 1 in
    add_request; ``zero-accepted`` (#48475) does not touch the InputBatch (the GDN kernels'
    column load is the bug; the lab's zero comes from a padded row)."""
    ib = make_batch(bugs)
    assert ib.num_accepted_tokens_cpu.tolist() == [1] * 6
    ib.add_request(req(0))
    ib.num_accepted_tokens_cpu[0] = 3  # the previous tenant accepted two drafts
    ib.remove_request("r0")
    assert ib.add_request(req(1)) == 0
    assert ib.num_accepted_tokens_cpu[0] == 1  # not the previous tenant's count
