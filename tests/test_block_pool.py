import pytest

from mambalab.block_pool import BlockPool, BlockPoolError
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
