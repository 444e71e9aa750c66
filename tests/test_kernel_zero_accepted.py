"""#48475 / #50021 (both open): num_accepted_tokens == 0 under speculative decoding.

Upstream (every release up to 0.33): the Mamba2 SSU has always clamped the initial-state column
to ``max(num_accepted - 1, 0)``, so the switch does not touch it; the GDN (FLA) kernels load
column ``num_accepted - 1`` unbounded, so a 0 reads column -1 of the row-major (N, C) indices:
the previous row's last column (row 0: before the tensor, an illegal access the sanitizer
reports). Fixed as #50021 proposes: the column load is masked to ``0 <= col < C`` and an
out-of-row column reads as the null block, so the row is skipped (not clamped to column 0)."""

import pytest
import torch

from mambalab.lab.bugs import BugConfig, GuardMode
from mambalab.device import DEVICE
from mambalab.kernels.gated_delta_rule import fused_recurrent_gated_delta_rule
from mambalab.kernels.gated_delta_rule_ref import fused_recurrent_gated_delta_rule_ref
from mambalab.kernels.mamba_ssm import selective_state_update
from mambalab.lab.sanitizer import IllegalMemoryAccess

BUG = BugConfig.with_bugs("zero-accepted")
cpu_only = pytest.mark.cpu_only(reason="column -1 of row 0 is a real wild read on a GPU")


def ssu_case(g):
    slots, nh, hd, ds, N, T = 9, 2, 4, 4, 2, 2
    state = torch.randn(slots, nh, hd, ds, generator=g).to(DEVICE)
    x = torch.randn(N * T, nh, hd, generator=g).to(DEVICE)
    dt = torch.rand(N * T, nh, hd, generator=g).to(DEVICE)
    A = -torch.rand(nh, hd, ds, generator=g).to(DEVICE)
    B = torch.randn(N * T, 1, ds, generator=g).to(DEVICE)
    C = torch.randn(N * T, 1, ds, generator=g).to(DEVICE)
    idx = torch.tensor([[1, 2], [3, 4]], dtype=torch.int32, device=DEVICE)
    cu = torch.tensor([0, T, 2 * T], dtype=torch.int32, device=DEVICE)
    return state, x, dt, A, B, C, idx, cu


def run_ssu(case, num_accepted, bugs, src=None):
    state, x, dt, A, B, C, idx, cu = case
    st = state.clone()
    dst = torch.zeros_like(idx)  # no stores: compare only what was read
    out = selective_state_update(st, x, dt, A, B, C, state_batch_indices=idx if src is None else src,
                                 dst_state_batch_indices=dst, num_accepted_tokens=num_accepted,
                                 cu_seqlens=cu, bugs=bugs)
    return out


@pytest.mark.parametrize("bugs", [BugConfig(), BUG], ids=["fixed", "zero-accepted"])
def test_ssu_always_clamps_zero_to_column_0(bugs):
    """No pre-fix world for the SSU: max(num_accepted - 1, 0) with or without the switch."""
    g = torch.Generator().manual_seed(1)
    case = ssu_case(g)
    zero = torch.tensor([1, 0], dtype=torch.int32, device=DEVICE)
    one = torch.tensor([1, 1], dtype=torch.int32, device=DEVICE)
    assert torch.equal(run_ssu(case, zero, bugs), run_ssu(case, one, bugs))
    # row 0 with a 0: still column 0, no read before the tensor
    assert torch.equal(run_ssu(case, torch.tensor([0, 1], dtype=torch.int32, device=DEVICE), bugs),
                       run_ssu(case, one, bugs))


def gdn_inputs():
    g = torch.Generator().manual_seed(4)
    N, T, H, HV, K, V = 2, 2, 1, 2, 4, 4
    q = torch.randn(1, N * T, H, K, generator=g).to(DEVICE)
    k = torch.randn(1, N * T, H, K, generator=g).to(DEVICE)
    v = torch.randn(1, N * T, HV, V, generator=g).to(DEVICE)
    gg = -torch.rand(1, N * T, HV, generator=g).to(DEVICE)
    beta = torch.rand(1, N * T, HV, generator=g).to(DEVICE)
    state = torch.randn(9, HV, V, K, generator=g).to(DEVICE)
    cu = torch.tensor([0, T, 2 * T], dtype=torch.int32, device=DEVICE)
    return q, k, v, gg, beta, state, cu


