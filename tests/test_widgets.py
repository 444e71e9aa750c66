"""The control panels, driven headless: set widget values, click buttons, read what the panel shows.

No browser and no kernel: ipywidgets fire ``observe`` callbacks on Python-side
``.value = ...`` and ``Button.click()`` runs the ``on_click`` handlers, so
"knob moved → engine rebuilt → figure redrawn → verdict flips" is tested here
exactly as a learner would trigger it. Engines are small (the Triton
interpreter is slow): each test steps only as far as its point needs.
"""

import io

import ipywidgets as widgets
import numpy as np
import pytest
from matplotlib.image import imread

from mambalab.lab import scenarios

from mambalab import viz
from mambalab.lab.bugs import BugConfig
from mambalab.widgets import SPECS, VIEWS, EngineExplorer, bug_panel, clear_caches, engine_explorer, panel_ids
from mambalab.widgets import pad_minus_one, spec_slots, stale_is_prefilling, stale_rows, guard_lt_zero
from mambalab.widgets import move_row_stale_source, single_token_extend, zero_accepted
from mambalab.widgets.mechanism import clear_row_grid, guard_grid


def pixels(png: bytes) -> np.ndarray:
    return imread(io.BytesIO(png), format="png")


@pytest.fixture(autouse=True)
def _fresh_caches():
    """Sessions, verdicts and figures are cached by settings: every test starts from nothing."""
    clear_caches()
    yield
    clear_caches()


@pytest.fixture(autouse=True)
def _nothing_printed(capsys):
    """Callbacks write only into the panel's own widgets."""
    yield
    out, err = capsys.readouterr()
    assert out == "" and err == "", (out, err)


# -- the scenarios behind the panels -------------------------------------------------------------


@pytest.mark.parametrize("module, scenario", [
    (pad_minus_one, scenarios.pad_minus_one), (stale_rows, scenarios.stale_rows),
    (guard_lt_zero, scenarios.guard_lt_zero), (spec_slots, scenarios.spec_slots),
    (stale_is_prefilling, scenarios.stale_is_prefilling),
    (single_token_extend, scenarios.single_token_extend), (move_row_stale_source, scenarios.move_row_stale_source),
    (zero_accepted, scenarios.zero_accepted)],
    ids=["pad-minus-one", "stale-rows", "guard-lt-zero", "spec-slots", "stale-is-prefilling", "single-token-extend",
         "move-row-stale-source", "zero-accepted"])
def test_the_panel_builds_the_scenario_and_its_knobs_are_its_arguments(module, scenario):
    import inspect

    assert module.SPEC.build is scenario  # one scenario serves the replay and the panel
    params = inspect.signature(scenario).parameters
    defaults = module.SPEC.defaults()
    assert set(defaults) == set(params) and defaults["seed"] == 0
    for name, value in defaults.items():  # at the knobs' defaults the panel replays the scenario
        assert name == "seed" or params[name].default == value, name
    for seed in range(3):
        assert module.SPEC.build(**{**defaults, "seed": seed}) == scenario(seed)


def test_every_catalogue_id_has_a_panel():
    assert set(SPECS) == {b.split("/")[0] for b in panel_ids()}  # every catalogue bug has its own panel spec
    covered = {"pad-minus-one", "stale-rows", "guard-lt-zero", "spec-slots", "stale-is-prefilling",
               "spec-slots/gather"}  # each has its own test below
    for bug in [b for b in panel_ids() if b not in covered]:
        p = bug_panel(bug, auto_verdict=False)
        assert isinstance(p.widget, widgets.VBox)
        assert "application/vnd.jupyter.widget-view+json" in p._repr_mimebundle_()
        assert p.figure_png()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "at step 0" in p.verdict_text and p.cursor == 0
        assert p.switch == bug
    # a crash at start-up is a verdict too, the same one ``replay`` gives
    p = bug_panel("spec-slots/width")
    assert p.result.report() == scenarios.replay("spec-slots/width").report()
    assert "could not start" in p.message.value
    with pytest.raises(KeyError):
        bug_panel("no-such-bug")
    with pytest.raises(TypeError):
        bug_panel("stale-rows", requests=3)  # not a knob of this scenario


