"""The options of the SSU's one-head kernels (``mamba_ssm_kernels.one_head_options``).

* The fast softplus of ``dt`` (``_softplus`` with ``FAST``: the approximate ``exp2`` and ``lg2`` instructions, inline
  PTX, so a GPU only) against float64, and the launch rule that takes it only there. The interpreter keeps the exact
  form (libdevice's on a GPU), so CPU results do not move; on a GPU the whole decode step with it stays within the
  step's tolerance of the reference and of the exact form.
* The group ratio as a compile-time constant (``HPG``): the same group for every head, so the same bytes as with the
  runtime argument, on the interpreter and on a GPU.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from mambalab.device import DEVICE
from mambalab.kernels import mamba_ssm as ssu
from mambalab.kernels import mamba_ssm_kernels
from mambalab.kernels.mamba_ssm import LaunchConfig, selective_state_update
from mambalab.kernels.mamba_ssm_kernels import _softplus
from mambalab.kernels.mamba_ssm_ref import selective_state_update_ref
from mambalab.kernels.testing import poison_, random_slot_indices, spy_launches, tolerance

from test_kernel_selective_state_update import gen, make_case, same_layout_copy


@triton.jit
def _softplus_probe(x_ptr, out_ptr, n, FAST: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    x = tl.load(x_ptr + offs, mask=ok, other=0.0)
    tl.store(out_ptr + offs, _softplus(x, FAST), mask=ok)


def _probe(x: torch.Tensor, fast: bool) -> torch.Tensor:
    out = poison_(torch.empty_like(x))
    _softplus_probe[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), FAST=fast, BLOCK=1024)
    return out


@pytest.fixture
def launches(monkeypatch):
    """The GPU's launch rules on any device (one head a program); the launches' keywords."""
    monkeypatch.setattr(ssu, "_gpu_rules_on", lambda device: True)
    monkeypatch.setattr(ssu, "choose_launch_config", lambda *a, **k: LaunchConfig(block_m=4, num_warps=1))
    return spy_launches(monkeypatch, ssu)


def _step(case, kw):
    state = same_layout_copy(case.state)
    out = poison_(torch.empty_like(case.kwargs["x"]))
    selective_state_update(state, out=out, **case.kwargs, **kw)
    return state, out


def _against_reference(case, kw, out, state, family: str) -> None:
    """``out`` and ``state`` (a step's results) against the reference's on the same inputs, ``family``'s tolerance."""
    s_ref = same_layout_copy(case.state)
    o_ref = poison_(torch.empty_like(out))
    selective_state_update_ref(s_ref, out=o_ref, **case.kwargs, **kw)
    rtol, atol = tolerance(family, out.dtype)
    torch.testing.assert_close(out.float(), o_ref.float(), rtol=rtol, atol=atol)
    torch.testing.assert_close(state.float(), s_ref.float(), rtol=rtol, atol=atol)


def _case(seed: int, tokens: int, tied: bool, dtypes=(torch.float32, torch.float32)):
    """8 requests of ``tokens`` tokens (several: speculative, 2-D indices, accepted counts 1..T), ``dt_softplus``."""
    rows = 8
    slots = 1 + rows * tokens + 1
    case = make_case(seed, rows=rows, tokens=rows * tokens, nheads=4, dim=16, dstate=32, ngroups=2, tied=tied,
                     slots=slots, dtypes=dtypes)
    if tokens == 1:
        return case, dict(state_batch_indices=torch.randperm(slots - 1, generator=gen(seed))[:rows].add(1).to(DEVICE))
    idx = random_slot_indices(rows, slots, columns=tokens, generator=gen(seed + 1))
    return case, dict(state_batch_indices=idx.to(DEVICE),
                      num_accepted_tokens=torch.randint(1, tokens + 1, (rows,), generator=gen(seed + 2),
                                                        dtype=torch.int32).to(DEVICE),
                      cu_seqlens=torch.arange(0, rows * tokens + 1, tokens, dtype=torch.int32, device=DEVICE))


@pytest.mark.cpu_only
@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("tokens", [1, 3])
def test_the_interpreter_keeps_the_exact_softplus(launches, tied, tokens):
    assert not mamba_ssm_kernels.fast_softplus_on(torch.device("cpu"))
    case, kw = _case(3, tokens, tied)
    assert case.kwargs["dt_softplus"]
    _step(case, kw)
    assert launches and all("FAST_SOFTPLUS" not in k for k in launches)


@pytest.mark.cuda
def test_fast_softplus_against_float64():
    x = torch.cat([torch.linspace(-30.0, 40.0, 1 << 16), torch.tensor([20.0, 20.000002, 19.999998, 0.0, -0.0])])
    x = x.to(DEVICE)
    want = torch.where(x <= 20.0, torch.log1p(torch.exp(x.double())), x.double())
    fast, exact = _probe(x, True), _probe(x, False)

    def err(y):
        return ((y.double() - want).abs() / (1.0 + want.abs())).max().item()

    # exact: libdevice, whose error here is 1 + exp(x) rounded to float32 (2**-24 near 1)
    assert err(exact) < 2e-7, err(exact)
    # fast: lg2.approx's absolute error (about 2**-22 in log2) and ex2.approx's relative one
    assert err(fast) < 1e-6, err(fast)
    assert torch.equal(fast[x > 20.0], x[x > 20.0])  # linear above the threshold, exactly


@pytest.mark.cuda
@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                    (torch.float32, torch.bfloat16)], ids=["fp32", "bf16", "fp32state-bf16act"])
@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("tokens", [1, 3])
def test_the_step_with_the_fast_softplus(launches, monkeypatch, dtypes, tied, tokens):
    """Against the reference, within the step's tolerance, and against the exact form on the same inputs."""
    case, kw = _case(11 + tokens, tokens, tied, dtypes)
    s_fast, o_fast = _step(case, kw)
    # the rule: A/dt per element, or several tokens (one token with A/dt per head keeps libdevice's form)
    assert launches[-1].get("FAST_SOFTPLUS", False) is (not tied or tokens > 1)
    monkeypatch.setattr(mamba_ssm_kernels, "FAST_SOFTPLUS", False)
    s_exact, o_exact = _step(case, kw)
    assert "FAST_SOFTPLUS" not in launches[-1]
    s_ref = same_layout_copy(case.state)
    o_ref = poison_(torch.empty_like(o_fast))
    selective_state_update_ref(s_ref, out=o_ref, **case.kwargs, **kw)
    family = "ssu" if tokens == 1 else "ssu_spec"
    assert not o_fast.isnan().any()
    for got, ref in ((o_fast, o_ref), (o_exact, o_ref), (s_fast, s_ref), (s_exact, s_ref), (o_fast, o_exact),
                     (s_fast, s_exact)):
        rtol, atol = tolerance(family, got.dtype)
        torch.testing.assert_close(got.float(), ref.float(), rtol=rtol, atol=atol)
    assert torch.equal(s_fast[0], case.state[0])  # the null block, untouched


