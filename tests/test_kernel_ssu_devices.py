"""The SSU's launch rules keyed by the GPU's name (:mod:`mambalab.kernels.mamba_ssm_devices`): which launches take
them, what they change (the heads-first grid with the zigzag, the small batches' tile and early state load), and that
the launch they make gives the reference's bytes (on the interpreter with a rule forced, and on a GPU with the H100's
rule forced whatever the card)."""

from __future__ import annotations

import pytest
import torch

from mambalab.device import DEVICE
from mambalab.kernels import mamba_ssm as ssu
from mambalab.kernels import mamba_ssm_devices as devices
from mambalab.kernels.mamba_ssm import selective_state_update
from mambalab.kernels.mamba_ssm_devices import SSU_DEVICE_RULES, SSUDeviceRule, ssu_device_rule
from mambalab.kernels.testing import assert_untouched, poison_, random_slot_indices, spy_launches, touched_slots

from test_kernel_selective_state_update import gen, make_case, same_layout_copy
from test_kernel_ssu_launch_options import _against_reference

H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
TABLE = "NVIDIA A100-SXM4-80GB"  # a card without a rule: the H200's table as measured before its own rule


def test_rule_only_for_its_card_and_launch_form(monkeypatch):
    cuda = torch.device("cuda", 0)
    assert ssu_device_rule(torch.device("cpu"), 2, True, True) is None  # the interpreter: no name, no rule
    for name in ("NVIDIA H100 PCIe", TABLE):
        monkeypatch.setattr(devices, "device_name", lambda device, n=name: n)
        assert ssu_device_rule(cuda, 2, True, True) is None, name
    monkeypatch.setattr(devices, "device_name", lambda device: H200)
    h200 = ssu_device_rule(cuda, 2, True, True)
    assert h200 is SSU_DEVICE_RULES[H200][2] and ssu_device_rule(cuda, 4, True, True) is None
    assert [h200.heads_first(rh) for rh in (15 * 128, 16 * 128, 512 * 128)] == [False, True, True]
    # from 8 to 16 x 128 the 32-row tile on 4 warps, without the early load (the table's up to 4 x 128 stands)
    assert [h200.small(rh) for rh in (7 * 128, 8 * 128, 16 * 128, 17 * 128)] == [False, True, True, False]
    assert (h200.small_rows, h200.small_warps, h200.small_early) == (32, 4, False)
    monkeypatch.setattr(devices, "device_name", lambda device: H100)
    rule = SSU_DEVICE_RULES[H100][2]
    assert ssu_device_rule(cuda, 2, True, True) is rule
    assert (rule.heads_first_max, rule.small_max, rule.small_rows, rule.small_warps) == (1 << 30, 8 * 128, 32, 4)
    assert rule.small(1) and rule.small_early
    assert ssu_device_rule(cuda, 4, True, True) is None  # the fp32 state: the H200's table
    assert ssu_device_rule(cuda, 2, False, True) is None  # A/dt per element
    assert ssu_device_rule(cuda, 2, True, False) is None  # several tokens a request


def _caught(monkeypatch, name):
    """Launches caught, not run, as on a Hopper GPU named ``name``: returns the list of (grid, keywords)."""
    seen, table = [], ssu.choose_launch_config
    monkeypatch.setattr(ssu, "INTERPRET", False)
    monkeypatch.setattr(ssu, "choose_launch_config", lambda *a, **k: table(*a[:5], torch.device("cuda", 0), **k))
    monkeypatch.setattr(ssu, "_gpu_rules_on", lambda device: True)
    monkeypatch.setattr(ssu, "use_pdl", lambda device: True)
    monkeypatch.setattr(devices, "device_name", lambda device: name)
    monkeypatch.setattr(ssu.sanitizer, "launch", lambda kernel, grid, *a, **kw: seen.append((tuple(grid), kw)))
    monkeypatch.setattr(ssu.mamba_ssm_tma, "RULES", {})  # the Triton kernel's launches (the H200's CUDA kernel off)
    return seen


