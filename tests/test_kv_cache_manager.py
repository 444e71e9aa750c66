"""KVCacheManager: Mamba block lists per mamba_cache_mode, and prefix caching in "all" mode."""

import pytest

from mambalab.lab.bugs import BugConfig
from mambalab.constants import NULL_BLOCK_ID
from mambalab.core.kv_cache_manager import (
    KVCacheManager,
    block_hashes_of,
    hash_block_tokens,
)
from mambalab.core.kv_cache_interface import MambaSpec
from mambalab.core.request import Request

B = 4


def mgr(mode="all", nsb=0, num_blocks=32, max_model_len=32, **kw):
    return KVCacheManager(MambaSpec(B, mode, nsb), num_blocks, max_model_len, nsb, BugConfig(), **kw)


def compute(m, req, n):
    """What the scheduler + engine do for n tokens: allocate, compute, cache."""
    new = m.allocate_slots(req, n)
    assert new is not None
    req.num_computed_tokens += n
    m.cache_full_blocks(req)
    return new


def finished_prefill(m, rid, prompt):
    r = Request(rid, prompt, 4)
    compute(m, r, len(prompt))
    return r


# -- "none" mode ---------------------------------------------------------------


@pytest.mark.parametrize("nsb", [0, 1, 2])
def test_none_mode_gives_one_plus_nsb_blocks_once(nsb):
    m = mgr("none", nsb, num_blocks=8)
    r = Request("r", list(range(20)), 4)
    assert m.allocate_slots(r, 20) == list(range(1, 2 + nsb))
    assert r.block_ids == m.get_block_ids(r)[0] == list(range(1, 2 + nsb))
    r.num_computed_tokens = 20
    assert m.allocate_slots(r, 1 + nsb) == []  # running: never grows
    assert m.get_computed_blocks(Request("s", list(range(20)), 4)) == ([], 0)  # no caching
    assert m.cache_full_blocks(r) == [] and m.block_pool.num_cached_blocks == 0


def test_none_mode_pool_short_and_free_poisons():
    m = mgr("none", 2, num_blocks=5)  # 4 allocatable: one request of 3
    freed = []
    m.on_free = lambda b, cached: freed.append((b, cached))
    a, b = Request("a", [1], 2), Request("b", [1], 2)
    assert m.allocate_slots(a, 1) == [1, 2, 3]
    assert m.allocate_slots(b, 1) is None and b.block_ids == []
    m.free(a)
    assert a.block_ids == [] and freed == [(3, False), (2, False), (1, False)]  # tail first
    assert m.allocate_slots(b, 1) == [4, 3, 2]
    assert m.usage() == 0.75


# -- "all" mode: growth --------------------------------------------------------


@pytest.mark.parametrize("nsb", [0, 2])
def test_all_mode_list_follows_the_tokens_plus_lookahead_blocks(nsb):
    m = mgr("all", nsb)
    r = Request("r", list(range(9)), 8)
    assert len(m.allocate_slots(r, 9)) == 3 + nsb  # cdiv(9, 4) + nsb
    r.num_computed_tokens = 9
    assert m.allocate_slots(r, 1) == []  # 10 tokens still fit in 3 blocks
    assert len(r.block_ids) == 3 + nsb
    assert len(m.allocate_slots(r, 4)) == 1  # 13 tokens: 4 + nsb
    r.num_computed_tokens = 10  # drafts rejected: the list never shrinks
    assert m.allocate_slots(r, 1) == [] and len(r.block_ids) == 4 + nsb
    # num_lookahead_tokens reserves blocks for proposer tokens as upstream.
    assert len(m.allocate_slots(r, 1, num_lookahead_tokens=8)) == 1  # cdiv(19, 4) = 5


def test_all_mode_is_capped_at_the_block_table_width():
    m = mgr("all", 1, max_model_len=10)
    r = Request("r", list(range(9)), 8)
    m.allocate_slots(r, 9, num_lookahead_tokens=50)
    assert len(r.block_ids) == m.max_num_blocks_per_req == 3 + 1


def test_all_mode_returns_none_when_short_and_changes_nothing():
    m = mgr("all", 0, num_blocks=9, max_model_len=32)  # 8 allocatable
    a = Request("a", list(range(20)), 4)
    assert len(m.allocate_slots(a, 20)) == 5
    b = Request("b", list(range(100, 120)), 4)
    assert m.allocate_slots(b, 20) is None
    assert b.block_ids == [] and m.get_block_ids(b) == ([],)
    assert m.block_pool.get_num_free_blocks() == 3


