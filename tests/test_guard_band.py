"""The owned bands before the tensors a pre-fix kernel reaches one element before (mambalab/guard_band.py).

On a GPU nothing stops a pre-fix ``-1``: before the bands, ``zero-accepted``'s capture read the int32 before
its index buffer as a slot and faulted, which aborted a CUDA test worker (a Jupyter kernel would die the same
way), and ``pad-minus-one`` stored into whatever tensor lay before each pool. These tests run the kernels
unguarded on the CPU (the sanitizer off) to show where those accesses now land (before the bands, the
pad-minus-one replay below killed the test process: a segmentation fault or glibc's heap-corruption abort);
with the sanitizer on they are still stopped and reported as before (tests/test_sanitizer.py,
tests/test_kernel_zero_accepted.py).
"""

from __future__ import annotations

import pytest
import torch

from mambalab.constants import PAD_SLOT_ID
from mambalab.device import DEVICE
from mambalab.engine.core import Engine
from mambalab.guard_band import GUARD_CANARY, GUARD_SLOTS, GuardSlotWritten, banded_gather, banded_index
from mambalab.kernels.gated_delta_rule import fused_recurrent_gated_delta_rule
from mambalab.lab import sanitizer, scenarios
from mambalab.lab.bugs import BugConfig
from mambalab.model.config import TinyHybridConfig
from mambalab.model.state import STATE_KEYS, ModelState
from mambalab.widgets.bug_panel import spec_for
from mambalab.worker.block_table import BlockTable

# the sanitizer off: the kernels' accesses really happen (memory the band owns, on the CPU as on a GPU)
unguarded = pytest.mark.cpu_only(reason="turns the CPU sanitizer off; on a GPU there is none to turn off")


def _before(t: torch.Tensor, n: int) -> torch.Tensor:
    """The ``n`` elements of ``t``'s storage just before its first element."""
    assert t.storage_offset() >= n
    return torch.as_strided(t, (n,), (1,), t.storage_offset() - n)


def test_every_pool_starts_after_its_guard_slot_holding_the_canary():
    state = ModelState.allocate(TinyHybridConfig(), 5)
    assert set(state.guards) == set(STATE_KEYS) and state.guards_written() == []
    for k, pool in state.pools.items():
        g = state.guards[k]
        assert pool.shape[0] == 5 and g.shape[1:] == pool.shape[1:]
        # the guard is the storage's slot -1 of the pool: the address a -1 index computes
        assert pool.storage_offset() == GUARD_SLOTS * pool.stride(0) + g.storage_offset()
        assert pool.untyped_storage().data_ptr() == g.untyped_storage().data_ptr()
        assert bool((g == GUARD_CANARY).all()) and bool((pool == 0).all())
    state.mamba_ssm[0].fill_(1.0)  # a store inside the pool is not one before it
    assert state.guards_written() == []
    torch.as_strided(state.gdn_recurrent, (1,), (1,), state.gdn_recurrent.storage_offset() - 1).fill_(0.5)
    assert state.guards_written() == ["gdn_recurrent"]


def test_index_buffers_start_after_a_guard_row_of_pad_slot_id():
    t = banded_index((3, 2), torch.int32, DEVICE)
    assert t.tolist() == [[0, 0], [0, 0], [0, 0]] and _before(t, 2).tolist() == [PAD_SLOT_ID] * 2
    src = torch.tensor([[5, 6, 7], [8, 9, 10]], dtype=torch.int32, device=DEVICE)
    g = banded_gather(src, torch.tensor([[1, 2], [0, 1]], device=DEVICE))
    assert g.tolist() == [[6, 7], [8, 9]] and _before(g, 1).item() == PAD_SLOT_ID
    bt = BlockTable(block_size=4, max_num_reqs=3, max_num_blocks_per_req=2, max_num_batched_tokens=8,
                    device=DEVICE)
    for side in (bt.block_table.gpu, bt.block_table.cpu):
        assert side.shape == (3, 2) and _before(side, 2).tolist() == [PAD_SLOT_ID] * 2
    assert bt.block_table.np.shape == (3, 2)