# -- step, redraw in place, the fix at the same step ------------------------------------------------


def test_step_redraws_in_place_and_the_fix_keeps_the_step():
    p = bug_panel("stale-is-prefilling", auto_verdict=False)
    assert p.selected_view == "metadata" and p.engine.step == 0
    before = pixels(p.figure_png())
    for _ in range(3):
        p.step_button.click()
    fig = p.slots["metadata"].fig
    at3 = pixels(p.figure_png())
    drawn3 = viz.figure_to_array(fig)
    p.step_button.click()
    assert p.engine.step == 4 and p.cursor == 4
    assert p.slots["metadata"].fig is fig  # same shape: redrawn into the same figure (fig=)
    assert not np.array_equal(drawn3, viz.figure_to_array(fig))
    at4 = pixels(p.figure_png())
    assert not np.array_equal(before, at3) and not np.array_equal(at3, at4)
    # the fast in-place render gives exactly the pixels of a fresh drawing rendered by viz.figure_to_png
    assert np.array_equal(at4, pixels(viz.figure_to_png(VIEWS["metadata"].draw(p._vi, None))))
    assert "padded row 3 counted as a prefill (stale is_prefilling)" in p.findings["metadata"].value
    assert p.tabs.titles[p.view_names.index("metadata")].startswith("✗")
    assert "DIVERGED so far: step 4: request C" in p.verdict_text
    bugged_engine = p.engine

    p.fix_toggle.value = True  # the learner flips the fix at step 4: same step, fixed engine
    assert p.cursor == 4 and p.engine is not bugged_engine and p.engine.step == 4
    assert p.engine.bugs == BugConfig()
    assert "counted as a prefill" not in p.findings["metadata"].value
    assert "graph buffers refreshed" in p.findings["metadata"].value
    assert "so far every token matches" in p.verdict_text
    assert not np.array_equal(at4, pixels(p.figure_png()))

    p.fix_toggle.value = False  # back: the cached session, no engine work
    assert p.engine is bugged_engine and p.cursor == 4
    assert np.array_equal(at4, pixels(p.figure_png()))


@pytest.mark.cpu_only(reason="reads the sanitizer's verdict and access map")
def test_verdict_flips_when_the_fix_is_toggled():
    p = bug_panel("pad-minus-one", seed=3)  # verdict on every change: the whole scenario runs (seed 3: short)
    assert p.verdict_text.startswith("pad-minus-one (pre-fix), seed 3: ILLEGAL MEMORY ACCESS at step 2")
    assert "✗ FAILS" in p.verdict.value
    p.fix_toggle.value = True
    assert p.result.verdict.ok and p.result.fixed
    assert p.verdict_text.startswith("pad-minus-one (fixed), seed 3: OK: every request matches its reference")
    assert "✓ OK" in p.verdict.value
    p.fix_toggle.value = False
    assert "ILLEGAL MEMORY ACCESS" in p.verdict_text

    # step to the crash: the access map of the last step shows the -1
    p.step_button.click()
    p.step_button.click()
    assert p.cursor == 2
    assert "The engine crashed in step 2" in p.message.value
    p.tabs.selected_index = p.view_names.index("access_map")
    assert "row 3 loaded from and stored to slot -1 (illegal" in p.findings["access_map"].value
    assert p.slots["access_map"].fig.axes[0].get_title(loc="left").startswith("row 3 loaded from and stored to slot -1")
    assert "row 3 holds -1 (PAD_SLOT_ID) on the device" in p.findings["block_table"].value
    p.step_button.click()  # nothing left: a message, no exception
    assert "nothing left to step" in p.message.value


