"""The gated-delta-rule decode kernel (GDN) against its pure-torch reference.

Runs on the Triton interpreter (CPU, float32, tiny shapes) and, unchanged, on
a GPU (``MAMBALAB_DEVICE=cuda``), where the ``cuda``-marked bf16/fp16
parameters run too. Rules from upstream's kernel tests: fresh random inputs
(never zeros), outputs poisoned with NaN before every run, untouched slots
(the null block included) bit-identical.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import mambalab
from mambalab.lab import sanitizer
from mambalab.lab.bugs import BugConfig, GuardMode
from mambalab.device import DEVICE, DEVICE_TYPE
from mambalab.kernels import gated_delta_rule as gdn
from mambalab.kernels.gated_delta_rule import (
    fused_recurrent_gated_delta_rule,
    fused_sigmoid_gating_delta_rule_update,
    launch_config,
)
from mambalab.kernels.gated_delta_rule_ref import (
    fused_recurrent_gated_delta_rule_ref,
    fused_sigmoid_gating_delta_rule_update_ref,
    gated_delta_rule_closed_form,
)
from mambalab.kernels.testing import assert_untouched, random_slot_indices, tolerance, touched_slots

DTYPES = [
    pytest.param(torch.float32, id="fp32"),
    pytest.param(torch.bfloat16, id="bf16", marks=pytest.mark.cuda),
    pytest.param(torch.float16, id="fp16", marks=pytest.mark.cuda),
]
# (activation dtype, state dtype): vLLM runs bf16 activations on an fp32 or bf16 state
DTYPE_PAIRS = [
    pytest.param(torch.float32, torch.float32, id="fp32"),
    pytest.param(torch.bfloat16, torch.bfloat16, id="bf16", marks=pytest.mark.cuda),
    pytest.param(torch.bfloat16, torch.float32, id="bf16-act-fp32-state", marks=pytest.mark.cuda),
    pytest.param(torch.float16, torch.float16, id="fp16", marks=pytest.mark.cuda),
]
FIXED = BugConfig.fixed()
LT_ZERO = BugConfig.with_bugs("guard-lt-zero")
MINUS_ONE = BugConfig.with_bugs("pad-minus-one")
ON_CPU = DEVICE_TYPE == "cpu"


@pytest.fixture(autouse=True)
def _nan_empty(monkeypatch):
    """Every float ``torch.empty`` is NaN-filled (as flash-linear-attention's tests do).

    The wrapper allocates ``o`` (and a fresh final state) with ``torch.empty``:
    an element the kernel forgets to write stays NaN and fails the comparison.
    """
    real_empty = torch.empty

    def poisoned_empty(*args, **kwargs):
        t = real_empty(*args, **kwargs)
        if t.dtype.is_floating_point:
            t.fill_(float("nan"))
        return t

    monkeypatch.setattr(torch, "empty", poisoned_empty)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def make_inputs(gen, *, B, T, H, HV, K, V, dtype=torch.float32, device=DEVICE):
    """Fresh random activations: g < 0 (log-decays), beta in (0, 1)."""
    q = torch.randn(B, T, H, K, generator=gen)
    k = torch.randn(B, T, H, K, generator=gen)
    v = torch.randn(B, T, HV, V, generator=gen)
    g = F.logsigmoid(torch.randn(B, T, HV, generator=gen) + 2.0)  # decay in (0, 1)
    beta = torch.rand(B, T, HV, generator=gen) * 0.9 + 0.05
    return [x.to(device=device, dtype=dtype) for x in (q, k, v, g, beta)]


def make_pool(gen, slots, HV, V, K, dtype=torch.float32, device=DEVICE, *, pad=0):
    """A random state pool ``[slots, HV, V, K]``; ``pad`` > 0 makes it a page-padded view."""
    base = torch.randn(slots, HV * V * K + pad, generator=gen) * 0.5
    base = base.to(device=device, dtype=dtype)
    return base, base[:, : HV * V * K].view(slots, HV, V, K)


def assert_close(actual, expected, dtype, what):
    rtol, atol = tolerance("gdn", dtype)
    assert not torch.isnan(actual).any(), f"{what}: NaN (an element was never written)"
    torch.testing.assert_close(actual.float(), expected.float(), rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def run_both(args, kwargs, pool, *, bugs=FIXED, guard=GuardMode.NULL):
    """Kernel on ``pool``, reference on a copy; returns ((o, final), (o_ref, final_ref))."""
    pool_ref = pool.clone()
    out = fused_recurrent_gated_delta_rule(*args, initial_state=pool, bugs=bugs, **kwargs)
    ref = fused_recurrent_gated_delta_rule_ref(*args, initial_state=pool_ref, guard=guard, **kwargs)
    return out, ref


# ---------------------------------------------------------------------------
# kernel == reference
# ---------------------------------------------------------------------------

# (N, T, H, HV, K, V, null_rows, l2norm, scale, block_v)
CASES = [
    pytest.param(1, 1, 1, 1, 8, 8, 0, False, None, None, id="single"),
    pytest.param(4, 1, 1, 2, 16, 8, 1, True, None, None, id="gva2-null1"),
    pytest.param(3, 2, 2, 4, 12, 20, 1, True, 0.3, 8, id="odd-KV-multiblock"),
    pytest.param(5, 1, 2, 2, 20, 12, 2, False, None, 4, id="odd-KV-bv4"),
    pytest.param(16, 1, 1, 2, 8, 8, 4, True, None, None, id="16-seqs"),
    pytest.param(2, 3, 1, 2, 16, 16, 0, False, 1.5, None, id="T3-scale"),
    pytest.param(3, 1, 1, 2, 128, 128, 1, True, None, None, id="qwen-head-size"),
    pytest.param(64, 1, 16, 32, 128, 128, 8, True, None, None, id="qwen3-next-tp1", marks=pytest.mark.cuda),
    pytest.param(9, 2, 4, 8, 128, 128, 7, True, None, None, id="qwen3-next-tp4-T2", marks=pytest.mark.cuda),
]


def _worse(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    """The less precise of two dtypes (for choosing a tolerance)."""
    return a if torch.finfo(a).eps >= torch.finfo(b).eps else b


@pytest.mark.parametrize("dtype,state_dtype", DTYPE_PAIRS)
@pytest.mark.parametrize("N,T,H,HV,K,V,null_rows,l2norm,scale,block_v", CASES)
def test_kernel_matches_reference(dtype, state_dtype, N, T, H, HV, K, V, null_rows, l2norm, scale, block_v):
    gen = _gen(1000 + N * 7 + K)
    q, k, v, g, beta = make_inputs(gen, B=N, T=T, H=H, HV=HV, K=K, V=V, dtype=dtype)
    slots = N + 3
    _, pool = make_pool(gen, slots, HV, V, K, state_dtype)
    idx = random_slot_indices(N, slots, num_null_rows=null_rows, generator=gen).to(DEVICE)
    idx = idx[torch.randperm(N, generator=gen).to(DEVICE)]  # null rows anywhere, not only the tail
    before = pool.clone()
    pool_ref = pool.clone()

    o, final = fused_recurrent_gated_delta_rule(
        q, k, v, g, beta, scale, pool, True, None, idx, None, l2norm, bugs=FIXED, block_v=block_v
    )
    o_ref, _ = fused_recurrent_gated_delta_rule_ref(
        q, k, v, g, beta, scale, pool_ref, True, None, idx, None, l2norm
    )
    assert final is pool and o.dtype == v.dtype and o.shape == v.shape
    tol_dtype = _worse(dtype, state_dtype)
    assert_close(o, o_ref, tol_dtype, "o")
    assert_close(pool, pool_ref, tol_dtype, "state")
    live = touched_slots(idx)
    assert_untouched(before, pool, live)  # slot 0 and unused slots bit-identical
    for s in live:
        assert not torch.equal(before[s], pool[s]), f"live slot {s} was not updated"
    null = (idx == mambalab.NULL_BLOCK_ID).nonzero().flatten()
    assert torch.equal(o[null], torch.zeros_like(o[null])), "padded rows must output zeros"


@pytest.mark.parametrize("dtype", DTYPES)
def test_default_beta_and_no_indices(dtype):
    """beta None means ones; without indices sequence n reads and writes row n."""
    gen = _gen(11)
    B, T, H, HV, K, V = 3, 2, 1, 2, 8, 12
    q, k, v, g, _ = make_inputs(gen, B=B, T=T, H=H, HV=HV, K=K, V=V, dtype=dtype)
    _, pool = make_pool(gen, B + 2, HV, V, K, dtype)
    before = pool.clone()
    (o, _), (o_ref, pool_ref) = run_both((q, k, v, g), {}, pool)
    assert_close(o, o_ref, dtype, "o")
    assert_close(pool, pool_ref, dtype, "state")
    assert_untouched(before, pool, {0, 1, 2})


@pytest.mark.parametrize("dtype", DTYPES)
def test_fresh_final_state_per_token(dtype):
    """inplace_final_state=False: the pool is untouched and a fresh [B*T, HV, V, K] holds every token's state."""
    gen = _gen(12)
    B, T, H, HV, K, V = 3, 2, 1, 2, 8, 8
    q, k, v, g, beta = make_inputs(gen, B=B, T=T, H=H, HV=HV, K=K, V=V, dtype=dtype)
    _, pool = make_pool(gen, 6, HV, V, K, dtype)
    idx = torch.tensor([4, 0, 2], dtype=torch.int32, device=DEVICE)
    before = pool.clone()
    kw = dict(inplace_final_state=False, ssm_state_indices=idx)
    (o, fresh), (o_ref, fresh_ref) = run_both((q, k, v, g, beta), kw, pool)
    assert fresh is not pool and fresh.shape == (B * T, HV, V, K) and fresh.dtype == pool.dtype
    assert_untouched(before, pool, set())
    assert_close(o, o_ref, dtype, "o")
    assert_close(fresh, fresh_ref, dtype, "fresh final state")
    assert torch.equal(fresh[2:4], torch.zeros_like(fresh[2:4])), "skipped sequence rows are zeros"


def test_no_initial_state_starts_from_zeros():
    gen = _gen(13)
    q, k, v, g, beta = make_inputs(gen, B=2, T=2, H=1, HV=2, K=8, V=8)
    o, fresh = fused_recurrent_gated_delta_rule(q, k, v, g, beta)
    o_ref, fresh_ref = fused_recurrent_gated_delta_rule_ref(q, k, v, g, beta)
    assert fresh.dtype == torch.float32 and fresh.shape == (4, 2, 8, 8)
    assert_close(o, o_ref, torch.float32, "o")
    assert_close(fresh, fresh_ref, torch.float32, "final state")
    # and from zeros means: the same as an all-zero initial state
    zeros = torch.zeros(2, 2, 8, 8, device=DEVICE)
    o_z, _ = fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=zeros)
    assert_close(o, o_z, torch.float32, "o vs zero initial state")