# -- prefix caching ------------------------------------------------------------


def test_hashes_are_chained():
    toks = list(range(12))
    hs = block_hashes_of(toks, 4)
    assert len(hs) == 3 and hs[1] == hash_block_tokens(hs[0], toks[4:8])
    other = block_hashes_of([99, 98, 97, 96] + toks[4:8], 4)
    assert other[1] != hs[1]  # same block content after a different prefix
    assert block_hashes_of(toks[:11], 4) == hs[:2]  # only full blocks


def test_full_blocks_are_cached_as_they_fill():
    m = mgr("all")
    r = Request("r", list(range(10)), 8)
    assert compute(m, r, 3) == [1]
    assert m.block_pool.num_cached_blocks == 0  # block 0 is partial
    compute(m, r, 6)  # 9 computed: blocks 0, 1 full
    assert m.block_pool.cached_block_ids() == r.block_ids[:2]
    assert m.block_pool.block_hash(r.block_ids[1]) == block_hashes_of(list(range(10)), 4)[1]


def test_prefix_hit_is_null_placeholders_then_the_last_hit_block():
    m = mgr("all", 1)
    a = finished_prefill(m, "a", list(range(10)))  # 2 full blocks cached
    b = Request("b", list(range(8)) + [50, 51, 52], 4)
    hit, n = m.get_computed_blocks(b)
    assert hit == [NULL_BLOCK_ID, a.block_ids[1]] and n == 8
    new = m.allocate_slots(b, 3, num_new_computed_tokens=n, new_computed_blocks=hit)
    assert len(new) == 2  # cdiv(11, 4) + 1 - 2
    assert b.block_ids == [NULL_BLOCK_ID, a.block_ids[1]] + new
    assert m.block_pool.ref_count(a.block_ids[1]) == 2  # shared, read-only
    m.free(b)
    assert m.block_pool.ref_count(a.block_ids[1]) == 1


def test_at_least_one_token_is_left_to_compute():
    m = mgr("all")
    a = finished_prefill(m, "a", list(range(12)))  # 3 full blocks cached
    exact = Request("c", list(range(8)), 4)  # whole prompt cached: back off one block
    assert m.get_computed_blocks(exact) == ([a.block_ids[0]], 4)
    longer = Request("d", list(range(9)), 4)
    assert m.get_computed_blocks(longer) == ([NULL_BLOCK_ID, a.block_ids[1]], 8)


def test_same_block_content_after_a_different_prefix_is_no_hit():
    m = mgr("all")
    finished_prefill(m, "a", list(range(12)))
    d = Request("d", [99, 98, 97, 96] + list(range(4, 12)) + [1], 4)
    assert m.get_computed_blocks(d) == ([], 0)


def test_cached_blocks_survive_free_in_fifo_order_until_evicted():
    m = mgr("all", num_blocks=10, max_model_len=12)  # 9 allocatable
    evicted = []
    m.on_evict = evicted.append
    a = finished_prefill(m, "a", list(range(10)))  # blocks 1, 2 (cached), 3 (partial)
    m.free(a)  # tail first: queue [4..9, 3, 2, 1]
    assert m.block_pool.free_block_ids() == [4, 5, 6, 7, 8, 9, 3, 2, 1]
    probe = Request("p", list(range(9)), 4)
    assert m.get_computed_blocks(probe) == ([NULL_BLOCK_ID, 2], 8)
    x = Request("x", [7] * 11, 4)
    assert m.allocate_slots(x, 11) == [4, 5, 6]
    y = Request("y", [6] * 11, 4)
    assert m.allocate_slots(y, 11) == [7, 8, 9] and evicted == []
    z = Request("z", [5] * 7, 4)
    assert m.allocate_slots(z, 7) == [3, 2]  # the partial block, then block 1 of "a": evicted
    assert evicted == [2]
    # Block 0 of "a" is still cached: the hit shrinks to one block.
    assert m.get_computed_blocks(probe) == ([1], 4)


