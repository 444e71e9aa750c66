"""The SSU's one-token decode on a CUDA kernel with TMA (``mamba_ssm_tma``, the H200's SSU at a few requests).

On a GPU: every entry point (bf16 / fp32 state and activations, with and without ``z``, 16- and 32-row CTAs) against
the pure-torch reference on fresh random inputs (Nemotron-H's head: 64 x 128, 8 groups; null rows among the live
ones, outputs poisoned first, untouched slots and the null block bit-identical), directly and through
``selective_state_update``'s routing, the rule's rows included. Everywhere: the rule, the routing's refusals (CPU, a
planted pre-fix guard, no early-load promise, speculative tokens, A/dt per element, inputs the kernel does not take),
the routed launch equal to the checked entry's, clear errors for bad input, and the source's entry points (its
nvcc build and the warn-once loading: tests/test_cuda_driver.py).
"""

from __future__ import annotations

import re
import types

import pytest
import torch

from mambalab.device import DEVICE
from mambalab.kernels import mamba_ssm as ssu
from mambalab.kernels import mamba_ssm_tma as tma
from mambalab.kernels.mamba_ssm import selective_state_update
from mambalab.kernels.mamba_ssm_ref import is_tied, prepare_ssu_inputs, selective_state_update_ref
from mambalab.kernels.testing import (assert_untouched, poison_, random_slot_indices, recording_driver, tolerance,
                                      touched_slots)
from mambalab.lab.bugs import BugConfig, GuardMode

from test_kernel_selective_state_update import gen, make_case, same_layout_copy

BF16, F32 = torch.bfloat16, torch.float32
H200 = "NVIDIA H200"


def _case(seed, batch, live, state_dtype=BF16, act=BF16, has_z=False, nheads=8, **kw):
    """Nemotron-H's head (dim 64, dstate 128, heads in 8 groups... here ``nheads`` of them), A/dt per head, a batch
    whose null rows are spread among the live ones (a CUDA graph pads at the end; the kernel must not care)."""
    slots = batch + 5
    case = make_case(seed, rows=batch, nheads=nheads, dim=64, dstate=128, ngroups=min(nheads, 8), tied=True,
                     slots=slots, dtypes=(state_dtype, act), has_z=has_z, **kw)
    idx = random_slot_indices(batch, slots, num_null_rows=batch - live, generator=gen(seed + 1))
    idx = idx[torch.randperm(batch, generator=gen(seed + 2))].contiguous().to(DEVICE)
    return case, idx


def _problem(case, idx, **kw):
    k = case.kwargs
    return prepare_ssu_inputs(case.state, k["x"], k["dt"], k["A"], k["B"], k["C"], k["D"], k["dt_bias"], k["z"],
                              k["dt_softplus"], idx, None, 0, kw.get("out"), None, None)


def _check(case, idx, run):
    """``run(state, out)`` against the reference: outputs at the activations' tolerance, slots at the state's."""
    state = same_layout_copy(case.state)
    out = poison_(torch.empty_like(case.kwargs["x"]))
    res = run(state, out)
    assert res.data_ptr() == out.data_ptr() and res.shape == out.shape
    s_ref, o_ref = same_layout_copy(case.state), poison_(torch.empty_like(out))
    selective_state_update_ref(s_ref, out=o_ref, state_batch_indices=idx, **case.kwargs)
    for got, want in ((out, o_ref), (state, s_ref)):
        rtol, atol = tolerance("ssu", got.dtype)
        torch.testing.assert_close(got.float(), want.float(), rtol=rtol, atol=atol)
    null = (idx == 0).cpu()
    assert torch.equal(out[null], torch.zeros_like(out[null]))  # skipped rows: zeros
    assert_untouched(case.state, state, touched_slots(idx))


DTYPES = [(BF16, BF16), (BF16, F32), (F32, BF16), (F32, F32)]


