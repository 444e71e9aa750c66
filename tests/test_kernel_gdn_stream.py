"""The GDN streaming kernel (one token a sequence, state blocks through a pipelined loop) against the
reference, on the interpreter and, unchanged, on a GPU. The rule ``gated_delta_rule.STREAM`` is forced here
(GPU-sized and GPU-only by default: ``_gpu_rules_on``), with the GPU's one head a program
(``heads_per_program``); ``block_v`` is left alone, it turns the streaming kernel off.
"""

from __future__ import annotations

import pytest
import torch

from mambalab.device import DEVICE
from mambalab.kernels import gated_delta_rule as gdn
from mambalab.kernels.gated_delta_rule import fused_recurrent_gated_delta_rule
from mambalab.kernels.gated_delta_rule_ref import fused_recurrent_gated_delta_rule_ref
from mambalab.kernels.testing import assert_untouched, random_slot_indices, spy_launches, touched_slots
from mambalab.lab.bugs import BugConfig

from test_kernel_gated_delta_rule import _gen, _nan_empty, assert_close, make_inputs, make_pool  # noqa: F401

FIXED = BugConfig.fixed()
STATE_DTYPES = [
    pytest.param(torch.float32, torch.float32, id="fp32"),
    pytest.param(torch.bfloat16, torch.bfloat16, id="bf16", marks=pytest.mark.cuda),
    pytest.param(torch.bfloat16, torch.float32, id="bf16-act-fp32-state", marks=pytest.mark.cuda),
]


def _launched_kernels(monkeypatch):
    monkeypatch.setattr(gdn, "heads_per_program", lambda HV, device: 1)  # the GPU's launch rule
    return spy_launches(monkeypatch, gdn)


@pytest.mark.parametrize("dtype,state_dtype", STATE_DTYPES)
@pytest.mark.parametrize("rb,nb,stages,V", [(4, 2, 2, 20), (8, 2, 3, 16), (4, 4, 1, 12)],
                         ids=["rb4-nb2-V20-masked", "rb8-nb2-s3", "rb4-nb4-s1"])
@pytest.mark.parametrize("raw,l2norm", [(False, True), (True, True), (True, False)],
                         ids=["normalised", "raw-qk", "raw-qk-no-l2norm"])
def test_stream_kernel_matches_reference(dtype, state_dtype, rb, nb, stages, V, raw, l2norm, monkeypatch):
    """Padded rows (null slots) included; untouched slots, the null block too, bit-identical. ``RAW_QK``
    (``STREAM_RAW_QK``: q and k as loaded, their norms and the scale applied to the state's reductions) alike."""
    monkeypatch.setattr(gdn, "STREAM", {state_dtype.itemsize: (rb, nb, stages, 1, 1 << 30)})
    monkeypatch.setattr(gdn, "STREAM_RAW_QK", frozenset({state_dtype.itemsize} if raw else ()))
    monkeypatch.setattr(gdn, "_gpu_rules_on", lambda device: True)
    seen = _launched_kernels(monkeypatch)
    gen = _gen(90 + rb + V)
    N, H, HV, K = 6, 1, 2, 16
    q, k, v, g, beta = make_inputs(gen, B=N, T=1, H=H, HV=HV, K=K, V=V, dtype=dtype)
    slots = N + 3
    _, pool = make_pool(gen, slots, HV, V, K, state_dtype)
    idx = random_slot_indices(N, slots, num_null_rows=2, generator=gen).to(DEVICE)
    before, pool_ref = pool.clone(), pool.clone()
    kw = dict(ssm_state_indices=idx, use_qk_l2norm_in_kernel=l2norm)
    o, _ = fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, bugs=FIXED, **kw)
    o_ref, _ = fused_recurrent_gated_delta_rule_ref(q, k, v, g, beta, initial_state=pool_ref, **kw)
    assert seen and seen[-1]["kernel"] is gdn._gdn_stream_kernel and seen[-1]["RAW_QK"] == raw
    assert_close(o, o_ref, dtype, "o")
    assert_close(pool, pool_ref, state_dtype, "pool")
    assert_untouched(before, pool, touched_slots(idx))