@pytest.mark.parametrize("dtype", DTYPES)
def test_varlen_cu_seqlens(dtype):
    """Packed sequences of lengths 2, 0, 3, 1 (B == 1); the empty one touches nothing."""
    gen = _gen(14)
    lens = [2, 0, 3, 1]
    total, N, H, HV, K, V = sum(lens), len(lens), 1, 2, 12, 8
    q, k, v, g, beta = make_inputs(gen, B=1, T=total, H=H, HV=HV, K=K, V=V, dtype=dtype)
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device=DEVICE)
    _, pool = make_pool(gen, 7, HV, V, K, dtype)
    idx = torch.tensor([5, 3, 1, 6], dtype=torch.int64, device=DEVICE)
    before = pool.clone()
    kw = dict(cu_seqlens=cu, ssm_state_indices=idx, use_qk_l2norm_in_kernel=True)
    (o, _), (o_ref, pool_ref) = run_both((q, k, v, g, beta), kw, pool)
    assert_close(o, o_ref, dtype, "o")
    assert_close(pool, pool_ref, dtype, "state")
    assert_untouched(before, pool, {5, 1, 6})  # slot 3 belongs to the empty sequence

    # varlen == one call per sequence
    pool2 = before.clone()
    for n, (s, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        if e == s:
            continue
        o_n, _ = fused_recurrent_gated_delta_rule(
            q[:, s:e], k[:, s:e], v[:, s:e], g[:, s:e], beta[:, s:e],
            initial_state=pool2, ssm_state_indices=idx[n : n + 1], use_qk_l2norm_in_kernel=True,
        )
        assert_close(o[:, s:e], o_n, dtype, f"sequence {n} alone")
    assert_close(pool, pool2, dtype, "state, sequence by sequence")


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_pool_and_packed_activations(dtype):
    """Page-padded pool (stride(0) > HV*V*K), q/k/v slices of one projection, indices a block-table column."""
    gen = _gen(15)
    B, T, H, HV, K, V = 4, 1, 1, 2, 8, 12
    base, pool = make_pool(gen, 9, HV, V, K, dtype, pad=40)
    assert pool.stride(0) == HV * V * K + 40
    width = 2 * H * K + HV * V + 3  # packed [q | k | v | junk]
    mixed = torch.randn(B, T, width, generator=gen).to(DEVICE, dtype)
    q = mixed[..., : H * K].unflatten(-1, (H, K))
    k = mixed[..., H * K : 2 * H * K].unflatten(-1, (H, K))
    v = mixed[..., 2 * H * K : 2 * H * K + HV * V].unflatten(-1, (HV, V))
    assert not q.is_contiguous()
    gates = torch.randn(B, T, HV, 2, generator=gen)
    gates[..., 0] = F.logsigmoid(gates[..., 0] + 2)
    gates[..., 1] = torch.sigmoid(gates[..., 1])
    gates = gates.to(DEVICE, dtype)
    g, beta = gates[..., 0], gates[..., 1]  # stride 2 along the heads
    assert g.stride(-1) == 2
    table = torch.tensor([[9, 3, 9], [9, 0, 9], [9, 7, 9], [9, 2, 9]], dtype=torch.int32, device=DEVICE)
    idx = table[:, 1]  # stride 3
    base_before = base.clone()
    pool_ref = pool.clone()
    o, _ = fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, ssm_state_indices=idx)
    o_ref, _ = fused_recurrent_gated_delta_rule_ref(
        q.contiguous(), k.contiguous(), v.contiguous(), g.contiguous(), beta.contiguous(),
        initial_state=pool_ref, ssm_state_indices=idx.contiguous(),
    )
    assert_close(o, o_ref, dtype, "o")
    assert_close(pool, pool_ref, dtype, "state")
    # the page padding and every other slot stay bit-identical
    assert torch.equal(base[:, HV * V * K :].view(torch.uint8), base_before[:, HV * V * K :].view(torch.uint8))
    assert_untouched(base_before, base, {3, 7, 2})


