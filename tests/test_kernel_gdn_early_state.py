"""The GDN kernel's early state load (issue 14): ``early_state_load=True`` is the caller's promise that the
kernel launched just before writes neither the state pool nor the indices, and under PDL the general kernel
then reads them before waiting for it (as the SSU's, ``test_kernel_ssu_early_state.py``).

Same bytes as the launch that waits first (one token with padded rows, speculative varlen with
``num_accepted_tokens``), the reference within tolerance, a chain whose next ``v`` is the previous output, and
where the switch reaches the kernel: only on a Hopper GPU, only the general kernel, only small batches.
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
DTYPES = [
    pytest.param(torch.float32, torch.float32, id="fp32"),
    pytest.param(torch.bfloat16, torch.bfloat16, id="bf16", marks=pytest.mark.cuda),
    pytest.param(torch.bfloat16, torch.float32, id="bf16-act-fp32-state", marks=pytest.mark.cuda),
]


@pytest.fixture(autouse=True)
def _gpu_launch(monkeypatch):
    monkeypatch.setattr(gdn, "heads_per_program", lambda HV, device: 1)  # the GPU's launch rule


def _case(spec, dtype, state_dtype, seed):
    gen = _gen(seed)
    H, HV, K, V = 1, 2, 16, 8
    if spec:
        lens, num_acc = [3, 3, 2, 3], [2, 1, 2, 3]
        total, N = sum(lens), len(lens)
        q, k, v, g, beta = make_inputs(gen, B=1, T=total, H=H, HV=HV, K=K, V=V, dtype=dtype)
        slots = 1 + N * 3 + 2
        idx = random_slot_indices(N, slots, num_null_rows=1, columns=3, generator=gen).to(DEVICE)
        cu = torch.tensor([0, 3, 6, 8, 11], dtype=torch.int32, device=DEVICE)
        kw = dict(cu_seqlens=cu, ssm_state_indices=idx,
                  num_accepted_tokens=torch.tensor(num_acc, dtype=torch.int32, device=DEVICE))
    else:
        N = 6
        q, k, v, g, beta = make_inputs(gen, B=N, T=1, H=H, HV=HV, K=K, V=V, dtype=dtype)
        slots = N + 3
        idx = random_slot_indices(N, slots, num_null_rows=2, generator=gen).to(DEVICE)
        kw = dict(ssm_state_indices=idx)
    _, pool = make_pool(gen, slots, HV, V, K, state_dtype)
    return (q, k, v, g, beta), pool, dict(kw, use_qk_l2norm_in_kernel=True)


@pytest.mark.parametrize("dtype,state_dtype", DTYPES)
@pytest.mark.parametrize("spec", [False, True], ids=["one-token-nulls", "spec-varlen"])
def test_early_state_load_gives_the_same_bytes(spec, dtype, state_dtype):
    args, pool, kw = _case(spec, dtype, state_dtype, 120 + spec)
    before = pool.clone()
    results = []
    for early in (False, True):
        p = before.clone()
        o, _ = fused_recurrent_gated_delta_rule(*args, initial_state=p, bugs=FIXED, early_state_load=early, **kw)
        results.append((o, p))
    (o_wait, p_wait), (o_early, p_early) = results
    assert torch.equal(o_early, o_wait) and torch.equal(p_early, p_wait)
    pool_ref = before.clone()
    o_ref, _ = fused_recurrent_gated_delta_rule_ref(*args, initial_state=pool_ref, **kw)
    assert_close(o_early, o_ref, dtype, "o")
    assert_close(p_early, pool_ref, state_dtype, "pool")
    if not spec:
        assert_untouched(before, p_early, touched_slots(kw["ssm_state_indices"]))


@pytest.mark.parametrize("dtype,state_dtype", DTYPES)
def test_what_the_previous_kernel_writes_is_read_after_the_wait(dtype, state_dtype):
    """Launches each on its own pool, each taking the previous output as its ``v``: bit for bit."""
    args, pool, kw = _case(False, dtype, state_dtype, 130)
    q, k, v, g, beta = args
    results = {}
    for early in (False, True):
        pools, outs, x = [pool.clone() for _ in range(5)], [], v
        for p in pools:
            x, _ = fused_recurrent_gated_delta_rule(q, k, x, g, beta, initial_state=p, bugs=FIXED,
                                                    early_state_load=early, **kw)
            outs.append(x)
        results[early] = pools + outs
    for a, b in zip(results[False], results[True]):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("N,T,taken", [(4, 1, True), (4, 2, True), (8, 1, False)])
def test_the_switch_reaches_the_general_kernel_only_under_pdl(monkeypatch, N, T, taken):
    seen = []
    real = gdn.sanitizer.launch

    def spy(kernel, grid, *args, **kwargs):
        seen.append((kernel, {k: v for k, v in kwargs.items() if k != "fresh_outputs"}))  # a memo hint
        return real(kernel, grid, *args, **kwargs)

    monkeypatch.setattr(gdn.sanitizer, "launch", spy)
    monkeypatch.setattr(gdn, "_gpu_rules_on", lambda device: False)  # the general kernel at every batch
    monkeypatch.setattr(gdn, "EARLY_STATE_MAX_SEQ_HEADS", 8)  # 4 sequences x 2 heads: taken; 8 x 2: not
    gen = _gen(140)
    q, k, v, g, beta = make_inputs(gen, B=N, T=T, H=1, HV=2, K=8, V=8)
    _, pool = make_pool(gen, N + 1, 2, 8, 8)
    idx = torch.arange(1, N + 1, device=DEVICE)
    for early in (False, True):
        fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, ssm_state_indices=idx,
                                         early_state_load=early, bugs=FIXED)
    (k_wait, wait_first), (k_early, early) = seen
    assert k_wait is k_early is gdn._gdn_decode_kernel
    assert "EARLY_STATE" not in wait_first and "USE_PDL" not in wait_first
    small = N * 2 <= gdn.EARLY_STATE_MAX_SEQ_HEADS
    if gdn.use_pdl(q.device) and taken:
        assert small and early.get("EARLY_STATE") is True and early.get("USE_PDL") is True
    else:
        assert early == wait_first
