"""The GDN packed decode's CUDA kernel with TMA (``gated_delta_rule_tma``, a study kernel beside the Triton one).

On a GPU: every launch shape against the packed decode's pure-torch reference on fresh random inputs (Qwen3-Next's
head dims, null rows among the live ones, outputs poisoned first, untouched slots and the null block bit-identical),
directly and through the packed decode's routing. Everywhere: the routing's refusals (CPU, planted guards, an early
shape without the early-load promise, inputs the kernel does not take), clear errors for bad input, and the source's
entry points (its nvcc build and the warn-once loading: tests/test_cuda_driver.py).
"""

from __future__ import annotations

import re

import pytest
import torch

from mambalab.device import DEVICE
from mambalab.kernels import gated_delta_rule_tma as tma
from mambalab.kernels.gated_delta_rule_packed import (fused_recurrent_gated_delta_rule_packed_decode,
                                                      fused_recurrent_gated_delta_rule_packed_decode_ref)
from mambalab.kernels.testing import assert_untouched, poison_, recording_driver, touched_slots
from mambalab.lab.bugs import BugConfig

from test_kernel_gated_delta_rule import _gen, assert_close, make_pool
from test_kernel_gdn_packed import _packed

H, HV, K, V = 4, 8, 128, 128
BF16 = torch.bfloat16


def _inputs(seed, N, null_rows, *, slots=None):
    gen = _gen(seed)
    slots = slots or N + 3
    mixed, a, b, A_log, dt_bias, idx = _packed(gen, N, H, HV, K, V, BF16, slots=slots, null_rows=null_rows)
    _, pool = make_pool(gen, slots, HV, V, K, BF16)
    return mixed, a, b, A_log, dt_bias, idx, pool


def _check(seed, N, null_rows, run, l2norm=True):
    mixed, a, b, A_log, dt_bias, idx, pool = _inputs(seed, N, null_rows)
    before, pool_ref = pool.clone(), pool.clone()
    out = poison_(torch.empty(N, 1, HV, V, device=DEVICE, dtype=BF16))
    out_ref = torch.empty_like(out)
    res = run(mixed, a, b, A_log, dt_bias, K ** -0.5, pool, out, idx, l2norm)
    fused_recurrent_gated_delta_rule_packed_decode_ref(mixed, a, b, A_log, dt_bias, K ** -0.5, pool_ref, out_ref,
                                                       idx, l2norm)
    assert res[0] is out and res[1] is pool
    assert_close(out, out_ref, BF16, "out")
    live = idx > 0
    assert torch.equal(out[~live.cpu()], torch.zeros_like(out[~live.cpu()]))  # skipped rows: zeros
    assert_close(pool, pool_ref, BF16, "pool")
    assert_untouched(before, pool, touched_slots(idx))


@pytest.mark.cuda
@pytest.mark.parametrize("shape", tma.SHAPES, ids=lambda s: s.entry)
@pytest.mark.parametrize("N,null_rows,l2norm", [(1, 0, True), (9, 3, True), (64, 5, True), (5, 1, False),
                                                (700, 40, True)])
def test_tma_kernel_matches_reference(shape, N, null_rows, l2norm):
    if not tma.available(torch.device(DEVICE))[0]:
        pytest.skip(tma.available(torch.device(DEVICE))[1])

    def run(*args):
        return tma.gdn_packed_decode_tma(*args, shape=shape)

    _check(700 + N + shape.rows + shape.warps + shape.persist + shape.pieces, N, null_rows, run, l2norm)


@pytest.mark.cuda
def test_packed_decode_routes_to_the_tma_kernel_where_forced(monkeypatch):
    if not tma.available(torch.device(DEVICE))[0]:
        pytest.skip(tma.available(torch.device(DEVICE))[1])
    calls = []
    real = tma.launch

    def spy(*args):
        calls.append(args[11])  # the shape
        return real(*args)

    monkeypatch.setattr(tma, "FORCE", tma.TmaShape())
    import mambalab.kernels.gated_delta_rule_packed as packed

    monkeypatch.setattr(packed, "tma_launch", spy)

    def run(*args):
        return fused_recurrent_gated_delta_rule_packed_decode(*args, bugs=BugConfig.fixed(), early_state_load=True)

    _check(760, 16, 4, run)
    assert calls == [tma.TmaShape()]


