"""Launch rules keyed by the GPU's name (:mod:`mambalab.kernels.gated_delta_rule_devices`): which launches take them,
what they change, and that the launch they make gives the reference's bytes (on the interpreter with the rule
forced, and on a GPU with the H100's rule forced whatever the card)."""

from __future__ import annotations

import pytest
import torch

from mambalab.device import DEVICE
from mambalab.kernels import gated_delta_rule as gdn
from mambalab.kernels import gated_delta_rule_devices as devices
from mambalab.kernels.gated_delta_rule import fused_recurrent_gated_delta_rule
from mambalab.kernels.gated_delta_rule_devices import DEVICE_RULES, DeviceRule, device_rule
from mambalab.kernels.gated_delta_rule_ref import fused_recurrent_gated_delta_rule_ref
from mambalab.kernels.testing import assert_untouched, random_slot_indices, spy_launches, touched_slots
from mambalab.lab.bugs import BugConfig

from test_kernel_gated_delta_rule import _gen, _nan_empty, assert_close, make_inputs, make_pool  # noqa: F401

FIXED = BugConfig.fixed()
H100 = "NVIDIA H100 80GB HBM3"


def test_device_rule_only_for_its_card_and_batches(monkeypatch):
    cuda = torch.device("cuda", 0)
    assert device_rule(torch.device("cpu"), 2, 512) is None  # the interpreter: no name, no rule
    for name in ("NVIDIA H200", "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB"):
        monkeypatch.setattr(devices, "device_name", lambda device, n=name: n)
        assert device_rule(cuda, 2, 512) is None and device_rule(cuda, 4, 512) is None, name
    monkeypatch.setattr(devices, "device_name", lambda device: H100)
    bf16, fp32 = DEVICE_RULES[H100][2], DEVICE_RULES[H100][4]
    assert (bf16.state_bytes, bf16.num_warps, bf16.split) == (8192, 1, 1)  # 32 rows of 128, one piece
    assert (fp32.state_bytes, fp32.num_warps, fp32.split) == (8192, 2, 1)  # 16 rows of 128, two warps
    for size, rule in ((2, bf16), (4, fp32)):
        assert device_rule(cuda, size, rule.min_sequences - 1) is None
        assert device_rule(cuda, size, rule.min_sequences) is rule and device_rule(cuda, size, 512) is rule
    assert device_rule(cuda, 1, 512) is None  # no rule for that element size


def test_launch_config_takes_the_rules_bytes():
    # Qwen3-Next's head (K = V = 128, 32 value heads) at 256 sequences on 132 SMs
    assert gdn.launch_config(128, 128, 32, 256, 4, 132) == (128, 8, 1)
    assert gdn.launch_config(128, 128, 32, 256, 4, 132, state_bytes=8192) == (128, 16, 1)
    assert gdn.launch_config(128, 128, 32, 256, 2, 132, state_bytes=8192) == (128, 32, 1)
    assert gdn.launch_config(128, 16, 32, 256, 4, 132, state_bytes=1 << 20) == (128, 16, 1)  # at most V's


def _gpu_launch(monkeypatch, rule: DeviceRule, size: int):
    """The GPU's launch rules on this device (one head a program, the streaming kernel's rule covering every batch),
    this device named as a card whose table holds ``rule`` for a ``size``-byte state; returns the spy's list."""
    monkeypatch.setattr(gdn, "_gpu_rules_on", lambda device: True)
    monkeypatch.setattr(gdn, "heads_per_program", lambda HV, device: 1)
    monkeypatch.setattr(gdn, "STREAM", {size: (4, 2, 2, 1, 1 << 30)})
    monkeypatch.setattr(devices, "device_name", lambda device: "TEST CARD")
    monkeypatch.setattr(devices, "DEVICE_RULES", {"TEST CARD": {size: rule}})
    return spy_launches(monkeypatch, gdn)


