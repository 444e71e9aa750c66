"""A long text output folded: a short summary shown, the full text in a closed ``<details>``.

Notebook 06 prints recorded reports and tables of 20-100 lines; a reader needs their gist first.
:func:`fold` returns a :class:`Folded`: in Jupyter its HTML is the summary lines, then the whole
text behind a click; its ``text/plain`` (what nbval compares, and what a console shows) is the
summary alone, so it stays short and changes only when the summary does.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Folded:
    """``title`` and ``kept`` lines shown; ``text`` folded (expand to read it)."""

    title: str
    kept: tuple[str, ...]
    text: str

    @property
    def num_lines(self) -> int:
        return len(self.text.splitlines())

    def summary(self) -> str:
        lines = [self.title, *self.kept, f"({self.num_lines} lines folded: expand to read them)"]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(self.summary())

    def _repr_html_(self) -> str:
        shown = "\n".join(html.escape(x) for x in (self.title, *self.kept))
        return (f"<pre>{shown}</pre><details><summary>{html.escape(self.title)}: the full text "
                f"({self.num_lines} lines)</summary><pre>{html.escape(self.text)}</pre></details>")


def fold(text: str, title: str, keep: Iterable[str] = ()) -> Folded:
    """Fold ``text`` under ``title``; the lines that contain any of ``keep`` stay visible (in order,
    each distinct line once)."""
    pats = tuple(keep)
    kept: list[str] = []
    for line in str(text).splitlines():
        if pats and any(p in line for p in pats) and line not in kept:
            kept.append(line)
    return Folded(title, tuple(kept), str(text))


__all__ = ["Folded", "fold"]