@unguarded
def test_zero_accepted_row_0_reads_the_guard_row_and_skips_the_row():
    """Column -1 of row 0 is the guard row's PAD_SLOT_ID: the fixed guard skips the row, so nothing faults
    and nothing is stored (before the band: the bytes the allocator put there, read as a slot)."""
    g = torch.Generator().manual_seed(4)
    q, k = (torch.randn(1, 4, 1, 4, generator=g).to(DEVICE) for _ in range(2))
    v = torch.randn(1, 4, 2, 4, generator=g).to(DEVICE)
    gg, beta = -torch.rand(1, 4, 2, generator=g).to(DEVICE), torch.rand(1, 4, 2, generator=g).to(DEVICE)
    state = torch.randn(9, 2, 4, 4, generator=g).to(DEVICE)
    idx = banded_index((2, 2), torch.int32, DEVICE)
    idx.copy_(torch.tensor([[1, 2], [3, 4]], dtype=torch.int32))
    cu = torch.tensor([0, 2, 4], dtype=torch.int32, device=DEVICE)
    st = state.clone()
    with sanitizer.enabled(False):
        o, _ = fused_recurrent_gated_delta_rule(
            q, k, v, gg, beta, initial_state=st, cu_seqlens=cu, ssm_state_indices=idx,
            num_accepted_tokens=torch.tensor([0, 1], dtype=torch.int32, device=DEVICE),
            bugs=BugConfig.with_bugs("zero-accepted"))
    assert torch.count_nonzero(o[:, :2]) == 0  # row 0 skipped
    assert torch.equal(st[1], state[1]) and torch.equal(st[2], state[2])  # and stored nowhere
    assert torch.count_nonzero(o[:, 2:]) > 0 and not torch.equal(st[3], state[3])  # row 1 ran


@unguarded
def test_zero_accepted_engine_builds_with_the_sanitizer_off():
    wl = spec_for("zero-accepted").build(seed=0)
    with sanitizer.enabled(False):
        eng = Engine(wl.cfg, BugConfig.with_bugs("zero-accepted"))
    assert eng.ranks[0].runner.state.guards_written() == []
    with pytest.raises(sanitizer.IllegalMemoryAccess, match="state_indices"):  # the sanitizer still stops it
        Engine(wl.cfg, BugConfig.with_bugs("zero-accepted"))


@unguarded
@pytest.mark.filterwarnings("ignore:overflow encountered in exp")  # padded rows decaying the canary
def test_pad_minus_one_store_lands_in_the_guard_slot_and_is_the_verdict():
    with sanitizer.enabled(False):
        r = scenarios.replay("pad-minus-one")
        fixed = scenarios.replay("pad-minus-one", fixed=True)
    ill = r.verdict.illegal
    assert ill is not None and not ill.from_sanitizer, r.report()
    assert (ill.op, ill.slot, ill.step) == ("store", -1, 2) and ill.arg in STATE_KEYS
    assert "(the guard slot)" in r.verdict.summary() and "slot -1 of 'mamba_conv'" in r.verdict.summary()
    assert fixed.verdict.ok, fixed.report()
    # with the sanitizer: the load at slot -1 is stopped in the same step, before it happens
    on = scenarios.replay("pad-minus-one").verdict.illegal
    assert on.from_sanitizer and (on.arg, on.slot, on.step) == ("state_ptr", -1, 2)


def test_a_capture_that_stores_before_a_pool_stops_the_engine_at_start_up(monkeypatch):
    allocate = ModelState.allocate.__func__

    def dirty(cls, *a, **kw):
        state = allocate(cls, *a, **kw)
        state.guards["mamba_ssm"].fill_(0.0)
        return state

    monkeypatch.setattr(ModelState, "allocate", classmethod(dirty))
    wl = spec_for("stale-rows").build(seed=0)
    with pytest.raises(GuardSlotWritten, match="at start-up.*slot -1 of 'mamba_ssm'"):
        Engine(wl.cfg, BugConfig())
