"""The committed notebooks are complete, executed, portable and ready for nbval's strict mode.

nbval itself re-executes every notebook and compares each stored output
(``pytest --nbval notebooks/ --nbval-current-env --nbval-sanitize-with
tests/nbval_sanitize.cfg``): that is the check that outputs are up to date
with the library. This file checks, fast and without a kernel, what nbval
takes for granted: every code cell was executed in order by one kernel
(``scripts/run_notebooks.py``), no cell stored an error, the kernelspec is
the portable ``python3``, nothing machine-specific or random was stored,
widget cells are excluded from comparison, and each chapter has its story
links, its proof cell, its panel and its exercises. The exercises' stored
results are recomputed here: a change in the library's ground truth or in a
solution shows up without running a notebook.
"""

from __future__ import annotations

import configparser
import importlib
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
SANITIZE = ROOT / "tests" / "nbval_sanitize.cfg"

CHAPTERS = {
    "00_tour": [],
    "01_null_block_sentinel": [35431, 39064],
    "02_stale_rows": [37728, 49757],
    "03_spec_decode_slots": [41233, 48475],
    "04_stale_is_prefilling": [41873],
    "05_bug_hunt": [35431, 37728, 39064, 41233, 41873, 49757, 48475],
    "06_gpu": [],
}
WIDGET_CALL = re.compile(r"\b(bug_panel|engine_explorer)\(")
EXERCISE_CALL = re.compile(r'^check\("(\d\d\.\d)", (\w+)\)$', re.M)
SOLUTION_IMPORT = re.compile(r"^from solutions\.(ex\d\d) import (\w+) as solution$", re.M)


def load(name: str) -> dict:
    return json.loads((NOTEBOOKS / f"{name}.ipynb").read_text(encoding="utf-8"))


def code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def source(cell: dict) -> str:
    s = cell["source"]
    return s if isinstance(s, str) else "".join(s)


def text_of(output: dict) -> str:
    if output["output_type"] == "stream":
        t = output["text"]
    else:
        t = output.get("data", {}).get("text/plain", "")
    return t if isinstance(t, str) else "".join(t)


def test_the_notebook_folder_holds_the_chapters_and_nothing_stray():
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == sorted(CHAPTERS)
    assert not list(NOTEBOOKS.glob("**/.ipynb_checkpoints/*.ipynb"))


@pytest.mark.parametrize("name", sorted(CHAPTERS))
def test_notebook_is_portable_and_was_run_top_to_bottom(name):
    nb = load(name)
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    assert "version" not in nb["metadata"].get("language_info", {}), "run scripts/run_notebooks.py"
    assert "widgets" not in nb["metadata"], "widget state must not be stored (random model ids)"
    cells = code_cells(nb)
    counts = [c["execution_count"] for c in cells]
    assert counts == list(range(1, len(cells) + 1)), f"{name}: not executed top to bottom by one kernel: {counts}"
    for c in nb["cells"]:
        assert "execution" not in c.get("metadata", {}), f"{name}: execution timing metadata stored"
    for c in cells:
        for o in c["outputs"]:
            assert o["output_type"] != "error", f"{name}: a cell stored an error: {o.get('ename')}"
            assert not (o["output_type"] == "stream" and o["name"] == "stderr"), \
                f"{name}: stderr stored in cell {source(c)[:60]!r}"
            assert "application/vnd.jupyter.widget-view+json" not in o.get("data", {}), \
                f"{name}: a widget view was stored (run scripts/run_notebooks.py)"


