"""The workbook in a real browser: every notebook run in JupyterLab, in headless Chromium, as a learner would.

For every ``notebooks/*.ipynb`` (found by glob, so new chapters are tested
too): open it in JupyterLab (a server of our own on a free loopback port, in a
temporary copy of ``notebooks/``), Run ▸ Run All Cells from the menu, wait until
the kernel is idle, then check that every cell ran, that no cell shows an
error, and that every cell whose committed output is a widget's placeholder
(``scripts/run_notebooks.py`` stores a note in place of a live panel) now
shows a live widget, not its text form, and that no exercise's solution is on
show (its ``reveal(...)`` output stays a closed ``<details>``).

Then the notebook's first bug panel (``MAMBALAB_BROWSER_PANELS=all``: every
one) is operated with the mouse and keyboard: the fix toggle is clicked (the
whole-scenario verdict must flip from ✗ FAILS to ✓ OK and the output area's
screenshot must change), Step is pressed until the drawing changes (the pixels
the browser decoded for the figure compared), and a knob slider's handle is
moved with an arrow key (its readout changes, the kernel rebuilds the
scenario, the fixed scenario is still ✓ OK, the screenshot changes). An
engine explorer gets Step only.

Screenshots of each notebook after the run, and of each panel after each
action, go to ``results/browser/``; their paths are listed at the end of the
pytest run. Needs Debian's ``chromium`` (``make test`` installs it, see
README) and the ``playwright`` package; without them the test fails, unless
``MAMBALAB_SKIP_BROWSER=1`` says explicitly to skip it.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from browser_helpers import CHROMIUM, SKIP_ENV, STDERR_MIME, JupyterLab, NotebookPage, launch_chromium, panel_calls

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
RESULTS = ROOT / "results" / "browser"
RUN_TIMEOUT = float(os.environ.get("MAMBALAB_BROWSER_TIMEOUT", "300"))  # seconds for Run All, per notebook
ACTION_TIMEOUT = 120.0  # seconds for one panel action (a whole-scenario verdict on a slow CPU)
# The chapter's own panel (the first) is operated; every panel's DOM is the same, and the rest are checked live.
# MAMBALAB_BROWSER_PANELS=all operates every one (a minute more).
ALL_PANELS = os.environ.get("MAMBALAB_BROWSER_PANELS", "") == "all"

ERROR_LINE = re.compile(r"^\s*[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b.*$", re.M)
WIDGET_TEXT_REPR = re.compile(r"^(<(BugPanel|EngineExplorer|Panel)\b|(VBox|HBox|Box|Tab|Accordion|Output)\()")
WIDGET_FAILURE = re.compile(r"Error displaying widget|Loading widget\.\.\.|[Mm]odel not found|"
                            r"Failed to (load|create) (model|view)")
VERDICT_HEAD = re.compile(r"(✓ OK|✗ FAILS) — whole scenario")
# The image's pixels drawn onto a canvas at the PNG's own size, hashed (FNV-1a) with its width and height.
_PIXEL_DIGEST = """
async (img) => {
  await img.decode().catch(() => {});
  const c = document.createElement('canvas');
  c.width = img.naturalWidth; c.height = img.naturalHeight;
  const g = c.getContext('2d');
  g.drawImage(img, 0, 0);
  const d = g.getImageData(0, 0, c.width, c.height).data;
  let h = 2166136261;
  for (let i = 0; i < d.length; i++) { h = Math.imul(h ^ d[i], 16777619) >>> 0; }
  return `${c.width}x${c.height}:${h.toString(16)}`;
}
"""


def _opted_out() -> bool:
    return os.environ.get(SKIP_ENV, "") == "1"


def _unavailable(reason: str) -> None:
    """A missing browser is a failure, never a silent pass; only MAMBALAB_SKIP_BROWSER=1 skips (see ``browser``)."""
    pytest.fail(f"{reason}\n(set {SKIP_ENV}=1 to skip the browser test on purpose)", pytrace=False)


@pytest.fixture(scope="module")
def browser():
    """Headless Debian Chromium through Playwright, for the whole module."""
    if _opted_out():
        pytest.skip(f"browser test skipped: {SKIP_ENV}=1")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the Python package 'playwright' is not installed (make test installs it from pyproject.toml)")
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        _unavailable(f"no Chromium at {CHROMIUM}: `make test` installs Debian's package "
                     f"(scripts/bootstrap.py --chromium); or `sudo apt-get install chromium fonts-dejavu-core`")
    with sync_playwright() as p:
        b = launch_chromium(p)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def lab(browser, tmp_path_factory):
    """Our own JupyterLab server over a temporary copy of notebooks/ (ended, kernels included, at the end)."""
    server = JupyterLab(ROOT / "notebooks", tmp_path_factory.mktemp("jupyterlab"))
    server.start()
    RESULTS.mkdir(parents=True, exist_ok=True)
    try:
        yield server
    finally:
        server.stop()


# -- checks on the notebook after Run All -------------------------------------------------------------------


def _source(cell: dict) -> str:
    s = cell["source"]
    return s if isinstance(s, str) else "".join(s)


def _where(nb: dict, i: int) -> str:
    """'cell 7 ('its last line')': the last line is the call that shows something."""
    lines = _source(nb["cells"][i]).strip().splitlines()
    return f"cell {i} ({lines[-1][:70] if lines else ''!r})"


def _problems_after_run(nb: dict, state: dict, expected_widgets: list[int]) -> list[str]:
    """Everything a reader would see wrong after Run All: cells not run, errors, panels not live."""
    problems = []
    if len(state["cells"]) != len(nb["cells"]):
        problems.append(f"{len(state['cells'])} cells on the page, {len(nb['cells'])} in the file")
        return problems
    not_run = []
    for i, cell in enumerate(state["cells"]):
        if not cell["code"]:
            continue
        if cell["prompt"] and not re.fullmatch(r"\[\d+\]:", cell["prompt"]):
            not_run.append(i)
        for out in cell["outputs"]:
            text = out["text"]
            if out["mime"] == STDERR_MIME and ("Traceback (most recent call last)" in text or ERROR_LINE.search(text)):
                problems.append(f"{_where(nb, i)} shows an error:\n{text[-800:]}")
            if WIDGET_FAILURE.search(text):
                problems.append(f"{_where(nb, i)} shows a broken widget: {text[:200]!r}")
            if out["mime"] == "text/plain" and WIDGET_TEXT_REPR.match(text):
                problems.append(f"{_where(nb, i)} shows a widget's text form, not the widget: {text[:120]!r}")
    if not_run and problems:  # Run All stops at the first error: one line for the cells after it
        problems.append(f"{len(not_run)} cell(s) did not run after it: {not_run}")
    else:
        problems += [f"{_where(nb, i)} did not run (prompt {state['cells'][i]['prompt']!r})" for i in not_run]
    for i in expected_widgets:
        if i in not_run:
            continue
        live = [o for o in state["cells"][i]["outputs"] if o["widgets"] > 0 and o["height"] > 50]
        if not live:
            problems.append(f"{_where(nb, i)} should show a live widget panel; it shows "
                            f"{[(o['mime'], o['text'][:80]) for o in state['cells'][i]['outputs']]}")
    return problems


SOLUTION_IMPORT = re.compile(r"from solutions\.\w+ import (\w+) as solution")


def _solutions_shown(nb: dict, page: NotebookPage) -> list[str]:
    """Solutions on show after Run All: each ``reveal(...)`` output must stay a closed <details>."""
    problems = []
    for i, cell in enumerate(nb["cells"]):
        m = SOLUTION_IMPORT.search(_source(cell)) if cell["cell_type"] == "code" else None
        if not m or "reveal(" not in _source(cell):
            continue
        seen = page.text_shown(i, f"def {m.group(1)}(")
        if not seen["present"]:
            problems.append(f"{_where(nb, i)}: the solution's source is not in its output ({seen})")
        elif seen["visible"] or seen["details"] == 0 or seen["open"]:
            problems.append(f"{_where(nb, i)} shows its solution after Run All (`def {m.group(1)}(` visible: "
                            f"{seen['visible']}; <details>: {seen['details']}, open: {seen['open']})")
    return problems


# -- operating a panel ----------------------------------------------------------------------------------------


def _wait_for(what: str, predicate, timeout: float = ACTION_TIMEOUT):
    """Poll ``predicate`` until it returns something truthy (returned); fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}", pytrace=False)
        time.sleep(0.2)