@pytest.mark.cpu_only(reason="reads the sanitizer's verdict and access map")
def test_guard_lt_zero_padded_rows_write_the_null_block():
    p = bug_panel("guard-lt-zero", auto_verdict=False)
    assert p.selected_view == "access_map"
    p.step_button.click()
    p.step_button.click()
    assert p.cursor == 2
    assert "row 3 loaded from and stored to null block 0" in p.findings["access_map"].value
    assert "null block 0 was written by row 3" in p.findings["state_pool"].value
    assert p.slots["state_pool"].key is None  # not drawn until its tab is opened
    p.tabs.selected_index = p.view_names.index("state_pool")
    assert p.slots["state_pool"].key == p._content_key("state_pool")
    assert p.slots["state_pool"].fig.axes[0].get_title(loc="left").startswith("null block 0 was written by row 3")


@pytest.mark.cpu_only(reason="reads the sanitizer's verdict and access map")
def test_back_replay_reset():
    p = bug_panel("pad-minus-one", auto_verdict=False)
    p.step_button.click()
    engine = p.engine
    assert p.cursor == 1 and engine.step == 1 and p.result is None
    assert "whole scenario: not run yet" in p.verdict_text and "? whole scenario" in p.verdict.value
    p.back_button.click()
    assert p.cursor == 0 and p.engine is engine and engine.step == 1  # no engine work
    p.step_button.click()
    assert p.cursor == 1 and engine.step == 1  # already computed: shown, not recomputed
    p.replay_button.click()
    r = p.result
    assert r is not None and r.verdict.illegal and p.cursor == engine.step == 2
    assert "✗ FAILS" in p.verdict.value and "illegal" in p.findings["access_map"].value
    p.reset_button.click()
    assert p.cursor == 0 and p.engine is not engine and p.engine.step == 0
    assert p.result is r  # the verdict of these settings is kept


# -- extreme values: a message, never an exception ---------------------------------------------------


def test_zero_requests_and_capture_size_one():
    p = bug_panel("pad-minus-one", auto_verdict=False, requests=0)
    assert "No requests" in p.message.value
    p.step_button.click()
    assert "nothing left to step" in p.message.value and p.cursor == 0
    p.replay_button.click()
    assert p.result.verdict.ok
    p.set(requests=2, max_num_seqs=1)
    assert "max_num_seqs = 1" in p.message.value
    p.step_button.click()
    p.step_button.click()
    assert p.cursor == 2 and "ILLEGAL" not in p.verdict_text
    p.set(cudagraph=False)
    assert "FULL CUDA graphs are off" in p.message.value


def test_the_idle_ranks_dummy_batch_is_not_called_padding():
    p = bug_panel("stale-rows", auto_verdict=False)
    assert p.rank == 1 and not p.rank_select.disabled
    for _ in range(3):
        p.step_button.click()
    rv = p._vi.rv
    assert rv.kind == "dummy" and rv.n == 0 and rv.p >= 1
    assert "num_reqs == num_reqs_padded" in p._describe_rank(rv) and "is padding" not in p.message.value
    assert "the dummy batch reads and writes it this step" in p.findings["block_table"].value
    assert "wrote block 1, which no request holds" in p.findings["state_pool"].value
    a = pixels(p.figure_png())
    p.rank_select.value = 0  # the busy rank at the same step
    assert p._vi.rv.kind == "step" and not np.array_equal(a, pixels(p.figure_png()))
    for _ in range(3):
        p.back_button.click()  # back to step 0 (no engine work), so the next engine has nothing to catch up
    p.set(dp=1)
    assert "One DP rank" in p.message.value and p.rank_select.disabled and p.rank == 0


