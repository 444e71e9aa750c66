"""``scripts/ab_sweep.py``'s reference check, the one device call scripts run before timing an SSU variant: it passes
the shipped kernel and fails a variant that computes something else (here on the CPU interpreter, on a small head)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import ab_sweep  # noqa: E402

F32 = torch.float32
SMALL = dict(types=[(F32, F32)], has_z=(True,), batches=((3, 2),), nheads=2, dim=8, dstate=16)


def test_the_shipped_kernel_passes_and_base_is_set_back():
    seen = []
    results = ab_sweep.ssu_reference_checks(["base", "v1"], seen.append, **SMALL)
    assert [r["variant"] for r in results] == ["base", "v1"] and all(r["ok"] for r in results)
    assert results[0]["out"] < 1e-4 and results[0]["state"] < 1e-4
    assert seen == ["base", "v1", "base"]


def test_a_variant_that_computes_something_else_fails(monkeypatch):
    from mambalab.kernels import mamba_ssm

    real = mamba_ssm.selective_state_update

    def setv(v):
        def off(state, *args, **kw):
            res = real(state, *args, **kw)
            state.mul_(1.01)  # every slot moved: the touched ones off by 1%
            return res
        monkeypatch.setattr(mamba_ssm, "selective_state_update", off if v == "wrong" else real)

    with pytest.raises(AssertionError, match="1 reference checks failed"):
        ab_sweep.ssu_reference_checks(["base", "wrong"], setv, **SMALL)
