"""#48475: num_accepted_tokens == 0. Fixed kernels clamp the column to 0; the pre-fix kernels
read column -1 of the row-major (N, C) indices: the previous row's last column (row 0: before
the tensor, an illegal access the sanitizer reports)."""

import pytest
import torch

from mambalab.lab.bugs import BugConfig
from mambalab.device import DEVICE
from mambalab.kernels.gated_delta_rule import fused_recurrent_gated_delta_rule
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


def test_ssu_fixed_clamps_zero_to_column_0():
    g = torch.Generator().manual_seed(1)
    case = ssu_case(g)
    zero = torch.tensor([1, 0], dtype=torch.int32, device=DEVICE)
    one = torch.tensor([1, 1], dtype=torch.int32, device=DEVICE)
    assert torch.equal(run_ssu(case, zero, BugConfig()), run_ssu(case, one, BugConfig()))


def test_ssu_prefix_reads_the_previous_rows_last_column():
    g = torch.Generator().manual_seed(2)
    case = ssu_case(g)
    idx = case[6]
    got = run_ssu(case, torch.tensor([1, 0], dtype=torch.int32, device=DEVICE), BUG)
    # what row 1 read: slot idx[0, -1] = 2, i.e. request 0's state
    neighbour = idx.clone()
    neighbour[1, 0] = idx[0, 1]
    expect = run_ssu(case, torch.tensor([1, 1], dtype=torch.int32, device=DEVICE), BugConfig(), src=neighbour)
    assert torch.allclose(got, expect)
    ok = run_ssu(case, torch.tensor([1, 1], dtype=torch.int32, device=DEVICE), BUG)
    assert not torch.allclose(got[2:], ok[2:])


@cpu_only
def test_ssu_row_0_reads_before_the_tensor():
    g = torch.Generator().manual_seed(3)
    with pytest.raises(IllegalMemoryAccess) as e:
        run_ssu(ssu_case(g), torch.tensor([0, 1], dtype=torch.int32, device=DEVICE), BUG)
    assert e.value.row == 0 and e.value.index == -1


def gdn_run(num_accepted, bugs, idx=None):
    g = torch.Generator().manual_seed(4)
    N, T, H, HV, K, V = 2, 2, 1, 2, 4, 4
    q = torch.randn(1, N * T, H, K, generator=g).to(DEVICE)
    k = torch.randn(1, N * T, H, K, generator=g).to(DEVICE)
    v = torch.randn(1, N * T, HV, V, generator=g).to(DEVICE)
    gg = -torch.rand(1, N * T, HV, generator=g).to(DEVICE)
    beta = torch.rand(1, N * T, HV, generator=g).to(DEVICE)
    state = torch.randn(9, HV, V, K, generator=g).to(DEVICE)
    idx = idx if idx is not None else torch.tensor([[1, 2], [3, 4]], dtype=torch.int32, device=DEVICE)
    cu = torch.tensor([0, T, 2 * T], dtype=torch.int32, device=DEVICE)
    o, _ = fused_recurrent_gated_delta_rule(q, k, v, gg, beta, initial_state=state, cu_seqlens=cu,
                                            ssm_state_indices=idx, num_accepted_tokens=num_accepted,
                                            bugs=bugs)
    return o


def test_gdn_fixed_clamps_and_prefix_reads_neighbour():
    zero = torch.tensor([1, 0], dtype=torch.int32, device=DEVICE)
    one = torch.tensor([1, 1], dtype=torch.int32, device=DEVICE)
    assert torch.equal(gdn_run(zero, BugConfig()), gdn_run(one, BugConfig()))
    got = gdn_run(zero, BUG)
    # row 1 started from slot 2 (request 0's last column) instead of its own slot 3
    expect = gdn_run(one, BugConfig(), idx=torch.tensor([[1, 2], [2, 4]], dtype=torch.int32, device=DEVICE))
    assert torch.allclose(got[:, 2:], expect[:, 2:])