@pytest.mark.parametrize("ngroups", [1, 2, 4])
@pytest.mark.parametrize("tokens", [1, 3])
def test_the_group_ratio_as_a_constant_changes_no_byte(launches, monkeypatch, ngroups, tokens):
    rows, T = 6, tokens
    slots = 1 + rows * T + 1
    case = make_case(40 + ngroups + T, rows=rows, tokens=rows * T, nheads=8, dim=8, dstate=16, ngroups=ngroups,
                     tied=True, slots=slots)
    if T == 1:
        kw = dict(state_batch_indices=torch.arange(1, rows + 1, device=DEVICE))
    else:
        idx = random_slot_indices(rows, slots, columns=T, generator=gen(50 + ngroups))
        kw = dict(state_batch_indices=idx.to(DEVICE),
                  num_accepted_tokens=torch.full((rows,), T, dtype=torch.int32, device=DEVICE),
                  cu_seqlens=torch.arange(0, rows * T + 1, T, dtype=torch.int32, device=DEVICE))
    s_const, o_const = _step(case, kw)
    assert launches[-1]["HPG"] == 8 // ngroups
    monkeypatch.setattr(mamba_ssm_kernels, "HPG_CONSTEXPR", False)
    s_runtime, o_runtime = _step(case, kw)
    assert "HPG" not in launches[-1]
    assert torch.equal(o_const, o_runtime) and torch.equal(s_const, s_runtime)
    _against_reference(case, kw, o_const, s_const, "ssu")


def test_the_interpreters_several_heads_kernels_take_neither_option(monkeypatch):
    """Without the GPU's rules a CPU launch takes several heads a program (BLOCK_H > 1): the runtime ratio, the exact
    softplus."""
    seen = spy_launches(monkeypatch, ssu)
    case, kw = _case(5, 1, True)
    _step(case, kw)
    if DEVICE.type == "cpu":
        assert seen[-1]["BLOCK_H"] > 1 and "HPG" not in seen[-1] and "FAST_SOFTPLUS" not in seen[-1]
    else:
        assert seen[-1]["HPG"] == 2


