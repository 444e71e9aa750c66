"""The GDN decode step on a persistent grid (``gated_delta_rule_persistent._gdn_persistent_kernel``: resident
programs walking (sequence, head, block) items in one pipelined loop) against the reference, on the interpreter
and, unchanged, on a GPU. The rule ``PERSIST`` is forced here (off by default), with the GPU's one head a program;
the SM count is forced to 1 so that a few programs walk many items on either device. Outputs are NaN-poisoned
(``_nan_empty``); untouched slots, the null block too, stay bit-identical.
"""

from __future__ import annotations

import pytest
import torch

from mambalab.device import DEVICE
from mambalab.kernels import gated_delta_rule as gdn
from mambalab.kernels import gated_delta_rule_persistent as gp
from mambalab.kernels.gated_delta_rule import fused_recurrent_gated_delta_rule
from mambalab.kernels.gated_delta_rule_ref import fused_recurrent_gated_delta_rule_ref
from mambalab.kernels.testing import assert_untouched, random_slot_indices, touched_slots
from mambalab.lab.bugs import BugConfig

from test_kernel_gated_delta_rule import _gen, _nan_empty, assert_close, make_inputs, make_pool  # noqa: F401
from test_kernel_gdn_spec_stream import _interpreter_takes_a_runtime_range

FIXED = BugConfig.fixed()
STATE_DTYPES = [
    pytest.param(torch.float32, torch.float32, id="fp32"),
    pytest.param(torch.bfloat16, torch.bfloat16, id="bf16", marks=pytest.mark.cuda),
    pytest.param(torch.bfloat16, torch.float32, id="bf16-act-fp32-state", marks=pytest.mark.cuda),
]


@pytest.fixture
def launched(monkeypatch):
    """The GPU's launch (one head a program, the one-token kernels on), one SM; the kernels launched."""
    if not _interpreter_takes_a_runtime_range():
        pytest.skip("this Triton's interpreter cannot take a runtime tl.range bound (a GPU path)")
    monkeypatch.setattr(gdn, "heads_per_program", lambda HV, device: 1)
    monkeypatch.setattr(gdn, "_streams_on", lambda device: True)
    monkeypatch.setattr(gdn, "_num_sms", lambda device: 1)
    seen = []
    real = gdn.sanitizer.launch

    def spy(kernel, grid, *args, **kwargs):
        seen.append((kernel, grid))
        return real(kernel, grid, *args, **kwargs)

    monkeypatch.setattr(gdn.sanitizer, "launch", spy)
    return seen


@pytest.mark.parametrize("dtype,state_dtype", STATE_DTYPES)
@pytest.mark.parametrize("rb,stages,per_sm,contig,V,maxnreg", [
    (4, 2, 3, True, 20, 0), (8, 3, 2, False, 16, 0), (4, 1, 5, False, 12, 0), (8, 4, 64, True, 16, 0),
    pytest.param(8, 4, 3, False, 20, 64, marks=pytest.mark.cuda)],
    ids=["rb4-s2-p3-contig-V20-masked", "rb8-s3-p2-strided", "rb4-s1-p5-strided", "rb8-s4-one-item-a-program",
         "rb8-s4-p3-strided-maxnreg64"])
