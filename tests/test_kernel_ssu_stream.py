"""The SSU's streaming kernel (state blocks through a pipelined loop; one token a request, or a speculative
step unrolled) against the reference and against ``_ssu_kernel``, on the interpreter and, unchanged, on a GPU.
The rule ``mamba_ssm.SSU_STREAM`` is forced here (GPU-only by default: ``_streams_on``), with the GPU's one
head a program.
"""

from __future__ import annotations

import pytest
import torch

import mambalab
from mambalab.device import DEVICE
from mambalab.kernels import mamba_ssm as ssu
from mambalab.kernels.mamba_ssm import LaunchConfig, selective_state_update
from mambalab.kernels.mamba_ssm_ref import selective_state_update_ref
from mambalab.kernels.testing import assert_untouched, poison_, random_slot_indices, tolerance

from test_kernel_selective_state_update import DTYPES, gen, make_case, same_layout_copy


@pytest.fixture
def launched(monkeypatch):
    """GPU-shaped launches on any device (one head a program, the stream rule's gate open); the launches."""
    monkeypatch.setattr(ssu, "_streams_on", lambda device: True)
    monkeypatch.setattr(ssu, "choose_launch_config", lambda *a, **k: LaunchConfig(block_m=4, num_warps=1))
    monkeypatch.setattr(ssu, "SSU_STREAM_MAX_TOKENS", 8)  # the kernel takes any width; the rule stops at 2
    seen = []
    real = ssu.sanitizer.launch

    def spy(kernel, grid, *args, **kwargs):
        seen.append((kernel, grid, kwargs.get("TOKENS")))
        return real(kernel, grid, *args, **kwargs)

    monkeypatch.setattr(ssu.sanitizer, "launch", spy)
    return seen


def _rule(monkeypatch, state_dtype, multi, rb, nb, stages, lo=1, hi=1 << 30, warps=1):
    size = 4 if state_dtype.itemsize >= 4 else 2
    monkeypatch.setattr(ssu, "SSU_STREAM", {(size, multi): (rb, nb, stages, lo, hi, False, warps)})


def _run(case, kw):
    state = same_layout_copy(case.state)
    x = case.kwargs["x"]
    out = poison_(torch.empty(x.shape, dtype=x.dtype, device=x.device))
    selective_state_update(state, out=out, **case.kwargs, **kw)
    return state, out


def _check_against_reference_and_general(case, kw, family, launched, monkeypatch, tokens):
    s_k, o_k = _run(case, kw)
    assert launched[-1][0] is ssu._ssu_stream_kernel and launched[-1][2] == tokens
    monkeypatch.setattr(ssu, "SSU_STREAM", {})
    s_g, o_g = _run(case, kw)
    assert launched[-1][0] is ssu._ssu_kernel
    s_r = same_layout_copy(case.state)
    o_r = poison_(torch.empty_like(o_k))
    selective_state_update_ref(s_r, out=o_r, **case.kwargs, **kw)
    assert not o_k.isnan().any()
    for got, ref, what in ((o_k, o_r, "out"), (s_k, s_r, "state")):
        rtol, atol = tolerance(family, got.dtype)
        torch.testing.assert_close(got.float(), ref.float(), rtol=rtol, atol=atol, msg=what)
    if DEVICE.type == "cpu":  # the interpreter: the same operations on each row, so the same bytes
        assert torch.equal(o_k, o_g) and torch.equal(s_k, s_g)
    return s_k, o_k


@pytest.mark.parametrize("dtypes", DTYPES)
@pytest.mark.parametrize("rb,nb,stages,dim,dstate", [(4, 2, 2, 8, 16), (2, 4, 3, 12, 12), (4, 1, 1, 6, 16)],
                         ids=["rb4-nb2", "rb2-nb4-s3-masked", "rb4-nb1-masked-dim"])