def _launch_bf16(batch, nheads=128, tokens=1, early=True, tied=True, state_dtype=torch.bfloat16):
    """A step of ``batch`` requests (Nemotron-H's head: dim 64, dstate 128; bf16 activations, the state in
    ``state_dtype``), caught by :func:`_caught`."""
    state = torch.zeros(batch * tokens + 1, nheads, 64, 128, dtype=state_dtype)
    x = torch.zeros(batch * tokens, nheads, 64, dtype=torch.bfloat16)
    A = torch.zeros(nheads)[:, None, None].expand(nheads, 64, 128) if tied else torch.zeros(nheads, 64, 128)
    dt = torch.zeros(batch * tokens, nheads)[..., None].expand(-1, -1, 64) if tied else torch.zeros_like(x)
    B = C = torch.zeros(batch * tokens, 8, 128, dtype=torch.bfloat16)
    idx = torch.arange(1, batch + 1, dtype=torch.int32)
    kw = dict(state_batch_indices=idx)
    if tokens > 1:
        kw = dict(state_batch_indices=torch.arange(1, batch * tokens + 1, dtype=torch.int32).view(batch, tokens),
                  num_accepted_tokens=torch.ones(batch, dtype=torch.int32),
                  cu_seqlens=torch.arange(0, batch * tokens + 1, tokens, dtype=torch.int32))
    selective_state_update(state, x, dt, A, B, C, dt_softplus=True, early_state_load=early, **kw)


