"""A panel's idle-time work (``widgets/idle.py``): what it computes, where it runs, and that nothing shown changes.

While the learner reads, a panel computes the references of its workload and
the other side of the fix toggle at the step shown, one unit per callback of
the running event loop. The rules of ``test_widgets.py`` still hold: the
shown engine steps only when the learner steps.
"""

import asyncio
import io

import numpy as np
import pytest
from matplotlib.image import imread

from mambalab.lab.bugs import BugConfig
from mambalab.widgets import bug_panel, clear_caches, idle
from mambalab.lab import reference
from mambalab.widgets.session import _SESSIONS


@pytest.fixture(autouse=True)
def _fresh_caches():
    clear_caches()
    yield
    clear_caches()


def pixels(png: bytes) -> np.ndarray:
    return imread(io.BytesIO(png), format="png")


def _walk(pause: bool):
    """Four steps, then the fix toggled, with or without the learner's pauses (idle work) before each action."""
    clear_caches()
    p = bug_panel("stale-is-prefilling", auto_verdict=False)
    assert not p.idle.scheduled  # headless: no event loop runs, nothing is scheduled
    for _ in range(4):
        if pause:
            p.run_idle_work()
        p.step_button.click()
    shown = p.engine
    if pause:
        assert p.run_idle_work() > 0
        assert shown.step == 4 and p.engine is shown  # the shown engine steps only when the learner steps
        other = _SESSIONS[p._settings(fixed=True).key]
        assert other.engine is not shown and other.last_step == 4 and other.bugs == BugConfig()
    p.fix_toggle.value = True
    assert p.cursor == 4 and p.engine.step == 4 and p.engine is not shown
    if pause:
        assert p.session is other and p.last_engine_s < p.session.init_seconds  # found, not built
    return (p.verdict_text, p.verdict.value, p.message.value, p.tabs.titles,
            [p.findings[v].value for v in p.view_names], pixels(p.figure_png()))


def test_idle_work_changes_nothing_the_learner_sees():
    plain, paused = _walk(False), _walk(True)
    assert plain[:-2] == paused[:-2] and plain[-2] == paused[-2]
    assert np.array_equal(plain[-1], paused[-1])


def test_idle_work_runs_the_whole_verdict_when_the_panel_shows_it():
    p = bug_panel("pad-minus-one", seed=3)  # verdict on every change (seed 3: a short scenario)
    assert not p.result.fixed and p.run_idle_work() > 0
    key = p._settings(fixed=True).key
    other = _SESSIONS[key]
    assert other.result is not None and other.result.verdict.ok
    p.fix_toggle.value = True
    assert p.session is other and p.result is other.result and "✓ OK" in p.verdict.value
    assert p.run_idle_work() >= 1 and _SESSIONS[p._settings(fixed=False).key].result is not None


def test_references_are_computed_once_for_both_sides_of_the_fix():
    p = bug_panel("pad-minus-one", auto_verdict=False)
    p.run_idle_work()
    n = reference._MEMO.misses
    assert n >= 3 and not list(p.session.reference_jobs())  # every request's reference is memoised
    p.replay_button.click()
    p.fix_toggle.value = True
    p.replay_button.click()
    assert reference._MEMO.misses == n  # the verdicts and the fixed engine found them


def test_idle_work_runs_on_the_event_loop_between_actions(monkeypatch):
    monkeypatch.setattr(idle, "IDLE_DELAY_S", 0.0)

    async def learner():
        p = bug_panel("stale-is-prefilling", auto_verdict=False)
        p.step_button.click()
        assert p.idle.scheduled  # planned after the action, run later by the loop
        shown = p.engine
        for _ in range(60_000):  # until the plan is done (no time limit: a busy machine only takes longer)
            if not p.idle.scheduled:
                break
            await asyncio.sleep(0.002)
        assert not p.idle.scheduled and p.idle.done > 0
        assert p.engine is shown and shown.step == 1
        other = _SESSIONS[p._settings(fixed=True).key]
        assert other.last_step == 1
        p.step_button.click()  # a new action drops the old plan and makes a new one
        assert p.idle.scheduled
        p.idle.cancel()
        assert not p.idle.scheduled
        return other

    asyncio.run(learner())