@pytest.mark.cuda
@pytest.mark.parametrize("state_dtype,act", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("rows", tma.ROWS)
@pytest.mark.parametrize("has_z", [False, True])
@pytest.mark.parametrize("batch,live", [(1, 1), (9, 6), (70, 61)])
def test_tma_kernel_matches_reference(state_dtype, act, rows, has_z, batch, live):
    if not tma.available(torch.device(DEVICE))[0]:
        pytest.skip(tma.available(torch.device(DEVICE))[1])
    case, idx = _case(300 + batch + rows, batch, live, state_dtype, act, has_z)
    _check(case, idx, lambda state, out: tma.ssu_decode_tma(state, out=out, state_batch_indices=idx, rows=rows,
                                                            **case.kwargs))


@pytest.mark.cuda
@pytest.mark.parametrize("rows", tma.ROWS)
@pytest.mark.parametrize("batch,live,nheads", [(3, 2, 128), (8, 8, 128), (12, 9, 128), (5, 5, 16)])
def test_the_routed_step_matches_reference(monkeypatch, rows, batch, live, nheads):
    """``selective_state_update`` forced onto the kernel (the promise given, the fixed guard) on Nemotron-H's 128
    heads where the rule's batches are, and on 16 heads: the reference's bytes, the kernel's launch made."""
    if not tma.available(torch.device(DEVICE))[0]:
        pytest.skip(tma.available(torch.device(DEVICE))[1])
    monkeypatch.setattr(tma, "FORCE", rows)
    made = []
    real = tma.launch
    monkeypatch.setattr(tma, "launch", lambda p, r, *a: made.append(r) or real(p, r, *a))
    for state_dtype in (BF16, F32):
        case, idx = _case(400 + batch, batch, live, state_dtype, BF16, nheads=nheads)
        _check(case, idx, lambda state, out: selective_state_update(
            state, out=out, state_batch_indices=idx, early_state_load=True, bugs=BugConfig.fixed(), **case.kwargs))
    assert made == [rows, rows]


def test_the_rule_is_the_h200s_as_measured(monkeypatch):
    """bf16 state: 16-row CTAs up to 6 x 128 request x heads, 32-row from 7 to 12 x 128; fp32: 16-row at 128 only;
    no other card, and FORCE over the rule."""
    monkeypatch.setattr(tma, "FORCE", None)
    dev = torch.device("cuda", 0)
    monkeypatch.setattr(tma, "device_name", lambda device: H200)
    rh = [1, 128, 6 * 128, 6 * 128 + 1, 7 * 128, 12 * 128, 12 * 128 + 1]
    assert [tma.launch_rule(dev, 2, n) for n in rh] == [16, 16, 16, None, 32, 32, None]
    assert [tma.launch_rule(dev, 4, n) for n in rh] == [16, 16, None, None, None, None, None]
    assert tma.launch_rule(dev, 8, 128) is None  # no rule for another element size
    for name in ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", ""):
        monkeypatch.setattr(tma, "device_name", lambda device, n=name: n)
        assert tma.launch_rule(dev, 2, 128) is None, name
    monkeypatch.setattr(tma, "FORCE", 32)
    assert tma.launch_rule(dev, 4, 10 ** 6) == 32


def _routable(monkeypatch):
    """A CPU run made to look routable (a GPU that has the kernel, the rule forced), up to the kernel's loading."""
    monkeypatch.setattr(tma, "FORCE", 16)
    monkeypatch.setattr(tma, "available", lambda device: (True, ""))
    monkeypatch.setattr(tma, "loadable", lambda device, name: True)


def _on(p, device: str):
    """``p`` as if its pool lay on ``device`` (the routing reads the device type only)."""
    return types.SimpleNamespace(**{**p.__dict__, "state": types.SimpleNamespace(
        device=torch.device(device, 0), element_size=p.state.element_size, dtype=p.state.dtype,
        stride=p.state.stride, data_ptr=p.state.data_ptr)})


def _as_cuda(p):
    return _on(p, "cuda")


def test_the_routing_takes_the_decode_and_refuses_the_rest(monkeypatch):
    _routable(monkeypatch)
    case, idx = _case(500, 4, 3)
    p = _problem(case, idx)
    eq = int(GuardMode.EQ_NULL)
    tied = is_tied(p.A, p.dt, p.dt_bias)
    assert tied and tma.routed_rows(_as_cuda(p), eq, tied, True, True) == 16
    assert tma.routed_rows(_on(p, "cpu"), eq, tied, True, True) is None  # the interpreter: the Triton kernel
    assert tma.routed_rows(_as_cuda(p), int(GuardMode.NONE), tied, True, True) is None  # a planted pre-fix guard
    assert tma.routed_rows(_as_cuda(p), eq, tied, True, False) is None  # no early-load promise
    assert tma.routed_rows(_as_cuda(p), eq, tied, False, True) is None  # speculative tokens
    assert tma.routed_rows(_as_cuda(p), eq, False, True, True) is None  # A/dt per element
    odd_dstate = make_case(502, rows=4, nheads=8, dim=64, dstate=64, ngroups=8, tied=True, dtypes=(BF16, BF16))
    odd_dim = make_case(503, rows=4, nheads=8, dim=8, dstate=128, ngroups=8, tied=True, dtypes=(BF16, BF16))
    for what, c, i in (("int64 indices", case, idx.long()), ("dstate 64", odd_dstate, idx), ("dim 8", odd_dim, idx)):
        assert tma.routed_rows(_as_cuda(_problem(c, i)), eq, True, True, True) is None, what
    monkeypatch.setattr(tma, "FORCE", None)
    monkeypatch.setattr(tma, "device_name", lambda device: "NVIDIA A100-SXM4-80GB")
    assert tma.routed_rows(_as_cuda(p), eq, tied, True, True) is None  # a card without a rule


def test_the_routed_launch_is_the_checked_entrys(monkeypatch):
    """``selective_state_update``, routed, hands the kernel the launch :func:`ssu_decode_tma` makes (grid, block,
    shared memory, PDL, every parameter): both run against a recording driver."""
    seen = recording_driver(monkeypatch, tma)
    monkeypatch.setattr(ssu.mamba_ssm_tma, "routed_rows", lambda *args: 32)
    case, idx = _case(510, 5, 4, F32, BF16, has_z=True)
    out = torch.empty_like(case.kwargs["x"])
    assert tma.ssu_decode_tma(case.state, out=out, state_batch_indices=idx, rows=32, **case.kwargs) is out
    assert selective_state_update(case.state, out=out, state_batch_indices=idx, early_state_load=True,
                                  **case.kwargs) is out
    assert len(seen) == 4 and seen[0] == seen[2] == "ssu_tma_fb_r32_z1" and seen[1] == seen[3]
    grid, block, smem, stream, pdl, params = seen[1]
    assert (grid, block, smem, stream, pdl) == ((64 // 32, 8, 5), 32, 32 * 128 * 4, 7, True)
    assert params[-5:] == (1, 0, 1, 1, 1)  # heads a group, the null block, softplus, dt_bias, D


def test_the_kernel_refuses_a_cpu_tensor_clearly():
    if torch.device(DEVICE).type == "cuda":
        pytest.skip("a GPU runs the kernel")
    case, idx = _case(520, 3, 3)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        tma.ssu_decode_tma(case.state, state_batch_indices=idx, **case.kwargs)


@pytest.mark.parametrize("what,make,match", [
    ("fp16 state", lambda: _case(530, 3, 3, torch.float16, BF16), "bf16 or fp32 state"),
    ("int64 indices", lambda: (lambda c, i: (c, i.long()))(*_case(531, 3, 3)), "int32 state_batch_indices"),
    ("dstate 64", lambda: (make_case(532, rows=3, nheads=8, dim=64, dstate=64, ngroups=8, tied=True,
                                     dtypes=(BF16, BF16)), torch.arange(1, 4, dtype=torch.int32)), "dstate 128"),
    ("permuted state", lambda: _case(533, 3, 3, layout="permuted"), "state rows contiguous"),
    ("padded state", lambda: _case(534, 3, 3, layout="padded"), "16-byte aligned state"),
    ("A/dt per element", lambda: (make_case(535, rows=3, nheads=8, dim=64, dstate=128, ngroups=8, tied=False,
                                            dtypes=(BF16, BF16)), torch.arange(1, 4, dtype=torch.int32)),
     "one a head"),
])
def test_check_inputs_names_what_is_wrong(what, make, match):
    case, idx = make()
    p = _problem(case, idx.to(DEVICE))
    with pytest.raises(ValueError, match=match):
        tma.check_inputs(p, is_tied(p.A, p.dt, p.dt_bias), True)


def test_entries_are_the_sources_entry_points():
    """:data:`ENTRIES` lists exactly the entry points the source instantiates, and their shared memory is their
    rows of 128 state elements."""
    text = tma.SOURCE.read_text()
    found = set()
    for sn, an in re.findall(r"^SSU_TMA_TYPES\((\w), \w+, (\w), \w+\)$", text, re.M):
        for rows, z in re.findall(r"SSU_TMA_ENTRY\(SN, S, AN, A, (\d+), (\d)\)", text):
            found.add(f"ssu_tma_{sn}{an}_r{rows}_z{z}")
    assert found == set(tma.ENTRIES) and len(found) == len(tma.ENTRIES) == 16
    assert tma._smem("ssu_tma_bb_r16_z0") == 16 * 128 * 2 and tma._smem("ssu_tma_fb_r32_z1") == 32 * 128 * 4