def test_routing_refuses_what_the_kernel_does_not_take(monkeypatch):
    """The Triton kernel keeps every call the TMA kernel cannot take, whatever the rule says."""
    monkeypatch.setattr(tma, "FORCE", tma.TmaShape())
    mixed, a, b, A_log, dt_bias, idx, pool = _inputs(770, 6, 1)
    out = torch.empty(6, 1, HV, V, device=DEVICE, dtype=BF16)
    args = (mixed, a, b, A_log, dt_bias, pool, out, idx)
    fixed = BugConfig.fixed()
    if torch.device(DEVICE).type != "cuda":  # the interpreter: never routed
        assert tma.routed_shape(*args, fixed, True) is None
        return
    if not tma.available(torch.device(DEVICE))[0]:
        assert tma.routed_shape(*args, fixed, True) is None
        return
    assert tma.routed_shape(*args, fixed, True) == tma.TmaShape()
    assert tma.routed_shape(*args, fixed, False) is None  # an early shape without the promise
    assert tma.routed_shape(*args, BugConfig.with_bugs("guard-lt-zero"), True) is None  # a planted guard
    assert tma.routed_shape(mixed, a, b, A_log, dt_bias, pool.float(), out, idx, fixed, True) is None  # fp32 state
    assert tma.routed_shape(mixed, a, b, A_log, dt_bias, pool, out, idx.long(), fixed, True) is None  # int64 idx
    monkeypatch.setattr(tma, "FORCE", None)
    monkeypatch.setattr(tma, "RULES", {})
    assert tma.routed_shape(*args, fixed, True) is None  # no rule for this card


def test_a_forced_shape_the_source_lacks_is_refused(monkeypatch):
    monkeypatch.setattr(tma, "FORCE", tma.TmaShape(64, 1, True, False, 1))
    mixed, a, b, A_log, dt_bias, idx, pool = _inputs(775, 2, 0)
    out = torch.empty(2, 1, HV, V, device=DEVICE, dtype=BF16)
    if torch.device(DEVICE).type != "cuda":
        pytest.skip("the interpreter never routes to the TMA kernel")
    with pytest.raises(ValueError, match="one of gated_delta_rule_tma.SHAPES"):
        tma.routed_shape(mixed, a, b, A_log, dt_bias, pool, out, idx, BugConfig.fixed(), True)


def test_rules_select_by_card_and_batch(monkeypatch):
    shape = tma.TmaShape(64, 2, True, True, 4)
    monkeypatch.setattr(tma, "FORCE", None)
    monkeypatch.setattr(tma, "RULES", {"Card X": (16, 64, shape)})
    monkeypatch.setattr(tma, "device_name", lambda device: "Card X")
    dev = torch.device("cuda", 0)
    assert [tma.launch_rule(dev, n) for n in (15, 16, 64, 65)] == [None, shape, shape, None]
    monkeypatch.setattr(tma, "device_name", lambda device: "Card Y")
    assert tma.launch_rule(dev, 32) is None


def test_the_h200_takes_the_one_warp_shape_from_4_to_16(monkeypatch):
    """The measured rule (calls 206-207): on the H200 one-warp 32-row CTAs with plain stores, read early, from 4 to 16
    sequences; the Triton kernel below and above, and on every other card."""
    monkeypatch.setattr(tma, "FORCE", None)
    dev = torch.device("cuda", 0)
    monkeypatch.setattr(tma, "device_name", lambda device: "NVIDIA H200")
    shape = tma.TmaShape(32, 1, True, False, 1)
    assert [tma.launch_rule(dev, n) for n in (1, 3, 4, 9, 16, 17, 64)] == [None, None] + [shape] * 3 + [None, None]
    assert shape in tma.SHAPES
    for name in ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", ""):
        monkeypatch.setattr(tma, "device_name", lambda device, n=name: n)
        assert tma.launch_rule(dev, 8) is None, name


