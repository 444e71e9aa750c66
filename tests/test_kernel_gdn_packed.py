"""vLLM 0.33's packed GDN decode (``fused_recurrent_gated_delta_rule_packed_decode``: q/k/v from the conv's packed
output, the gates computed in the kernel) against its reference, on the interpreter and, unchanged, on a GPU; every
kernel that runs it (the general kernel, and with the GPU's rules forced the streaming kernel with and without its
early blocks, the speculative streaming kernel for the fused-gating call). Outputs poisoned first, untouched slots
(the null block included) bit-identical.
"""

from __future__ import annotations

import pytest
import torch

from mambalab.device import DEVICE
from mambalab.kernels import gated_delta_rule as gdn
from mambalab.kernels.gated_delta_rule import fused_recurrent_gated_delta_rule, fused_sigmoid_gating_delta_rule_update
from mambalab.kernels.gated_delta_rule_packed import (fused_recurrent_gated_delta_rule_packed_decode,
                                                      fused_recurrent_gated_delta_rule_packed_decode_ref)
from mambalab.kernels.gated_delta_rule_ref import (fused_recurrent_gated_delta_rule_ref,
                                               fused_sigmoid_gating_delta_rule_update_ref, sigmoid_gating)
from mambalab.kernels.testing import assert_untouched, poison_, random_slot_indices, spy_launches, touched_slots
from mambalab.lab.bugs import BugConfig, GuardMode

from test_kernel_gated_delta_rule import _gen, _nan_empty, assert_close, make_pool  # noqa: F401

FIXED = BugConfig.fixed()
PAIRS = [
    pytest.param(torch.float32, torch.float32, id="fp32"),
    pytest.param(torch.bfloat16, torch.bfloat16, id="bf16", marks=pytest.mark.cuda),
    pytest.param(torch.bfloat16, torch.float32, id="bf16-act-fp32-state", marks=pytest.mark.cuda),
]
# the kernel that runs the call: (STREAM rule or None, STREAM_EARLY_STATE rule)
PATHS = {
    "general": (None, {}),
    "stream": ({4: (4, 2, 2, 1, 1 << 30), 2: (4, 2, 2, 1, 1 << 30)}, {}),
    "stream-early": ({4: (4, 2, 2, 1, 1 << 30), 2: (4, 2, 2, 1, 1 << 30)},
                     {4: (1, 1 << 30, True, False), 2: (1, 1 << 30, False, False)}),
    "stream-early-one": ({4: (4, 2, 2, 1, 1 << 30), 2: (4, 2, 2, 1, 1 << 30)},
                         {4: (1, 1 << 30, True, True), 2: (1, 1 << 30, False, True)}),
}


def _packed(gen, N, H, HV, K, V, act, *, slots, null_rows=0, a_scale=3.0):
    mixed = torch.randn(N, 2 * H * K + HV * V, generator=gen).to(DEVICE, act)
    a = (torch.randn(N, HV, generator=gen) * a_scale).to(DEVICE, act)
    a[0, 0] = 30.0  # softplus's linear branch
    b = torch.randn(N, HV, generator=gen).to(DEVICE, act)
    A_log = torch.randn(HV, generator=gen).to(DEVICE)
    dt_bias = torch.randn(HV, generator=gen).to(DEVICE)
    idx = random_slot_indices(N, slots, num_null_rows=null_rows, generator=gen).to(DEVICE)
    return mixed, a, b, A_log, dt_bias, idx


def _force(monkeypatch, path):
    stream, early = PATHS[path]
    if stream is None:
        return spy_launches(monkeypatch, gdn)
    monkeypatch.setattr(gdn, "STREAM", stream)
    monkeypatch.setattr(gdn, "STREAM_EARLY_STATE", early)
    monkeypatch.setattr(gdn, "_gpu_rules_on", lambda device: True)
    monkeypatch.setattr(gdn, "heads_per_program", lambda HV, device: 1)  # the GPU's launch rule
    return spy_launches(monkeypatch, gdn)


@pytest.mark.parametrize("act,state", PAIRS)
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("N,H,HV,K,V,null_rows", [(5, 1, 2, 16, 8, 2), (3, 2, 4, 32, 20, 1)],
                         ids=["gva2-null2", "masked-V20"])