class PanelDriver:
    """One live panel on the page, found by the CSS classes ``mambalab.widgets`` gives its parts."""

    def __init__(self, nbpage: NotebookPage, locator, label: str) -> None:
        self.nb = nbpage
        self.loc = locator
        self.label = label
        self.area = locator.locator("xpath=ancestor::div[contains(@class, 'jp-OutputArea-output')][1]")
        self.shots: list[Path] = []

    def text(self, role: str) -> str:
        return self.loc.locator(f".mambalab-{role}").first.inner_text()

    def verdict_head(self) -> str | None:
        m = VERDICT_HEAD.search(self.text("verdict"))
        return m.group(1) if m else None

    def status_step(self) -> int | None:
        m = re.match(r"\s*step (\d+)", self.text("status"))
        return int(m.group(1)) if m else None

    def log_text(self) -> str:
        return self.loc.locator(".mambalab-log").first.evaluate("el => el.textContent")

    def figure(self):
        """The drawing now shown (the selected tab's image)."""
        return self.loc.locator(".mambalab-views .mambalab-figure:visible").first

    def drawing(self) -> str:
        """A digest of the pixels the browser decoded for the drawing shown, at the PNG's own size.

        Not a screenshot of the element: the image is scaled to the cell's width, and when text above it
        grows by a fraction of a pixel the same picture is resampled differently.
        """
        return self.figure().evaluate(_PIXEL_DIGEST)

    def settle(self) -> None:
        self.nb.wait_idle(ACTION_TIMEOUT, settle=0.6)

    def shoot(self, action: str) -> bytes:
        """Screenshot of the panel's output area, kept under results/browser/."""
        path = RESULTS / f"{self.label}-{action}.png"
        png = self.area.screenshot(path=str(path), animations="disabled")
        self.shots.append(path)
        return png

    # -- the three things a learner does -----------------------------------------------------------------
    def toggle_fix(self) -> tuple[str, str]:
        """Click 'fixed'; return the verdict before and after (waits for the new whole-scenario verdict)."""
        before = _wait_for(f"{self.label}: a whole-scenario verdict", self.verdict_head)
        self.loc.locator(".mambalab-fix button").filter(has_text=re.compile(r"^\s*fixed\s*$")).click()
        after = _wait_for(f"{self.label}: the verdict to change after clicking 'fixed'",
                          lambda: (h := self.verdict_head()) and h != before and h)
        self.settle()
        return before, after

    def step_until_drawing_changes(self, presses: int = 6) -> tuple[int, int, str, str]:
        """Press Step until the drawing's pixels change; return (step before, step after, the two digests)."""
        start = self.status_step()
        before = self.drawing()
        after = before
        for _ in range(presses):
            shown = self.status_step()
            self.loc.locator(".mambalab-step").first.click()
            _wait_for(f"{self.label}: the step counter to move past {shown}",
                      lambda: (s := self.status_step()) is not None and s > shown)
            self.settle()
            after = self.drawing()
            if after != before:
                break
        return start, self.status_step(), before, after

    def press_slider(self) -> tuple[str, str, str, str] | None:
        """Move the first knob slider one notch with an arrow key; (readout, log) before and after."""
        sliders = self.loc.locator(".mambalab-knob.widget-slider")
        if sliders.count() == 0:
            return None
        slider = sliders.first
        handle = slider.locator(".noUi-handle").first
        readout = slider.locator(".widget-readout").first
        r0, log0 = readout.inner_text(), self.log_text()
        now, top = handle.get_attribute("aria-valuenow"), handle.get_attribute("aria-valuemax")
        key = "ArrowLeft" if now is not None and top is not None and float(now) >= float(top) else "ArrowRight"
        handle.focus()
        handle.press(key)
        r1 = _wait_for(f"{self.label}: the slider readout to change after {key}",
                       lambda: (r := readout.inner_text()) != r0 and r)
        log1 = _wait_for(f"{self.label}: the kernel to rebuild the scenario for {r1}",
                         lambda: (t := self.log_text()) != log0 and t)
        self.settle()
        return r0, r1, log0, log1


