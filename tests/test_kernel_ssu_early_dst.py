"""The SSU's early store-slot load for several tokens a request (``mamba_ssm.SPEC_EARLY_DST_MAX``: each token's store
slot loaded, masked to the index row, with the token's inputs, not after its output) against the kernel without
it: the same bytes (one-head launches, as on a GPU), the reference, untouched slots, and the switch reaching only
the general kernel's multi-token launches."""

from __future__ import annotations

import pytest
import torch

from mambalab.device import DEVICE
from mambalab.kernels import mamba_ssm as ssu
from mambalab.kernels.mamba_ssm import LaunchConfig
from mambalab.kernels.testing import assert_untouched, random_slot_indices, spy_launches

from test_kernel_selective_state_update import DTYPES, gen, make_case
from test_kernel_ssu_early_state import _assert_matches_reference, _run


@pytest.mark.parametrize("dtypes", DTYPES)
@pytest.mark.parametrize("lens,num_acc", [([3, 3, 3], [2, 1, 3]), ([3, 4, 2], [1, 3, 2]), ([3, 0, 3], [3, 1, 1])],
                         ids=["3-tokens", "more-tokens-than-cols", "an-empty-request"])
def test_early_dst_gives_the_same_bytes(monkeypatch, dtypes, lens, num_acc):
    seed = 40 + sum(lens) + num_acc[0]
    case = make_case(seed, rows=3, tokens=sum(lens), dim=8, dstate=16, slots=16, tied=True, dtypes=dtypes)
    idx = random_slot_indices(3, case.slots, columns=3, generator=gen(seed + 1)).to(DEVICE)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    kw = dict(state_batch_indices=idx, num_accepted_tokens=torch.tensor(num_acc, dtype=torch.int32, device=DEVICE),
              cu_seqlens=cu)
    seen = spy_launches(monkeypatch, ssu)
    results = []
    with ssu.launch_config_override(LaunchConfig(block_m=4, num_warps=1)):  # one head a program: _ssu_kernel
        for on in (False, True):
            monkeypatch.setattr(ssu, "SPEC_EARLY_DST_MAX", 1 << 30 if on else 0)
            results.append(_run(case, kw, early=False))
    assert [s.get("EARLY_DST", False) for s in seen] == [False, True]
    assert all(s["kernel"] is ssu._ssu_kernel for s in seen)
    (s0, o0), (s1, o1) = results
    assert torch.equal(o1, o0) and torch.equal(s1, s0)
    assert_untouched(case.state, s1, {int(i) for i in idx.flatten().tolist() if int(i) > 0})
    _assert_matches_reference(case, kw, "spec", s1, o1)


def test_the_rule_reaches_small_batches_and_never_one_token(monkeypatch):
    assert ssu.SPEC_EARLY_DST_MAX == 8 * 128  # call 64: batch <= 8 at 128 heads
    monkeypatch.setattr(ssu, "SPEC_EARLY_DST_MAX", 1 << 30)
    seen = spy_launches(monkeypatch, ssu)
    case = make_case(5, rows=4, dim=8, dstate=16, slots=12, tied=True)
    idx = random_slot_indices(4, case.slots, generator=gen(6)).to(DEVICE)
    with ssu.launch_config_override(LaunchConfig(block_m=4, num_warps=1)):
        _run(case, dict(state_batch_indices=idx), early=False)
    assert "EARLY_DST" not in seen[0]