@pytest.mark.parametrize("split", [1, 2])
def test_rule_launch_matches_reference(split, monkeypatch):
    """Under a rule the one-token launch is the general kernel (not the streaming one) with the rule's rows, warps and
    pieces; outputs and updated slots as the reference's, padded rows and untouched slots (the null block)
    bit-identical. Below the rule's batch the streaming kernel runs as before."""
    rule = DeviceRule(6, 8 * 16 * 4, 2, split)  # 8 rows of K = 16 fp32 a program
    seen = _gpu_launch(monkeypatch, rule, 4)
    gen = _gen(160 + split)
    H, HV, K, V = 1, 2, 16, 32
    for N, rule_on in ((5, False), (6, True), (9, True)):
        q, k, v, g, beta = make_inputs(gen, B=N, T=1, H=H, HV=HV, K=K, V=V)
        _, pool = make_pool(gen, N + 3, HV, V, K)
        idx = random_slot_indices(N, N + 3, num_null_rows=2, generator=gen).to(DEVICE)
        before, pool_ref = pool.clone(), pool.clone()
        kw = dict(ssm_state_indices=idx, use_qk_l2norm_in_kernel=True)
        o, _ = fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, bugs=FIXED, **kw)
        o_ref, _ = fused_recurrent_gated_delta_rule_ref(q, k, v, g, beta, initial_state=pool_ref, **kw)
        launch = seen[-1]
        if rule_on:
            assert launch["kernel"] is gdn._gdn_decode_kernel and launch["num_warps"] == 2
            # the rule's 8 rows, halved on a GPU while the grid is under 4 programs an SM (launch_config)
            BV = gdn.launch_config(K, V, HV, N, 4, gdn._num_sms(q.device), state_bytes=rule.state_bytes)[1]
            assert BV == 8 or DEVICE.type == "cuda"
            assert launch["SPLIT"] == split and launch["grid"] == (V // BV, HV, N)
        else:
            assert launch["kernel"] is gdn._gdn_stream_kernel, N
        assert_close(o, o_ref, torch.float32, f"o (N={N})")
        assert_close(pool, pool_ref, torch.float32, f"pool (N={N})")
        assert_untouched(before, pool, touched_slots(idx))


def test_rule_leaves_speculative_and_explicit_launches_alone(monkeypatch):
    """Several tokens a sequence and an explicit ``block_v`` keep the H200's rules under a card's rule."""
    seen = _gpu_launch(monkeypatch, DeviceRule(1, 8 * 16 * 4, 2, 2), 4)
    gen = _gen(170)
    for N, T, bv in ((4, 2, None), (4, 1, 4)):
        q, k, v, g, beta = make_inputs(gen, B=N, T=T, H=1, HV=2, K=16, V=32)
        _, pool = make_pool(gen, N + 1, 2, 32, 16)
        idx = torch.arange(1, N + 1, device=DEVICE)
        fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, ssm_state_indices=idx, block_v=bv,
                                         bugs=FIXED)
        assert seen[-1]["num_warps"] == gdn._NUM_WARPS and seen[-1]["SPLIT"] == 1, (N, T, bv)


@pytest.mark.cuda
@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_h100_rule_on_a_gpu(state_dtype, monkeypatch):
    """The H100's rule, forced on whatever GPU runs this (Qwen3-Next's head, 128 sequences, bf16 activations): the
    reference's outputs and slots, untouched slots bit-identical, every output element written."""
    monkeypatch.setattr(devices, "device_name", lambda device: H100)
    seen = spy_launches(monkeypatch, gdn)
    gen = _gen(180)
    N, H, HV, K, V = DEVICE_RULES[H100][state_dtype.itemsize].min_sequences, 2, 4, 128, 128
    q, k, v, g, beta = make_inputs(gen, B=N, T=1, H=H, HV=HV, K=K, V=V, dtype=torch.bfloat16)
    _, pool = make_pool(gen, N + 8, HV, V, K, state_dtype)
    idx = random_slot_indices(N, N + 8, num_null_rows=3, generator=gen).to(DEVICE)
    before, pool_ref = pool.clone(), pool.clone()
    kw = dict(ssm_state_indices=idx, use_qk_l2norm_in_kernel=True)
    o, _ = fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, bugs=FIXED, **kw)
    o_ref, _ = fused_recurrent_gated_delta_rule_ref(q, k, v, g, beta, initial_state=pool_ref, **kw)
    rule = DEVICE_RULES[H100][state_dtype.itemsize]
    assert seen[-1]["kernel"] is gdn._gdn_decode_kernel
    assert (seen[-1]["num_warps"], seen[-1]["SPLIT"]) == (rule.num_warps, rule.split)
    assert_close(o, o_ref, torch.bfloat16, "o")
    assert_close(pool, pool_ref, state_dtype, "pool")
    assert_untouched(before, pool, touched_slots(idx))