@pytest.mark.cpu_only(reason="the guard is planted as Python inside the kernels (Triton's interpreter)")
def test_a_mechanism_panel_runs_the_neighbouring_combinations_ahead_and_shows_the_same():
    from mambalab.widgets.mechanism import guard_grid

    plain, ahead = guard_grid(), guard_grid()
    table = ahead.table.value
    assert ahead.run_idle_work() > 0
    assert set(ahead._ahead) == {(-1, "EQ_NULL"), (-1, "NEGATIVE"), (-1, "NULL"), (0, "NONE")}
    assert ahead.table.value == table and "·" in ahead.table.value  # run ahead, not shown
    for g in (plain, ahead):
        g.col_toggle.value = "NULL"
    assert (-1, "NULL") not in ahead._ahead  # taken, not run again
    assert plain.verdict.value == ahead.verdict.value and plain.note.value == ahead.note.value
    assert plain.table.value == ahead.table.value
    assert np.array_equal(pixels(plain.image.value), pixels(ahead.image.value))


def test_planted_functions_keep_distinct_identities_for_the_capture_memo():
    """The CPU capture memo tells plants apart by the id() of the planted function: ``planted`` keeps every
    replacement alive, so a new guard never takes a dead one's id (and with it its captures)."""
    import gc

    from mambalab.widgets.mechanism import GUARDS
    from mambalab.workbook.fix_it import guard_plants, planted
    from mambalab.worker.cuda_graph import _code_fingerprint

    seen = []
    for guard in ("NULL", "NEGATIVE", "EQ_NULL", "NONE"):
        plants = guard_plants(GUARDS[guard][1])
        with planted(plants):
            seen.append(_code_fingerprint())
        del plants
        gc.collect()
    assert len(set(seen)) == 4


def test_the_explorer_runs_its_workload_without_the_selected_bugs_ahead():
    from mambalab.widgets import engine_explorer

    p = engine_explorer(seed=4, num_requests=2, data_parallel_size=2, bugs=["stale-rows"])
    p.step_button.click()
    assert p.run_idle_work() > 0 and p.engine.step == 1
    other = _SESSIONS[p._settings(bugs=()).key]
    assert other.last_step == 1 and other.bugs == BugConfig()
    p.bug_select.value = ()
    assert p.session is other and p.cursor == 1
    n = len(_SESSIONS)
    p.run_idle_work()
    assert len(_SESSIONS) == n  # nothing selected: no other setting to run ahead


def test_idle_work_draws_the_next_drawings_into_the_cache_without_showing_them():
    from mambalab.widgets import views

    p = bug_panel("stale-rows", auto_verdict=False)
    for _ in range(3):
        p.step_button.click()
    shown = {v: p.slots[v].image.value for v in p.view_names}
    keys = {v: p.slots[v].key for v in p.view_names}
    p.run_idle_work()
    assert {v: p.slots[v].image.value for v in p.view_names} == shown  # nothing shown changed
    assert {v: p.slots[v].key for v in p.view_names} == keys
    others = [v for v in p.view_names if v != p.selected_view]
    assert all(p._content_key(v) in views._PNG_CACHE for v in others)
    renders = p.slots["state_pool"].renders
    p.tabs.selected_index = p.view_names.index("state_pool")  # opening the tab finds its drawing
    assert p.slots["state_pool"].renders == renders and p.slots["state_pool"].cache_hits >= 1
    cached = p.figure_png()
    views.clear_png_cache()
    p.slots["state_pool"].key = None
    p._render("state_pool")  # drawn now, as without idle time: the same pixels
    assert np.array_equal(pixels(cached), pixels(p.figure_png()))
    p.run_idle_work()
    hits, renders = p.slots["state_pool"].cache_hits, p.slots["state_pool"].renders
    p.set(fixed=True)  # the fix toggle: its drawing was made ahead too
    assert p.cursor == 3 and p.slots["state_pool"].cache_hits == hits + 1
    assert p.slots["state_pool"].renders == renders


