"""The SSU's heads-first grid (``mamba_ssm.HEADS_FIRST_GRID``: grid ``(row blocks, heads, requests)``, so the
programs running together walk one slot's heads) against the requests-first grid: the same bytes in every kernel
that takes it (the one-request kernel one token and speculative, several requests a program), the reference,
untouched slots; the rule (fp32 state always, bf16 with ``A``/``dt`` per element); and an illegal access still names
its request row. On the CPU the interpreter runs the
kernels with the launch forced the way a GPU takes it (one head a program)."""

from __future__ import annotations

import pytest
import torch

from mambalab.device import DEVICE
from mambalab.kernels import mamba_ssm as ssu
from mambalab.kernels import mamba_ssm_devices as devices
from mambalab.kernels import mamba_ssm_untied as untied
from mambalab.kernels.mamba_ssm import KERNEL_NAME, LaunchConfig, selective_state_update
from mambalab.kernels.mamba_ssm_untied import _ssu_untied_reqs_kernel
from mambalab.kernels.testing import assert_untouched, random_slot_indices, spy_launches
from mambalab.lab import sanitizer
from mambalab.lab.bugs import BugConfig

from test_kernel_selective_state_update import DTYPES, cpu_only, gen, make_case
from test_kernel_ssu_early_state import _assert_matches_reference, _run

ROWS, HEADS = 5, 4


def _one_head(monkeypatch, rows=4):
    """One head a program, ``rows`` rows of the head dim (several row blocks a head), as a GPU launches."""
    monkeypatch.setattr(ssu, "choose_launch_config", lambda *a, **k: LaunchConfig(block_m=rows, num_warps=1))


# form: (make_case keywords, index columns, num_accepted, the kernel launched, whether a 16-bit state takes it)
FORMS = {
    "one-token": (dict(tied=True, has_z=False), 1, None, ssu._ssu_kernel, False),
    "one-token-z": (dict(tied=True), 1, None, ssu._ssu_kernel, False),
    "one-token-untied": (dict(tied=False, has_z=False), 1, None, ssu._ssu_kernel, True),
    "untied-reqs": (dict(tied=False, has_z=False), 1, None, _ssu_untied_reqs_kernel, True),
    "spec": (dict(tied=True, tokens=3 * ROWS), 3, [2, 1, 3, 3, 1], ssu._ssu_kernel, False),
}


def _kwargs(form, case, seed):
    cols, acc = FORMS[form][1], FORMS[form][2]
    idx = random_slot_indices(ROWS, case.slots, columns=cols if cols > 1 else None, num_null_rows=1,
                              generator=gen(seed)).to(DEVICE)
    kw = dict(state_batch_indices=idx)
    if acc is not None:
        kw["num_accepted_tokens"] = torch.tensor(acc, dtype=torch.int32, device=DEVICE)
        kw["cu_seqlens"] = torch.arange(0, ROWS * cols + 1, cols, dtype=torch.int32, device=DEVICE)
    return kw, {int(i) for i in idx.flatten().tolist() if int(i) > 0}


@pytest.mark.parametrize("dtypes", DTYPES)
@pytest.mark.parametrize("form", list(FORMS))
def test_heads_first_gives_the_same_bytes(monkeypatch, dtypes, form):
    seed = 70 + sum(map(ord, form))
    case = make_case(seed, rows=ROWS, nheads=HEADS, dim=8, dstate=16, slots=4 * ROWS + 2, ngroups=2, dtypes=dtypes,
                     **FORMS[form][0])
    kw, written = _kwargs(form, case, seed + 1)
    _one_head(monkeypatch)
    monkeypatch.setattr(ssu, "_gpu_rules_on", lambda device: True)  # the GPU's rules (several requests a program)
    monkeypatch.setattr(devices, "SSU_DEVICE_RULES", {})  # the H200's table (the H100's: test_kernel_ssu_devices.py)
    monkeypatch.setattr(untied, "UNTIED_REQS", {s: [(ROWS, 1, 1 << 30, 0)] for s in (2, 4)}
                        if form == "untied-reqs" else {})
    seen = spy_launches(monkeypatch, ssu)
    results = []
    for on in (False, True):
        monkeypatch.setattr(ssu, "HEADS_FIRST_GRID", on)
        results.append(_run(case, kw, early=False))
    assert all(s["kernel"] is FORMS[form][3] for s in seen)
    if case.state.dtype == torch.float32 or FORMS[form][4]:
        assert [s.get("HEADS_FIRST", False) for s in seen] == [False, True]
        g0, g1 = seen[0]["grid"], seen[1]["grid"]
        assert g1 == (g0[0], g0[2], g0[1])  # the heads' axis before the requests'
        assert g1[1] == HEADS and seen[1]["row_axis"] == 2
    else:
        assert not any(s.get("HEADS_FIRST", False) for s in seen) and seen[1]["grid"] == seen[0]["grid"]
    (s0, o0), (s1, o1) = results
    assert torch.equal(o1, o0) and torch.equal(s1, s0)
    assert not o1.isnan().any()
    assert_untouched(case.state, s1, written)  # the null block included
    _assert_matches_reference(case, kw, "spec" if "spec" in form else form, s1, o1)