def test_the_h100_rule_reaches_the_launch(monkeypatch):
    """On the H100, bf16 one token with A/dt per head: heads first and zigzagged at every batch; up to batch 8 (128
    heads) 32 rows on 4 warps with the state read early under the promise, above it the H200's 16 rows on one warp
    and the L2 hint (from 1, where the H200's starts at 17 x 128). The H200 keeps its table; speculative and
    per-element launches keep theirs."""
    seen = _caught(monkeypatch, H100)
    for batch, rows, warps, early in ((1, 32, 4, True), (8, 32, 4, True), (9, 16, 1, False), (16, 16, 1, False),
                                      (17, 16, 1, False), (64, 16, 1, False)):
        _launch_bf16(batch)
        grid, kw = seen[-1]
        assert kw["BLOCK_M"] == rows and kw["num_warps"] == warps, batch
        assert kw.get("HEADS_FIRST") and kw.get("ZIGZAG") and grid == (64 // rows, 128, batch), batch
        assert bool(kw.get("EARLY_STATE")) == early and (kw.get("PREFETCH") is None) == early, batch
    _launch_bf16(8, early=False)  # no promise: the tile, the grid, no early load
    assert seen[-1][1]["BLOCK_M"] == 32 and "EARLY_STATE" not in seen[-1][1] and seen[-1][1].get("HEADS_FIRST")
    for kwargs in (dict(tokens=2), dict(tied=False)):
        monkeypatch.setattr(devices, "device_name", lambda device: H100)
        _launch_bf16(8, **kwargs)
        on_h100 = seen[-1][1]
        monkeypatch.setattr(devices, "device_name", lambda device: TABLE)
        _launch_bf16(8, **kwargs)
        assert on_h100 == seen[-1][1], kwargs
    for batch in (8, 64):  # a card without a rule: requests before heads, 16 rows on one warp
        _launch_bf16(batch)
        grid, kw = seen[-1]
        assert kw["BLOCK_M"] == 16 and kw["num_warps"] == 1 and not kw.get("HEADS_FIRST") and grid == (4, batch, 128)
    with ssu.launch_config_override(ssu.LaunchConfig(8, 2)):  # a pinned configuration is left alone
        monkeypatch.setattr(devices, "device_name", lambda device: H100)
        _launch_bf16(8)
        assert seen[-1][1]["BLOCK_M"] == 8 and not seen[-1][1].get("HEADS_FIRST")


def test_the_h200_rule_reaches_the_launch(monkeypatch):
    """On the H200, bf16 one token with A/dt per head: from batch 16 (128 heads; 9 -> 16 counts its padded rows) heads
    first and zigzagged, with the table's early load and L2 hint (from 17 x 128); from 8 to 16 32-row tiles on 4 warps,
    no early load (at 16 under the heads-first grid, above it the table's tile); below 8 the table's launch."""
    seen = _caught(monkeypatch, TABLE)
    table = {}
    for batch in (1, 4, 7, 8, 9, 15, 16, 17, 64):
        _launch_bf16(batch)
        table[batch] = seen[-1]
        assert (seen[-1][1].get("PREFETCH") == 2) == (batch >= 17), batch  # the table's hint range
    monkeypatch.setattr(devices, "device_name", lambda device: H200)
    for batch, (grid, kw) in table.items():
        _launch_bf16(batch)
        grid_h200, kw_h200 = seen[-1]
        small = 8 <= batch <= 16
        if small:
            assert (kw_h200["BLOCK_M"], kw_h200["num_warps"]) == (32, 4) and "EARLY_STATE" not in kw_h200, batch
        if small and batch < 16:
            assert grid_h200 == (2, batch, 128), batch
            assert not {"EARLY_STATE", "PREFETCH", "HEADS_FIRST"} & set(kw_h200), batch
            rest = {k: v for k, v in kw_h200.items() if k not in ("BLOCK_M", "num_warps")}
            assert rest == {k: v for k, v in kw.items() if k not in ("BLOCK_M", "num_warps")}, batch
            continue
        if batch < 8:
            assert (grid_h200, kw_h200) == (grid, kw), batch
            assert bool(kw_h200.get("EARLY_STATE")) == (batch <= 4), batch
            continue
        assert kw_h200.get("HEADS_FIRST") and kw_h200.get("ZIGZAG"), batch
        assert grid_h200 == ((2 if small else 4), 128, batch), batch
        tile = ("BLOCK_M", "num_warps", "EARLY_STATE") if small else ()
        rest = {k: v for k, v in kw_h200.items() if k not in ("HEADS_FIRST", "ZIGZAG", "row_axis") + tile}
        assert rest == {k: v for k, v in kw.items() if k not in ("row_axis",) + tile}, batch
        assert (kw["row_axis"], kw_h200["row_axis"]) == (1, 2)  # the sanitizer's request axis moves with the grid


def test_the_h100_untied_warps_reach_the_launch(monkeypatch):
    """On the H100, an fp32 state with A/dt per element, one token: from 8 x 128 request x heads the table's 4-row
    tile on 2 warps; below it, on other cards, for a bf16 state or speculative steps, the table's launch."""
    assert devices.ssu_untied_warps(torch.device("cpu"), 4, False, True, 1 << 20) is None
    monkeypatch.setattr(devices, "device_name", lambda device: H100)  # the lookup alone: the launch form decides
    assert [devices.ssu_untied_warps(torch.device("cpu"), 4, tied, one, 1 << 20)
            for tied, one in ((False, True), (True, True), (False, False))] == [2, None, None]
    seen = _caught(monkeypatch, H100)
    fp32 = dict(tied=False, state_dtype=torch.float32)
    for batch, warps in ((4, 1), (7, 1), (8, 2), (512, 2)):
        _launch_bf16(batch, **fp32)
        assert (seen[-1][1]["BLOCK_M"], seen[-1][1]["num_warps"]) == (4, warps), batch
    for name, kwargs in ((TABLE, fp32), (H200, fp32), (H100, dict(fp32, tokens=2)), (H100, dict(tied=False))):
        monkeypatch.setattr(devices, "device_name", lambda device, n=name: n)
        _launch_bf16(64, **kwargs)
        on_card = seen[-1][1]
        monkeypatch.setattr(devices, "device_name", lambda device: TABLE)
        _launch_bf16(64, **kwargs)
        assert on_card == seen[-1][1] and on_card["num_warps"] == 1, (name, kwargs)


@pytest.mark.parametrize("batch,live", [(3, 3), (12, 9)])
def test_a_forced_rule_gives_the_reference(monkeypatch, batch, live):
    """A test card's rule for an fp32 state (the interpreter has no bf16), taken at 3 requests and not at 12: the GPU's
    one-head kernel with the rule's tile and warps (else the table's, here 16 rows on one warp), the reference's outputs
    and slots, padded rows (the null block) and untouched slots bit-identical."""
    monkeypatch.setattr(ssu, "_gpu_rules_on", lambda device: True)
    monkeypatch.setattr(ssu, "choose_launch_config", lambda *a, **k: ssu.LaunchConfig(block_m=16, num_warps=1))
    monkeypatch.setattr(devices, "device_name", lambda device: "TEST CARD")
    monkeypatch.setattr(devices, "SSU_DEVICE_RULES", {"TEST CARD": {4: SSUDeviceRule(1 << 30, 3 * 4, 8, 2)}})
    seen = spy_launches(monkeypatch, ssu)
    slots = batch + 4
    case = make_case(140 + batch, rows=batch, nheads=4, dim=16, dstate=32, ngroups=2, tied=True, slots=slots)
    idx = random_slot_indices(batch, slots, num_null_rows=batch - live, generator=gen(141)).to(DEVICE)
    state = same_layout_copy(case.state)
    out = poison_(torch.empty_like(case.kwargs["x"]))
    selective_state_update(state, out=out, state_batch_indices=idx, early_state_load=True, **case.kwargs)
    taken = batch * 4 <= 12
    assert seen[-1]["kernel"] is ssu._ssu_kernel and seen[-1].get("HEADS_FIRST") and seen[-1].get("ZIGZAG")
    assert (seen[-1]["BLOCK_M"], seen[-1]["num_warps"]) == ((8, 2) if taken else (16, 1)), batch
    _against_reference(case, dict(state_batch_indices=idx), out, state, "ssu")
    assert_untouched(case.state, state, touched_slots(idx))


def _card_against_table(monkeypatch, seed, batch, live, tied, state_dtype, taken, card=H100, tokens=1, **kwargs):
    """A step of Nemotron-H's head (bf16 activations, z=None, padded rows as a CUDA graph pads) launched as on
    ``card`` and as on a card without a rule: ``taken(launch)`` tells the card's launch from the table's; the slots the table
    writes (an element's update is a thread's own; the outputs' sums over dstate may round otherwise across warps), the
    reference's outputs and slots, untouched slots bit-identical. ``tokens`` > 1: speculative decoding (2-D indices,
    accepted counts 1..tokens, ``cu_seqlens``)."""
    seen = spy_launches(monkeypatch, ssu)
    slots = batch * tokens + 8
    case = make_case(seed, rows=batch, tokens=batch * tokens, nheads=128, dim=64, dstate=128, ngroups=8, tied=tied,
                     slots=slots, dtypes=(state_dtype, torch.bfloat16), has_z=False)
    idx = random_slot_indices(batch, slots, num_null_rows=batch - live, columns=tokens if tokens > 1 else None,
                              generator=gen(seed + 1)).to(DEVICE)
    step = dict(state_batch_indices=idx)
    if tokens > 1:
        step.update(num_accepted_tokens=torch.randint(1, tokens + 1, (batch,), generator=gen(seed + 2),
                                                      dtype=torch.int32).to(DEVICE),
                    cu_seqlens=torch.arange(0, batch * tokens + 1, tokens, dtype=torch.int32, device=DEVICE))
    results = []
    for name in (card, TABLE):
        monkeypatch.setattr(devices, "device_name", lambda device, n=name: n)
        state = same_layout_copy(case.state)
        out = poison_(torch.empty_like(case.kwargs["x"]))
        selective_state_update(state, out=out, **step, **kwargs, **case.kwargs)
        results.append((state, out))
        assert taken(seen[-1]) == (name == card), name
    (state, out), (state_table, out_table) = results
    assert torch.equal(state, state_table)
    torch.testing.assert_close(out, out_table, rtol=1e-2, atol=1e-2)
    _against_reference(case, step, out, state, "ssu" if tokens == 1 else "ssu_spec")
    assert_untouched(case.state, state, touched_slots(idx))


@pytest.mark.cuda
@pytest.mark.parametrize("batch,live", [(8, 8), (16, 9)])
def test_h100_untied_warps_on_a_gpu(monkeypatch, batch, live):
    """The H100's 2 warps for A/dt per element and an fp32 state, forced on whatever GPU runs this."""
    _card_against_table(monkeypatch, 160 + batch, batch, live, False, torch.float32,
                        lambda launch: launch["num_warps"] == 2)


@pytest.mark.cuda
@pytest.mark.parametrize("batch,live", [(8, 8), (16, 9), (64, 64)])
def test_h100_rule_on_a_gpu(monkeypatch, batch, live):
    """The H100's rule for a bf16 state, A/dt per head, forced on whatever GPU runs this (the early-load promise
    given, as mamba_mixer2 gives it)."""
    _card_against_table(monkeypatch, 150 + batch, batch, live, True, torch.bfloat16,
                        lambda launch: bool(launch.get("HEADS_FIRST")), early_state_load=True)


def test_the_h200_early_half_rule_reaches_the_launch(monkeypatch):
    """On the H200, an fp32 state, one token, A/dt per head, under the early-load promise: from 5 to 8 x 128 request x
    heads the even row blocks read their state before PDL's wait and the odd ones after it (EARLY_HALF, with
    EARLY_STATE), on the table's tile; not at 4 (the table's early load, every block), from 9, for a bf16 state, several
    tokens, A/dt per element, without the promise, on other cards."""
    cuda = torch.device("cuda", 0)
    assert not devices.ssu_early_half(torch.device("cpu"), 4, True, True, 8 * 128)
    monkeypatch.setattr(devices, "device_name", lambda device: H200)
    assert [devices.ssu_early_half(cuda, 4, True, True, rh) for rh in (4 * 128, 5 * 128, 8 * 128, 8 * 128 + 1)] == [
        False, True, True, False]
    assert not any(devices.ssu_early_half(cuda, *args, 8 * 128) for args in ((2, True, True), (4, False, True),
                                                                               (4, True, False)))
    seen = _caught(monkeypatch, H200)
    fp32 = dict(state_dtype=torch.float32)
    for batch, early, half in ((4, True, False), (5, True, True), (8, True, True), (9, False, False)):
        _launch_bf16(batch, **fp32)
        kw = seen[-1][1]
        assert (bool(kw.get("EARLY_STATE")), bool(kw.get("EARLY_HALF"))) == (early, half), batch
        assert kw.get("USE_PDL") and kw["BLOCK_M"] == (8 if batch <= 8 else 16), batch
    _launch_bf16(8, early=False, **fp32)
    assert not {"EARLY_STATE", "EARLY_HALF"} & set(seen[-1][1])
    for kwargs in (dict(tokens=2, **fp32), dict(tied=False, **fp32), {}):
        _launch_bf16(8, **kwargs)
        assert "EARLY_HALF" not in seen[-1][1], kwargs
    monkeypatch.setattr(devices, "device_name", lambda device: TABLE)
    _launch_bf16(8, **fp32)
    assert not {"EARLY_STATE", "EARLY_HALF"} & set(seen[-1][1])


@pytest.mark.cuda
@pytest.mark.parametrize("batch,live", [(8, 8), (6, 5)])
def test_h200_early_half_on_a_gpu(monkeypatch, batch, live):
    """The H200's early-half rule for an fp32 state forced on whatever GPU runs this (the promise given): the same
    slots as the table's launch, the reference's outputs and slots, padded rows and untouched slots as they were."""
    _card_against_table(monkeypatch, 170 + batch, batch, live, True, torch.float32,
                        lambda launch: bool(launch.get("EARLY_HALF")), card=H200, early_state_load=True)


def test_the_h200_early_slot_rule_reaches_the_launch(monkeypatch):
    """On the H200, an fp32 state, A/dt per head, under the early-load promise and PDL: from 9 to 16 x 128 request x
    heads the source slot alone is read before the wait (EARLY_SLOT), one token or several; not where the state is
    read early (8), from 17, for a bf16 state, A/dt per element, without the promise, on other cards."""
    cuda = torch.device("cuda", 0)
    assert not devices.ssu_early_slot(torch.device("cpu"), 4, True, 16 * 128)
    monkeypatch.setattr(devices, "device_name", lambda device: H200)
    assert [devices.ssu_early_slot(cuda, 4, True, rh) for rh in (9 * 128 - 1, 9 * 128, 16 * 128, 16 * 128 + 1)] == [
        False, True, True, False]
    assert not devices.ssu_early_slot(cuda, 2, True, 16 * 128) and not devices.ssu_early_slot(cuda, 4, False, 16 * 128)
    seen = _caught(monkeypatch, H200)
    fp32 = dict(state_dtype=torch.float32)
    for batch, tokens, slot in ((8, 1, False), (9, 1, True), (16, 1, True), (17, 1, False), (8, 2, False),
                                (12, 2, True), (16, 4, True), (24, 2, False)):
        _launch_bf16(batch, tokens=tokens, **fp32)
        kw = seen[-1][1]
        assert bool(kw.get("EARLY_SLOT")) == slot and kw.get("USE_PDL"), (batch, tokens)
        assert not (slot and kw.get("EARLY_STATE")), (batch, tokens)
    for kwargs in (dict(early=False, **fp32), dict(tied=False, **fp32), {}):
        _launch_bf16(16, **kwargs)
        assert "EARLY_SLOT" not in seen[-1][1], kwargs
    monkeypatch.setattr(devices, "device_name", lambda device: TABLE)
    _launch_bf16(16, **fp32)
    assert "EARLY_SLOT" not in seen[-1][1]


@pytest.mark.cuda
@pytest.mark.parametrize("batch,live,tokens", [(16, 9, 1), (12, 12, 1), (16, 11, 3)])
def test_h200_early_slot_on_a_gpu(monkeypatch, batch, live, tokens):
    """The H200's early slot for an fp32 state forced on whatever GPU runs this (the promise given): the same slots as
    the table's launch, the reference's outputs and slots, padded rows and untouched slots as they were; one token
    with a CUDA graph's padded rows, and speculative decoding."""
    _card_against_table(monkeypatch, 190 + batch + tokens, batch, live, True, torch.float32,
                        lambda launch: bool(launch.get("EARLY_SLOT")), card=H200, tokens=tokens,
                        early_state_load=True)
