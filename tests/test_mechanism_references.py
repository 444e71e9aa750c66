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


def test_the_drawings_made_at_the_build_are_each_combination_s_own(monkeypatch):
    """maps_ahead draws every combination at the build; each is the drawing and note of that combination's
    own launch, and a toggle shows it without launching again."""
    from mambalab.device import without_overflow_asserts
    from mambalab.lab.bugs import BugConfig
    from mambalab.workbook import kernel_launch
    from mambalab.workbook.fix_it import guard_plants, planted

    mechanism._DRAWN.clear()
    g = mechanism.guard_grid()
    assert sorted(g._maps) == sorted((p, c) for p in mechanism.PADS for c in mechanism.GUARDS)
    for (pad, guard), (png, note) in g._maps.items():
        bugs = BugConfig.with_bugs("pad-minus-one") if pad == -1 else BugConfig()
        with planted(guard_plants(mechanism.GUARDS[guard][1])), without_overflow_asserts():
            launch = kernel_launch.launch_ssu([3, 5, 2, pad], bugs)
        assert png == mechanism._png(launch.draw_access_map()), (pad, guard)
        faulted = launch.error is not None
        assert ("illegal access" in note) == faulted, (pad, guard, note)
        if not faulted:
            assert note.endswith("written" if not bool((launch.state[0] == 0).all()) else "untouched"), note
    launched = []
    monkeypatch.setattr(kernel_launch, "launch_ssu", lambda *a, **k: launched.append(a))
    g.row_toggle.value = 0
    assert not launched and g.image.value == g._maps[(0, g.col_toggle.value)][0]