def _skip_if_this_python_froze_objects():
    """The actions leave objects someone else froze alone: where the interpreter starts with a frozen
    permanent generation (the lent GPU machine's Python: 375 objects), they never freeze or defer."""
    import gc

    if gc.get_freeze_count():
        pytest.skip(f"this Python starts with {gc.get_freeze_count()} frozen objects: actions do not freeze here")


def test_a_learner_action_runs_without_a_full_collection(monkeypatch):
    """An action freezes what was alive before it (a collection inside scans only what it allocates) and
    unfreezes it after; nested actions freeze once; someone else's frozen objects are left alone; after
    MAX_DEFERRED_ACTIONS actions with no full collection in between, the next action lets one run."""
    _skip_if_this_python_froze_objects()
    import gc

    # (frozen objects that die meanwhile leave the frozen count: it is compared with 0 only)
    monkeypatch.setitem(idle._ACTIONS, "deferred", 0)
    assert gc.get_freeze_count() == 0
    with idle.learner_action():
        assert gc.get_freeze_count() > 0 and idle._ACTIONS["deferred"] == 1
        with idle.learner_action():
            assert gc.get_freeze_count() > 0 and idle._ACTIONS["deferred"] == 1  # frozen once
        assert gc.get_freeze_count() > 0  # the inner action did not unfreeze the outer one's objects
    assert gc.get_freeze_count() == 0
    gc.freeze()
    try:
        with idle.learner_action():
            assert idle._ACTIONS["deferred"] == 1  # someone else froze: this action does not
        assert gc.get_freeze_count() > 0  # and does not unfreeze their objects
    finally:
        gc.unfreeze()
    monkeypatch.setitem(idle._ACTIONS, "deferred", idle.MAX_DEFERRED_ACTIONS)
    with idle.learner_action():
        assert gc.get_freeze_count() == 0  # deferred long enough: this one may collect everything
    gc.collect()
    assert idle._ACTIONS["deferred"] == 0  # a full collection outside the actions: defer again


def test_panel_actions_are_learner_actions_and_idle_units_are_not(monkeypatch):
    _skip_if_this_python_froze_objects()
    import gc

    monkeypatch.setitem(idle._ACTIONS, "deferred", 0)
    seen = []
    p = bug_panel("stale-is-prefilling", auto_verdict=False)
    real = p.session.advance
    monkeypatch.setattr(p.session, "advance", lambda: seen.append(("step", gc.get_freeze_count())) or real())
    p.step_button.click()
    p._idle_unit(lambda: seen.append(("idle", gc.get_freeze_count())) or False)
    assert seen[0][0] == "step" and seen[0][1] > 0 and seen[-1] == ("idle", 0)
    assert gc.get_freeze_count() == 0


def test_the_full_collection_an_action_left_runs_as_the_idle_plan_s_last_unit(monkeypatch):
    _skip_if_this_python_froze_objects()
    p = bug_panel("stale-is-prefilling", auto_verdict=False)
    p.step_button.click()
    monkeypatch.setitem(idle._ACTIONS, "deferred", 3)
    p.run_idle_work()
    assert idle._ACTIONS["deferred"] == 0
    assert not p.idle.step()  # nothing left, nothing due


def test_a_new_panel_runs_the_deferred_collection_before_its_build(monkeypatch):
    _skip_if_this_python_froze_objects()
    monkeypatch.setitem(idle._ACTIONS, "deferred", 5)
    bug_panel("pad-minus-one", auto_verdict=False)
    assert idle._ACTIONS["deferred"] == 1  # collected (0), then the build itself ran as one action