def test_the_packed_decode_launches_as_the_checked_entry_does(monkeypatch):
    """The packed decode, routed, hands the kernel the launch :func:`gdn_packed_decode_tma` makes (grid, block,
    shared memory, PDL, every parameter) without repeating its checks: both run against a recording driver."""
    import mambalab.kernels.gated_delta_rule_packed as packed

    recorded = recording_driver(monkeypatch, tma)
    monkeypatch.setattr(packed, "routed_shape", lambda *args: tma.TmaShape())
    mixed, a, b, A_log, dt_bias, idx, pool = _inputs(785, 5, 1)
    out = torch.empty(5, 1, HV, V, device=DEVICE, dtype=BF16)
    args = (mixed, a, b, A_log, dt_bias, 0.125, pool, out, idx, True)
    tma.gdn_packed_decode_tma(*args, shape=tma.TmaShape())
    assert fused_recurrent_gated_delta_rule_packed_decode(*args, bugs=BugConfig.fixed(), early_state_load=True) == (
        out, pool)
    seen = [r for r in recorded if isinstance(r, tuple)]  # the launches
    assert len(seen) == 2 and seen[0] == seen[1]
    assert seen[0][:5] == ((V // 32, HV, 5), 32, 32 * K * 2, 7, True) and seen[0][5][-7:-3] == (H, HV, 0, 1)


def test_the_kernel_refuses_a_cpu_tensor_clearly():
    mixed, a, b, A_log, dt_bias, idx, pool = _inputs(780, 3, 0)
    out = torch.empty(3, 1, HV, V, device=DEVICE, dtype=BF16)
    if torch.device(DEVICE).type == "cuda":
        pytest.skip("a GPU runs the kernel")
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        tma.gdn_packed_decode_tma(mixed, a, b, A_log, dt_bias, K ** -0.5, pool, out, idx, True)


@pytest.mark.parametrize("what,mutate,match", [
    ("fp32 state", lambda t: t.update(pool=t["pool"].float()), "initial_state as torch.bfloat16"),
    ("int64 indices", lambda t: t.update(idx=t["idx"].long()), "ssm_state_indices as torch.int32"),
    ("K of 64", lambda t: t.update(pool=t["pool"][..., :64].contiguous()), r"\[slots, HV, 128, 128\]"),
    ("strided pool", lambda t: t.update(pool=t["pool"].transpose(2, 3)), "contiguous"),
    ("unaligned mixed", None, "16-byte aligned"),
])
def test_check_inputs_names_what_is_wrong(what, mutate, match):
    mixed, a, b, A_log, dt_bias, idx, pool = _inputs(790, 3, 0)
    t = dict(mixed=mixed, pool=pool, idx=idx)
    if what == "unaligned mixed":  # one element off: a 2-byte aligned base
        t["mixed"] = torch.empty(mixed.numel() + 8, dtype=BF16, device=DEVICE)[1:1 + mixed.numel()].view(
            mixed.shape)
    else:
        mutate(t)
    out = torch.empty(3, 1, HV, V, device=DEVICE, dtype=BF16)
    with pytest.raises(ValueError, match=match):
        tma.check_inputs(t["mixed"], a, b, A_log, dt_bias, t["pool"], out, t["idx"])


def test_shapes_are_the_sources_entry_points():
    """:data:`SHAPES` lists exactly the shapes the source instantiates (a shape without an entry would fail at
    load, an entry without a shape would never be measured)."""
    text = tma.SOURCE.read_text()
    found = re.findall(r"^GDN_TMA_ENTRY\((\d+), (\d+), (\d), (\d), (\d)\)$", text, re.M)
    shapes = {tma.TmaShape(int(r), int(w), e == "1", s == "1", int(n)) for r, w, e, s, n in found}
    shapes |= {tma.TmaShape(tma_store=False, persist=int(s)) for s in re.findall(r"^GDN_TMA_PERSIST_ENTRY\((\d+)\)$", text, re.M)}
    shapes |= {tma.TmaShape(int(r), int(w), True, s == "1", int(n), 0, int(ep))
               for r, w, s, n, ep in re.findall(r"^GDN_TMA_ENTRY_EP\((\d+), (\d+), (\d), (\d), (\d)\)$", text, re.M)}
    assert shapes == set(tma.SHAPES) and len(shapes) == len(tma.SHAPES)
    assert all(s.rows // s.warps in (16, 32) for s in tma.SHAPES)  # 4 rows a step, at most 32 a warp
    assert all(s[:5] == (32, 1, True, False, 1) for s in tma.SHAPES if s.persist)  # one-warp, 32-row items
    assert all(0 < s.early_pieces < s.pieces and s.early for s in tma.SHAPES if s.early_pieces)