def test_packed_decode_matches_reference(act, state, path, N, H, HV, K, V, null_rows, monkeypatch):
    seen = _force(monkeypatch, path)
    gen = _gen(300 + N + V)
    slots = N + 3
    mixed, a, b, A_log, dt_bias, idx = _packed(gen, N, H, HV, K, V, act, slots=slots, null_rows=null_rows)
    _, pool = make_pool(gen, slots, HV, V, K, state)
    before, pool_ref = pool.clone(), pool.clone()
    out, out_ref = poison_(torch.empty(N, 1, HV, V, device=DEVICE, dtype=act)), torch.empty(N, 1, HV, V,
                                                                                          device=DEVICE, dtype=act)
    res = fused_recurrent_gated_delta_rule_packed_decode(mixed, a, b, A_log, dt_bias, K ** -0.5, pool, out, idx,
                                                         True, bugs=FIXED, early_state_load=path == "stream-early")
    fused_recurrent_gated_delta_rule_packed_decode_ref(mixed, a, b, A_log, dt_bias, K ** -0.5, pool_ref, out_ref,
                                                       idx, True)
    assert res[0] is out and res[1] is pool
    if path != "general":
        assert seen[-1]["kernel"] is gdn._gdn_stream_kernel
        assert seen[-1].get("EARLY_STATE", False) == (path == "stream-early")
    assert_close(out, out_ref, act, "out")
    assert torch.equal(out[N - null_rows:], torch.zeros_like(out[N - null_rows:]))  # skipped rows: zeros
    assert_close(pool, pool_ref, state, "pool")
    assert_untouched(before, pool, touched_slots(idx))


