"""The SSU with ``A``/``dt`` per element, several requests a program (``mamba_ssm_untied``): the same bytes as
the one-request kernel (the arithmetic is shared), the reference within tolerance, padded rows with zero outputs
and no state traffic, untouched slots bit-identical, and the rule that takes it (a GPU, one token back to its
own slot, the requests a multiple of ``REQS``). On the CPU the interpreter runs it with the launch forced the way a
GPU would take it (one head a program)."""

from __future__ import annotations

import pytest
import torch

from mambalab.device import DEVICE
from mambalab.kernels import mamba_ssm as ssu
from mambalab.kernels import mamba_ssm_untied as untied
from mambalab.kernels.mamba_ssm import LaunchConfig, selective_state_update
from mambalab.kernels.mamba_ssm_untied import _ssu_untied_reqs_kernel, untied_reqs
from mambalab.kernels.testing import assert_untouched, random_slot_indices, spy_launches

from test_kernel_selective_state_update import DTYPES, gen, make_case
from test_kernel_ssu_early_state import _assert_matches_reference, _run


def _gpu_like_launch(monkeypatch, reqs, rows=0):
    """One head a program and the rule on (``reqs`` requests a program, ``rows`` its own tile height or 0: the
    table's), as on a GPU (the interpreter otherwise stacks heads)."""
    real = ssu.choose_launch_config

    def one_head(*a, **k):
        cfg = real(*a, **k)
        return LaunchConfig(block_m=min(cfg.block_m, 4), num_warps=1)  # several row blocks a head, too

    monkeypatch.setattr(ssu, "choose_launch_config", one_head)
    monkeypatch.setattr(ssu, "_gpu_rules_on", lambda device: True)
    monkeypatch.setattr(untied, "UNTIED_REQS", {4: [(reqs, 1, 1 << 30, rows)], 2: [(reqs, 1, 1 << 30, rows)]}
                        if reqs else {})


@pytest.mark.parametrize("dtypes", DTYPES)
@pytest.mark.parametrize("reqs,rows,nulls", [(2, 6, 2), (4, 8, 3), (3, 9, 0), (4, 9, 2), (4, 7, 0), (4, 5, 1)])
def test_several_requests_a_program_give_the_same_bytes(monkeypatch, dtypes, reqs, rows, nulls):
    """Where ``REQS`` does not divide the requests (9, 7 or 5 on 4) the last group's requests past the batch's end
    store nothing (``UNTIED_TAIL_MIN``): the bytes are the one-request kernel's all the same, every slot but the live
    ones untouched."""
    monkeypatch.setattr(untied, "UNTIED_TAIL_MIN", 0)
    seed = 100 * reqs + rows
    case = make_case(seed, rows=rows, dim=8, dstate=16, slots=2 * rows + 2, ngroups=2, dtypes=dtypes)
    idx = random_slot_indices(rows, case.slots, num_null_rows=nulls, generator=gen(seed + 1)).to(DEVICE)
    kw = dict(state_batch_indices=idx)
    written = {int(i) for i in idx.tolist() if int(i) > 0}
    seen = spy_launches(monkeypatch, ssu)
    _gpu_like_launch(monkeypatch, 0)
    s_one, o_one = _run(case, kw, early=False)
    _gpu_like_launch(monkeypatch, reqs)
    s_many, o_many = _run(case, kw, early=False)
    assert seen[0]["kernel"] is not _ssu_untied_reqs_kernel
    assert seen[1]["kernel"] is _ssu_untied_reqs_kernel and seen[1]["REQS"] == reqs
    assert seen[0]["BLOCK_M"] == seen[1]["BLOCK_M"]  # one tile shape: a GPU's reduction order follows it
    assert torch.equal(o_many, o_one) and torch.equal(s_many, s_one)
    assert not o_many.isnan().any()
    null_rows = (idx == 0).nonzero().flatten()
    assert (o_many[null_rows] == 0).all()  # a padded row: zero outputs
    assert_untouched(case.state, s_many, written)  # the null block included
    _assert_matches_reference(case, kw, "one-token-untied", s_many, o_many)


