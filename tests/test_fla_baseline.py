"""fla-core as the bench's third GDN implementation (``mambalab.gpu.fla_baseline``, ``bench.setup_fla``).

Its gate's reference is held against mambalab's own GDN reference (vLLM's semantics, a V-first state); the bench's
call binds every tensor to the parameter of its name in fla-core 0.6.0's signature, where ``gk`` and ``gv`` come
before ``beta``: the call the bench made until call 258 (``beta`` fifth) bound it to ``gk``, and the stand-in
below, which has that signature, refuses it. fla-core's own kernel (the bench extra, which the bootstrap installs)
runs on the inputs, on Triton's interpreter on a CPU, and passes the gate.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

from mambalab.device import DEVICE_TYPE
from mambalab.gpu import bench, fla_baseline
from mambalab.kernels.gated_delta_rule_ref import fused_recurrent_gated_delta_rule_ref

HV, K, V = bench.GDN["HV"], bench.GDN["K"], bench.GDN["V"]


def _h0(n: int, seed: int) -> torch.Tensor:
    return torch.randn(n, HV, K, V, generator=torch.Generator().manual_seed(seed)) * 0.1


def test_the_gates_reference_is_mambalabs_gdn_reference():
    torch.manual_seed(0)
    x = fla_baseline.inputs(3, "cpu")
    h0 = _h0(3, 1)
    o, h = fla_baseline.step_reference(x, h0)
    state = h0.transpose(-1, -2).contiguous()  # vLLM's layout: [slots, HV, V, K]
    o_ref, s_ref = fused_recurrent_gated_delta_rule_ref(x["q"], x["k"], x["v"], x["g"], x["beta"],
                                                        initial_state=state, inplace_final_state=True)
    torch.testing.assert_close(o.float(), o_ref.float().reshape(o.shape), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(h, s_ref.transpose(-1, -2), rtol=1e-5, atol=1e-5)


def _fla_0_6_0(calls: list):
    """A stand-in with fla-core 0.6.0's parameters in their order, computing the step from what it was given."""
    def fused_recurrent_gated_delta_rule(q, k, v, g=None, gk=None, gv=None, beta=None, scale=None,
                                         initial_state=None, output_final_state=False, **kwargs):
        calls.append(dict(gk=gk, gv=gv, beta=beta))
        if gk is not None or gv is not None:
            raise AssertionError(f"a per-key / per-value decay was passed (gk {None if gk is None else gk.shape})")
        return fla_baseline.step_reference(dict(q=q, k=k, v=v, g=g, beta=beta), initial_state)
    return fused_recurrent_gated_delta_rule


@pytest.fixture
def fake_fla(monkeypatch):
    calls: list = []
    mod = types.ModuleType("fla.ops.gated_delta_rule")
    mod.fused_recurrent_gated_delta_rule = _fla_0_6_0(calls)
    for name in ("fla", "fla.ops"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "fla.ops.gated_delta_rule", mod)
    return calls


def test_the_bench_binds_beta_to_beta_and_gates_fla(fake_fla):
    torch.manual_seed(0)
    state = 2 * HV * K * V * 4  # two sequences' fp32 states
    fn, x, pools = bench._fla_problem(2, 4 * state, device="cpu")  # what bench.run gates, then times
    assert fla_baseline.agreement(fn, x, pools[0]) == (True, "")
    calls, nbytes = bench.setup_fla(2, torch.float32, 4 * state, device="cpu")
    calls[0]()
    assert len(fake_fla) == 2 and all(c["beta"] is not None and c["beta"].shape == (2, 1, HV) for c in fake_fla)
    assert nbytes == 2 * state  # read and written once


def test_the_gate_fails_an_fla_that_computes_something_else():
    torch.manual_seed(0)
    x, h0 = fla_baseline.inputs(2, "cpu"), _h0(2, 2)

    def beta_ignored(q, k, v, g=None, beta=None, initial_state=None, **kw):
        return fla_baseline.step_reference(dict(q=q, k=k, v=v, g=g, beta=torch.ones_like(beta)), initial_state)

    ok, msg = fla_baseline.agreement(beta_ignored, x, h0)
    assert not ok and "output differs" in msg and "final state differs" in msg
    assert torch.equal(h0, _h0(2, 2))  # the gate runs fla on a copy


def test_fla_core_itself_agrees_where_importable():
    """On the interpreter here; with ``MAMBALAB_DEVICE=cuda``, fla-core's compiled kernel on the GPU."""
    fla = pytest.importorskip("fla.ops.gated_delta_rule", reason="fla-core (pip install 'mambalab[bench]')")
    torch.manual_seed(0)
    n = 1 if DEVICE_TYPE == "cpu" else 64
    ok, msg = fla_baseline.agreement(fla.fused_recurrent_gated_delta_rule, fla_baseline.inputs(n, DEVICE_TYPE),
                                     _h0(n, 3).to(DEVICE_TYPE))
    assert ok, msg
