"""The conv decode kernel's PDL trigger (``causal_conv1d.DECODE_TRIGGER``): where its own PDL is off
(``PDL_MAX_BATCH_DECODE``), up to the rule's batch, it still executes ``griddepcontrol.launch_dependents``, so the
kernel after it in a layer (the SSU or the GDN, launched with PDL) may start early and waits for the conv with PDL's
wait before it reads the conv's output. The rule is checked on caught launches (no GPU needed); on a GPU the trigger
must not change a byte: the conv alone, and the conv followed by the GDN's packed decode under the layer's
``early_state_load`` promise, as mambalab's GDN layer runs them.
"""

from __future__ import annotations

import pytest
import torch

import mambalab  # noqa: F401  (sets TRITON_INTERPRET before kernels are defined)
from mambalab.device import DEVICE
from mambalab.kernels import causal_conv1d as conv_mod
from mambalab.kernels import causal_conv1d_kernels
from mambalab.kernels import common
from mambalab.kernels.causal_conv1d import causal_conv1d_update, make_conv_state
from mambalab.kernels.gated_delta_rule_packed import fused_recurrent_gated_delta_rule_packed_decode
from mambalab.kernels.testing import poison_, spy_launches
from mambalab.lab.bugs import BugConfig

from test_kernel_causal_conv1d import _pool
from test_kernel_gated_delta_rule import make_pool
from test_kernel_gdn_packed import _packed


def _caught(monkeypatch, pdl_gpu: bool) -> list[dict]:
    """Every launch caught, not run, with the GPU's kernel and ``use_pdl`` answering ``pdl_gpu``."""
    seen: list[dict] = []
    monkeypatch.setattr(conv_mod, "decode_kernel", lambda rows, device: conv_mod._causal_conv1d_decode_kernel)
    monkeypatch.setattr(conv_mod.sanitizer, "launch", lambda kernel, grid, *a, **kw: seen.append(kw))
    monkeypatch.setattr(common, "use_pdl", lambda device: pdl_gpu)
    return seen


def _launch_opts(seen, batch, dtype, dim=8192):
    """The caught launch's PDL options at ``dim`` channels (8192: the rules' own, where their batch is the batch)."""
    x = torch.zeros(batch, dim, dtype=dtype)
    causal_conv1d_update(x, make_conv_state(batch + 1, dim, 3, dtype, "cpu"), torch.zeros(dim, 4, dtype=dtype),
                         conv_state_indices=torch.arange(1, batch + 1, dtype=torch.int32))
    return {k: seen[-1][k] for k in ("USE_PDL", "TRIGGER", "launch_pdl") if k in seen[-1]}


def test_trigger_where_pdl_is_off(monkeypatch):
    """bf16 state: PDL to 8 requests, the trigger alone from 9 to 128 (no ``launch_pdl``: the conv itself starts as
    any launch), neither above; fp32: PDL to 24 (and 112-128, ``DECODE_DEEP``), the trigger from 25 to 32."""
    seen = _caught(monkeypatch, True)
    pdl, trigger = {"USE_PDL": True, "launch_pdl": True}, {"TRIGGER": True}
    for batch, dtype, want in ((4, torch.bfloat16, pdl), (8, torch.bfloat16, pdl), (9, torch.bfloat16, trigger),
                               (128, torch.bfloat16, trigger), (129, torch.bfloat16, {}), (16, torch.float32, pdl),
                               (24, torch.float32, pdl), (25, torch.float32, trigger), (32, torch.float32, trigger),
                               (33, torch.float32, {}), (128, torch.float32, pdl), (256, torch.float32, {})):
        assert _launch_opts(seen, batch, dtype) == want, (batch, dtype)
    monkeypatch.setattr(conv_mod, "DECODE_TRIGGER", {})
    assert _launch_opts(seen, 64, torch.bfloat16) == {}


