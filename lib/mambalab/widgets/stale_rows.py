"""Panel for #37728 ``stale-rows``: an idle DP rank's dummy batch reads and writes stale block-table rows.

DP 2 with prefix caching. On rank 1, A finishes early and rank 1 goes idle
while rank 0 keeps decoding C: every step rank 1 runs a dummy batch padded
to rank 0's size with ``num_reqs == num_reqs_padded``, so no null fill masks
its rows. Pre-fix, A's finished row was never cleared and the dummy run does
not commit the table: dummy rows write A's freed, cached blocks; D later
arrives sharing A's first block and starts from that corrupted state.
Knobs: DP ranks, ``max_num_seqs``, the step D arrives.
"""

from __future__ import annotations

from mambalab.lab import scenarios
from mambalab.widgets.bug_spec import SEED, BugSpec
from mambalab.widgets.controls import Knob

KNOBS = (
    SEED,
    Knob("dp", "DP ranks", "int", 2, 1, 4, help="data-parallel ranks; A and D go to rank 1, C to rank 0"),
    Knob("max_num_seqs", "max_num_seqs", "int", 4, 1, 8, help="the largest batch per rank"),
    Knob("d_arrives", "D arrives at step", "int", 10, 2, 16,
         help="when D (sharing A's first block) arrives on rank 1"),
)


def explain(k: dict) -> list[str]:
    out = []
    if k["dp"] == 1:
        out.append("One DP rank: A, C and D share rank 0, no rank is ever idle, so no dummy batch runs and "
                   "#37728 cannot happen.")
    else:
        out.append(f"Rank 1 runs a dummy batch in every step it has no request (after A finishes, until D "
                   f"arrives at step {k['d_arrives']}) while rank 0 decodes C.")
        if k["dp"] > 2:
            who = "Rank 2 never gets a request: it runs" if k["dp"] == 3 else \
                f"Ranks 2–{k['dp'] - 1} never get a request: they run"
            out.append(f"{who} dummy batches over empty rows (null block only: harmless).")
    return out


SPEC = BugSpec(
    bug="stale-rows",
    knobs=KNOBS,
    build=scenarios.stale_rows,
    focus_rank=lambda k: min(1, k["dp"] - 1),
    views=("block_table", "metadata", "state_pool", "timeline"),
    first_view="block_table",
    lesson=("Watch <b>rank 1</b>. A finishes at step 2; from step 3 rank 1 only runs dummy batches. Pre-fix its "
            "block table still holds A's row (never cleared, never committed): the dummy row reads and writes "
            "block 1, A's freed but cached first block (Block table, State pool). At step 10 D arrives with "
            "A's first 4 tokens, hits that cached block and starts from the state the dummy batches wrote "
            "(Timeline: D diverges). With the fix the row is cleared and committed: the dummy row points at "
            "the null block."),
    explain=explain,
)
