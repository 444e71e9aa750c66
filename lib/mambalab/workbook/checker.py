"""The exercises' checker: :func:`check` runs a learner's function on an exercise's random cases and
says correct, not answered yet, or the first miss (its expected value only on request); :func:`reveal` prints a solution and its check as a
:class:`Solution` (folded in a notebook)."""

from __future__ import annotations

import html
import inspect
import textwrap
from typing import Callable

import numpy as np
import torch

from mambalab.viz.text import Text
from mambalab.workbook.exercises import EXERCISES


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray):
        a = a.tolist()
    if isinstance(a, torch.Tensor):
        a = a.tolist()
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001
        return False


class CheckResult(Text):
    """An exercise's check: one line to show, ``passed`` to decide on, ``detail`` without the exercise id."""

    def __new__(cls, exercise_id: str, detail: str, passed: bool) -> "CheckResult":
        self = super().__new__(cls, f"exercise {exercise_id}: {detail}")
        self.exercise_id, self.detail, self.passed = exercise_id, detail, passed
        return self

    def __getnewargs__(self) -> tuple[str, str, bool]:  # copy and pickle
        return self.exercise_id, self.detail, self.passed


def check(exercise_id: str, fn: Callable, show_expected: bool = False) -> CheckResult:
    """Run the learner's ``fn`` on the exercise's random cases; one line: correct, not answered yet, or the
    first miss. The expected value of a miss is shown only when asked (``show_expected=True``)."""
    ex = EXERCISES[exercise_id]
    cases = ex.cases()
    for args, expected in cases:
        call = f"{ex.name}({ex.describe_args(args)})"
        try:
            got = fn(*args)
        except NotImplementedError:
            return CheckResult(ex.id, f"not answered yet ({ex.name} raises NotImplementedError)", False)
        except Exception as e:  # noqa: BLE001 - reported to the learner
            return CheckResult(ex.id, f"{call} raised {type(e).__name__}: {e}", False)
        if got is None:
            return CheckResult(ex.id, f"not answered yet ({ex.name} returned None)", False)
        if not _same(got, expected):
            tail = (f", expected {expected!r}" if show_expected else
                    f" (to see the expected value: check({ex.id!r}, {ex.name}, show_expected=True))")
            return CheckResult(ex.id, f"not yet: {call} returned {got!r}{tail}", False)
    return CheckResult(ex.id, f"correct ({len(cases)} cases)", True)


class Solution(Text):
    """A revealed solution: its source, then its check, as plain text; in a notebook, folded.

    JupyterLab clears a cell's ``outputs_hidden`` flag when the cell runs, so
    after Run All a plain-text solution would be on show: the HTML form is a
    closed ``<details>`` whose summary gives only the check's verdict.
    """

    def __new__(cls, exercise_id: str, source: str, verdict: str) -> "Solution":
        self = super().__new__(cls, f"{source}\n\n{verdict}")
        self.exercise_id, self.source, self.verdict = exercise_id, source, verdict
        return self

    def __getnewargs__(self) -> tuple[str, str, str]:  # copy and pickle
        return self.exercise_id, self.source, self.verdict

    def _repr_html_(self) -> str:
        return (f"<details class='mambalab-solution'><summary style='cursor:pointer'>"
                f"<b>Solution {html.escape(self.exercise_id)} — click to show</b> · {html.escape(self.verdict)}"
                f"</summary><pre>{html.escape(self.source)}</pre></details>")


def reveal(exercise_id: str, fn: Callable) -> Solution:
    """A solution's source, then its check (:class:`Solution`: folded in a notebook)."""
    src = textwrap.dedent(inspect.getsource(fn)).rstrip()
    return Solution(exercise_id, src, str(check(exercise_id, fn)))