def _operate_bug_panel(drv: PanelDriver) -> list[str]:
    """Fix toggle, Step, slider: return what went wrong (empty: all as a learner expects)."""
    problems = []
    drv.loc.scroll_into_view_if_needed()
    shot0 = drv.shoot("0-start")
    before, after = drv.toggle_fix()
    if (before, after) != ("✗ FAILS", "✓ OK"):
        problems.append(f"{drv.label}: clicking 'fixed' turned the verdict {before!r} into {after!r}, "
                        f"not ✗ FAILS into ✓ OK")
    shot1 = drv.shoot("1-fixed")
    if shot1 == shot0:
        problems.append(f"{drv.label}: the panel looks the same after clicking 'fixed'")
    s0, s1, fig0, fig1 = drv.step_until_drawing_changes()
    if fig0 == fig1:
        problems.append(f"{drv.label}: Step went from step {s0} to {s1} and the drawing never changed")
    drv.shoot("2-step")
    moved = drv.press_slider()
    if moved is not None:
        r0, r1, _, _ = moved
        shot3 = drv.shoot("3-slider")
        if drv.verdict_head() != "✓ OK":
            problems.append(f"{drv.label}: with the fix on, moving the slider {r0} → {r1} gave the verdict "
                            f"{drv.text('verdict')[:200]!r}")
        if shot3 == shot1:
            problems.append(f"{drv.label}: the panel looks the same after moving the slider {r0} → {r1}")
    return problems


