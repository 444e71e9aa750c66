"""The conv's window kernel (few tokens a row, width 2..4) against the general kernel it replaces there.

Both run on copies of one random pool with poisoned outputs; the whole pool (slots, padding, the null
block) must come out bit-identical and the outputs equal up to rounding. The reference comparison of
every case lives in test_kernel_causal_conv1d.py; this file pins the two Triton paths to each other.
"""

from __future__ import annotations

import pytest
import torch

import mambalab  # noqa: F401  (sets TRITON_INTERPRET before kernels are defined)
from mambalab.device import DEVICE
from mambalab.kernels import causal_conv1d as conv_mod
from mambalab.kernels import common
from mambalab.kernels.causal_conv1d import causal_conv1d_update, make_conv_state
from mambalab.kernels.testing import poison_, random_slot_indices

DTYPES = [
    pytest.param(torch.float32, id="fp32"),
    pytest.param(torch.bfloat16, id="bf16", marks=pytest.mark.cuda),
]

# (width, tokens a row: an int = x (batch, dim, T), a tuple = varlen lengths, speculative?)
CASES = [
    pytest.param(4, 4, True, id="w4-T4-spec"),
    pytest.param(4, 2, True, id="w4-T2-spec"),
    pytest.param(3, 3, True, id="w3-T3-spec"),
    pytest.param(2, 4, True, id="w2-T4-spec"),
    pytest.param(4, (3, 1, 0, 2, 3, 3), True, id="w4-varlen-spec"),
    pytest.param(3, (2, 0, 1, 3, 3, 2), True, id="w3-varlen-spec"),
    pytest.param(4, 3, False, id="w4-T3"),
    pytest.param(2, 2, False, id="w2-T2"),
    pytest.param(4, (1, 4, 0, 2, 3, 1), False, id="w4-varlen"),
]


def _run(path_window: bool, monkeypatch, pool, args, preload: bool = False):
    monkeypatch.setattr(conv_mod, "WINDOW_KERNEL", path_window)
    monkeypatch.setattr(conv_mod, "WINDOW_PRELOAD_X", preload)
    out = poison_(torch.empty_like(args["x"]))
    causal_conv1d_update(conv_state=pool, out=out, **args)
    return out