IDX = [[1, 2], [3, 4]]


def gdn_run(num_accepted, bugs, idx=None):
    q, k, v, gg, beta, state, cu = gdn_inputs()
    idx = torch.tensor(idx if idx is not None else IDX, dtype=torch.int32, device=DEVICE)
    st = state.clone()
    na = torch.tensor(num_accepted, dtype=torch.int32, device=DEVICE)
    o, _ = fused_recurrent_gated_delta_rule(q, k, v, gg, beta, initial_state=st, cu_seqlens=cu,
                                            ssm_state_indices=idx, num_accepted_tokens=na, bugs=bugs)
    return o, st, state


def test_gdn_fixed_skips_the_out_of_row_column_instead_of_clamping():
    o, st, before = gdn_run([1, 0], BugConfig())
    o1, _, _ = gdn_run([1, 1], BugConfig())
    assert torch.equal(o[:, :2], o1[:, :2])                    # row 0 unaffected
    assert torch.count_nonzero(o[:, 2:]) == 0                  # row 1 skipped: zero output ...
    assert not torch.equal(o[:, 2:], o1[:, 2:])                # ... not column 0's result
    assert torch.equal(st[3], before[3]) and torch.equal(st[4], before[4])  # ... and no store
    # a column past the row (num_accepted > C) is skipped too (#50021's upper bound)
    o3, _, _ = gdn_run([1, 3], BugConfig())
    assert torch.count_nonzero(o3[:, 2:]) == 0


def test_gdn_prefix_reads_the_previous_rows_last_column():
    got, _, _ = gdn_run([1, 0], BUG)
    # row 1 started from slot 2 (request 0's last column) instead of its own slot 3
    expect, _, _ = gdn_run([1, 1], BugConfig(), idx=[[1, 2], [2, 4]])
    assert torch.allclose(got[:, 2:], expect[:, 2:])


@pytest.mark.parametrize("bound", [True, pytest.param(False, marks=pytest.mark.cpu_only(
    reason="unbounded, row 1 reads column -1: row 0's last slot, which row 0's program writes in the same "
           "launch; on a GPU the two programs run in no defined order (the race is the bug), the interpreter "
           "and the reference run them in order"))])
def test_gdn_reference_models_both(bound):
    q, k, v, gg, beta, state, cu = gdn_inputs()
    idx = torch.tensor(IDX, dtype=torch.int32, device=DEVICE)
    na = torch.tensor([1, 0], dtype=torch.int32, device=DEVICE)
    bugs = BugConfig() if bound else BUG
    st_k, st_r = state.clone(), state.clone()
    o_k, _ = fused_recurrent_gated_delta_rule(q, k, v, gg, beta, initial_state=st_k, cu_seqlens=cu,
                                              ssm_state_indices=idx, num_accepted_tokens=na, bugs=bugs)
    o_r, _ = fused_recurrent_gated_delta_rule_ref(q, k, v, gg, beta, initial_state=st_r, cu_seqlens=cu,
                                                  ssm_state_indices=idx, num_accepted_tokens=na,
                                                  guard=GuardMode.NULL, bound_accepted=bound)
    assert torch.allclose(o_k, o_r, atol=1e-5) and torch.allclose(st_k, st_r, atol=1e-5)


@cpu_only
def test_gdn_prefix_row_0_reads_before_the_tensor():
    with pytest.raises(IllegalMemoryAccess) as e:
        gdn_run([0, 1], BUG)
    assert e.value.row == 0 and e.value.index == -1
    q, k, v, gg, beta, state, cu = gdn_inputs()
    with pytest.raises(IndexError, match="outside the storage"):
        fused_recurrent_gated_delta_rule_ref(
            q, k, v, gg, beta, initial_state=state.clone(), cu_seqlens=cu,
            ssm_state_indices=torch.tensor(IDX, dtype=torch.int32, device=DEVICE),
            num_accepted_tokens=torch.tensor([0, 1], dtype=torch.int32, device=DEVICE), bound_accepted=False)
    # fixed: the same input is skipped, no access outside
    o, _, _ = gdn_run([0, 1], BugConfig())
    assert torch.count_nonzero(o[:, :2]) == 0