# ---------------------------------------------------------------------------
# the recurrent invariant and an independent derivation of the maths
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_one_call_of_T_tokens_equals_T_calls_of_one(dtype):
    """The recurrent invariant. The state is float32 here: a bf16 state would be
    rounded between the T single-token calls but not inside the T-token call."""
    gen = _gen(16)
    B, T, H, HV, K, V = 3, 4, 1, 2, 8, 12
    q, k, v, g, beta = make_inputs(gen, B=B, T=T, H=H, HV=HV, K=K, V=V, dtype=dtype)
    _, pool = make_pool(gen, 6, HV, V, K, torch.float32)
    idx = torch.tensor([2, 5, 0], dtype=torch.int32, device=DEVICE)
    step_pool = pool.clone()
    o_all, _ = fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, ssm_state_indices=idx,
                                                use_qk_l2norm_in_kernel=True)
    outs = []
    for t in range(T):
        sl = slice(t, t + 1)
        o_t, _ = fused_recurrent_gated_delta_rule(
            q[:, sl], k[:, sl], v[:, sl], g[:, sl], beta[:, sl],
            initial_state=step_pool, ssm_state_indices=idx, use_qk_l2norm_in_kernel=True,
        )
        outs.append(o_t)
    assert_close(torch.cat(outs, dim=1), o_all, dtype, "o, token by token")
    assert_close(step_pool, pool, dtype, "state, token by token")