def test_spec_slots_parts_and_maximum_speculative_tokens():
    p = bug_panel("spec-slots", auto_verdict=False)
    assert p.engine is None and "could not start" in p.message.value
    p.step_button.click()
    assert "did not start" in p.message.value
    p.replay_button.click()
    assert p.result.verdict.crash.kind == "startup" and "capture" in p.result.verdict.crash.describe()
    p.set(part="spec-slots/gather", num_spec=3, requests=1)
    assert p.engine is not None and "3 speculative tokens" in p.message.value
    p.step_button.click()
    p.step_button.click()
    assert p.cursor == 2 and p.engine.cfg.runner.num_speculative_tokens == 3
    assert p.figure_png()[:4] == b"\x89PNG"


def test_a_failing_callback_is_shown_in_the_panel(monkeypatch):
    p = bug_panel("pad-minus-one", auto_verdict=False)

    def boom():
        print("noise from inside")
        raise RuntimeError("kaboom")

    monkeypatch.setattr(p.session, "advance", boom)
    p.step_button.click()  # no exception escapes, nothing reaches stdout
    assert "Internal error" in p.message.value and "kaboom" in p.message.value
    text = "".join(o.get("text", "") for o in p.log.outputs)
    assert "RuntimeError: kaboom" in text and "noise from inside" in text


# -- the engine explorer ----------------------------------------------------------------------------


def test_engine_explorer_steps_a_random_workload():
    p = engine_explorer(seed=4, num_requests=2, data_parallel_size=2)
    assert isinstance(p, EngineExplorer) and p.engine.cfg.data_parallel_size == 2
    a = pixels(p.figure_png())
    for _ in range(2):
        p.step_button.click()
    assert p.engine.step == 2
    assert not np.array_equal(a, pixels(p.figure_png()))
    p.rank_select.value = 1  # r0 finished on rank 1 after one token: rank 1 runs a dummy batch
    assert p.rank == 1 and p._vi.rv.kind == "dummy" and "num_reqs == num_reqs_padded" in p.message.value
    p.back_button.click()
    p.bug_select.value = ("stale-rows",)  # same step, the bug switched on
    assert p.cursor == 1 and p.engine.bugs == BugConfig.with_bugs("stale-rows") and p.engine.step == 1
    with pytest.raises(KeyError):
        engine_explorer(bugs=["nope"])


def test_engine_explorer_knobs_share_one_label_column():
    """The knobs are stacked in a column: one label width for all, so labels and controls line up."""
    p = engine_explorer(seed=0, num_requests=1)
    widths = {w.style.description_width for w in p.knob_widgets.values()}
    assert len(widths) == 1 and widths != {"initial"}
    column = int(widths.pop().removesuffix("px"))
    assert all(column >= 7.5 * len(w.description) for w in p.knob_widgets.values())
    sliders = [w for w in p.knob_widgets.values() if hasattr(w, "readout_format") or type(w).__name__ == "IntSlider"]
    assert len({w.layout.width for w in sliders}) == 1  # and the slider tracks are as long


# -- mechanism panels: the halves of a fix as toggles ---------------------------------------------------


@pytest.mark.cpu_only(reason="the guard is planted as Python inside the kernels (Triton's interpreter)")
def test_guard_grid_pad_and_guard_toggles_flip_the_verdict_and_the_drawing():
    g = guard_grid()
    assert (g.row_toggle.value, g.col_toggle.value) == (-1, "NONE")
    assert "✗ FAILS" in g.verdict.value and "ILLEGAL MEMORY ACCESS" in g.verdict.value
    assert "illegal access before the pool" in g.note.value
    trusting = pixels(g.image.value)
    g.col_toggle.value = "NULL"  # the guard of #39064 holds with -1 padding too
    assert "✓ OK" in g.verdict.value and "null block 0 untouched" in g.note.value
    assert not np.array_equal(trusting, pixels(g.image.value))
    g.row_toggle.value = 0
    g.col_toggle.value = "NEGATIVE"  # the window between #35431 and #39064
    assert "✗ FAILS" in g.verdict.value and "null block 0 written" in g.note.value
    g.col_toggle.value = "EQ_NULL"  # vLLM's Mamba kernels: safe with 0, not with -1
    assert "✓ OK" in g.verdict.value
    assert "0 (NULL_BLOCK_ID, since #35431) × != null (vLLM's Mamba kernels): ✓ OK" in g.grid_text()
    assert "✓ OK" in g.table.value and "·" in g.table.value  # the combinations not yet run
    g.fill()
    ok = [line for line in g.grid_text().splitlines() if line.endswith("✓ OK")]
    assert len(g.grid_text().splitlines()) == 8 and len(ok) == 3 and "·" not in g.table.value
    assert "text/plain" in g._repr_mimebundle_()