def test_stream_kernel_varlen_rows_of_other_lengths(monkeypatch):
    """cu_seqlens with as many tokens as sequences, but of lengths 1, 0, 2, 1: the empty sequence touches
    nothing, the two-token one takes the general path inside the same launch."""
    monkeypatch.setattr(gdn, "STREAM", {4: (4, 2, 2, 1, 1 << 30)})
    monkeypatch.setattr(gdn, "_gpu_rules_on", lambda device: True)
    seen = _launched_kernels(monkeypatch)
    gen = _gen(97)
    lens = [1, 0, 2, 1]
    total, N, H, HV, K, V = sum(lens), len(lens), 1, 2, 12, 8
    q, k, v, g, beta = make_inputs(gen, B=1, T=total, H=H, HV=HV, K=K, V=V)
    cu = torch.tensor([0, 1, 1, 3, 4], dtype=torch.int32, device=DEVICE)
    _, pool = make_pool(gen, 7, HV, V, K)
    idx = torch.tensor([5, 3, 1, 6], dtype=torch.int64, device=DEVICE)
    before, pool_ref = pool.clone(), pool.clone()
    kw = dict(cu_seqlens=cu, ssm_state_indices=idx, use_qk_l2norm_in_kernel=True)
    o, _ = fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, bugs=FIXED, **kw)
    o_ref, _ = fused_recurrent_gated_delta_rule_ref(q, k, v, g, beta, initial_state=pool_ref, **kw)
    assert seen and seen[-1]["kernel"] is gdn._gdn_stream_kernel
    assert_close(o, o_ref, torch.float32, "o")
    assert_close(pool, pool_ref, torch.float32, "pool")
    assert_untouched(before, pool, {5, 1, 6})


def test_stream_rule_leaves_other_launches_alone(monkeypatch):
    """Several tokens a sequence, batches outside the rule's range and an explicit block_v keep the general
    kernel; the interpreter keeps it by default."""
    assert not gdn._gpu_rules_on(torch.device("cpu"))
    monkeypatch.setattr(gdn, "STREAM", {4: (4, 2, 2, 4, 6)})
    monkeypatch.setattr(gdn, "_gpu_rules_on", lambda device: True)
    seen = _launched_kernels(monkeypatch)
    gen = _gen(98)
    for N, T, bv in ((4, 2, None), (2, 1, None), (8, 1, None), (4, 1, 4)):
        q, k, v, g, beta = make_inputs(gen, B=N, T=T, H=1, HV=2, K=8, V=8)
        _, pool = make_pool(gen, N + 1, 2, 8, 8)
        idx = torch.arange(1, N + 1, device=DEVICE)
        fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, ssm_state_indices=idx,
                                         block_v=bv, bugs=FIXED)
        assert seen[-1]["kernel"] is gdn._gdn_decode_kernel, (N, T, bv)


@pytest.mark.parametrize("dtype,state_dtype", STATE_DTYPES)
@pytest.mark.parametrize("lens", [None, [1, 0, 2, 1, 1]], ids=["one-token", "varlen"])
@pytest.mark.parametrize("one", [False, True], ids=["both-blocks", "first-block"])
def test_stream_early_state_same_bytes(dtype, state_dtype, lens, one, monkeypatch):
    """``STREAM_EARLY_STATE`` (both blocks read with the slot, or the first only, ``EARLY_ONE``, the second read
    before the first's state store, under ptxas' cap; before PDL's wait on a GPU) gives the same bytes as the
    pipelined loop, padded rows and sequences of other lengths included, and
    only with the caller's ``early_state_load`` promise."""
    monkeypatch.setattr(gdn, "STREAM", {state_dtype.itemsize: (4, 2, 2, 1, 1 << 30)})
    monkeypatch.setattr(gdn, "_gpu_rules_on", lambda device: True)
    seen = _launched_kernels(monkeypatch)
    gen = _gen(131)
    H, HV, K, V = 1, 2, 16, 12
    if lens is None:
        N, B, T, cu = 6, 6, 1, None
        idx = random_slot_indices(N, N + 3, num_null_rows=2, generator=gen).to(DEVICE)
    else:
        N, B, T = len(lens), 1, sum(lens)
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device=DEVICE)
        idx = torch.tensor([5, 3, 0, 6, 2], dtype=torch.int64, device=DEVICE)
    q, k, v, g, beta = make_inputs(gen, B=B, T=T, H=H, HV=HV, K=K, V=V, dtype=dtype)
    _, pool = make_pool(gen, N + 3, HV, V, K, state_dtype)
    runs = {}
    on = {state_dtype.itemsize: (1, 64, True, one)}  # zigzag: under PDL only (a GPU)
    for rule, promise in (({}, True), (on, False), (on, True)):
        monkeypatch.setattr(gdn, "STREAM_EARLY_STATE", rule)
        p = pool.clone()
        o, _ = fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=p, cu_seqlens=cu,
                                                ssm_state_indices=idx, use_qk_l2norm_in_kernel=True, bugs=FIXED,
                                                early_state_load=promise)
        assert seen[-1]["kernel"] is gdn._gdn_stream_kernel
        runs[(bool(rule), promise)] = (o, p, seen[-1].get("EARLY_STATE", False))
        assert seen[-1].get("EARLY_ONE", False) == (one and bool(rule) and promise)
        assert seen[-1].get("maxnreg") == (gdn.STREAM_ONE_MAXNREG if one and rule and promise else None)
        assert seen[-1]["RAW_QK"] == (state_dtype.itemsize in gdn.STREAM_RAW_QK)
    assert [r[2] for r in runs.values()] == [False, False, True]
    o0, p0, _ = runs[(False, True)]
    o1, p1, _ = runs[(True, True)]
    assert torch.equal(o0, o1) and torch.equal(p0, p1)
