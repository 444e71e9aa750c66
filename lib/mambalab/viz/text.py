"""Text: a string that a notebook shows as plain text, without quotes.

Summaries, tables and verdict lines are returned as ``Text`` so that a cell
that ends with one shows it the way it reads, and nbval compares it as text.
"""

from __future__ import annotations


class Text(str):
    """A string that a notebook displays as plain text (no quotes), e.g. a summary."""

    def _repr_pretty_(self, p, cycle) -> None:  # IPython's pretty printer
        p.text(str(self))


__all__ = ["Text"]