def test_reference_matches_closed_form():
    """The recurrent reference equals the unrolled product of transition matrices (float64)."""
    gen = _gen(17)
    T, H, HV, K, V = 4, 1, 2, 6, 5
    q, k, v, g, beta = make_inputs(gen, B=1, T=T, H=H, HV=HV, K=K, V=V, device="cpu")
    h0 = torch.randn(1, HV, V, K, generator=gen)
    o_ref, fresh = fused_recurrent_gated_delta_rule_ref(
        q, k, v, g, beta, 0.7, h0.clone(), False, use_qk_l2norm_in_kernel=True
    )
    qn = F.normalize(q[0].double(), dim=-1, eps=0).repeat_interleave(HV // H, dim=1)
    kn = F.normalize(k[0].double(), dim=-1, eps=0).repeat_interleave(HV // H, dim=1)
    o_cf, h_cf = gated_delta_rule_closed_form(qn, kn, v[0], g[0], beta[0], h0[0], 0.7)
    torch.testing.assert_close(o_ref[0].double(), o_cf, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(fresh[-1].double(), h_cf, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------
# speculative decoding: read column num_accepted - 1, write column t after token t
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,state_dtype", DTYPE_PAIRS)
@pytest.mark.parametrize("T", [2, 3, 4])
def test_spec_decode_columns(dtype, state_dtype, T):
    gen = _gen(20 + T)
    N = T + 1  # one sequence per num_accepted in 1..T, plus a padded row
    H, HV, K, V = 1, 2, 8, 8
    q, k, v, g, beta = make_inputs(gen, B=N, T=T, H=H, HV=HV, K=K, V=V, dtype=dtype)
    slots = N * T + 2
    _, pool = make_pool(gen, slots, HV, V, K, state_dtype)
    dtype = _worse(dtype, state_dtype)  # tolerance
    idx = random_slot_indices(N, slots, num_null_rows=1, columns=T, generator=gen).to(DEVICE)
    num_accepted = torch.tensor(list(range(1, T + 1)) + [1], dtype=torch.int32, device=DEVICE)
    before = pool.clone()
    kw = dict(ssm_state_indices=idx, num_accepted_tokens=num_accepted)
    (o, _), (o_ref, pool_ref) = run_both((q, k, v, g, beta), kw, pool)
    assert_close(o, o_ref, dtype, "o")
    assert_close(pool, pool_ref, dtype, "state")
    assert_untouched(before, pool, touched_slots(idx))
    assert torch.equal(o[-1], torch.zeros_like(o[-1])), "padded row outputs zeros"

    # independently: column t of row n holds the state after token t, started from column na-1
    for n in range(N - 1):
        start = int(idx[n, int(num_accepted[n]) - 1])
        sl = slice(n, n + 1)
        _, states = fused_recurrent_gated_delta_rule_ref(
            q[sl], k[sl], v[sl], g[sl], beta[sl], initial_state=before[start : start + 1].clone(),
            inplace_final_state=False,
        )
        for t in range(T):
            assert_close(pool[int(idx[n, t])], states[t], dtype, f"row {n} column {t}")


def test_spec_decode_null_store_column_skips_that_store():
    """A null column stores nothing for that token; the recurrence carries on in registers."""
    gen = _gen(30)
    N, T, H, HV, K, V = 2, 3, 1, 2, 8, 8
    q, k, v, g, beta = make_inputs(gen, B=N, T=T, H=H, HV=HV, K=K, V=V)
    _, pool = make_pool(gen, 8, HV, V, K)
    idx = torch.tensor([[3, 0, 5], [7, 2, 0]], dtype=torch.int32, device=DEVICE)
    na = torch.tensor([1, 2], dtype=torch.int32, device=DEVICE)
    before = pool.clone()
    (o, _), (o_ref, pool_ref) = run_both((q, k, v, g, beta), dict(ssm_state_indices=idx, num_accepted_tokens=na), pool)
    assert_close(o, o_ref, torch.float32, "o")
    assert_close(pool, pool_ref, torch.float32, "state")
    assert_untouched(before, pool, {3, 5, 7, 2})


def test_2d_indices_without_num_accepted_read_column_zero():
    gen = _gen(31)
    N, T, H, HV, K, V = 2, 2, 1, 1, 8, 8
    q, k, v, g, beta = make_inputs(gen, B=N, T=T, H=H, HV=HV, K=K, V=V)
    _, pool = make_pool(gen, 6, HV, V, K)
    idx = torch.tensor([[1, 2, 9], [3, 4, 9]], dtype=torch.int32, device=DEVICE)[:, :2]
    (o, _), (o_ref, pool_ref) = run_both((q, k, v, g, beta), dict(ssm_state_indices=idx), pool)
    assert_close(o, o_ref, torch.float32, "o")
    assert_close(pool, pool_ref, torch.float32, "state")


# ---------------------------------------------------------------------------
# the bugs: #39064 (guard-lt-zero) and #35431 (pad-minus-one)
# ---------------------------------------------------------------------------


def _padded_batch(gen, dtype, *, null_rows):
    N, T, H, HV, K, V = 4 + null_rows, 1, 1, 2, 8, 8
    q, k, v, g, beta = make_inputs(gen, B=N, T=T, H=H, HV=HV, K=K, V=V, dtype=dtype)
    _, pool = make_pool(gen, 8, HV, V, K, dtype)
    pool[0].zero_()  # the null block: zeros, as the block pool leaves it
    idx = random_slot_indices(N, 8, num_null_rows=null_rows, generator=gen).to(DEVICE)
    return (q, k, v, g, beta), pool, idx


@pytest.mark.parametrize("dtype", DTYPES)
def test_fixed_guard_leaves_null_block_alone(dtype):
    args, pool, idx = _padded_batch(_gen(40), dtype, null_rows=3)
    before = pool.clone()
    (o, _), (o_ref, pool_ref) = run_both(args, dict(ssm_state_indices=idx), pool, bugs=FIXED)
    assert_untouched(before, pool, touched_slots(idx))  # slot 0 included
    assert torch.equal(o[-3:], torch.zeros_like(o[-3:]))
    assert_close(o, o_ref, dtype, "o")
    assert_close(pool, pool_ref, dtype, "state")


@pytest.mark.parametrize("dtype", DTYPES)
def test_guard_lt_zero_dirties_the_null_block(dtype):
    """Before #39064 a padded row (index 0) loads the null block and stores into it."""
    args, pool, idx = _padded_batch(_gen(41), dtype, null_rows=1)
    before = pool.clone()
    (o, _), (o_ref, pool_ref) = run_both(args, dict(ssm_state_indices=idx), pool, bugs=LT_ZERO,
                                         guard=GuardMode.NEGATIVE)
    assert not torch.equal(pool[0], before[0]), "the null block should have been written"
    assert pool[0].abs().sum() > 0, "the null block is no longer zeros"
    assert_close(o, o_ref, dtype, "o")
    assert_close(pool, pool_ref, dtype, "state")
    assert_untouched(before, pool, touched_slots(idx) | {0})


@pytest.mark.parametrize("dtype", DTYPES)
def test_guard_lt_zero_padded_rows_race_on_block_zero(dtype):
    """Several padded rows all read and write block 0.

    The interpreter runs them one after another, in order, like the
    reference; on a GPU they race, so there only the corruption is checked.
    """
    args, pool, idx = _padded_batch(_gen(42), dtype, null_rows=3)
    before = pool.clone()
    (o, _), (o_ref, pool_ref) = run_both(args, dict(ssm_state_indices=idx), pool, bugs=LT_ZERO,
                                         guard=GuardMode.NEGATIVE)
    assert not torch.equal(pool[0], before[0])
    assert_untouched(before, pool, touched_slots(idx) | {0})
    assert_close(o[:-3], o_ref[:-3], dtype, "o of the live rows")
    if ON_CPU:
        assert_close(o, o_ref, dtype, "o (sequential order)")
        assert_close(pool, pool_ref, dtype, "state (sequential order)")


def test_guard_lt_zero_still_skips_negative():
    args, pool, _ = _padded_batch(_gen(43), torch.float32, null_rows=0)
    idx = torch.tensor([1, -1, 2, 3], dtype=torch.int32, device=DEVICE)
    before = pool.clone()
    (o, _), (o_ref, pool_ref) = run_both(args, dict(ssm_state_indices=idx), pool, bugs=LT_ZERO,
                                         guard=GuardMode.NEGATIVE)
    assert_untouched(before, pool, {1, 2, 3})
    assert torch.equal(o[1], torch.zeros_like(o[1]))
    assert_close(pool, pool_ref, torch.float32, "state")


def test_bug_switch_comes_from_active_config():
    """With bugs=None the kernel follows mambalab.lab.bugs.use(...)."""
    args, pool, idx = _padded_batch(_gen(44), torch.float32, null_rows=1)
    before = pool.clone()
    with mambalab.lab.bugs.use(LT_ZERO):
        fused_recurrent_gated_delta_rule(*args, initial_state=pool, ssm_state_indices=idx)
    assert not torch.equal(pool[0], before[0])


_PLACEHOLDER = (sanitizer.__doc__ or "").startswith("PLACEHOLDER")


@pytest.mark.cpu_only(reason="a -1 index on a GPU is a real illegal memory access")
@pytest.mark.skipif(_PLACEHOLDER, reason="mambalab.lab.sanitizer is still the placeholder: a -1 index "
                    "would touch host memory outside the pool instead of raising")
@pytest.mark.parametrize("spec", [False, True], ids=["1d", "spec"])
def test_pad_minus_one_is_an_illegal_memory_access(spec):
    """In the #35431 world a consumer that trusts every index computes state_ptr + (-1) * stride."""
    gen = _gen(45)
    N, T = 3, (2 if spec else 1)
    q, k, v, g, beta = make_inputs(gen, B=N, T=T, H=1, HV=2, K=8, V=8)
    _, pool = make_pool(gen, 8, 2, 8, 8)
    if spec:
        idx = torch.tensor([[1, 2], [3, 4], [-1, -1]], dtype=torch.int32)
        extra = dict(num_accepted_tokens=torch.tensor([1, 2, 1], dtype=torch.int32))
    else:
        idx, extra = torch.tensor([1, 2, -1], dtype=torch.int32), {}
    with pytest.raises(sanitizer.IllegalMemoryAccess, match="fused_recurrent_gated_delta_rule"):
        fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, ssm_state_indices=idx,
                                         bugs=MINUS_ONE, **extra)
    # the fixed guard skips the same -1 (and the reference refuses it outright)
    _, pool2 = make_pool(_gen(46), 8, 2, 8, 8)
    o, _ = fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool2, ssm_state_indices=idx,
                                            bugs=FIXED, **extra)
    assert torch.equal(o[2], torch.zeros_like(o[2]))
    with pytest.raises(IndexError, match="illegal memory access"):
        fused_recurrent_gated_delta_rule_ref(q, k, v, g, beta, initial_state=pool2.clone(),
                                             ssm_state_indices=idx, guard=GuardMode.NONE, **extra)


def test_pad_minus_one_world_with_zero_padding_is_guard_none():
    """GuardMode.NONE trusts index 0 too: it behaves like the reference with guard NONE."""
    args, pool, idx = _padded_batch(_gen(47), torch.float32, null_rows=1)
    (o, _), (o_ref, pool_ref) = run_both(args, dict(ssm_state_indices=idx), pool, bugs=MINUS_ONE,
                                         guard=GuardMode.NONE)
    assert_close(o, o_ref, torch.float32, "o")
    assert_close(pool, pool_ref, torch.float32, "state")


# ---------------------------------------------------------------------------
# the fused sigmoid-gating variant
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_sigmoid_gating_variant(dtype):
    gen = _gen(50)
    N, T, H, HV, K, V = 3, 2, 1, 2, 8, 12
    q, k, v, _, _ = make_inputs(gen, B=N, T=T, H=H, HV=HV, K=K, V=V, dtype=dtype)
    a = (torch.randn(N, T, HV, generator=gen) * 3).to(DEVICE, dtype)
    a[0, 0, 0] = 30.0  # softplus's linear branch
    b = torch.randn(N, T, HV, generator=gen).to(DEVICE, dtype)
    A_log = torch.randn(HV, generator=gen).to(DEVICE)
    dt_bias = torch.randn(HV, generator=gen).to(DEVICE)
    _, pool = make_pool(gen, 5, HV, V, K, dtype)
    idx = torch.tensor([4, 0, 1], dtype=torch.int32, device=DEVICE)
    pool_ref = pool.clone()
    o, _ = fused_sigmoid_gating_delta_rule_update(A_log, a, b, dt_bias, q, k, v, initial_state=pool,
                                                  ssm_state_indices=idx, use_qk_l2norm_in_kernel=True)
    o_ref, _ = fused_sigmoid_gating_delta_rule_update_ref(A_log, a, b, dt_bias, q, k, v, initial_state=pool_ref,
                                                          ssm_state_indices=idx, use_qk_l2norm_in_kernel=True)
    assert_close(o, o_ref, dtype, "o")
    assert_close(pool, pool_ref, dtype, "state")


# ---------------------------------------------------------------------------
# two row blocks per tile (the bf16 launch on a GPU), on any device
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("T,spec,fresh", [(1, False, False), (3, False, False), (3, True, False), (2, False, True)],
                         ids=["decode", "T3", "spec-T3", "fresh-final-state"])
def test_split_row_blocks_match_reference(T, spec, fresh, monkeypatch):
    """SPLIT == 2 (both halves loaded, worked on one after the other) equals the reference."""
    monkeypatch.setattr(gdn, "SPLIT_BY_ELEMENT_SIZE", {4: 2, 2: 2})
    assert gdn.split_rows(8, 4) == 2 and gdn.split_rows(4, 4) == 1
    gen = _gen(70 + T + 10 * spec)
    N, H, HV, K, V = 5, 1, 2, 12, 20  # V = 20: the last tile's second half is partly masked
    q, k, v, g, beta = make_inputs(gen, B=N, T=T, H=H, HV=HV, K=K, V=V)
    slots = N * T + 3
    _, pool = make_pool(gen, slots, HV, V, K)
    kw = dict(use_qk_l2norm_in_kernel=True)
    if spec:
        idx = random_slot_indices(N, slots, num_null_rows=1, columns=T, generator=gen)
        kw["num_accepted_tokens"] = torch.randint(1, T + 1, (N,), generator=gen, dtype=torch.int32).to(DEVICE)
    else:
        idx = random_slot_indices(N, slots, num_null_rows=1, generator=gen)
    idx = idx.to(DEVICE)
    if fresh:
        kw["inplace_final_state"] = False
    before, pool_ref = pool.clone(), pool.clone()
    o, final = fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, ssm_state_indices=idx,
                                                bugs=FIXED, block_v=8, **kw)
    o_ref, final_ref = fused_recurrent_gated_delta_rule_ref(q, k, v, g, beta, initial_state=pool_ref,
                                                            ssm_state_indices=idx, **kw)
    assert_close(o, o_ref, torch.float32, "o")
    assert_close(final, final_ref, torch.float32, "final state")
    assert_close(pool, pool_ref, torch.float32, "pool")
    assert_untouched(before, pool, touched_slots(idx) if not fresh else set())


# ---------------------------------------------------------------------------
# launch rule and input validation (host only, no kernel runs)
# ---------------------------------------------------------------------------


def test_launch_rule_for_qwen3_next():
    # batch 64, H100: enough programs already, no halving; 4 KiB of state, one warp
    assert launch_config(128, 128, 32, 64, 4, 132) == (128, 8, 1)  # fp32 state
    assert launch_config(128, 128, 32, 64, 2, 132) == (128, 32, 1)  # bf16 state: 8 KiB ...
    assert gdn.split_rows(32, 2) == 2 and gdn.split_rows(8, 4) == 1  # ... in two halves
    # batch 1: 32 heads x 8 blocks < 4 x 132 programs, so BV halves for more programs
    BK, BV, nw = launch_config(128, 128, 32, 1, 4, 132)
    assert BK == 128 and BV == 4 and nw == 1
    # odd sizes
    assert launch_config(12, 20, 2, 1, 4, 1)[:2] == (16, 16)
    assert launch_config(4096, 8, 1, 1, 4, 1) == (4096, 4, 1)


def _good():
    gen = _gen(60)
    q, k, v, g, beta = make_inputs(gen, B=2, T=1, H=1, HV=2, K=8, V=4)
    _, pool = make_pool(gen, 4, 2, 4, 8)
    idx = torch.tensor([1, 2], dtype=torch.int32, device=DEVICE)
    return dict(q=q, k=k, v=v, g=g, beta=beta, initial_state=pool, ssm_state_indices=idx)


BAD = [
    ("q 3-D", lambda a: a.update(q=a["q"][0]), ValueError, "q must be"),
    ("k shape", lambda a: a.update(k=a["k"][..., :4]), ValueError, "k must have"),
    ("HV not multiple of H", lambda a: a.update(q=a["q"].repeat(1, 1, 3, 1), k=a["k"].repeat(1, 1, 3, 1)),
     ValueError, "multiple"),
    ("g shape", lambda a: a.update(g=a["g"][..., :1]), ValueError, "g must be"),
    ("beta shape", lambda a: a.update(beta=a["beta"][:, :, :, None]), ValueError, "beta must be"),
    ("int q", lambda a: a.update(q=a["q"].long()), TypeError, "q must be a floating"),
    ("state K/V swapped", lambda a: a.update(initial_state=a["initial_state"].transpose(2, 3)),
     ValueError, "K innermost"),
    ("state int", lambda a: a.update(initial_state=a["initial_state"].int()), TypeError, "initial_state must be"),
    ("float indices", lambda a: a.update(ssm_state_indices=a["ssm_state_indices"].float()), TypeError,
     "ssm_state_indices must be int32"),
    ("indices wrong N", lambda a: a.update(ssm_state_indices=a["ssm_state_indices"][:1]), ValueError,
     "ssm_state_indices must be"),
    ("spec without 2-D", lambda a: a.update(num_accepted_tokens=torch.ones(2, dtype=torch.int32, device=DEVICE)),
     ValueError, "num_accepted_tokens"),
    ("2-D too narrow", lambda a: a.update(q=a["q"].repeat(1, 2, 1, 1), k=a["k"].repeat(1, 2, 1, 1),
                                          v=a["v"].repeat(1, 2, 1, 1), g=a["g"].repeat(1, 2, 1),
                                          beta=a["beta"].repeat(1, 2, 1),
                                          ssm_state_indices=a["ssm_state_indices"][:, None]),
     ValueError, "columns"),
    ("cu_seqlens with B>1", lambda a: a.update(cu_seqlens=torch.tensor([0, 1, 2], device=DEVICE)), ValueError,
     "batch size must be 1"),
    ("cu_seqlens float", lambda a: a.update(cu_seqlens=torch.tensor([0.0, 1.0], device=DEVICE)), TypeError,
     "cu_seqlens"),
    ("scale <= 0", lambda a: a.update(scale=0.0), ValueError, "scale must be positive"),
    ("indices without pool", lambda a: a.update(initial_state=None), ValueError, "needs initial_state"),
    ("pool too small", lambda a: a.update(ssm_state_indices=None, initial_state=a["initial_state"][:1]),
     ValueError, "need >= 2 rows"),
    ("bugs not a BugConfig", lambda a: a.update(bugs="guard-lt-zero"), TypeError, "BugConfig"),
]


@pytest.mark.parametrize("what,mutate,exc,match", BAD, ids=[b[0] for b in BAD])
def test_bad_inputs_raise_clear_errors(what, mutate, exc, match):
    args = _good()
    mutate(args)
    with pytest.raises(exc, match=match):
        fused_recurrent_gated_delta_rule(**args)
    if "bugs" not in args:
        with pytest.raises(exc, match=match):
            fused_recurrent_gated_delta_rule_ref(**args)


def test_sigmoid_gating_bad_gate_shapes():
    args = _good()
    a = torch.randn(2, 1, 2, device=DEVICE)
    zeros2 = torch.zeros(2, device=DEVICE)
    with pytest.raises(ValueError, match="A_log must be"):
        fused_sigmoid_gating_delta_rule_update(torch.zeros(3, device=DEVICE), a, a, zeros2,
                                               args["q"], args["k"], args["v"])
    with pytest.raises(ValueError, match=r"b must be \[B, T, HV\]"):
        fused_sigmoid_gating_delta_rule_update(zeros2, a, a[..., :1], zeros2, args["q"], args["k"], args["v"])


def test_wrapper_never_reads_index_values_on_host(monkeypatch):
    """Host-side checks look at shapes only: .tolist()/.item() on an index would sync the GPU. (The
    interpreter's choice of several requests a program reads CPU indices, where nothing waits, and no other:
    tests/test_interpreter_requests.py; here it is a stand-in that reads nothing.)"""
    args = _good()

    def boom(*_a, **_k):
        raise AssertionError("index values read on the host")

    launched = []
    monkeypatch.setattr(gdn.sanitizer, "launch", lambda *a, **k: launched.append(k["name"]))
    monkeypatch.setattr(gdn, "requests_a_program", lambda *a, **k: 0)
    monkeypatch.setattr(torch.Tensor, "tolist", boom)
    monkeypatch.setattr(torch.Tensor, "item", boom)
    monkeypatch.setattr(torch.Tensor, "__int__", boom)
    fused_recurrent_gated_delta_rule(**args)
    assert launched == ["fused_recurrent_gated_delta_rule"]


def test_default_scale_is_inverse_sqrt_k():
    gen = _gen(61)
    q, k, v, g, beta = make_inputs(gen, B=1, T=1, H=1, HV=1, K=8, V=8)
    o1, _ = fused_recurrent_gated_delta_rule(q, k, v, g, beta)
    o2, _ = fused_recurrent_gated_delta_rule(q, k, v, g, beta, scale=1 / math.sqrt(8))
    o3, _ = fused_recurrent_gated_delta_rule(q, k, v, g, beta, scale=1.0)
    assert_close(o1, o2, torch.float32, "default scale")
    assert not torch.allclose(o1, o3)


def test_launch_rule_several_tokens():
    """Speculative decoding (several tokens a request) takes its own rows per program, in one piece
    (measured on an H200 against vLLM 0.33, docs/benchmarks.md); one token keeps the decode rule."""
    from mambalab.kernels.gated_delta_rule import MULTI_TOKEN_BV, launch_config

    assert launch_config(128, 128, 32, 64, 2, 132, multi_token=True) == (128, MULTI_TOKEN_BV[2], 1)
    assert launch_config(128, 128, 32, 64, 4, 132, multi_token=True) == (128, MULTI_TOKEN_BV[4], 1)
    assert launch_config(128, 128, 32, 64, 4, 132) == launch_config(128, 128, 32, 64, 4, 132, multi_token=False)
    assert launch_config(128, 8, 32, 64, 2, 132, multi_token=True)[1] == 8  # never wider than next_pow2(V)
