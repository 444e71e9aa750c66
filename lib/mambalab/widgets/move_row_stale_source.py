"""Panel for #49757 ``move-row-stale-source``: the row ``condense`` vacated still names a live request's blocks.

DP 2 with prefix caching. On rank 1, A finishes first and ``condense`` moves
B from row 1 down into row 0 with ``BlockTable.move_row``, which (v0.19 -
v0.26) copied the row and left the source as it was. B finishes: ``clear_row``
clears its new row 0, but row 1 still holds B's freed block ids. Rank 1 idles
while rank 0 decodes two requests, so its dummy batch has two rows and row 1
writes through B's blocks; D later arrives sharing B's first block. The
scenario has only the seed as a knob.
"""

from __future__ import annotations

from mambalab.lab import scenarios
from mambalab.widgets.bug_spec import SEED, BugSpec


def explain(k: dict) -> list[str]:
    return ["Rank 1: A finishes at step 2, condense moves B to row 0, B finishes; from step 4 rank 1 runs a "
            "2-row dummy batch (rank 0 decodes C and E) until D arrives at step 11."]


SPEC = BugSpec(
    bug="move-row-stale-source",
    knobs=(SEED,),
    build=scenarios.move_row_stale_source,
    focus_rank=lambda k: 1,
    views=("block_table", "state_pool", "timeline", "metadata"),
    first_view="block_table",
    lesson=("Watch <b>rank 1</b> and step to step 4, its first dummy run. Row 0 was cleared when B finished; "
            "pre-fix, row 1 still holds the copy <code>move_row</code> left when <code>condense</code> moved B "
            "down: the dummy row writes B's freed, cached blocks (Block table, State pool), and D, which shares "
            "B's first block, diverges (Timeline). With the fix <code>move_row</code> clears its source and both "
            "dummy rows hold the null block."),
    explain=explain,
)
