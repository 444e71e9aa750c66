"""Screenshots of every control panel, as a reader without a kernel sees them in the notebooks' markdown.

Opens one throw-away notebook holding one panel per cell in JupyterLab in headless Chromium (the
helpers of ``tests/test_browser.py``), runs it, and saves each panel's output area as
``notebooks/figures/panel-<name>.png``. Each bug panel is shown as it opens (pre-fix, the whole
scenario's verdict); the mechanism grids are shown filled (every combination run).

    .venv/bin/python scripts/panel_screenshots.py            # every panel
    .venv/bin/python scripts/panel_screenshots.py guard-grid  # some of them
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from browser_helpers import JupyterLab, NotebookPage, launch_chromium  # noqa: E402

OUT = ROOT / "notebooks" / "figures"

PANELS = {
    "pad-minus-one": 'bug_panel("pad-minus-one")',
    "guard-lt-zero": 'bug_panel("guard-lt-zero")',
    "guard-grid": "g = guard_grid()\ng.fill()\ng",
    "stale-rows": 'bug_panel("stale-rows")',
    "move-row-stale-source": 'bug_panel("move-row-stale-source")',
    "clear-row-grid": "c = clear_row_grid()\nc.fill()\nc",
    "spec-slots": 'bug_panel("spec-slots")',
    "zero-accepted": 'bug_panel("zero-accepted")',
    "stale-is-prefilling": 'bug_panel("stale-is-prefilling")',
    "single-token-extend": 'bug_panel("single-token-extend")',
    "engine-explorer": "engine_explorer()",
}
SETUP = ("from mambalab import workbook as wb\nfrom mambalab.widgets import bug_panel, engine_explorer\n"
         "from mambalab.widgets.mechanism import clear_row_grid, guard_grid\nwb.setup(seed=0)")


def _notebook(names: list[str]) -> dict:
    def cell(src: str) -> dict:
        return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": src}

    return {"cells": [cell(SETUP)] + [cell(PANELS[n]) for n in names],
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
            "nbformat": 4, "nbformat_minor": 5}


def main(argv: list[str]) -> int:
    from playwright.sync_api import sync_playwright

    names = argv or list(PANELS)
    unknown = sorted(set(names) - set(PANELS))
    if unknown:
        print(f"unknown panel(s) {unknown}; known: {', '.join(PANELS)}", file=sys.stderr)
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mambalab-shots-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        (src / "panels.ipynb").write_text(json.dumps(_notebook(names)), encoding="utf-8")
        lab = JupyterLab(src, Path(tmp), python=sys.executable).start()
        try:
            with sync_playwright() as pw:
                browser = launch_chromium(pw)
                page = NotebookPage(lab, browser, "panels.ipynb")
                try:
                    page.open()
                    page.run_all()
                    page.wait_idle(900, settle=3.0)
                    for k, name in enumerate(names, start=1):
                        area = page.output_area(k)
                        area.locator(".mambalab-panel, .mambalab-mechanism-panel").first.wait_for(timeout=60_000)
                        path = OUT / f"panel-{name}.png"
                        area.screenshot(path=str(path), animations="disabled")
                        print(path.relative_to(ROOT))
                finally:
                    page.close()
                    browser.close()
        finally:
            lab.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