@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16)],
                         ids=["fp32", "bf16"])
@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("tokens,ahead", [(2, 1), (3, 1), (3, 2), (4, 1), (4, 2), (4, 3)])
def test_the_unrolled_speculative_step_changes_no_byte(launches, monkeypatch, dtypes, tied, tokens, ahead):
    """``SPEC_UNROLL``: a request of exactly the index row's width runs its tokens unrolled with the loads ahead
    (``mamba_ssm_spec.py``); one of another length (varlen) takes the token loop in the same launch. Same bytes as
    the loop, outputs and every slot; a null column of the row skips its store; against the reference."""
    rows, T = 7, tokens
    lens = [T, T, 1, T, T - 1, T, T][:rows]  # rows 2 and 4: another length, the loop's path
    slots = 1 + rows * T + 1
    case = make_case(60 + 7 * T + ahead, rows=rows, tokens=sum(lens), nheads=4, dim=16, dstate=32, ngroups=2,
                     tied=tied, slots=slots, dtypes=dtypes)
    idx = random_slot_indices(rows, slots, columns=T, generator=gen(70 + T))
    idx[1, T - 1] = 0  # a null column: that token's store is skipped, its output still written
    cu = torch.tensor([0, *lens], dtype=torch.int32).cumsum(0).to(torch.int32)
    kw = dict(state_batch_indices=idx.to(DEVICE), cu_seqlens=cu.to(DEVICE),
              num_accepted_tokens=torch.randint(1, T + 1, (rows,), generator=gen(80 + T), dtype=torch.int32).to(DEVICE))
    monkeypatch.setattr(mamba_ssm_kernels, "SPEC_UNROLL", {4: (1, 1 << 30, ahead), 2: (1, 1 << 30, ahead)})
    s_unrolled, o_unrolled = _step(case, kw)
    assert launches[-1]["SPEC_TOKENS"] == T and launches[-1]["SPEC_AHEAD"] == ahead
    monkeypatch.setattr(mamba_ssm_kernels, "SPEC_UNROLL", {})
    s_loop, o_loop = _step(case, kw)
    assert "SPEC_TOKENS" not in launches[-1]
    assert torch.equal(o_unrolled, o_loop) and torch.equal(s_unrolled, s_loop)
    _against_reference(case, kw, o_unrolled, s_unrolled, "ssu_spec")
    assert torch.equal(s_unrolled[0], case.state[0])  # the null block, untouched


def test_the_one_head_kernels_rule_unroll_and_cap():
    """``ssu_kernel_options``: the unrolled speculative step by state size and request x heads (interpreter too),
    else the register cap on a GPU only, by state size and tokens; fp32 never capped."""
    from types import SimpleNamespace

    def p(dtype, requests, width):
        idx = torch.zeros(requests, width, dtype=torch.int32) if width else None
        return SimpleNamespace(state=torch.empty(1, dtype=dtype), src=idx, dst=idx, num_requests=requests, nheads=128)

    opts = mamba_ssm_kernels.ssu_kernel_options
    bf16, fp32 = torch.bfloat16, torch.float32
    assert opts(p(bf16, 4, 4), False, True) == {"SPEC_TOKENS": 4, "SPEC_AHEAD": 3}  # batch 4: unrolled, no cap
    assert opts(p(bf16, 4, 2), False, False) == {"SPEC_TOKENS": 2, "SPEC_AHEAD": 1}
    assert opts(p(bf16, 8, 4), False, True) == {"maxnreg": mamba_ssm_kernels.MAXNREG[(2, True)]}  # the loop, capped
    assert opts(p(bf16, 8, 4), False, False) == {}  # ... on a GPU only
    assert opts(p(bf16, 8, 5), False, True) == {"maxnreg": mamba_ssm_kernels.MAXNREG[(2, True)]}  # too wide to unroll
    assert opts(p(bf16, 64, 1), True, True) == {}  # one token: no cap
    assert opts(p(fp32, 2, 3), False, True) == {"SPEC_TOKENS": 3, "SPEC_AHEAD": 2}
    assert opts(p(fp32, 4, 3), False, True) == {} and opts(p(fp32, 64, 1), True, True) == {}
