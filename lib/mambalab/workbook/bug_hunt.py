"""Notebook 05's helpers around the bug hunter: the planted ``pad_tail`` (the learner's, once it
passes its exercise), a hunt's report and a workload's steps as stable text, long lines wrapped, and
a hunt's report folded (:func:`hunt_summary`: its gist shown, the whole text behind a click)."""

from __future__ import annotations

import textwrap
from typing import Callable

from mambalab.lab.planted import Plant
from mambalab.viz.text import Text
from mambalab.workbook.checker import check
from mambalab.workbook.folded import Folded


def plant_pad_tail(pad_tail: Callable) -> tuple[Plant, Text]:
    """Notebook 05's plant: the learner's ``pad_tail`` when it passes exercise 05.1, else the library's
    :func:`mambalab.lab.planted.repeat_last_live` (so the chapter runs before the exercise is done)."""
    from mambalab.lab.planted import plant_padded_tail, repeat_last_live

    verdict = check("05.1", pad_tail)
    if verdict.passed:
        return plant_padded_tail(pad_tail), Text("planting your pad_tail (it passes exercise 05.1)")
    return plant_padded_tail(repeat_last_live), Text(f"planting the library's repeat_last_live ({verdict.detail})")


def _wrap(text: str, width: int) -> str:
    """Lines longer than ``width`` wrapped at spaces (same indentation, 4 more for continuations)."""
    lines = []
    for line in text.split("\n"):
        if len(line) <= width:
            lines.append(line)
            continue
        indent = line[:len(line) - len(line.lstrip())]
        lines += textwrap.wrap(line.strip(), width, initial_indent=indent, subsequent_indent=indent + "    ",
                               break_long_words=False, break_on_hyphens=False) or [line]
    return "\n".join(lines)


def hunt_report(result, width: int = 100) -> Text:
    """A hunt's report without timings: the same text on every run (what the notebook shows).

    Lines longer than ``width`` are wrapped at spaces (same indentation, 4 more
    for continuations), since JupyterLab wraps them mid-word; the Python
    snippet after ``As Python (...):`` stays verbatim, to be copied and run.
    """
    head, snippet = result.report_parts(timings=False)
    return Text(_wrap(head, width) + snippet)


def workload_steps(workload, width: int = 100) -> Text:
    """A workload as the hunter prints it (:func:`mambalab.lab.hunt_report.step_list`), long lines wrapped."""
    from mambalab.lab.hunt_report import step_list

    return Text(_wrap("\n".join(step_list(workload)), width))


# The report's lines a reader needs first: what failed, how big it was, what it shrank to, the fixed run.
_GIST = ("  DIVERGED", "  CRASH", "  ILLEGAL", "  original workload:", "  shrunk in", "  (not shrunk)", "  => ",
         "  with every fix:")


def hunt_summary(result, width: int = 100) -> Folded:
    """A hunt's report (:func:`hunt_report`, no timings) folded: the outcome line, the failure, the
    sizes before and after shrinking and the fixed engine's verdict shown; the whole report (the
    minimal reproduction, the runnable snippet) in a closed ``<details>``. Its ``text/plain`` is the
    summary alone: short, and the same on every run of the same hunt."""
    full = str(hunt_report(result, width))
    lines = result.report_parts(timings=False)[0].splitlines()  # unwrapped: one line per fact
    at = next((i for i, line in enumerate(lines) if " FOUND after " in line or " random workloads" in line), 0)
    title = lines[at] if lines else ""
    kept = [line for i, line in enumerate(lines) if i != at and (line.startswith(_GIST) or line.startswith("(workload "))]
    return Folded(title, tuple(kept), full)
