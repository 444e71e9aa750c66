"""The GDN streaming kernel for speculative decoding (2-D indices, several tokens a sequence, state blocks
through a pipelined loop) against the reference, on the interpreter and, unchanged, on a GPU. The rule
``gated_delta_rule.SPEC_STREAM`` is forced here (GPU-only by default: ``_gpu_rules_on``), with the GPU's one
head a program (``heads_per_program``).
"""

from __future__ import annotations

import pytest
import torch

from mambalab.device import DEVICE
from mambalab.kernels import gated_delta_rule as gdn
from mambalab.kernels.gated_delta_rule import fused_recurrent_gated_delta_rule
from mambalab.kernels.gated_delta_rule_ref import fused_recurrent_gated_delta_rule_ref
from mambalab.kernels.testing import assert_untouched, random_slot_indices, touched_slots
from mambalab.lab.bugs import BugConfig

from test_kernel_gated_delta_rule import _gen, _nan_empty, assert_close, make_inputs, make_pool  # noqa: F401

FIXED = BugConfig.fixed()
STATE_DTYPES = [
    pytest.param(torch.float32, torch.float32, id="fp32"),
    pytest.param(torch.bfloat16, torch.bfloat16, id="bf16", marks=pytest.mark.cuda),
    pytest.param(torch.bfloat16, torch.float32, id="bf16-act-fp32-state", marks=pytest.mark.cuda),
]


@pytest.fixture
def launched(monkeypatch):
    """Force the rule (every batch), the GPU's one head a program; return the kernels launched."""
    monkeypatch.setattr(gdn, "heads_per_program", lambda HV, device: 1)
    monkeypatch.setattr(gdn, "_gpu_rules_on", lambda device: True)
    monkeypatch.setattr(gdn, "SPEC_STREAM_MAX_TOKENS", 8)  # the kernel takes any width; the rule stops at 2
    seen = []
    real = gdn.sanitizer.launch

    def spy(kernel, grid, *args, **kwargs):
        seen.append((kernel, kwargs.get("TOKENS", kwargs.get("TOKEN_STAGES"))))
        return real(kernel, grid, *args, **kwargs)

    monkeypatch.setattr(gdn.sanitizer, "launch", spy)
    return seen


def _spec_case(gen, lens, num_acc, cols, dtype, state_dtype, V=20, null_rows=1):
    N, H, HV, K = len(lens), 1, 2, 16
    total = sum(lens)
    q, k, v, g, beta = make_inputs(gen, B=1, T=total, H=H, HV=HV, K=K, V=V, dtype=dtype)
    slots = 1 + N * cols + 3
    idx = random_slot_indices(N, slots, num_null_rows=null_rows, columns=cols, generator=gen).to(DEVICE)
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device=DEVICE)
    _, pool = make_pool(gen, slots, HV, V, K, state_dtype)
    kw = dict(cu_seqlens=cu, ssm_state_indices=idx, use_qk_l2norm_in_kernel=True,
              num_accepted_tokens=torch.tensor(num_acc, dtype=torch.int32, device=DEVICE))
    return (q, k, v, g, beta), pool, kw


def _check(args, pool, kw, dtype, state_dtype, untouched=True):
    before, pool_ref = pool.clone(), pool.clone()
    o, _ = fused_recurrent_gated_delta_rule(*args, initial_state=pool, bugs=FIXED, **kw)
    o_ref, _ = fused_recurrent_gated_delta_rule_ref(*args, initial_state=pool_ref, **kw)
    assert_close(o, o_ref, dtype, "o")
    assert_close(pool, pool_ref, state_dtype, "pool")
    if untouched:
        assert_untouched(before, pool, touched_slots(kw["ssm_state_indices"]))


@pytest.mark.parametrize("dtype,state_dtype", STATE_DTYPES)
@pytest.mark.parametrize("rb,nb,stages,V,warps", [(4, 2, 2, 20, 1), (8, 2, 3, 16, 1), (4, 4, 1, 12, 1),
                                                   (8, 2, 3, 16, 2)],
                         ids=["rb4-nb2-V20-masked", "rb8-nb2-s3", "rb4-nb4-s1", "rb8-nb2-s3-w2"])
@pytest.mark.parametrize("T", [2, 4])
def test_spec_stream_matches_reference(T, rb, nb, stages, V, warps, dtype, state_dtype, launched, monkeypatch):
    """Every sequence T tokens (a speculative step), accepted counts 1..T, a padded row (null slots);
    untouched slots, the null block too, bit-identical."""
    monkeypatch.setattr(gdn, "SPEC_STREAM", {state_dtype.itemsize: (rb, nb, stages, 1, 1 << 30, warps)})
    gen = _gen(300 + 10 * T + rb + V)
    lens = [T] * 5
    num_acc = [1, T, 2, T - 1, 1]
    args, pool, kw = _spec_case(gen, lens, num_acc, T, dtype, state_dtype, V=V)
    _check(args, pool, kw, dtype, state_dtype)
    assert launched[-1] == (gdn._gdn_spec_stream_kernel, T)


