"""Panel for #42430 ``single-token-extend``: a live one-token prompt chunk replays the decode graph as a "prefill".

A and B decode while X's 7-token prompt is chunked by a token budget of 8, so
that X's last chunk is one token. That step every row schedules one token:
the shape-based dispatch replays the FULL uniform-decode graph, but X's
``is_prefilling`` is still True and, before #42430, the Mamba builder's split
(``treat_short_extends_as_decodes=False``) counted it as a prefill and skipped
the graph-buffer refresh: the graph reads last step's slots. The scenario has
only the seed as a knob.
"""

from __future__ import annotations

from mambalab.lab import scenarios
from mambalab.widgets.bug_spec import SEED, BugSpec


def explain(k: dict) -> list[str]:
    return ["X arrives at step 4; its prompt is split by the token budget so that step 5 holds its one-token "
            "last chunk beside A's and B's decodes."]


SPEC = BugSpec(
    bug="single-token-extend",
    knobs=(SEED,),
    build=scenarios.single_token_extend,
    focus_rank=lambda k: 0,
    views=("metadata", "state_pool", "timeline", "block_table"),
    first_view="metadata",
    lesson=("Step to step 5: X's one-token last chunk is row 2 of a FULL decode graph. Pre-fix the builder counts "
            "it as a prefill (it still has <code>is_prefilling</code>), skips the CUDA-graph buffer refresh, and "
            "the graph reads last step's slots (Metadata): X's next token comes from the wrong state (Timeline). "
            "With the fix a one-token chunk with prior state is a decode and the buffers are refreshed."),
    explain=explain,
)