@pytest.mark.parametrize("preload", [False, True], ids=["x-per-token", "x-preloaded"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width,tokens,spec", CASES)
def test_window_kernel_equals_general_kernel(width, tokens, spec, dtype, preload, monkeypatch):
    gen = torch.Generator().manual_seed(width * 100 + (tokens if isinstance(tokens, int) else len(tokens)) + spec)
    dim = 37
    batch = 6
    if isinstance(tokens, int):
        max_t = tokens
        x = torch.randn(batch, dim, tokens, generator=gen).to(dtype).to(DEVICE)
        extra = {}
    else:
        max_t = max(tokens)
        qsl = torch.zeros(batch + 1, dtype=torch.int32)
        qsl[1:] = torch.cumsum(torch.tensor(tokens), 0)
        x = torch.randn(int(qsl[-1]), dim, generator=gen).to(dtype).to(DEVICE)
        extra = dict(query_start_loc=qsl.to(DEVICE), max_query_len=max_t)
    state_len = (width - 2 + max_t if spec else width - 1) + 1
    slots = 2 * batch + 3
    pool = make_conv_state(slots, dim, state_len, dtype, DEVICE, slot_stride=state_len * dim + 5)
    pool._base.copy_(torch.randn(pool._base.shape, generator=gen).to(dtype))
    twin = pool._base.clone().as_strided(pool.shape, pool.stride())
    idx = random_slot_indices(batch, slots, num_null_rows=2, generator=gen)
    idx = idx[torch.randperm(batch, generator=gen)].to(DEVICE)
    if spec:  # every count 0..T (0 reads as 1)
        extra["num_accepted_tokens"] = (torch.arange(batch, dtype=torch.int32) % (max_t + 1)).to(DEVICE)
    weight = torch.randn(dim, width, generator=gen).to(dtype).to(DEVICE)
    bias = torch.randn(dim, generator=gen).to(dtype).to(DEVICE)
    args = dict(x=x, weight=weight, bias=bias, activation="silu", conv_state_indices=idx, **extra)

    out_w = _run(True, monkeypatch, pool, args, preload)
    out_g = _run(False, monkeypatch, twin, args)
    assert not torch.isnan(out_w).any() and not torch.isnan(out_g).any(), "an output element was not written"
    assert torch.equal(pool._base.view(torch.uint8), twin._base.view(torch.uint8)), "the pools differ"
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(out_w.float(), out_g.float(), rtol=tol, atol=tol)


def test_window_launch_rule():
    """Without a device (and on cards without a cap): 512 channels a program for an fp32 state, rows of 3 tokens or
    more, from 64 requests (H200, calls 28-29; the H200 itself now caps it at 95, the next test); 256 otherwise; never
    more than the (padded) channels."""
    rule = conv_mod.window_launch_config
    assert rule(4096, 64, 3, 4) == (512, conv_mod.WINDOW_WARPS)
    assert rule(4096, 256, 4, 4) == (512, conv_mod.WINDOW_WARPS)
    for dim, batch, max_t, size in ((4096, 256, 2, 4), (4096, 8, 4, 4), (4096, 256, 4, 2)):
        assert rule(dim, batch, max_t, size) == (256, conv_mod.WINDOW_WARPS), (dim, batch, max_t, size)
    assert rule(300, 64, 3, 4)[0] == 512 and rule(200, 64, 3, 4)[0] == 256 and rule(20, 64, 3, 4)[0] == 32


def test_window_wide_block_stops_at_96_on_the_h200(monkeypatch):
    """As measured on an H200 beside vLLM (calls 213-214): there the wide block runs from 64 to 95 requests only, the
    narrow one from 96 (PDL mode 1 from 128 stays); another card, and a call without a device, keep the wide block."""
    gpu, rule = torch.device("cuda", 0), conv_mod.window_launch_config
    monkeypatch.setattr(conv_mod, "device_name", lambda device: "NVIDIA H200")
    for batch, block in ((64, 512), (95, 512), (96, 256), (128, 256), (256, 256), (512, 256)):
        assert rule(4096, batch, 4, 4, gpu) == (block, conv_mod.WINDOW_WARPS), batch
        assert conv_mod.window_pdl_mode(batch, 4, 4) == (1 if batch >= 128 else conv_mod.WINDOW_PDL_MODE)
    assert rule(4096, 256, 2, 4, gpu)[0] == 256 and rule(4096, 256, 4, 2, gpu)[0] == 256
    assert rule(4096, 256, 4, 4)[0] == 512
    monkeypatch.setattr(conv_mod, "device_name", lambda device: "NVIDIA H100 80GB HBM3")
    assert rule(4096, 256, 4, 4, gpu)[0] == 512 and rule(4096, 96, 3, 4, gpu)[0] == 512


def test_window_pdl_mode_rule():
    """As measured on an H200 beside vLLM: the wide launches (fp32, rows of 3+ tokens) trigger their dependents
    first (mode 1) from 128 requests; at 64, and every other launch, after the state's stores (WINDOW_PDL_MODE)."""
    mode = conv_mod.window_pdl_mode
    assert mode(128, 3, 4) == 1 and mode(256, 4, 4) == 1 and mode(512, 3, 4) == 1
    for batch, max_t, size in ((64, 4, 4), (256, 2, 4), (256, 4, 2), (8, 4, 4)):
        assert mode(batch, max_t, size) == conv_mod.WINDOW_PDL_MODE, (batch, max_t, size)


@pytest.mark.cuda
@pytest.mark.parametrize("pdl1_from,block", [(1 << 30, 512), (1, 512), (1, 256)],
                         ids=["pdl-mode-2", "pdl-mode-1", "narrow-pdl-mode-1"])
def test_wide_window_kernel_equals_general_kernel(pdl1_from, block, monkeypatch):
    """The wide launch (512 channels a program, masked at 600 channels) against the general kernel: fp32,
    64 speculative rows of 3 tokens, padded rows; the pools bit-identical, the outputs equal up to rounding;
    with either PDL mode (window_pdl_mode), and the narrow block under mode 1 (the H200 from 128 requests)."""
    monkeypatch.setattr(conv_mod, "WINDOW_WIDE_PDL1_MIN_BATCH", pdl1_from)
    monkeypatch.setattr(conv_mod, "WINDOW_WIDE_MAX_BATCH", {} if block == 512 else {"TEST CARD": 0})
    monkeypatch.setattr(conv_mod, "device_name", lambda device: "TEST CARD")
    gen = torch.Generator().manual_seed(600)
    batch, dim, width, T = 64, 600, 4, 3
    assert conv_mod.window_launch_config(dim, batch, T, 4, torch.device(DEVICE))[0] == block
    assert conv_mod.window_pdl_mode(batch, T, 4) == (1 if pdl1_from == 1 else conv_mod.WINDOW_PDL_MODE)
    x = torch.randn(batch, dim, T, generator=gen).to(DEVICE)
    state_len = width - 2 + T + 1
    slots = batch + 9
    pool = make_conv_state(slots, dim, state_len, torch.float32, DEVICE)
    pool.copy_(torch.randn(pool.shape, generator=gen))
    twin = pool.clone()
    idx = random_slot_indices(batch, slots, num_null_rows=5, generator=gen).to(DEVICE)
    args = dict(x=x, weight=torch.randn(dim, width, generator=gen).to(DEVICE),
                bias=torch.randn(dim, generator=gen).to(DEVICE), activation="silu", conv_state_indices=idx,
                num_accepted_tokens=(torch.arange(batch, dtype=torch.int32) % (T + 1)).to(DEVICE))
    out_w = _run(True, monkeypatch, pool, args)
    out_g = _run(False, monkeypatch, twin, args)
    assert not torch.isnan(out_w).any()
    assert torch.equal(pool, twin)
    torch.testing.assert_close(out_w, out_g, rtol=1e-5, atol=1e-5)


# the decode kernel's rule beside the window kernel's (test_kernel_causal_conv1d.py is past 600 lines)
def test_decode_deep_rule(monkeypatch):
    """As measured on an H200 beside vLLM: an fp32 state at batch 112-128 takes 4 requests a program with PDL (above
    PDL_MAX_BATCH_DECODE); 104, 136, 256 and a bf16 state keep DECODE_ROWS. (The launch is caught, not run.)"""
    gpu = torch.device("cuda", 0)
    for batch, dtype, rows in ((128, torch.float32, 4), (112, torch.float32, 4), (104, torch.float32, 2),
                               (136, torch.float32, 2), (256, torch.float32, 2), (128, torch.bfloat16, 2)):
        assert conv_mod.decode_launch_config(8192, batch, dtype, gpu)[2] == rows, (batch, dtype)
    seen = []
    monkeypatch.setattr(conv_mod, "decode_launch_config", lambda dim, batch, dtype, device: (64, 1, 4))
    monkeypatch.setattr(conv_mod, "decode_kernel", lambda rows, device: conv_mod._causal_conv1d_decode_kernel)
    monkeypatch.setattr(conv_mod.sanitizer, "launch", lambda kernel, grid, *a, **kw: seen.append(kw.get("USE_PDL")))
    monkeypatch.setattr(common, "use_pdl", lambda device: True)
    for batch, pdl in ((128, True), (136, None), (16, True)):  # at 8192 channels, where the rules' batch is the batch
        x = torch.zeros(batch, 8192)
        causal_conv1d_update(x, make_conv_state(batch + 1, 8192, 3, torch.float32, "cpu"), torch.zeros(8192, 4),
                             conv_state_indices=torch.arange(1, batch + 1, dtype=torch.int32))
        assert seen[-1] == pdl, batch