@pytest.mark.parametrize("dim,batch,dtype,want", [
    (1024, 64, torch.float32, "pdl"), (1024, 192, torch.float32, "pdl"), (1024, 200, torch.float32, "trigger"),
    (2048, 96, torch.float32, "pdl"), (10240, 16, torch.float32, "pdl"), (10240, 24, torch.float32, "trigger"),
    (1024, 64, torch.bfloat16, "pdl"), (1024, 72, torch.bfloat16, "trigger"), (4096, 16, torch.bfloat16, "pdl")])
def test_the_rules_see_the_work_of_a_rank(monkeypatch, dim, batch, dtype, want):
    """A tensor-parallel rank's fewer channels (Qwen3-Next TP 8: 1024): the rules take the batch of 8192 channels
    with the same work (``causal_conv1d_kernels.rule_batch``); as the batch is (``CONV_RULE_DIM`` 0) fp32 at 64 of
    1024 channels took no PDL, 0.838x vLLM's time there (call 282)."""
    seen = _caught(monkeypatch, True)
    opts = {"pdl": {"USE_PDL": True, "launch_pdl": True}, "trigger": {"TRIGGER": True}}
    assert _launch_opts(seen, batch, dtype, dim) == opts[want]
    monkeypatch.setattr(causal_conv1d_kernels, "CONV_RULE_DIM", 0)
    assert causal_conv1d_kernels.rule_batch(batch, dim) == batch
    if (dim, batch, dtype) == (1024, 64, torch.float32):
        assert _launch_opts(seen, batch, dtype, dim) == {}


def test_rule_batch():
    assert causal_conv1d_kernels.CONV_RULE_DIM == 8192
    rb = causal_conv1d_kernels.rule_batch
    assert (rb(64, 1024), rb(1, 1024), rb(16, 10240), rb(9, 8192), rb(3, 3584)) == (8, 1, 20, 9, 2)


def test_no_trigger_without_pdl(monkeypatch):
    """No PDL on the device (the interpreter, a GPU before sm_90, ``MAMBALAB_PDL=0``): neither option."""
    seen = _caught(monkeypatch, False)
    for batch in (4, 64):
        assert _launch_opts(seen, batch, torch.bfloat16) == {}


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_trigger_changes_no_byte(dtype, monkeypatch):
    """The conv at 64 requests (trigger on) against the same launch without it: outputs and pools identical; then
    the layer's pair, the conv's output read by the GDN's packed decode launched with PDL (bf16 state at 64: the
    streaming kernel's early blocks), against the same pair without the trigger."""
    if DEVICE.type != "cuda":
        pytest.skip("the trigger exists on a GPU only")
    seen = spy_launches(monkeypatch, conv_mod)
    gen = torch.Generator().manual_seed(151)
    H, HV, K, V, N = 2, 4, 128, 128, 64
    x, a, b, A_log, dt_bias, idx = _packed(gen, N, H, HV, K, V, dtype, slots=N + 4, null_rows=2)  # x: the conv's input
    pool, _ = _pool(gen, N + 4, x.shape[1], 3, dtype)
    w = torch.randn(x.shape[1], 4, generator=gen).to(DEVICE, dtype)
    _, ssm = make_pool(gen, N + 4, HV, V, K, dtype)
    runs = []
    for on in (True, False):
        monkeypatch.setattr(conv_mod, "DECODE_TRIGGER", {dtype.itemsize: N} if on else {})
        monkeypatch.setattr(conv_mod, "PDL_MAX_BATCH_DECODE", {dtype.itemsize: 0})  # its rules' batch is 8 here
        p, s = pool.clone(), ssm.clone()
        mixed = poison_(torch.empty_like(x))
        causal_conv1d_update(x, p, w, activation="silu", conv_state_indices=idx, out=mixed,
                             bugs=BugConfig.fixed())
        assert seen[-1].get("TRIGGER", False) is on
        o = poison_(torch.empty(N, 1, HV, V, dtype=dtype, device=DEVICE))
        fused_recurrent_gated_delta_rule_packed_decode(mixed, a, b, A_log, dt_bias, K ** -0.5, s, o, idx, True,
                                                       bugs=BugConfig.fixed(), early_state_load=True)
        torch.cuda.synchronize()
        runs.append((mixed, p, o, s))
    for first, second in zip(*runs):
        assert torch.equal(first, second)
