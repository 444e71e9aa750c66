"""The bench's copy floor (``mambalab.gpu.copy_floor``): the slot copy against its torch reference on the CPU's
interpreter (and on CUDA with ``MAMBALAB_DEVICE=cuda``), every variant, untouched slots bit-identical, and bad
input refused before a launch."""

import pytest
import torch

from mambalab.device import DEVICE
from mambalab.gpu.copy_floor import (SLOT_COPY_VARIANTS, TOKEN_FLOOR_VARIANTS, SlotCopy, SlotCopyVariant, case_slots,
                                    slot_copy_ref)


def _pool(slots, shape, dtype):
    return torch.randn(slots, *shape, dtype=dtype, device=DEVICE)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tokens", [1, 3])
def test_slot_copy_moves_every_source_to_its_destinations(dtype, tokens):
    requests, slots, shape = 3, 1 + 3 * 3 + 2, (2, 5, 7)  # 70 elements a slot: blocks end inside a slot
    perm = torch.randperm(slots - 1)[: requests * tokens].to(torch.int32) + 1
    dst = perm.view(requests, tokens).to(DEVICE)
    src = dst[torch.arange(requests), torch.tensor([0, tokens - 1, tokens // 2])].contiguous()
    base = _pool(slots, shape, dtype)
    want = slot_copy_ref(base.clone(), src, dst)
    # the token floor's variants too: a store held on the token word, the odd blocks' loads after the wait
    for v in [SlotCopyVariant(32, 1, False), SlotCopyVariant(64, 2, True), SlotCopyVariant(128, 4, False),
              SlotCopyVariant(32, 1, True, True), SlotCopyVariant(32, 1, False, True, True),
              SlotCopyVariant(32, 2, True, False, True)]:
        pool = base.clone()
        got = SlotCopy(src, dst, slots, v)(pool)
        assert got is pool
        assert torch.equal(got, want), v
        written = torch.zeros(slots, dtype=torch.bool)
        written[dst.flatten().long().cpu()] = True
        assert torch.equal(got[~written.to(DEVICE)], base[~written.to(DEVICE)])  # untouched slots bit-identical
        for r in range(requests):
            for t in range(tokens):
                assert torch.equal(got[dst[r, t]], base[src[r]])


def test_the_reference_reads_every_source_before_it_stores():
    pool = torch.arange(4.0)[:, None].repeat(1, 3)
    src = torch.tensor([1, 2], dtype=torch.int32)
    dst = torch.tensor([[2], [1]], dtype=torch.int32)  # a swap: a store-then-read order would lose one
    out = slot_copy_ref(pool, src, dst)
    assert out[:, 0].tolist() == [0.0, 2.0, 1.0, 3.0]


def test_variants_cover_blocks_warps_and_pdl():
    assert {v.pdl for v in SLOT_COPY_VARIANTS} == {False, True}
    assert len({(v.block, v.num_warps) for v in SLOT_COPY_VARIANTS}) >= 6
    assert not any(v.token or v.defer for v in SLOT_COPY_VARIANTS)
    # the token floor: every variant waits on its token; with PDL the state all before the wait or half after; and
    # without PDL; over the same blocks and warps
    assert all(v.token for v in TOKEN_FLOOR_VARIANTS)
    assert {(v.pdl, v.defer) for v in TOKEN_FLOOR_VARIANTS} == {(False, False), (True, False), (True, True)}
    assert {(v.block, v.num_warps) for v in TOKEN_FLOOR_VARIANTS} == {(v.block, v.num_warps) for v in SLOT_COPY_VARIANTS}
    assert len({v.name for v in SLOT_COPY_VARIANTS + TOKEN_FLOOR_VARIANTS}) == len(SLOT_COPY_VARIANTS) + len(
        TOKEN_FLOOR_VARIANTS)


def test_the_token_floor_stores_nothing_before_its_token_word_is_read():
    slots = 6
    src = torch.tensor([1, 3], dtype=torch.int32, device=DEVICE)
    dst = torch.tensor([[4], [5]], dtype=torch.int32, device=DEVICE)
    base = _pool(slots, (70,), torch.float32)
    pool = base.clone()
    op = SlotCopy(src, dst, slots, SlotCopyVariant(32, 1, False, True))
    op.token.fill_(-1)  # the word the stores are held on, set to the one value that drops them
    op(pool)
    assert torch.equal(pool, base)
    op.token.zero_()
    op(pool)
    assert torch.equal(pool[4], base[1]) and torch.equal(pool[5], base[3]) and torch.equal(pool[:4], base[:4])


@pytest.mark.parametrize("src, dst, err, words", [
    ([1, 9], [[1], [2]], IndexError, "src holds slot 9, outside the pool's [0, 5)"),
    ([1, 2], [[1], [-1]], IndexError, "dst holds slot -1"),
    ([1, 2], [[3], [3]], ValueError, "appears twice"),
    ([1, 2], [3, 4], ValueError, "dst (R, T)"),
])
def test_bad_indices_are_refused_before_any_launch(src, dst, err, words):
    s = torch.tensor(src, dtype=torch.int32, device=DEVICE)
    d = torch.tensor(dst, dtype=torch.int32, device=DEVICE)
    with pytest.raises(err, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        SlotCopy(s, d, 5)


def test_bad_pools_and_index_dtypes_are_refused():
    s = torch.tensor([1], dtype=torch.int32, device=DEVICE)
    with pytest.raises(TypeError, match="int32"):
        SlotCopy(s.long(), s[:, None], 5)
    op = SlotCopy(s, s[:, None], 5)
    with pytest.raises(ValueError, match="5 slots"):
        op(_pool(4, (3,), torch.float32))
    with pytest.raises(ValueError, match="not contiguous"):
        op(_pool(5, (3, 2), torch.float32).transpose(1, 2))


class _Case:  # the attributes case_slots reads of a bench case
    kernel = "ssu"

    def __init__(self, tokens):
        self.T, self.active = tokens, 2
        if tokens == 1:
            self.idx = torch.tensor([4, 2, 0], dtype=torch.int32)  # a padded row (the null block) last
        else:
            self.idx = torch.tensor([[1, 2, 3], [4, 5, 6]], dtype=torch.int32)
            self.num_acc = torch.tensor([3, 1], dtype=torch.int32)


def test_case_slots_reads_the_kernels_initial_state_column():
    src, dst = case_slots(_Case(1))
    assert src.tolist() == [4, 2] and dst.tolist() == [[4], [2]]  # live rows only, back where they were read
    src, dst = case_slots(_Case(3))
    assert src.tolist() == [3, 4] and dst.tolist() == [[1, 2, 3], [4, 5, 6]]  # column num_accepted - 1
    conv = _Case(1)
    conv.kernel = "conv"
    with pytest.raises(ValueError, match="conv"):
        case_slots(conv)
