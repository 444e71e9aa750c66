"""The SSU's tile where the state row is wider than the launch table's 128 (``mamba_ssm_kernels.wide_state_rows``,
Falcon-H1's dstate 256): the GPU rule's rows shrink by the row's width, so a program holds the bytes the table was
measured with; the step is the reference's either way (on the interpreter with the GPU's one-head rule, and on CUDA)."""

from __future__ import annotations

import pytest
import torch

from mambalab.device import DEVICE
from mambalab.kernels import mamba_ssm as ssu
from mambalab.kernels import mamba_ssm_kernels
from mambalab.kernels.mamba_ssm import LaunchConfig, selective_state_update
from mambalab.kernels.mamba_ssm_ref import selective_state_update_ref
from mambalab.kernels.testing import assert_untouched, poison_, spy_launches, tolerance, touched_slots

from test_kernel_selective_state_update import make_case, same_layout_copy


@pytest.mark.parametrize("rows,dstate,div,want", [(16, 128, 1, 16), (16, 64, 1, 16), (16, 256, 1, 8),
                                                  (8, 256, 1, 4), (16, 512, 1, 4), (16, 256, 2, 4),
                                                  (1, 256, 1, 1), (16, 200, 1, 8), (16, 256, 0, 16)])
def test_the_rows_keep_the_tables_bytes(monkeypatch, rows, dstate, div, want):
    monkeypatch.setattr(mamba_ssm_kernels, "WIDE_STATE_DIV", div)
    assert mamba_ssm_kernels.wide_state_rows(rows, dstate) == want


def test_the_measured_rule_is_halved():
    assert mamba_ssm_kernels.WIDE_STATE_DIV == 1


@pytest.mark.parametrize("tied", [True, False], ids=["dt-per-head", "dt-per-element"])
@pytest.mark.parametrize("dstate,want", [(256, 4), (128, 8)])
@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float32), (torch.float32, torch.bfloat16),
                                    (torch.bfloat16, torch.bfloat16)], ids=["fp32", "fp32state-bf16act", "bf16"])
def test_the_gpu_rule_at_a_wide_state_matches_the_reference(monkeypatch, dstate, want, dtypes, tied):
    """The GPU's one-head kernel with the table's 8 rows: 4 at dstate 256, 8 at 128, ``A``/``dt`` per head (as
    ``mamba_mixer2`` calls it) or per element (the untied launch, whose rows are halved too); null rows among the
    live ones, outputs poisoned, untouched slots bit-identical."""
    monkeypatch.setattr(ssu, "_gpu_rules_on", lambda device: True)
    monkeypatch.setattr(ssu, "choose_launch_config", lambda *a, **k: LaunchConfig(block_m=8, num_warps=1))
    seen = spy_launches(monkeypatch, ssu)
    rows, slots = 3, 8
    case = make_case(5 + dstate, rows=rows, nheads=2, dim=16, dstate=dstate, ngroups=1, tied=tied, slots=slots,
                     dtypes=dtypes)
    idx = torch.tensor([3, 0, 6], dtype=torch.int32, device=DEVICE)  # a padded row between two live ones
    state, s_ref = same_layout_copy(case.state), same_layout_copy(case.state)
    out, o_ref = poison_(torch.empty_like(case.kwargs["x"])), poison_(torch.empty_like(case.kwargs["x"]))
    selective_state_update(state, out=out, state_batch_indices=idx, **case.kwargs)
    selective_state_update_ref(s_ref, out=o_ref, state_batch_indices=idx, **case.kwargs)
    assert [k["BLOCK_M"] for k in seen] == [want]
    rtol, atol = tolerance("ssu", out.dtype)
    torch.testing.assert_close(out.float(), o_ref.float(), rtol=rtol, atol=atol)
    torch.testing.assert_close(state.float(), s_ref.float(), rtol=rtol, atol=atol)
    assert_untouched(case.state, state, touched_slots(idx))