def test_hit_searches_from_the_right_even_if_earlier_blocks_were_evicted():
    # free_skipped_blocks releases block 0 of "a" mid-request (upstream Mamba).
    m = mgr("all", num_blocks=10, max_model_len=16, free_skipped_blocks=True)
    a = Request("a", list(range(13)), 4)
    compute(m, a, 9)
    assert m.allocate_slots(a, 4) == [4]
    assert a.block_ids == [NULL_BLOCK_ID, NULL_BLOCK_ID, 3, 4]  # (9 - 1) // 4 = 2 blocks released
    assert m.block_pool.free_block_ids()[-2:] == [2, 1]
    assert m.block_pool.is_cached(1) and m.block_pool.is_cached(2)
    a.num_computed_tokens = 13
    m.cache_full_blocks(a)
    m.block_pool.allocate(m.block_pool.get_num_free_blocks() - 1)  # evicts block 2 ... keeps 1
    assert m.block_pool.free_block_ids() == [1] and not m.block_pool.is_cached(2)
    # Block 2 (tokens 4..7) is gone but block 3 (tokens 8..11) is still cached.
    probe = Request("p", list(range(13)), 4)
    assert m.get_computed_blocks(probe) == ([NULL_BLOCK_ID, NULL_BLOCK_ID, 3], 12)


def test_a_free_hit_costs_one_free_block():
    m = mgr("all", num_blocks=6, max_model_len=16)  # 5 allocatable
    a = finished_prefill(m, "a", list(range(9)))  # [1, 2, 3]
    m.free(a)  # queue [4, 5, 3, 2, 1], 2 cached
    b = Request("b", list(range(8)) + [50] * 8, 4)  # 16 tokens: needs 4 blocks, hit 2
    hit, n = m.get_computed_blocks(b)
    assert hit == [NULL_BLOCK_ID, 2]
    filler = m.block_pool.allocate(3)  # leave 2 free: one is the hit
    assert m.allocate_slots(b, 8, num_new_computed_tokens=n, new_computed_blocks=hit) is None
    assert m.block_pool.is_cached(2) and not m.block_pool.is_allocated(2)
    m.block_pool.free(filler[:1])
    new = m.allocate_slots(b, 8, num_new_computed_tokens=n, new_computed_blocks=hit)
    assert new is not None and len(new) == 2 and b.block_ids[:2] == [NULL_BLOCK_ID, 2]


def test_freed_blocks_report_whether_they_are_cached():
    m = mgr("all", 1)
    seen = []
    m.on_free = lambda b, cached: seen.append((b, cached))
    a = finished_prefill(m, "a", list(range(6)))  # cdiv(6,4) + 1 = 3 blocks, block 0 full
    m.free(a)
    assert seen == [(3, False), (2, False), (1, True)]


# -- bad input -----------------------------------------------------------------


def test_bad_configuration():
    with pytest.raises(NotImplementedError, match="align"):
        KVCacheManager(MambaSpec(B, "align", 0), 32, 32, 0)
    with pytest.raises(ValueError, match="allocatable"):
        KVCacheManager(MambaSpec(B, "all", 0), 8, 32, 0)  # needs 8 blocks, 7 allocatable
    with pytest.raises(ValueError, match="num_speculative"):
        KVCacheManager(MambaSpec(B, "all", 1), 32, 32, 2)
    with pytest.raises(TypeError, match="MambaSpec"):
        KVCacheManager(object(), 32, 32, 0)


def test_bad_allocation_calls():
    m = mgr("all")
    a = finished_prefill(m, "a", list(range(9)))
    with pytest.raises(ValueError, match="num_new_tokens"):
        m.allocate_slots(a, 0)
    with pytest.raises(ValueError, match="already holds"):
        m.allocate_slots(a, 1, num_new_computed_tokens=4, new_computed_blocks=[1])
    b = Request("b", list(range(9)), 4)
    with pytest.raises(ValueError, match="covers"):
        m.allocate_slots(b, 1, num_new_computed_tokens=5, new_computed_blocks=[1])
    with pytest.raises(ValueError, match="null"):
        m.allocate_slots(b, 1, num_new_computed_tokens=8, new_computed_blocks=[1, 2])
    with pytest.raises(ValueError, match="not cached under"):
        m.allocate_slots(b, 1, num_new_computed_tokens=8, new_computed_blocks=[NULL_BLOCK_ID, 1])
    m.free(b)  # a request that never got blocks: no-op
    m.free(a)
    m.free(a)  # twice: no-op