@pytest.mark.parametrize("dtypes", DTYPES)
def test_the_rules_own_rows_reach_the_launch(monkeypatch, dtypes):
    """A rule with its own tile height (fp32 at batch 8: 2 rows where the table says 4) launches with it, and the
    result still matches the reference, padded rows zero, untouched slots untouched."""
    case = make_case(31, rows=8, dim=8, dstate=16, slots=18, ngroups=2, dtypes=dtypes)
    idx = random_slot_indices(8, case.slots, num_null_rows=2, generator=gen(32)).to(DEVICE)
    kw = dict(state_batch_indices=idx)
    seen = spy_launches(monkeypatch, ssu)
    _gpu_like_launch(monkeypatch, 4, rows=2)
    s_new, o_new = _run(case, kw, early=False)
    assert seen[0]["kernel"] is _ssu_untied_reqs_kernel and seen[0]["BLOCK_M"] == 2
    assert not o_new.isnan().any() and (o_new[(idx == 0).nonzero().flatten()] == 0).all()
    assert_untouched(case.state, s_new, {int(i) for i in idx.tolist() if int(i) > 0})
    _assert_matches_reference(case, kw, "one-token-untied", s_new, o_new)


def test_the_rule_takes_it_only_where_it_applies(monkeypatch):
    monkeypatch.setattr(untied, "UNTIED_REQS", {2: [(4, 8 * 128, 64 * 128, 0), (2, 64 * 128 + 1, 1 << 30, 0)]})
    common = dict(tied=False, one_token=True, dst_is_src=True, on_gpu=True)
    assert untied_reqs(64, 128, 2, **common) == (4, 0)
    assert untied_reqs(256, 128, 2, **common) == (2, 0)  # the second tier
    assert untied_reqs(4, 128, 2, **common) == (0, 0)  # below the first tier
    assert untied_reqs(66, 128, 2, **common) == (2, 0)  # 4 does not divide 66: the next tier that fits
    monkeypatch.setattr(untied, "UNTIED_TAIL_MIN", 1 << 30)
    assert untied_reqs(63, 128, 2, **common) == (0, 0)  # no tier's REQS divides it, and no tail
    monkeypatch.setattr(untied, "UNTIED_TAIL_MIN", 0)
    assert untied_reqs(63, 128, 2, **common) == (4, 0)  # the first tier, its last group with a tail
    assert untied_reqs(66, 128, 2, **common) == (2, 0)  # the second
    assert untied_reqs(4, 128, 2, **common) == (0, 0)
    monkeypatch.setattr(untied, "UNTIED_REQS", {2: [(4, 1, 1 << 30, 0)]})
    assert [untied_reqs(b, 128, 2, **common)[0] for b in (3, 4, 5)] == [0, 4, 4]  # never fewer requests than REQS
    monkeypatch.setattr(untied, "UNTIED_REQS", {2: [(4, 8 * 128, 64 * 128, 0), (2, 64 * 128 + 1, 1 << 30, 0)]})
    assert untied_reqs(64, 128, 4, **common) == (0, 0)  # no rule for fp32 here
    for flip in ("tied", "one_token", "dst_is_src", "on_gpu"):
        assert untied_reqs(64, 128, 2, **{**common, flip: not common[flip]}) == (0, 0), flip


def test_the_shipped_rule_is_the_measured_one():
    kw = dict(tied=False, one_token=True, dst_is_src=True, on_gpu=True)
    # calls 103-104, with the fast softplus: 4 requests from batch 8 (bf16); fp32 keeps the one-request kernel
    assert [untied_reqs(b, 128, 2, **kw)[0] for b in (1, 4, 8, 16, 64, 128, 256, 512, 9)] == [0, 0, 4, 4, 4, 4, 4, 4, 0]
    # call 292: batches 4 does not divide, with a tail from 11 x 128 request x heads (9 and 10 slower after a torch
    # kernel)
    assert [untied_reqs(b, 128, 2, **kw)[0] for b in (9, 10, 11, 13, 15, 17, 57, 63, 257)] == [0, 0] + [4] * 7
    assert untied_reqs(11, 64, 2, **kw) == (0, 0)  # 704 request x heads
    assert [untied_reqs(b, 128, 4, **kw) for b in (1, 8, 9, 16, 256)] == [(0, 0)] * 5


def test_the_interpreter_and_a_pinned_launch_keep_the_one_request_kernel(monkeypatch):
    monkeypatch.setattr(untied, "UNTIED_REQS", {4: [(2, 1, 1 << 30, 0)], 2: [(2, 1, 1 << 30, 0)]})
    seen = spy_launches(monkeypatch, ssu)
    case = make_case(7, rows=4, dim=8, dstate=16, slots=12)
    idx = random_slot_indices(4, case.slots, generator=gen(8)).to(DEVICE)
    with ssu.launch_config_override(LaunchConfig(block_m=8, num_warps=1)):
        _run(case, dict(state_batch_indices=idx), early=False)
    assert seen[-1]["kernel"] is not _ssu_untied_reqs_kernel
    if DEVICE.type == "cpu":
        _run(case, dict(state_batch_indices=idx), early=False)
        assert seen[-1]["kernel"] is not _ssu_untied_reqs_kernel