def _operate_explorer(drv: PanelDriver) -> list[str]:
    drv.loc.scroll_into_view_if_needed()
    drv.shoot("0-start")
    s0, s1, fig0, fig1 = drv.step_until_drawing_changes()
    drv.shoot("1-step")
    return [] if fig0 != fig1 else [f"{drv.label}: Step went from step {s0} to {s1}; the drawing never changed"]


# -- the test -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_in_jupyterlab(path, lab, browser, record_property):
    nb = json.loads(path.read_text(encoding="utf-8"))
    expected_widgets = panel_calls(path)
    for old in RESULTS.glob(f"{path.stem}*.png"):
        old.unlink()  # only this run's screenshots of this notebook
    page = NotebookPage(lab, browser, path.name)
    shots: list[Path] = []
    seconds: dict[str, float] = {}
    t0 = time.monotonic()
    try:
        page.open()
        seconds["open"] = time.monotonic() - t0
        page.run_all()
        state = page.wait_idle(RUN_TIMEOUT)
        seconds["run all"] = time.monotonic() - t0 - seconds["open"]
        shots.append(page.screenshot_notebook(RESULTS / f"{path.stem}.png"))
        problems = _problems_after_run(nb, state, expected_widgets)
        problems += _solutions_shown(nb, page)
        if problems:
            pytest.fail(f"{path.name} after Run All Cells:\n- " + "\n- ".join(problems), pytrace=False)

        bug_panels = page.panel.locator(".mambalab-bug-panel")
        explorers = page.panel.locator(".mambalab-explorer")
        operate = bug_panels.count() if ALL_PANELS else min(1, bug_panels.count())
        for k in range(operate):
            drv = PanelDriver(page, bug_panels.nth(k), f"{path.stem}-panel{k + 1}")
            problems += _operate_bug_panel(drv)
            shots += drv.shots
        for k in range(explorers.count()):
            drv = PanelDriver(page, explorers.nth(k), f"{path.stem}-explorer{k + 1}")
            problems += _operate_explorer(drv)
            shots += drv.shots
        widget_errors = [m for m in page.console_errors if re.search(r"widget", m, re.I)]
        if widget_errors:
            problems.append(f"widget errors in the browser console: {widget_errors[:5]}")
        if problems:
            pytest.fail(f"{path.name}, operating its panels:\n- " + "\n- ".join(problems), pytrace=False)
    finally:
        for s in shots:
            record_property("screenshot", str(s.relative_to(ROOT)))
        seconds["panels"] = time.monotonic() - t0 - sum(seconds.values())
        record_property("timing", f"{path.stem}: " + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items()))
        page.close()
        lab.shutdown_kernels()
