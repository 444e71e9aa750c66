"""The guard grid computes its scenario's references as part of its build (widgets/mechanism.GuardGrid
.references_ahead): the toggles then find them in the reference memo, and judge the same as without."""

from __future__ import annotations

import pytest

from mambalab.device import INTERPRET
from mambalab.lab.reference import clear_reference_memo
from mambalab.model.tiny_hybrid import TinyHybridModel
from mambalab.widgets import mechanism

pytestmark = pytest.mark.skipif(not INTERPRET, reason="the guard is planted in the interpreter's kernels")


@pytest.fixture
def counted(monkeypatch):
    """How many greedy references and reference final states the model computes."""
    calls = []
    greedy, forward = TinyHybridModel.greedy_ref, TinyHybridModel.forward_ref
    monkeypatch.setattr(TinyHybridModel, "greedy_ref",
                        lambda self, *a, **k: (calls.append("greedy"), greedy(self, *a, **k))[1])
    monkeypatch.setattr(TinyHybridModel, "forward_ref",
                        lambda self, *a, **k: (calls.append("forward"), forward(self, *a, **k))[1])
    return calls


def test_a_toggle_after_the_build_computes_no_reference_and_judges_as_without(counted, monkeypatch):
    clear_reference_memo()
    g = mechanism.guard_grid()
    assert "greedy" in counted, "the build computed the references"
    assert g.references_ahead() == 0, "all of them"
    del counted[:]
    g.row_toggle.value, g.col_toggle.value = -1, "NULL"  # the pad skipped: no fault, every request judged
    ours = g._cache[(-1, "NULL")][0]
    assert ours.ok and not counted, counted

    clear_reference_memo()
    monkeypatch.setattr(mechanism.GuardGrid, "references_ahead", lambda self: 0)
    plain = mechanism.guard_grid()
    assert plain.run_verdict(-1, "NULL").summary() == ours.summary()
    assert plain.run_verdict(0, "NEGATIVE").summary() == g.run_verdict(0, "NEGATIVE").summary()