@pytest.mark.parametrize("state,z,tokens,gpu,taken,tied", [
    (torch.float32, False, 1, False, True, True), (torch.float32, True, 1, False, True, True),
    (torch.float32, False, 3, False, True, True), (torch.float32, False, 1, False, True, False),
    (torch.bfloat16, False, 1, False, False, True), (torch.bfloat16, True, 1, False, False, True),
    (torch.bfloat16, False, 3, False, False, True), (torch.bfloat16, False, 2, True, False, True),
    (torch.bfloat16, False, 1, False, True, False), (torch.bfloat16, False, 3, False, False, False),
])
def test_the_rule(monkeypatch, state, z, tokens, gpu, taken, tied):
    """Calls 70-79 (H200 and H100, beside vLLM): fp32 everywhere; bf16 with A/dt per element (with A/dt per head its
    one-token kernel lost padded batches, its token loop T = 3; the GPU's rules change none of it)."""
    seen: list[dict] = []  # the launch is only looked at: a bf16 pool on the CPU is never run
    monkeypatch.setattr(ssu.sanitizer, "launch", lambda kernel, grid, *a, **k: seen.append(dict(k, kernel=kernel)))
    monkeypatch.setattr(ssu.mamba_ssm_tma, "RULES", {})  # the Triton kernel's launches (the H200's CUDA kernel off)
    _one_head(monkeypatch)
    monkeypatch.setattr(ssu, "_gpu_rules_on", lambda device: gpu)
    case = make_case(9, rows=2, tokens=2 * tokens, nheads=HEADS, dim=8, dstate=16, slots=8, ngroups=2, tied=tied,
                     has_z=z)
    kw = dict(state_batch_indices=random_slot_indices(2, 8, columns=tokens if tokens > 1 else None,
                                                      generator=gen(10)).to(DEVICE))
    if tokens > 1:
        kw["num_accepted_tokens"] = torch.tensor([1, tokens], dtype=torch.int32, device=DEVICE)
        kw["cu_seqlens"] = torch.arange(0, 2 * tokens + 1, tokens, dtype=torch.int32, device=DEVICE)
    selective_state_update(case.state.to(state), **case.kwargs, **kw)
    assert seen[0].get("HEADS_FIRST", False) is taken
    assert seen[0]["kernel"] is ssu._ssu_kernel
    assert ssu.HEADS_FIRST_GRID is True  # the shipped rule


@cpu_only
def test_an_illegal_access_still_names_its_row(monkeypatch):
    """Heads first puts the request on the grid's third axis: the sanitizer is told so (``row_axis=2``)."""
    case = make_case(31, rows=4, nheads=HEADS, dim=8, dstate=8, slots=10, ngroups=2)
    live = random_slot_indices(3, 10, generator=gen(32))
    idx = torch.cat([live, torch.tensor([-1], dtype=torch.int32)]).to(DEVICE)
    _one_head(monkeypatch)
    seen = spy_launches(monkeypatch, ssu)
    with pytest.raises(sanitizer.IllegalMemoryAccess) as err:
        selective_state_update(case.state.clone(), bugs=BugConfig.fixed(), state_batch_indices=idx, **case.kwargs)
    assert seen[0].get("HEADS_FIRST") is True and seen[0]["row_axis"] == 2
    assert KERNEL_NAME in str(err.value) and err.value.row == 3 and err.value.slot == -1