@pytest.mark.parametrize("name", sorted(CHAPTERS))
def test_checked_outputs_hold_nothing_that_changes_between_runs(name):
    for c in code_cells(load(name)):
        src = source(c)
        ignored = "NBVAL_IGNORE_OUTPUT" in src or "NBVAL_SKIP" in src
        if WIDGET_CALL.search(src):
            assert ignored, f"{name}: a widget cell must be marked NBVAL_IGNORE_OUTPUT: {src[:80]!r}"
        if ignored:
            continue
        for o in c["outputs"]:
            t = text_of(o)
            assert not re.search(r"0x[0-9a-fA-F]{6,}", t), f"{name}: an address in a checked output: {t[:120]!r}"
            assert not re.search(r"<\w*Figure size", t), f"{name}: a figure repr in a checked output"
            assert not re.search(r"\b\d+\.\d+ ?s\b", t), f"{name}: a timing in a checked output: {t[:120]!r}"
            if "image/png" in o.get("data", {}):
                assert t.startswith("[figure] "), f"{name}: a PNG without a stable text form (use show())"


def test_the_sanitize_file_parses():
    cfg = configparser.ConfigParser()
    assert cfg.read(SANITIZE)
    assert cfg.sections()
    for section in cfg.sections():
        re.compile(cfg[section]["regex"])
        assert "replace" in cfg[section]
    sub = {cfg[s]["regex"]: cfg[s]["replace"] for s in cfg.sections()}

    def sanitize(t: str) -> str:
        for rx, rep in sub.items():
            t = re.sub(rx, rep, t)
        return t

    assert sanitize("<Figure size 640x480 with 1 Axes>") == sanitize("<Figure size 950x300 with 2 Axes>")
    assert sanitize("at 0x7fa20e7ff080") == sanitize("at 0x7fb11e0000c0")
    assert sanitize("ran in 3.2 s") == sanitize("ran in 12.75 s")
    assert sanitize("4 slots, exit code 1") == "4 slots, exit code 1"


@pytest.mark.parametrize("name", [n for n in CHAPTERS if CHAPTERS[n]])
def test_each_chapter_tells_proves_replays_and_exercises(name):
    nb = load(name)
    markdown = "\n".join(source(c) for c in nb["cells"] if c["cell_type"] == "markdown")
    for pr in CHAPTERS[name]:
        assert f"https://github.com/vllm-project/vllm/pull/{pr}" in markdown, f"{name}: no link to #{pr}"
    assert "vllm/" in markdown, f"{name}: no upstream file path"
    codes = [source(c) for c in code_cells(nb)]
    assert any(re.search(r"^assert .*exit_code == 1", s, re.M) for s in codes), f"{name}: no proof of the bug"
    assert any(re.search(r"exit_code == 0", s) for s in codes), f"{name}: no proof of the fix"
    assert any("bug_panel(" in s for s in codes), f"{name}: no panel"


@pytest.mark.parametrize("name", sorted(CHAPTERS))
def test_exercises_have_hidden_solutions_and_their_stored_results_are_current(name):
    sys.path.insert(0, str(NOTEBOOKS))
    try:
        from mambalab import workbook as wb

        nb = load(name)
        cells = code_cells(nb)
        asked = [(i, m.group(1), m.group(2)) for i, c in enumerate(cells) for m in EXERCISE_CALL.finditer(source(c))]
        assert 2 <= len(asked) <= 3, f"{name}: {len(asked)} exercises"
        for i, eid, fn in asked:
            assert eid.startswith(name[:2]) and wb.EXERCISES[eid].name == fn
            assert text_of(cells[i]["outputs"][0]).strip() == \
                f"exercise {eid}: not answered yet ({fn} raises NotImplementedError)"
            sol = cells[i + 1]
            assert sol["metadata"].get("jupyter", {}).get("source_hidden") is True, f"{name}: solution {eid} not hidden"
            m = SOLUTION_IMPORT.search(source(sol))
            assert m and m.group(2) == fn and f'reveal("{eid}", solution)' in source(sol)
            solution = getattr(importlib.import_module(f"solutions.{m.group(1)}"), fn)
            stored = "".join(text_of(o) for o in sol["outputs"]).strip()
            assert stored == str(wb.reveal(eid, solution)).strip(), \
                f"{name}: the stored solution {eid} is out of date: re-run scripts/run_notebooks.py"
            assert stored.endswith("cases)") and "correct" in stored.splitlines()[-1]
    finally:
        sys.path.remove(str(NOTEBOOKS))