def test_spec_stream_rows_of_other_lengths_take_the_general_path(launched, monkeypatch):
    """Sequences of 3, 0, 1 and 3 tokens in a 3-column launch: the empty one touches nothing, the short one
    runs the general path inside the same launch, the others the unrolled one."""
    monkeypatch.setattr(gdn, "SPEC_STREAM", {4: (4, 2, 2, 1, 1 << 30, 1)})
    gen = _gen(331)
    args, pool, kw = _spec_case(gen, [3, 0, 1, 3], [2, 1, 1, 3], 3, torch.float32, torch.float32, null_rows=0)
    before = pool.clone()
    _check(args, pool, kw, torch.float32, torch.float32, untouched=False)
    idx = kw["ssm_state_indices"].cpu()
    written = {int(s) for s in idx[0]} | {int(idx[2, 0])} | {int(s) for s in idx[3]}
    assert_untouched(before, pool, written)
    assert launched[-1] == (gdn._gdn_spec_stream_kernel, 3)


def test_spec_stream_zero_accepted_reads_the_null_block(launched, monkeypatch):
    """num_accepted_tokens == 0 under the fixed bound (#50021): the row is skipped, outputs zero, no state
    written (as the general kernel)."""
    monkeypatch.setattr(gdn, "SPEC_STREAM", {4: (4, 2, 2, 1, 1 << 30, 1)})
    gen = _gen(332)
    args, pool, kw = _spec_case(gen, [2, 2, 2], [0, 2, 1], 2, torch.float32, torch.float32, null_rows=0)
    before = pool.clone()
    general = before.clone()
    monkeypatch.setattr(gdn, "SPEC_STREAM", {})
    o_general, _ = fused_recurrent_gated_delta_rule(*args, initial_state=general, bugs=FIXED, **kw)
    monkeypatch.setattr(gdn, "SPEC_STREAM", {4: (4, 2, 2, 1, 1 << 30, 1)})
    o, _ = fused_recurrent_gated_delta_rule(*args, initial_state=pool, bugs=FIXED, **kw)
    assert launched[-2][0] is gdn._gdn_decode_kernel and launched[-1][0] is gdn._gdn_spec_stream_kernel
    assert torch.equal(o.reshape(-1, *o.shape[-2:])[:2], torch.zeros_like(o.reshape(-1, *o.shape[-2:])[:2]))
    torch.testing.assert_close(o, o_general, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(pool, general, rtol=1e-5, atol=1e-6)
    idx = kw["ssm_state_indices"].cpu()
    assert_untouched(before, pool, {int(s) for s in idx[1:].reshape(-1)})


def test_the_interpreter_keeps_the_general_kernel():
    assert not gdn._gpu_rules_on(torch.device("cpu"))


def test_spec_stream_rule_leaves_other_launches_alone(launched, monkeypatch):
    """One token a sequence, batches outside the rule's range, an explicit block_v, sigmoid gating's absence
    aside, and index rows wider than SPEC_STREAM_MAX_TOKENS keep the general kernel."""
    monkeypatch.setattr(gdn, "SPEC_STREAM", {4: (4, 2, 2, 2, 3, 1)})
    monkeypatch.setattr(gdn, "STREAM", {})
    gen = _gen(333)
    for lens, cols, bv in (([1, 1], 1, None), ([2], 2, None), ([2] * 4, 2, None), ([2, 2], 2, 4),
                           ([9, 9], 9, None)):
        args, pool, kw = _spec_case(gen, lens, [1] * len(lens), cols, torch.float32, torch.float32, null_rows=0)
        fused_recurrent_gated_delta_rule(*args, initial_state=pool, block_v=bv, bugs=FIXED, **kw)
        assert launched[-1][0] is gdn._gdn_decode_kernel, (lens, cols, bv)
    args, pool, kw = _spec_case(gen, [2, 2], [1, 2], 2, torch.float32, torch.float32, null_rows=0)
    fused_recurrent_gated_delta_rule(*args, initial_state=pool, bugs=FIXED, **kw)
    assert launched[-1][0] is gdn._gdn_spec_stream_kernel


def _spec_launch(N, T, state_dtype):
    """A speculative call of N sequences of T tokens (zeros, bf16 activations), for a caught launch."""
    ntok = N * T
    q = torch.zeros(1, ntok, 1, 8, dtype=torch.bfloat16)
    v = torch.zeros(1, ntok, 2, 8, dtype=torch.bfloat16)
    pool = torch.zeros(ntok + 1, 2, 8, 8, dtype=state_dtype)
    idx = torch.arange(1, ntok + 1, dtype=torch.int32).view(N, T)
    fused_recurrent_gated_delta_rule(q, q, v, torch.zeros(1, ntok, 2), torch.zeros(1, ntok, 2), initial_state=pool,
                                     cu_seqlens=torch.arange(0, ntok + 1, T, dtype=torch.int32),
                                     ssm_state_indices=idx, num_accepted_tokens=torch.ones(N, dtype=torch.int32))


def test_the_default_rule(monkeypatch):
    """As measured on an H200: a bf16 state with two columns from 64 sequences; not three columns, not fp32,
    not fewer sequences. (The launch is caught, not run.)"""
    monkeypatch.setattr(gdn, "heads_per_program", lambda HV, device: 1)
    monkeypatch.setattr(gdn, "_gpu_rules_on", lambda device: True)
    seen = []
    monkeypatch.setattr(gdn.sanitizer, "launch", lambda kernel, grid, *a, **kw: seen.append(kernel))
    for N, T, state_dtype, streams in ((64, 2, torch.bfloat16, True), (256, 2, torch.bfloat16, True),
                                       (16, 2, torch.bfloat16, False), (64, 3, torch.bfloat16, False),
                                       (64, 2, torch.float32, False)):
        _spec_launch(N, T, state_dtype)
        assert (seen[-1] is gdn._gdn_spec_stream_kernel) == streams, (N, T, state_dtype)


def _interpreter_takes_a_runtime_range() -> bool:
    """Whether ``tl.range`` with a loaded bound runs under this Triton's interpreter (3.6's does not under
    NumPy 2: the pipelined token loop is a GPU path; the engine's interpreter launches never take it)."""
    import triton
    import triton.language as tl

    @triton.jit
    def probe(n_ptr, out_ptr):
        acc = tl.zeros([], dtype=tl.int32)
        for _ in tl.range(0, tl.load(n_ptr), num_stages=2):
            acc += 1
        tl.store(out_ptr, acc)

    out = torch.zeros(1, dtype=torch.int32, device=DEVICE)
    try:
        probe[(1,)](torch.tensor([3], dtype=torch.int32, device=DEVICE), out)
    except Exception:  # noqa: BLE001 - the interpreter's error, whatever its class
        return False
    return int(out[0]) == 3


def test_pipelined_token_loop_gives_the_same_bytes(launched, monkeypatch):
    """The general kernel's token loop as a pipelined tl.range (``TOKEN_STAGES``): the bytes of the plain loop
    on the interpreter, the reference within tolerance on a GPU; sequences of 3, 0, 1 and 3 tokens."""
    if not _interpreter_takes_a_runtime_range():
        pytest.skip("this Triton's interpreter cannot take a runtime tl.range bound (a GPU path)")
    monkeypatch.setattr(gdn, "SPEC_STREAM", {})
    monkeypatch.setattr(gdn, "SPEC_TOKEN_STAGES_MIN_N", 1)
    gen = _gen(334)
    args, pool, kw = _spec_case(gen, [3, 0, 1, 3], [2, 1, 1, 3], 3, torch.float32, torch.float32, null_rows=0)
    results = []
    for stages in (0, 2):
        monkeypatch.setattr(gdn, "SPEC_TOKEN_STAGES", {4: stages})
        p = pool.clone()
        o, _ = fused_recurrent_gated_delta_rule(*args, initial_state=p, bugs=FIXED, **kw)
        assert launched[-1] == (gdn._gdn_decode_kernel, stages or None)
        results.append((o, p))
    (o_plain, p_plain), (o_pipe, p_pipe) = results
    if DEVICE.type == "cpu":
        assert torch.equal(o_pipe, o_plain) and torch.equal(p_pipe, p_plain)
    _check(args, pool, kw, torch.float32, torch.float32, untouched=False)
    torch.testing.assert_close(p_pipe, pool, rtol=1e-5, atol=1e-6)


def test_the_default_token_stages_rule(monkeypatch):
    """As measured on an H200: a bf16 state from 128 sequences, 3 stages; not fp32, not 64 sequences, not
    where the streaming kernel takes the launch (two columns). (The launch is caught, not run.)"""
    monkeypatch.setattr(gdn, "heads_per_program", lambda HV, device: 1)
    monkeypatch.setattr(gdn, "_gpu_rules_on", lambda device: True)
    seen = []
    monkeypatch.setattr(gdn.sanitizer, "launch",
                        lambda kernel, grid, *a, **kw: seen.append((kernel, kw.get("TOKEN_STAGES", 0))))
    for N, T, state_dtype, want in ((256, 3, torch.bfloat16, (gdn._gdn_decode_kernel, 3)),
                                    (256, 4, torch.bfloat16, (gdn._gdn_decode_kernel, 3)),
                                    (128, 3, torch.bfloat16, (gdn._gdn_decode_kernel, 3)),
                                    (64, 3, torch.bfloat16, (gdn._gdn_decode_kernel, 0)),
                                    (256, 3, torch.float32, (gdn._gdn_decode_kernel, 0)),
                                    (256, 2, torch.bfloat16, (gdn._gdn_spec_stream_kernel, 0))):
        _spec_launch(N, T, state_dtype)
        assert seen[-1] == want, (N, T, state_dtype)