@pytest.mark.parametrize("path", ["general", "stream"])
def test_packed_decode_equals_torch_gates_then_unpacked_kernel(path, monkeypatch):
    """The invariant behind the fusion: gates in the kernel == torch's gates handed to the unfused kernel."""
    _force(monkeypatch, path)
    gen = _gen(311)
    N, H, HV, K, V = 4, 2, 4, 16, 16
    mixed, a, b, A_log, dt_bias, idx = _packed(gen, N, H, HV, K, V, torch.float32, slots=8)
    _, pool = make_pool(gen, 8, HV, V, K)
    pool2 = pool.clone()
    out = torch.empty(N, 1, HV, V, device=DEVICE)
    fused_recurrent_gated_delta_rule_packed_decode(mixed, a, b, A_log, dt_bias, 0.25, pool, out, idx, True)
    q, k, v = torch.split(mixed, [H * K, H * K, HV * V], dim=-1)
    g, beta = sigmoid_gating(A_log, a, b, dt_bias)
    o2, _ = fused_recurrent_gated_delta_rule(q.reshape(N, 1, H, K).contiguous(), k.reshape(N, 1, H, K).contiguous(),
                                             v.reshape(N, 1, HV, V).contiguous(), g[:, None], beta[:, None],
                                             0.25, pool2, ssm_state_indices=idx, use_qk_l2norm_in_kernel=True)
    torch.testing.assert_close(out, o2, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(pool, pool2, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("act,state", PAIRS)
@pytest.mark.parametrize("stream", [False, True], ids=["general", "spec-stream"])
def test_fused_gating_speculative_matches_reference(act, state, stream, monkeypatch):
    """vLLM 0.33's speculative GDN call (``fused_sigmoid_gating_delta_rule_update``, 2-D indices,
    ``num_accepted_tokens``), on the speculative streaming kernel where forced."""
    if stream:
        monkeypatch.setattr(gdn, "SPEC_STREAM", {4: (4, 2, 2, 1, 1 << 30, 1), 2: (4, 2, 2, 1, 1 << 30, 1)})
        monkeypatch.setattr(gdn, "_gpu_rules_on", lambda device: True)
        monkeypatch.setattr(gdn, "heads_per_program", lambda HV, device: 1)
    seen = spy_launches(monkeypatch, gdn)
    gen = _gen(320)
    N, T, H, HV, K, V = 3, 2, 1, 2, 16, 8
    slots = N * T + 2
    q, k = (torch.randn(1, N * T, H, K, generator=gen).to(DEVICE, act) for _ in range(2))
    v = torch.randn(1, N * T, HV, V, generator=gen).to(DEVICE, act)
    a = (torch.randn(1, N * T, HV, generator=gen) * 3).to(DEVICE, act)
    b = torch.randn(1, N * T, HV, generator=gen).to(DEVICE, act)
    A_log, dt_bias = torch.randn(HV, generator=gen).to(DEVICE), torch.randn(HV, generator=gen).to(DEVICE)
    idx = random_slot_indices(N, slots, columns=T, generator=gen).to(DEVICE)
    num_acc = torch.tensor([1, 2, 2], dtype=torch.int32, device=DEVICE)
    cu = torch.arange(0, N * T + 1, T, dtype=torch.int32, device=DEVICE)
    _, pool = make_pool(gen, slots, HV, V, K, state)
    before, pool_ref = pool.clone(), pool.clone()
    kw = dict(cu_seqlens=cu, ssm_state_indices=idx, num_accepted_tokens=num_acc, use_qk_l2norm_in_kernel=True)
    o, _ = fused_sigmoid_gating_delta_rule_update(A_log, a, b, dt_bias, q, k, v, initial_state=pool, bugs=FIXED,
                                                  early_state_load=True, **kw)
    o_ref, _ = fused_sigmoid_gating_delta_rule_update_ref(A_log, a, b, dt_bias, q, k, v, initial_state=pool_ref,
                                                          **kw)
    if stream:
        assert seen[-1]["kernel"] is gdn._gdn_spec_stream_kernel
    assert_close(o, o_ref, act, "o")
    assert_close(pool, pool_ref, state, "pool")
    assert_untouched(before, pool, touched_slots(idx))


def test_packed_decode_guard_lt_zero_dirties_the_null_block():
    """A padded request (slot 0) under #39064's pre-fix guard loads and stores the null block, as the unpacked
    call does; the fixed guard (upstream's ``<= 0``) leaves it alone."""
    gen = _gen(330)
    N, H, HV, K, V = 4, 1, 2, 8, 8
    mixed, a, b, A_log, dt_bias, idx = _packed(gen, N, H, HV, K, V, torch.float32, slots=6, null_rows=1)
    for bugs, guard, dirty in ((FIXED, GuardMode.NULL, False),
                               (BugConfig.with_bugs("guard-lt-zero"), GuardMode.NEGATIVE, True)):
        _, pool = make_pool(gen, 6, HV, V, K)
        pool[0].zero_()
        before, pool_ref = pool.clone(), pool.clone()
        out, out_ref = (torch.empty(N, 1, HV, V, device=DEVICE) for _ in range(2))
        fused_recurrent_gated_delta_rule_packed_decode(mixed, a, b, A_log, dt_bias, 0.3, pool, out, idx, True,
                                                       bugs=bugs)
        fused_recurrent_gated_delta_rule_packed_decode_ref(mixed, a, b, A_log, dt_bias, 0.3, pool_ref, out_ref, idx,
                                                           True, guard=guard)
        assert (not torch.equal(pool[0], before[0])) == dirty
        assert_close(out, out_ref, torch.float32, "out")
        assert_close(pool, pool_ref, torch.float32, "pool")


def _good():
    gen = _gen(340)
    mixed, a, b, A_log, dt_bias, idx = _packed(gen, 3, 1, 2, 8, 8, torch.float32, slots=5)
    _, pool = make_pool(gen, 5, 2, 8, 8)
    return dict(mixed_qkv=mixed, a=a, b=b, A_log=A_log, dt_bias=dt_bias, scale=0.3, initial_state=pool,
                out=torch.empty(3, 1, 2, 8, device=DEVICE), ssm_state_indices=idx)


@pytest.mark.parametrize("what,mutate,match", [
    ("3-D mixed_qkv", lambda d: d.update(mixed_qkv=d["mixed_qkv"][None]), "mixed_qkv must be 2-D"),
    ("qkv dim", lambda d: d.update(mixed_qkv=d["mixed_qkv"][:, :-3]), "not 2 \\* H \\* K"),
    ("a shape", lambda d: d.update(a=d["a"][:, :1]), "a must be \\[N, HV\\]"),
    ("2-D indices", lambda d: d.update(ssm_state_indices=d["ssm_state_indices"][:, None]), "ssm_state_indices"),
    ("out shape", lambda d: d.update(out=d["out"][:, 0]), "out must be a contiguous"),
    ("out strided", lambda d: d.update(out=torch.empty(3, 1, 2, 16, device=DEVICE)[..., :8]), "contiguous"),
    ("A_log shape", lambda d: d.update(A_log=d["A_log"][:1]), "A_log must be"),
    ("a not a tensor", lambda d: d.update(a=[1.0]), "a must be a torch.Tensor"),
])
def test_packed_decode_bad_inputs_raise_clear_errors(what, mutate, match):
    d = _good()
    mutate(d)
    with pytest.raises((ValueError, TypeError), match=match):
        fused_recurrent_gated_delta_rule_packed_decode(**d, use_qk_l2norm_in_kernel=True)


@pytest.mark.parametrize("N,spec,rows", [(2, False, 4), (3, False, None), (2, True, None)],
                         ids=["two-seqs", "three-seqs", "two-seqs-speculative"])
def test_small_batch_rule_takes_four_rows_on_a_gpu(N, spec, rows, monkeypatch):
    """``SMALL_N_BV``: one token a sequence, at most two sequences, on a GPU: 4 value rows a program (the general
    kernel; the interpreter keeps its heads kernel). The launch takes :func:`launch_config`'s rows (an H200's SMs
    forced here); the results do not depend on them."""
    monkeypatch.setattr(gdn, "_gpu_rules_on", lambda device: True)
    monkeypatch.setattr(gdn, "_num_sms", lambda device: 132)
    monkeypatch.setattr(gdn, "heads_per_program", lambda HV, device: 1)
    monkeypatch.setattr(gdn, "STREAM", {})
    monkeypatch.setattr(gdn, "SPEC_STREAM", {})
    seen = spy_launches(monkeypatch, gdn)
    gen = _gen(350 + N)
    H, HV, K, V, T = 1, 2, 16, 16, 2 if spec else 1
    q, k = (torch.randn(N, T, H, K, generator=gen).to(DEVICE) for _ in range(2))
    v = torch.randn(N, T, HV, V, generator=gen).to(DEVICE)
    g, beta = -torch.rand(N, T, HV, generator=gen).to(DEVICE), torch.rand(N, T, HV, generator=gen).to(DEVICE)
    idx = random_slot_indices(N, 8, columns=T if spec else None, generator=gen).to(DEVICE)
    _, pool = make_pool(gen, 8, HV, V, K)
    pool_ref = pool.clone()
    kw = dict(ssm_state_indices=idx, use_qk_l2norm_in_kernel=True)
    if spec:
        kw.update(num_accepted_tokens=torch.full((N,), 2, dtype=torch.int32, device=DEVICE),
                  cu_seqlens=torch.arange(0, N * T + 1, T, dtype=torch.int32, device=DEVICE))
        q, k, v, g, beta = (x.reshape(1, N * T, *x.shape[2:]) for x in (q, k, v, g, beta))
    o, _ = fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, **kw)
    o_ref, _ = fused_recurrent_gated_delta_rule_ref(q, k, v, g, beta, initial_state=pool_ref, **kw)
    bv = gdn.launch_config(K, V, HV, N, 4, gdn._num_sms(pool.device), multi_token=spec and DEVICE.type == "cuda")[1]
    assert seen[-1]["BV"] == (rows if rows is not None else bv)
    assert_close(o, o_ref, torch.float32, "o")
    assert_close(pool, pool_ref, torch.float32, "pool")


def test_small_batch_rule_in_launch_config():
    """The rule on Qwen3-Next's shapes (K = V = 128, 32 value heads) with an H200's 132 SMs: the halving alone leaves
    8 rows at 2 sequences; ``SMALL_N_BV`` takes 4 there and leaves 3 sequences, several tokens and the interpreter
    (1 SM) alone."""
    for size, three in ((2, 16), (4, 8)):
        assert gdn.launch_config(128, 128, 32, 1, size, 132)[1] == 4
        assert gdn.launch_config(128, 128, 32, 2, size, 132)[1] == 4
        assert gdn.launch_config(128, 128, 32, 3, size, 132)[1] == three
        assert gdn.launch_config(128, 128, 32, 2, size, 132, multi_token=True)[1] == gdn.MULTI_TOKEN_BV[size]
    assert gdn.launch_config(12, 20, 2, 1, 4, 1)[1] == 16
