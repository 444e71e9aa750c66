import numpy as np
import pytest
import torch

from mambalab.lab.bugs import BugConfig
from mambalab.worker.block_table import BlockTable, MultiGroupBlockTable
from mambalab.constants import NULL_BLOCK_ID, PAD_SLOT_ID
from mambalab.core.kv_cache_interface import AttentionSpec, MambaSpec


def sync():
    """What the engine's step does before it touches the host rows again (sampled tokens to the host)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def make(rows=4, width=4, bs=4, tokens=32, num_blocks=None):
    return BlockTable(bs, rows, width, tokens, num_blocks=num_blocks)


def test_tables_are_int32_cpu_mirror_plus_device_copy():
    bt = make()
    assert bt.block_table.cpu.dtype == torch.int32 and bt.block_table.gpu.dtype == torch.int32
    assert bt.block_table.cpu.shape == (4, 4)
    assert bt.block_table.cpu.data_ptr() != bt.block_table.gpu.data_ptr()
    assert bt.num_blocks_per_row.dtype == np.int32


def test_add_append_clear():
    bt = make()
    bt.add_row([3, 4], 1)
    bt.append_row([7], 1)
    assert bt.row(1) == [3, 4, 7]
    bt.add_row([9], 1)  # add resets the count, old entries beyond stay in memory
    assert bt.row(1) == [9]
    assert bt.block_table.np[1].tolist() == [9, 4, 7, 0]
    bt.add_row([5, 6, 8], 2)
    bt.clear_row(2)
    assert bt.block_table.np[2].tolist() == [NULL_BLOCK_ID] * 4 and bt.num_blocks_per_row[2] == 0


def test_move_row_clears_its_source_since_49757():
    """v0.27+ (#49757): ``BlockTable.move_row`` itself zeroes the vacated row and its count."""
    bt = make()
    bt.add_row([3, 4], 3)
    bt.move_row(3, 0)
    assert bt.row(0) == [3, 4]
    assert bt.row(3) == [] and bt.block_table.np[3].tolist() == [NULL_BLOCK_ID] * 4


def test_move_row_keeps_source_before_49757():
    """v0.19 - v0.26 (switch ``move-row-stale-source``, consulted in move_row as upstream)."""
    bt = BlockTable(4, 4, 4, 32, bugs=BugConfig.with_bugs("move-row-stale-source"))
    bt.add_row([3, 4], 3)
    bt.move_row(3, 0)
    assert bt.row(0) == [3, 4]
    assert bt.row(3) == [3, 4]  # a duplicate of the live request's blocks


def test_multi_group_move_row_clears_every_group():
    mg = MultiGroupBlockTable(4, 32, 32, [AttentionSpec(4), MambaSpec(32)])
    mg.add_row([[5, 6], [7]], 2)
    mg.move_row(2, 0)
    assert [bt.row(0) for bt in mg.block_tables] == [[5, 6], [7]]
    assert [bt.row(2) for bt in mg.block_tables] == [[], []]


def test_move_row_leaves_the_targets_tail_as_upstream():
    """Only ``num_blocks`` entries are copied; the target's old tail stays (#39591 unmerged)."""
    bt = make()
    bt.add_row([7, 8, 9], 0)
    bt.add_row([4, 5], 1)
    bt.move_row(1, 0)
    assert bt.block_table.np[0].tolist() == [4, 5, 9, 0] and bt.row(0) == [4, 5]


def test_swap_row():
    bt = make()
    bt.add_row([1, 2], 0)
    bt.add_row([5], 2)
    bt.swap_row(0, 2)
    assert bt.row(0) == [5] and bt.row(2) == [1, 2]


def test_commit_copies_only_first_rows():
    bt = make()
    bt.add_row([1], 0)
    bt.add_row([2], 1)
    bt.add_row([3], 2)
    bt.commit_block_table(3)
    sync()  # on a GPU the commit is asynchronous: the host rows may change only once it ran
    bt.clear_row(2)
    bt.add_row([4], 1)
    bt.commit_block_table(2)
    # row 2 was cleared on the CPU but not committed: the device still says block 3
    assert bt.block_table.gpu[:, 0].tolist() == [1, 4, 3, 0]
    assert bt.block_table.np[:, 0].tolist() == [1, 4, 0, 0]
    assert bt.get_device_tensor(2).shape == (2, 4)


def test_device_tensor_is_a_view_of_the_persistent_table():
    bt = make()
    bt.get_device_tensor(4)[2:].fill_(-1)
    assert bt.block_table.gpu[3, 0] == -1


def test_slot_mapping_and_pad_tail():
    bt = make(bs=4, tokens=8)
    bt.add_row([2, 5], 0)
    bt.add_row([7], 1)
    bt.compute_slot_mapping(np.array([0, 0, 0, 1]), np.array([2, 3, 4, 1]))
    bt.commit_slot_mapping(4)
    expect = [2 * 4 + 2, 2 * 4 + 3, 5 * 4 + 0, 7 * 4 + 1] + [PAD_SLOT_ID] * 4
    assert bt.slot_mapping.np.tolist() == expect
    assert bt.slot_mapping.gpu.tolist() == expect


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda bt: bt.add_row([1], 4), IndexError, "row_idx"),
        (lambda bt: bt.add_row([1], -1), IndexError, "row_idx"),
        (lambda bt: bt.add_row([1, 2, 3, 4, 5], 0), ValueError, "max_num_blocks_per_req"),
        (lambda bt: bt.add_row([-1], 0), ValueError, "PAD_SLOT_ID"),
        (lambda bt: bt.add_row([10], 0), ValueError, r"out of range \[0, 10\)"),
        (lambda bt: bt.move_row(0, 9), IndexError, "tgt"),
        (lambda bt: bt.commit_block_table(5), ValueError, "num_reqs"),
        (lambda bt: bt.compute_slot_mapping(np.array([0]), np.array([0, 1])), ValueError, "positions"),
        (lambda bt: bt.compute_slot_mapping(np.array([0]), np.array([99])), ValueError, "positions"),
    ],
)
def test_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call(make(num_blocks=10))


@pytest.mark.parametrize("field, value", [("block_size", 0), ("max_num_reqs", -2), ("max_num_blocks_per_req", 1.5)])
def test_bad_construction(field, value):
    kwargs = dict(block_size=4, max_num_reqs=2, max_num_blocks_per_req=2, max_num_batched_tokens=8)
    kwargs[field] = value
    with pytest.raises(ValueError, match=field):
        BlockTable(**kwargs)


@pytest.mark.parametrize(
    "spec, width",
    [
        (AttentionSpec(16), 16),
        (MambaSpec(256, "none"), 1),
        (MambaSpec(256, "none", num_speculative_blocks=2), 3),
        (MambaSpec(16, "all"), 16),
        (MambaSpec(16, "all", num_speculative_blocks=2), 18),
    ],
)
def test_multi_group_widths(spec, width):
    mg = MultiGroupBlockTable(4, 256, 64, [spec])
    assert mg[0].max_num_blocks_per_req == width


def test_multi_group_fans_out():
    mg = MultiGroupBlockTable(4, 64, 64, [AttentionSpec(16), MambaSpec(64)])
    mg.add_row(([1, 2], [9]), 0)
    mg.move_row(0, 3)
    mg.commit_block_table(4)
    assert mg[0].row(3) == [1, 2] and mg[1].row(3) == [9]
    assert mg[1].block_table.gpu[3, 0] == 9
    with pytest.raises(ValueError, match="groups"):
        mg.add_row(([1],), 1)