def test_clear_row_grid_shows_both_halves_of_37728_and_the_reviews_question():
    c = clear_row_grid()
    assert (c.row_toggle.value, c.col_toggle.value) == ("none", False)
    assert "✗ FAILS" in c.verdict.value and "request D (rank 1)" in c.verdict.value
    assert "row 0 is stale: it points at block 1" in c.note.value
    c.row_toggle.value = "cpu"  # half the fix: the device copy still holds A's blocks
    assert "✗ FAILS" in c.verdict.value and "device copy; the CPU row was cleared" in c.note.value
    c.col_toggle.value = True  # the merged fix
    assert "✓ OK" in c.verdict.value and "all rows consistent" in c.note.value
    c.fill()
    text = c.grid_text()
    assert "device row (the review's question) × dummy run commits nothing (pre-fix): ✓ OK" in text
    # writing the device row and then committing copies the stale CPU row back
    assert "device row (the review's question) × dummy run commits its rows (#37728): ✗ FAILS" in text
    assert "not cleared (pre-fix) × dummy run commits its rows (#37728): ✗ FAILS" in text


# -- stored screenshots for readers without a kernel ----------------------------------------------------


def test_every_panel_has_a_stored_screenshot_shown_beside_its_cell():
    import importlib.util
    import json
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("panel_screenshots", root / "scripts" / "panel_screenshots.py")
    shots = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shots)
    assert set(SPECS) | {"guard-grid", "clear-row-grid", "engine-explorer"} == set(shots.PANELS)
    for name in shots.PANELS:
        png = root / "notebooks" / "figures" / f"panel-{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    for nb in sorted((root / "notebooks").glob("0*.ipynb")):
        chapter = nb.stem
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        src = ["".join(c["source"]) for c in cells]
        for i, s in enumerate(src):
            m = re.search(r'\b(?:bug_panel\("([\w-]+)"\)|(guard_grid|clear_row_grid|engine_explorer)\(\))', s)
            if cells[i]["cell_type"] != "code" or not m:
                continue
            name = m.group(1) or m.group(2).replace("_", "-")
            assert f"](figures/panel-{name}.png)" in src[i - 1], f"{chapter}: no screenshot before {s!r}"
            assert "NBVAL_IGNORE_OUTPUT" in s


@pytest.mark.cpu_only(reason="zero-accepted's engine stops on the interpreter's illegal access; a GPU reads the bytes before the pool and runs on")
def test_a_panel_without_engine_draws_a_view_s_message_when_its_tab_shows():
    """The engine could not start: a change draws the selected view's message at once (one figure, not one
    per view); another view's is drawn when its tab opens, the same message as a drawing of every view."""
    p = bug_panel("zero-accepted", auto_verdict=False)
    assert p.engine is None
    p.set(seed=1)
    key = ("no-engine", p.settings.key)
    assert [p.slots[v].key == key + (v,) for v in p.view_names] == [v == p.selected_view for v in p.view_names]
    other = next(i for i, v in enumerate(p.view_names) if v != p.selected_view)
    p.tabs.selected_index = other
    name = p.view_names[other]
    assert p.slots[name].key == key + (name,) and p.slots[name].image.value[:8] == b"\x89PNG\r\n\x1a\n"
    assert "could not start" in p.message.value
