"""Rows zigzagged over the grid (``common.program_row`` with ``ZIGZAG``: rows ``0, n-1, 1, n-2, ...``), so a CUDA
graph's padding rows run among the first live ones instead of as a tail: the order is a permutation of the rows, and
the SSU's heads-first kernel and the GDN's general and streaming kernels give the same bytes with it as without, the
padded rows skipped. (On a GPU by rule, ``mamba_ssm.ZIGZAG_ROWS`` / ``gated_delta_rule.ZIGZAG_ROWS``, the streaming
kernel's ``ZIGZAG_STREAM`` an A/B switch; here forced.)
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from mambalab.device import DEVICE
from mambalab.kernels import gated_delta_rule as gdn
from mambalab.kernels import mamba_ssm as ssu
from mambalab.kernels.common import program_row
from mambalab.kernels.gated_delta_rule import fused_recurrent_gated_delta_rule
from mambalab.kernels.gated_delta_rule_ref import fused_recurrent_gated_delta_rule_ref
from mambalab.kernels.mamba_ssm import LaunchConfig, selective_state_update
from mambalab.kernels.mamba_ssm_ref import selective_state_update_ref
from mambalab.kernels.testing import poison_, random_slot_indices, spy_launches
from mambalab.lab.bugs import BugConfig

from test_kernel_gated_delta_rule import _gen, assert_close, make_inputs, make_pool
from test_kernel_selective_state_update import make_case, same_layout_copy
from test_kernel_ssu_launch_options import _against_reference

FIXED = BugConfig.fixed()


@triton.jit
def _row_probe(out_ptr, ZIGZAG: tl.constexpr):
    tl.store(out_ptr + tl.program_id(0), program_row(0, ZIGZAG))


@pytest.mark.parametrize("n", [1, 2, 3, 9, 16, 57, 64])
def test_the_zigzag_is_a_permutation(n):
    for zigzag in (False, True):
        out = torch.full((n,), -1, dtype=torch.int32, device=DEVICE)
        _row_probe[(n,)](out, ZIGZAG=zigzag)
        rows = out.cpu().tolist()
        want = [i // 2 if i % 2 == 0 else n - 1 - i // 2 for i in range(n)] if zigzag else list(range(n))
        assert rows == want and sorted(rows) == list(range(n))


def _twice(monkeypatch, module, run, switch="ZIGZAG_ROWS"):
    """``run()`` with the module's zigzag ``switch`` off, then on (the GPU's rules forced): both results."""
    monkeypatch.setattr(module, "_gpu_rules_on", lambda device: True)
    monkeypatch.setattr(module, switch, False)
    plain = run()
    monkeypatch.setattr(module, switch, True)
    return plain, run()


@pytest.mark.parametrize("tokens", [1, 3])
def test_the_ssu_heads_first_kernel_gives_the_same_bytes(monkeypatch, tokens):
    """fp32 state (the heads-first grid), 9 live requests padded to 12 with the null block, one token or three."""
    monkeypatch.setattr(ssu, "choose_launch_config", lambda *a, **k: LaunchConfig(block_m=8, num_warps=1))
    seen = spy_launches(monkeypatch, ssu)
    rows, live = 12, 9
    slots = 1 + rows * tokens + 1
    case = make_case(120 + tokens, rows=rows, tokens=rows * tokens, nheads=4, dim=16, dstate=32, ngroups=2,
                     tied=True, slots=slots)
    idx = random_slot_indices(rows, slots, num_null_rows=rows - live, columns=tokens, generator=_gen(121))
    kw = dict(state_batch_indices=idx.to(DEVICE) if tokens > 1 else idx.view(-1).to(DEVICE))
    if tokens > 1:
        kw.update(num_accepted_tokens=torch.ones(rows, dtype=torch.int32, device=DEVICE),
                  cu_seqlens=torch.arange(0, rows * tokens + 1, tokens, dtype=torch.int32, device=DEVICE))

    def run():
        state = same_layout_copy(case.state)
        out = poison_(torch.empty_like(case.kwargs["x"]))
        selective_state_update(state, out=out, **case.kwargs, **kw)
        return state, out

    (s0, o0), (s1, o1) = _twice(monkeypatch, ssu, run)
    assert seen[-1].get("ZIGZAG") and seen[-1].get("HEADS_FIRST")
    assert torch.equal(s0, s1) and torch.equal(o0, o1)
    _against_reference(case, kw, o1, s1, "ssu" if tokens == 1 else "ssu_spec")
    assert torch.equal(o1[live * tokens:], torch.zeros_like(o1[live * tokens:]))  # the padded rows': zeros


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "general"])
def test_the_gdn_kernels_give_the_same_bytes(monkeypatch, stream):
    """12 sequences, the last 3 padded with the null block; the streaming kernel or the general one."""
    monkeypatch.setattr(gdn, "heads_per_program", lambda HV, device: 1)  # the GPU's launch rule
    monkeypatch.setattr(gdn, "STREAM", {4: (4, 2, 2, 1, 1 << 30)} if stream else {})
    seen = spy_launches(monkeypatch, gdn)
    gen = _gen(130)
    N, H, HV, K, V = 12, 1, 2, 16, 16
    q, k, v, g, beta = make_inputs(gen, B=N, T=1, H=H, HV=HV, K=K, V=V)
    slots = N + 3
    _, pool0 = make_pool(gen, slots, HV, V, K)
    idx = random_slot_indices(N, slots, num_null_rows=3, generator=gen).to(DEVICE)
    kw = dict(ssm_state_indices=idx, use_qk_l2norm_in_kernel=True)

    def run():
        pool = pool0.clone()
        o, _ = fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, bugs=FIXED, **kw)
        return pool, o

    (p0, o0), (p1, o1) = _twice(monkeypatch, gdn, run, "ZIGZAG_STREAM" if stream else "ZIGZAG_ROWS")
    assert seen[-1]["kernel"] is (gdn._gdn_stream_kernel if stream else gdn._gdn_decode_kernel)
    assert seen[-1].get("ZIGZAG")
    assert torch.equal(p0, p1) and torch.equal(o0, o1)
    pool_ref = pool0.clone()
    o_ref, _ = fused_recurrent_gated_delta_rule_ref(q, k, v, g, beta, initial_state=pool_ref, **kw)
    assert_close(o1, o_ref, torch.float32, "o")
    assert_close(p1, pool_ref, torch.float32, "pool")
