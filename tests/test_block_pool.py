import pytest

from mambalab.core.block_pool import BlockPool, BlockPoolError
from mambalab.constants import NULL_BLOCK_ID


def test_null_block_is_reserved_and_never_handed_out():
    pool = BlockPool(5)
    ids = pool.allocate(4, owner="a")
    assert NULL_BLOCK_ID not in ids
    assert ids == [1, 2, 3, 4]
    assert pool.get_num_free_blocks() == 0
    with pytest.raises(BlockPoolError, match="out of blocks"):
        pool.allocate(1)


def test_free_is_fifo_like_vllm():
    pool = BlockPool(6)
    a = pool.allocate(2, owner="a")
    pool.allocate(1, owner="b")
    pool.free(a)
    # Blocks that were already free come before the ones freed now.
    assert pool.allocate(2) == [4, 5]
    assert pool.allocate(2) == a


def test_owner_tracking():
    pool = BlockPool(4)
    (b,) = pool.allocate(1, owner="req-7")
    assert pool.owner_of(b) == "req-7"
    pool.free([b])
    assert pool.owner_of(b) is None and not pool.is_allocated(b)


@pytest.mark.parametrize(
    "bad, match",
    [([0], "null block"), ([9], "out of range"), ([-1], "out of range"), ([3], "not allocated")],
)
def test_free_errors(bad, match):
    pool = BlockPool(5)
    pool.allocate(2)
    with pytest.raises(BlockPoolError, match=match):
        pool.free(bad)


def test_double_free_and_duplicates_are_all_or_nothing():
    pool = BlockPool(5)
    ids = pool.allocate(2)
    pool.free(ids[:1])
    with pytest.raises(BlockPoolError, match="not allocated"):
        pool.free(ids)  # ids[0] already free
    assert pool.is_allocated(ids[1])  # nothing freed by the failed call
    with pytest.raises(BlockPoolError, match="twice"):
        pool.free([ids[1], ids[1]])


@pytest.mark.parametrize("n", [0, 1, -3, 2.5])
def test_bad_sizes(n):
    with pytest.raises(BlockPoolError, match="num_blocks"):
        BlockPool(n)
    if isinstance(n, int) and n < 0:
        with pytest.raises(BlockPoolError, match="num_blocks"):
            BlockPool(4).allocate(n)


# -- prefix-cache support ------------------------------------------------------


def test_cached_block_survives_free_until_evicted_fifo():
    pool = BlockPool(5)  # blocks 1..4
    evicted, freed = [], []
    pool.on_evict = evicted.append
    pool.on_free = lambda b, cached: freed.append((b, cached))
    a = pool.allocate(2, owner="a")  # [1, 2]
    pool.cache_block(a[0], "h0")
    pool.free(a, owner="a")
    assert freed == [(1, True), (2, False)]
    assert pool.free_block_ids() == [3, 4, 1, 2]
    assert pool.lookup_cached_block("h0") == 1 and pool.is_cached(1)
    assert pool.allocate(2) == [3, 4] and evicted == []
    assert pool.lookup_cached_block("h0") == 1  # still hittable
    assert pool.allocate(1) == [1]  # the queue hands it out again: evicted
    assert evicted == [1] and pool.lookup_cached_block("h0") is None
    assert not pool.is_cached(1) and pool.num_cached_blocks == 0


def test_get_cached_block_takes_a_free_hit_out_of_the_queue():
    pool = BlockPool(6)
    ids = pool.allocate(3, owner="a")  # [1, 2, 3]
    pool.cache_block(2, "h")
    pool.free(ids, owner="a")
    assert pool.free_block_ids() == [4, 5, 1, 2, 3]
    assert pool.get_cached_block("h", owner="b") == 2
    assert pool.free_block_ids() == [4, 5, 1, 3]  # order of the others kept
    assert pool.ref_count(2) == 1 and pool.owner_of(2) == "b"
    assert pool.get_cached_block("missing") is None


def test_shared_hit_is_ref_counted():
    pool = BlockPool(4)
    freed = []
    pool.on_free = lambda b, cached: freed.append((b, cached))
    (b,) = pool.allocate(1, owner="a")
    pool.cache_block(b, "h")
    assert pool.get_cached_block("h", owner="c") == b
    assert pool.ref_count(b) == 2 and pool.owners_of(b) == ["a", "c"]
    pool.free([b], owner="a")
    assert pool.is_allocated(b) and pool.owners_of(b) == ["c"] and freed == []
    pool.free([b], owner="c")
    assert not pool.is_allocated(b) and freed == [(b, True)]
    assert pool.free_block_ids()[-1] == b and pool.lookup_cached_block("h") == b


def test_cache_errors_and_null_block():
    pool = BlockPool(4)
    (b,) = pool.allocate(1)
    with pytest.raises(BlockPoolError, match="never cached"):
        pool.cache_block(NULL_BLOCK_ID, "h")
    with pytest.raises(BlockPoolError, match="not allocated"):
        pool.cache_block(3, "h")
    pool.cache_block(b, "h")
    pool.cache_block(b, "h")  # same hash again: no-op
    with pytest.raises(BlockPoolError, match="another hash"):
        pool.cache_block(b, "other")
    with pytest.raises(BlockPoolError, match="not cached"):
        pool.touch([3])
    pool.touch([NULL_BLOCK_ID])  # skipped, as upstream
    assert NULL_BLOCK_ID not in pool.free_block_ids() and not pool.is_cached(NULL_BLOCK_ID)


def test_same_hash_on_two_blocks_first_wins_then_the_other():
    pool = BlockPool(5)
    x, y = pool.allocate(2)
    pool.cache_block(x, "h")
    pool.cache_block(y, "h")
    assert pool.lookup_cached_block("h") == x
    pool.free([x, y])
    pool.allocate(2)  # blocks 3, 4
    pool.allocate(1)  # x: evicted
    assert pool.lookup_cached_block("h") == y


def test_usage_counts_cached_free_blocks_as_free():
    pool = BlockPool(5)
    ids = pool.allocate(2)
    assert pool.get_usage() == 0.5
    pool.cache_block(ids[0], "h")
    pool.free(ids)
    assert pool.get_usage() == 0.0
