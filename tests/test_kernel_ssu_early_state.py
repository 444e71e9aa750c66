"""The SSU's early state load (issue 14): ``early_state_load=True`` reads the indices and the state tile
before programmatic dependent launch's wait, so they overlap the previous kernel's tail.

The promise it takes (the kernel launched just before writes neither the state pool nor the indices) holds in
mambalab's Mamba2 layer. These tests check that the launch gives the same bytes as the launch that waits
first, in the forms the engine uses (one token with padded rows, speculative varlen with
``num_accepted_tokens``, ``A``/``dt`` per head and per element), that it still matches the reference, that
whatever the previous kernel does write (here ``x``) is read after the wait, and that the switch reaches the
kernel only where PDL is on (a Hopper GPU; never the interpreter).
"""

from __future__ import annotations

import pytest
import torch

from mambalab.device import DEVICE
from mambalab.kernels import mamba_ssm as ssu
from mambalab.kernels import mamba_ssm_devices as devices
from mambalab.kernels.mamba_ssm import selective_state_update
from mambalab.kernels.mamba_ssm_ref import selective_state_update_ref
from mambalab.kernels.testing import assert_untouched, poison_, random_slot_indices, spy_launches, tolerance

from test_kernel_selective_state_update import DTYPES, gen, make_case, same_layout_copy

# name -> (make_case kwargs, index kind, null rows)
FORMS = {
    "one-token-tied-nulls": (dict(rows=9, dim=16, dstate=16, ngroups=2, tied=True, slots=24), "1d", 3),
    "one-token-untied": (dict(rows=4, dim=8, dstate=16, slots=12), "1d", 1),
    "spec-varlen": (dict(rows=3, tokens=9, dim=8, dstate=16, slots=16, tied=True), "spec", 0),
}


def _kwargs(name, case, seed):
    shape, kind, nulls = FORMS[name]
    rows = shape["rows"]
    if kind == "1d":
        idx = random_slot_indices(rows, case.slots, num_null_rows=nulls, generator=gen(seed)).to(DEVICE)
        return dict(state_batch_indices=idx), {int(i) for i in idx.tolist() if int(i) > 0}
    T = shape["tokens"] // rows
    idx = random_slot_indices(rows, case.slots, columns=T, generator=gen(seed)).to(DEVICE)
    return (dict(state_batch_indices=idx,
                 num_accepted_tokens=torch.tensor([2, 1, 3], dtype=torch.int32, device=DEVICE),
                 cu_seqlens=torch.arange(0, rows * T + 1, T, dtype=torch.int32, device=DEVICE)),
            {int(i) for i in idx.flatten().tolist() if int(i) > 0})


def _run(case, kw, early):
    state = same_layout_copy(case.state)
    x = case.kwargs["x"]
    out = poison_(torch.empty(x.shape, dtype=x.dtype, device=x.device))
    selective_state_update(state, out=out, early_state_load=early, **case.kwargs, **kw)
    return state, out