@pytest.mark.parametrize("separate_dst", [False, True], ids=["in-place", "dst-indices"])
def test_one_token_stream(separate_dst, rb, nb, stages, dim, dstate, dtypes, launched, monkeypatch):
    """A decode step with padded rows (null slots): the state back to its slot, or to separate dst indices."""
    _rule(monkeypatch, dtypes[0], False, rb, nb, stages)
    seed = 500 + rb * 10 + dim + separate_dst
    case = make_case(seed, rows=7, dim=dim, dstate=dstate, ngroups=2, tied=True, slots=20, dtypes=dtypes)
    idx = random_slot_indices(7, 20, num_null_rows=2, generator=gen(seed + 1)).to(DEVICE)
    kw = dict(state_batch_indices=idx)
    written = {int(i) for i in idx.tolist() if int(i) > 0}
    if separate_dst:  # slots no request reads (a program writing another's source would race on a GPU)
        free = [s for s in range(1, 20) if s not in written][:4]
        dst = idx.clone()
        dst[:5] = torch.tensor(free + [mambalab.NULL_BLOCK_ID], dtype=dst.dtype)  # and a null store
        kw["dst_state_batch_indices"] = dst
        written = set(free)
    s_k, o_k = _check_against_reference_and_general(case, kw, "ssu", launched, monkeypatch, 1)
    assert_untouched(case.state, s_k, written)
    assert torch.equal(o_k[5:], torch.zeros_like(o_k[5:]))  # padded rows: zero outputs
    assert launched[0][1][0] == -(-dim // (rb * nb))


@pytest.mark.parametrize("dtypes", DTYPES)
@pytest.mark.parametrize("T,warps", [(2, 1), (4, 1), (3, 2)])
def test_spec_stream(T, warps, dtypes, launched, monkeypatch):
    """Speculative varlen, every request T tokens, accepted counts 1..T, a null store column, a padded row."""
    _rule(monkeypatch, dtypes[0], True, 4, 2, 2, warps=warps)
    seed = 520 + T
    rows = 5
    slots = 1 + rows * T + 2
    case = make_case(seed, rows=rows, tokens=rows * T, dim=8, dstate=16, ngroups=2, tied=True, slots=slots,
                     dtypes=dtypes)
    idx = random_slot_indices(rows, slots, num_null_rows=1, columns=T, generator=gen(seed + 1))
    idx[1, T - 1] = mambalab.NULL_BLOCK_ID
    num_acc = [1, T, 2, T - 1, 1]
    kw = dict(state_batch_indices=idx.to(DEVICE),
              num_accepted_tokens=torch.tensor(num_acc, dtype=torch.int32, device=DEVICE),
              cu_seqlens=torch.arange(0, rows * T + 1, T, dtype=torch.int32, device=DEVICE))
    s_k, _ = _check_against_reference_and_general(case, kw, "ssu_spec", launched, monkeypatch, T)
    assert_untouched(case.state, s_k, {int(i) for i in idx.flatten().tolist() if int(i) > 0})


def test_spec_stream_rows_of_other_lengths_take_the_token_loop(launched, monkeypatch):
    """Lengths 3, 0, 1, 3 in a 3-column launch: the empty request touches nothing, the short one runs the
    token loop inside the same launch."""
    _rule(monkeypatch, torch.float32, True, 2, 2, 2)
    lens, T = [3, 0, 1, 3], 3
    slots = 1 + len(lens) * T + 1
    case = make_case(530, rows=4, tokens=sum(lens), dim=8, dstate=16, tied=True, slots=slots)
    idx = random_slot_indices(4, slots, columns=T, generator=gen(531))
    cu = torch.tensor([0, 3, 3, 4, 7], dtype=torch.int32, device=DEVICE)
    kw = dict(state_batch_indices=idx.to(DEVICE), cu_seqlens=cu,
              num_accepted_tokens=torch.tensor([2, 1, 1, 3], dtype=torch.int32, device=DEVICE))
    s_k, _ = _check_against_reference_and_general(case, kw, "ssu_spec", launched, monkeypatch, T)
    written = {int(i) for i in idx[0].tolist()} | {int(idx[2, 0])} | {int(i) for i in idx[3].tolist()}
    assert_untouched(case.state, s_k, written)


def test_stream_rule_leaves_other_launches_alone(launched, monkeypatch):
    """A/dt per element, no indices, request x heads outside the rule's range and a pinned launch keep
    ``_ssu_kernel``."""
    monkeypatch.setattr(ssu, "SSU_STREAM", {(4, False): (4, 2, 2, 8, 16, False, 1)})
    tied = make_case(540, rows=3, nheads=4, tied=True)  # 12 request x heads: in range
    untied = make_case(541, rows=3, nheads=4, tied=False)
    idx = torch.arange(1, 4, device=DEVICE)
    selective_state_update(same_layout_copy(tied.state), state_batch_indices=idx, **tied.kwargs)
    assert launched[-1][0] is ssu._ssu_stream_kernel
    for case, kw in ((untied, dict(state_batch_indices=idx)), (tied, {})):
        selective_state_update(same_layout_copy(case.state), **kw, **case.kwargs)
        assert launched[-1][0] is ssu._ssu_kernel
    small = make_case(542, rows=1, nheads=4, tied=True)  # 4 request x heads: below the range
    selective_state_update(same_layout_copy(small.state), state_batch_indices=idx[:1], **small.kwargs)
    assert launched[-1][0] is ssu._ssu_kernel
    with ssu.launch_config_override(LaunchConfig(block_m=4, num_warps=1)):
        selective_state_update(same_layout_copy(tied.state), state_batch_indices=idx, **tied.kwargs)
    assert launched[-1][0] is ssu._ssu_kernel


def test_the_interpreter_keeps_its_own_kernels():
    assert not ssu._streams_on(torch.device("cpu"))


def test_the_default_rule(monkeypatch):
    """As measured on an H200 (issue 14, call 121): no launch takes the streaming kernel, the capped token loop of
    ``_ssu_kernel`` being faster wherever it once did (a bf16 state, two tokens a request, from 32 x 128
    request-heads). (The launch is caught, not run.)"""
    monkeypatch.setattr(ssu, "_streams_on", lambda device: True)
    monkeypatch.setattr(ssu, "choose_launch_config", lambda *a, **k: LaunchConfig(block_m=16, num_warps=1))
    seen = []
    monkeypatch.setattr(ssu.sanitizer, "launch", lambda kernel, grid, *a, **kw: seen.append(kernel))
    H, P, N = 128, 4, 8
    for rows, T, state_dtype, streams in ((32, 2, torch.bfloat16, False), (256, 2, torch.bfloat16, False),
                                          (16, 2, torch.bfloat16, False), (64, 3, torch.bfloat16, False),
                                          (64, 2, torch.float32, False), (64, 1, torch.bfloat16, False)):
        ntok = rows * T
        state = torch.zeros(ntok + 1, H, P, N, dtype=state_dtype)
        x = torch.zeros(ntok, H, P, dtype=torch.bfloat16)
        dt = torch.zeros(ntok, H, dtype=torch.bfloat16)[:, :, None].expand(ntok, H, P)
        A = torch.zeros(H)[:, None, None].expand(H, P, N)
        B = torch.zeros(ntok, 1, N, dtype=torch.bfloat16)
        kw = dict(state_batch_indices=torch.arange(1, ntok + 1, dtype=torch.int32).view(rows, T))
        if T > 1:
            kw.update(num_accepted_tokens=torch.ones(rows, dtype=torch.int32),
                      cu_seqlens=torch.arange(0, ntok + 1, T, dtype=torch.int32))
        else:
            kw["state_batch_indices"] = kw["state_batch_indices"].view(-1)
        selective_state_update(state, x, dt, A, B, B, **kw)
        assert (seen[-1] is ssu._ssu_stream_kernel) == streams, (rows, T, state_dtype)
