"""A replay (or a trace) in a few deterministic lines: exit code, verdict, and the mechanisms, with
per-step sentences that differ only in the step number folded into step ranges."""

from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING, Iterable, Sequence

from mambalab.lab.scenarios import ReplayResult
from mambalab.viz.text import Text

if TYPE_CHECKING:
    from mambalab.workbook.step_trace import Trace


_STEP_LINE = re.compile(r"^step (\d+)(, rank \d+)?: (.*)$")


def _ranges(values: Iterable[int]) -> str:
    vs = sorted(set(values))
    out, i = [], 0
    while i < len(vs):
        j = i
        while j + 1 < len(vs) and vs[j + 1] == vs[j] + 1:
            j += 1
        out.append(str(vs[i]) if i == j else f"{vs[i]}-{vs[j]}")
        i = j + 1
    return ", ".join(out)


def fold_steps(lines: Sequence[str]) -> list[str]:
    """Fold per-step sentences that differ only in the step number into one line with step ranges.

    ``["step 3, rank 1: x", "step 4, rank 1: x", "step 9: y"]`` →
    ``["steps 3-4, rank 1: x", "step 9: y"]`` (first-appearance order).
    """
    groups: dict[tuple[str, str], list[int]] = {}
    order: list[tuple[str, str] | str] = []
    for line in lines:
        m = _STEP_LINE.match(line)
        if not m:
            order.append(line)
            continue
        key = (m.group(2) or "", m.group(3))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(m.group(1)))
    out = []
    for item in order:
        if isinstance(item, str):
            out.append(item)
            continue
        steps = groups[item]
        word = "step" if len(steps) == 1 else "steps"
        out.append(f"{word} {_ranges(steps)}{item[0]}: {item[1]}")
    return out


def summary_of(result: "ReplayResult | Trace", *, mechanisms: int = 3, width: int = 110) -> Text:
    """A replay (or a trace) in a few deterministic lines: exit code, verdict, mechanisms."""
    from mambalab.workbook.step_trace import Trace  # step_trace imports this module: Trace prints its summary

    if isinstance(result, Trace):
        result = result.result
    mode = "fixed" if result.fixed else "pre-fix"
    lines = [f"{result.bug} ({mode}, seed {result.seed}): exit code {result.exit_code}"]
    lines += textwrap.wrap(result.verdict.summary(), width, initial_indent="  ", subsequent_indent="    ")
    folded = fold_steps(result.signatures)
    for s in folded[:mechanisms]:
        lines += textwrap.wrap(f"mechanism: {s}", width, initial_indent="  ", subsequent_indent="    ")
    if len(folded) > mechanisms:
        lines.append(f"  (+{len(folded) - mechanisms} more mechanism line(s))")
    return Text("\n".join(lines))
