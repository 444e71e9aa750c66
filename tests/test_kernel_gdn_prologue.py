"""The GDN general kernel's early index load (``gated_delta_rule.EARLY_INDEX``: the slot's loads issued with
cu_seqlens', before the empty-sequence test) against the kernel without it: the same bytes on the interpreter, the
reference within tolerance on a GPU. The rule is GPU-only (``_gpu_rules_on``) and forced here, with the GPU's one head
a program; the streaming kernels are switched off so that every launch is the general kernel's.
"""

from __future__ import annotations

import pytest
import torch

from mambalab.device import DEVICE
from mambalab.kernels import gated_delta_rule as gdn
from mambalab.kernels.gated_delta_rule import fused_recurrent_gated_delta_rule
from mambalab.lab.bugs import BugConfig

from test_kernel_gated_delta_rule import _gen, _nan_empty  # noqa: F401
from test_kernel_gdn_spec_stream import _check, _spec_case, _spec_launch

FIXED = BugConfig.fixed()
ALL = (1, 1 << 30)
STATE_DTYPES = [
    pytest.param(torch.float32, torch.float32, id="fp32"),
    pytest.param(torch.bfloat16, torch.bfloat16, id="bf16", marks=pytest.mark.cuda),
]


def general_kernel_launches(monkeypatch, switch: str) -> list:
    """The general kernel at every batch, one head a program (as on a GPU, the streaming kernels off); returns
    ``(kernel, its launch's value of the constexpr switch)`` for every launch."""
    monkeypatch.setattr(gdn, "heads_per_program", lambda HV, device: 1)
    monkeypatch.setattr(gdn, "_gpu_rules_on", lambda device: True)
    monkeypatch.setattr(gdn, "STREAM", {})
    monkeypatch.setattr(gdn, "SPEC_STREAM", {})
    seen = []
    real = gdn.sanitizer.launch

    def spy(kernel, grid, *args, **kwargs):
        seen.append((kernel, kwargs.get(switch, False)))
        return real(kernel, grid, *args, **kwargs)

    monkeypatch.setattr(gdn.sanitizer, "launch", spy)
    return seen


@pytest.fixture
def launched(monkeypatch):
    return general_kernel_launches(monkeypatch, "EARLY_INDEX")


def _both(monkeypatch, args, pool, kw, size, bugs=FIXED):
    """The launch without the early index load, then with it."""
    results = []
    for rule in ({}, {size: ALL}):
        monkeypatch.setattr(gdn, "EARLY_INDEX", rule)
        p = pool.clone()
        o, final = fused_recurrent_gated_delta_rule(*args, initial_state=p, bugs=bugs, **kw)
        results.append((o, p, final))
    return results


def _same(results, state_dtype):
    (o0, p0, f0), (o1, p1, f1) = results
    if DEVICE.type == "cpu":
        assert torch.equal(o0, o1) and torch.equal(p0, p1) and torch.equal(f0, f1)
    else:  # the same arithmetic; compiled apart, so within rounding
        tol = 1e-5 if state_dtype == torch.float32 else 1e-2
        for a, b in ((o0, o1), (p0, p1), (f0, f1)):
            torch.testing.assert_close(a.float(), b.float(), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype,state_dtype", STATE_DTYPES)
@pytest.mark.parametrize("cols,lens,num_acc", [(3, [3, 0, 1, 3, 2], [2, 1, 1, 3, 0]), (4, [4] * 5, [1, 4, 2, 3, 1]),
                                               (2, [2, 2, 2], [0, 2, 1])],
                         ids=["3-cols-varlen", "4-cols", "2-cols-zero-accepted"])
def test_spec_early_index(cols, lens, num_acc, dtype, state_dtype, launched, monkeypatch):
    """Speculative rows (2-D indices): empty and short sequences, a count of 0 (the null block under the fixed
    bound), a padded row; the reference as well, untouched slots bit-identical."""
    gen = _gen(500 + 10 * cols + len(lens))
    args, pool, kw = _spec_case(gen, lens, num_acc, cols, dtype, state_dtype, V=20)
    _same(_both(monkeypatch, args, pool, kw, state_dtype.itemsize), state_dtype)
    assert launched[-1] == (gdn._gdn_decode_kernel, True)
    _check(args, pool, kw, dtype, state_dtype, untouched=all(n > 0 for n in lens))


def test_spec_early_index_under_zero_accepted_bug(launched, monkeypatch):
    """Under the pre-#50021 behaviour (a count of 0 reads column -1, unbounded) the early index load reads the
    same element the late one does: the same bytes."""
    gen = _gen(520)
    args, pool, kw = _spec_case(gen, [2, 2, 2], [1, 0, 2], 2, torch.float32, torch.float32, null_rows=0)
    _same(_both(monkeypatch, args, pool, kw, 4, BugConfig.with_bugs("zero-accepted")), torch.float32)


@pytest.mark.parametrize("dtype,state_dtype", STATE_DTYPES)
@pytest.mark.parametrize("inplace", [True, False], ids=["in-place", "fresh-state"])
def test_one_token_early_index(inplace, dtype, state_dtype, launched, monkeypatch):
    """1-D indices with null rows (a padded batch), varlen with an empty sequence whose slot is live (it must
    read and write nothing, as the early return without the switch), in place and into a fresh state."""
    gen = _gen(530 + inplace)
    lens = [1, 1, 0, 1, 2, 1]
    args, pool, kw = _spec_case(gen, lens, [1] * len(lens), 1, dtype, state_dtype, V=20)
    kw.pop("num_accepted_tokens")
    kw["ssm_state_indices"] = kw["ssm_state_indices"][:, 0].contiguous()
    kw["inplace_final_state"] = inplace
    _same(_both(monkeypatch, args, pool, kw, state_dtype.itemsize), state_dtype)
    assert launched[-1] == (gdn._gdn_decode_kernel, True)


def test_the_default_early_index_rule(monkeypatch):
    """As measured on an H200 beside vLLM: an fp32 state from 33 sequences (the general kernel's one-token batches
    and speculative ones), a bf16 state from 128 (speculative rows of 3+ tokens); not below, not the streaming
    kernels, not without indices. (The launch is caught, not run.)"""
    monkeypatch.setattr(gdn, "heads_per_program", lambda HV, device: 1)
    monkeypatch.setattr(gdn, "_gpu_rules_on", lambda device: True)
    seen = []
    monkeypatch.setattr(gdn.sanitizer, "launch",
                        lambda kernel, grid, *a, **kw: seen.append((kernel, kw.get("EARLY_INDEX", False))))
    dec, spec = gdn._gdn_decode_kernel, gdn._gdn_spec_stream_kernel
    for N, T, state_dtype, want in ((64, 3, torch.float32, (dec, True)), (32, 3, torch.float32, (dec, False)),
                                    (128, 3, torch.bfloat16, (dec, True)), (64, 3, torch.bfloat16, (dec, False)),
                                    (128, 2, torch.bfloat16, (spec, False))):
        _spec_launch(N, T, state_dtype)
        assert seen[-1] == want, (N, T, state_dtype)
    q = torch.zeros(1, 57, 1, 8)
    pool = torch.zeros(58, 2, 8, 8)
    for idx, want in ((torch.arange(1, 58, dtype=torch.int32), True), (None, False)):
        fused_recurrent_gated_delta_rule(q, q, torch.zeros(1, 57, 2, 8), torch.zeros(1, 57, 2), torch.zeros(1, 57, 2),
                                         initial_state=pool, cu_seqlens=torch.arange(58, dtype=torch.int32),
                                         ssm_state_indices=idx)
        assert seen[-1] == (dec, want)