@pytest.mark.parametrize("prefetch", [False, True], ids=["", "prefetch"])
@pytest.mark.parametrize("varlen", [False, True], ids=["batch", "varlen"])
def test_persistent_kernel_matches_reference(dtype, state_dtype, rb, stages, per_sm, contig, V, maxnreg, prefetch,
                                             varlen, launched, monkeypatch):
    """Null rows included (zero outputs, no state traffic); as a batch of one token and as vLLM's varlen call;
    the sequence's loads in the item or carried one item ahead (``PREFETCH``); a register cap on a GPU."""
    rule = (rb, stages, per_sm, 1, 1 << 30, contig, maxnreg, prefetch)
    monkeypatch.setattr(gp, "PERSIST", {state_dtype.itemsize: rule})
    gen = _gen(350 + rb + V + per_sm)
    N, H, HV, K = 6, 1, 2, 16
    q, k, v, g, beta = make_inputs(gen, B=N, T=1, H=H, HV=HV, K=K, V=V, dtype=dtype)
    kw = dict(use_qk_l2norm_in_kernel=True)
    if varlen:
        q, k, v, g, beta = (t.transpose(0, 1) for t in (q, k, v, g, beta))  # [1, N, ...]: one token each
        kw["cu_seqlens"] = torch.arange(N + 1, dtype=torch.int32, device=DEVICE)
    slots = N + 3
    _, pool = make_pool(gen, slots, HV, V, K, state_dtype)
    idx = random_slot_indices(N, slots, num_null_rows=2, generator=gen).to(DEVICE)
    before, pool_ref = pool.clone(), pool.clone()
    kw["ssm_state_indices"] = idx
    o, _ = fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, bugs=FIXED, **kw)
    o_ref, _ = fused_recurrent_gated_delta_rule_ref(q, k, v, g, beta, initial_state=pool_ref, **kw)
    kernel, grid = launched[-1]
    assert kernel is gp._gdn_persistent_kernel
    assert grid == (min(per_sm, N * HV * -(-V // rb)), 1, 1)
    assert_close(o, o_ref, dtype, "o")
    assert_close(pool, pool_ref, state_dtype, "pool")
    assert_untouched(before, pool, touched_slots(idx))


@pytest.mark.parametrize("contig", [True, False], ids=["contig", "strided"])
@pytest.mark.parametrize("prefetch", [False, True], ids=["", "prefetch"])
def test_persistent_kernel_varlen_rows_of_other_lengths(contig, prefetch, launched, monkeypatch):
    """cu_seqlens with as many tokens as sequences, but of 1, 0, 2, 1, 2 and 0 tokens, the second two-token one on
    the null slot: the empty ones touch nothing, the live two-token one takes the general path after the walk, the
    null one gets zero outputs."""
    monkeypatch.setattr(gp, "PERSIST", {4: (4, 2, 3, 1, 1 << 30, contig, 0, prefetch)})
    gen = _gen(357)
    lens = [1, 0, 2, 1, 2, 0]
    total, H, HV, K, V = sum(lens), 1, 2, 12, 8
    q, k, v, g, beta = make_inputs(gen, B=1, T=total, H=H, HV=HV, K=K, V=V)
    cu = torch.tensor([0, 1, 1, 3, 4, 6, 6], dtype=torch.int32, device=DEVICE)
    _, pool = make_pool(gen, 7, HV, V, K)
    idx = torch.tensor([5, 3, 1, 6, 0, 2], dtype=torch.int64, device=DEVICE)
    before, pool_ref = pool.clone(), pool.clone()
    kw = dict(cu_seqlens=cu, ssm_state_indices=idx, use_qk_l2norm_in_kernel=True)
    o, _ = fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, bugs=FIXED, **kw)
    o_ref, _ = fused_recurrent_gated_delta_rule_ref(q, k, v, g, beta, initial_state=pool_ref, **kw)
    assert launched[-1][0] is gp._gdn_persistent_kernel
    assert torch.all(o[0, 4:6] == 0)
    assert_close(o, o_ref, torch.float32, "o")
    assert_close(pool, pool_ref, torch.float32, "pool")
    assert_untouched(before, pool, {5, 1, 6})


def test_persistent_rule_leaves_other_launches_alone(launched, monkeypatch):
    """Off by default; outside its batch range, with several tokens a sequence, an explicit block_v or
    sigmoid gating the launch is the one it was."""
    assert gp.PERSIST == {} and gp.persistent_launch(2, 64, 32, 128, 132) is None
    monkeypatch.setattr(gdn, "STREAM", {})
    monkeypatch.setattr(gp, "PERSIST", {4: (4, 2, 3, 4, 6, True, 0, False)})
    gen = _gen(358)
    for N, T, bv, want in ((4, 2, None, gdn._gdn_decode_kernel), (2, 1, None, gdn._gdn_decode_kernel),
                           (8, 1, None, gdn._gdn_decode_kernel), (4, 1, 4, gdn._gdn_decode_kernel),
                           (4, 1, None, gp._gdn_persistent_kernel)):
        q, k, v, g, beta = make_inputs(gen, B=N, T=T, H=1, HV=2, K=8, V=8)
        _, pool = make_pool(gen, N + 1, 2, 8, 8)
        idx = torch.arange(1, N + 1, device=DEVICE)
        fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, ssm_state_indices=idx,
                                         block_v=bv, bugs=FIXED)
        assert launched[-1][0] is want, (N, T, bv)


def test_persistent_launch_rule():
    """Programs: the resident slots (programs per SM x SMs), at most one an item."""
    rule = {2: (8, 4, 24, 16, 1 << 30, True, 80, True)}
    old, gp.PERSIST = gp.PERSIST, rule
    try:
        kernel, extra, grid = gp.persistent_launch(2, 64, 32, 128, 132)
        assert kernel is gp._gdn_persistent_kernel and grid == (24 * 132, 1, 1)
        assert extra == dict(RB=8, STAGES=4, CONTIG=True, PREFETCH=True, N_SEQ=64, maxnreg=80)
        assert gp.persistent_launch(2, 1 << 4, 1, 8, 132)[2] == (16, 1, 1)
        assert gp.persistent_launch(2, 8, 32, 128, 132) is None and gp.persistent_launch(4, 64, 32, 128, 132) is None
    finally:
        gp.PERSIST = old