def _assert_matches_reference(case, kw, name, s_new, o_new):
    s_ref = same_layout_copy(case.state)
    o_ref = poison_(torch.empty_like(o_new))
    selective_state_update_ref(s_ref, out=o_ref, **case.kwargs, **kw)
    family = "ssu_spec" if "spec" in name else "ssu"
    for got, want in ((o_new, o_ref), (s_new, s_ref)):
        rtol, atol = tolerance(family, got.dtype)
        torch.testing.assert_close(got.float(), want.float(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtypes", DTYPES)
@pytest.mark.parametrize("name", list(FORMS))
def test_early_state_load_gives_the_same_bytes(name, dtypes):
    seed = sum(map(ord, name))
    case = make_case(seed, dtypes=dtypes, **FORMS[name][0])
    kw, written = _kwargs(name, case, seed + 1)
    s_wait, o_wait = _run(case, kw, early=False)
    s_early, o_early = _run(case, kw, early=True)
    assert torch.equal(o_early, o_wait) and torch.equal(s_early, s_wait)
    assert not o_early.isnan().any()
    assert_untouched(case.state, s_early, written)
    _assert_matches_reference(case, kw, name, s_early, o_early)


@pytest.mark.parametrize("dtypes", DTYPES)
def test_what_the_previous_kernel_writes_is_read_after_the_wait(dtypes):
    """A chain of launches on one stream, each on its own pool (the promise holds), each taking the previous
    launch's output as its ``x``: the early launches give the bytes of the launches that wait first."""
    case = make_case(91, rows=16, dim=16, dstate=16, slots=20, tied=True, dtypes=dtypes)
    idx = random_slot_indices(16, 20, num_null_rows=2, generator=gen(92)).to(DEVICE)
    results = {}
    for early in (False, True):
        pools = [same_layout_copy(case.state) for _ in range(6)]
        x = case.kwargs["x"].clone()
        outs = []
        for pool in pools:
            x = selective_state_update(pool, state_batch_indices=idx, early_state_load=early,
                                       **dict(case.kwargs, x=x))
            outs.append(x)
        results[early] = (pools, outs)
    for a, b in zip(*(results[e][0] + results[e][1] for e in (False, True))):
        # fp16 overflows along the chain: NaN where the wait-first launch has NaN, and nowhere else
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("state_dtype,rows,nheads,tied,taken", [
    (torch.float32, 2, 4, True, True),  # a small fp32 tile: PDL only with the promise
    (torch.float32, 64, 4, True, True),  # 256 request-heads
    (torch.bfloat16, 2, 4, True, True),
    (torch.float32, 40, 16, True, False),  # 640 request-heads: past EARLY_STATE_MAX_REQUEST_HEADS
    (torch.float32, 2, 4, False, True),  # A/dt per element: up to 2 x 128 request-heads fp32 (call 73)
    (torch.float32, 65, 4, False, False),  # 260 request-heads
    (torch.bfloat16, 100, 4, False, True),  # bf16: up to 4 x 128
])
def test_the_switch_reaches_the_kernel_only_under_pdl(monkeypatch, state_dtype, rows, nheads, tied, taken):
    """Under PDL the promise adds ``EARLY_STATE`` where it was measured to pay (small batches; A/dt per element
    smaller ones; also to the small fp32 tiles, which wait-first launches leave without PDL); without PDL (the
    interpreter, MAMBALAB_PDL=0) the launch is the plain one."""
    if DEVICE.type != "cuda" and state_dtype != torch.float32:
        pytest.skip("bf16 runs on the GPU only")
    seen = spy_launches(monkeypatch, ssu)
    monkeypatch.setattr(devices, "SSU_EARLY_HALF", {})  # the table's range (the H200 reads early at 5-8 x 128 fp32)
    case = make_case(5, rows=rows, nheads=nheads, dim=16, dstate=16, slots=rows + 1, tied=tied,
                     dtypes=(state_dtype, state_dtype))
    idx = torch.arange(1, rows + 1, dtype=torch.int32, device=DEVICE)
    for early in (False, True):
        selective_state_update(case.state.clone(), state_batch_indices=idx, early_state_load=early, **case.kwargs)
    wait_first, early = seen
    assert "EARLY_STATE" not in wait_first
    if ssu.use_pdl(case.state.device) and taken:
        assert early.get("EARLY_STATE") is True and early.get("USE_PDL") is True
    else:
        assert early == wait_first
    monkeypatch.setenv("MAMBALAB_PDL", "0")
    seen.clear()
    selective_state_update(case.state.clone(), state_batch_indices=idx, early_state_load=True, **case.kwargs)
    assert "EARLY_STATE" not in seen[0] and "USE_PDL" not in seen[0]


@pytest.mark.cuda
@pytest.mark.parametrize("state_dtype,hint", [(torch.bfloat16, True), (torch.float32, False)])
@pytest.mark.parametrize("name", ["one-token-tied-nulls", "spec-varlen"])
def test_the_l2_hint_gives_the_same_bytes_and_needs_the_promise(monkeypatch, name, state_dtype, hint):
    """Past the early state load (here: everywhere), with the promise, a 16-bit state launches with ``PREFETCH``
    (an L2 hint for the initial state's tile before PDL's wait: ``mamba_ssm.PREFETCH_STATE`` and
    ``PREFETCH_STATE_MULTI_TOKEN``, forced on from one request x head here); fp32 does not. Same bytes as the
    launch without the promise, the slots not written untouched, the reference within tolerance."""
    seen = spy_launches(monkeypatch, ssu)
    monkeypatch.setattr(devices, "SSU_DEVICE_RULES", {})  # the H200's table (an H100's rule reads batch 8 early)
    monkeypatch.setattr(ssu, "EARLY_STATE_MAX_REQUEST_HEADS", 0)
    monkeypatch.setattr(ssu, "EARLY_STATE_MAX_REQUEST_HEADS_MULTI_TOKEN", 0)
    monkeypatch.setattr(ssu, "PREFETCH_STATE_MULTI_TOKEN", {2: (2, 1, 1 << 30)})
    monkeypatch.setattr(ssu, "PREFETCH_STATE", {2: (2, 1, 1 << 30)})
    seed = sum(map(ord, name)) + 3
    case = make_case(seed, dtypes=(state_dtype, state_dtype), **FORMS[name][0])
    kw, written = _kwargs(name, case, seed + 1)
    (s_wait, o_wait), (s_hint, o_hint) = (_run(case, kw, early) for early in (False, True))
    assert "PREFETCH" not in seen[0]
    if ssu.use_pdl(case.state.device) and hint:
        assert seen[1].get("PREFETCH") == 2 and "EARLY_STATE" not in seen[1]
    else:
        assert "PREFETCH" not in seen[1]
    assert torch.equal(o_hint, o_wait) and torch.equal(s_hint, s_wait)
    assert_untouched(case.state, s_hint, written)
    _assert_matches_reference(case, kw, name, s_hint, o_hint)
