"""Panel for #48475 ``zero-accepted`` (open upstream): a GDN kernel reads state column ``num_accepted - 1 = -1``.

Speculative decoding: the GDN decode kernels start from column
``num_accepted_tokens - 1`` of a row's state indices, unbounded in every
release up to 0.33. The lab's zero comes from a padded row (the switch gives
padded rows an accepted count of 0, one of the sources #48475 names): row 0
of a capture batch then reads before the index tensor, at engine start-up,
and the sanitizer reports it. The Mamba2 SSU clamps ``max(num_accepted - 1,
0)`` and is not involved. Fixed as the open #50021 proposes (a masked load).
The scenario has only the seed as a knob.
"""

from __future__ import annotations

from mambalab.lab import scenarios
from mambalab.widgets.bug_spec import SEED, BugSpec


def explain(k: dict) -> list[str]:
    return ["Every CUDA-graph batch has padded rows, the capture batches at start-up included: the first capture "
            "is where a zero count first reaches the GDN kernel."]


SPEC = BugSpec(
    bug="zero-accepted",
    knobs=(SEED,),
    build=scenarios.zero_accepted,
    focus_rank=lambda k: 0,
    views=("access_map", "metadata", "timeline", "block_table"),
    first_view="access_map",
    lesson=("Pre-fix the engine stops before step 1: capturing the CUDA graphs runs padded rows whose accepted "
            "count is 0, and the GDN kernel loads column -1 of the state indices, before the tensor (the "
            "verdict names the access). The Mamba2 SSU clamps the column and is not involved. Toggle the fix: the "
            "bounded load skips the row and every request matches its reference."),
    explain=explain,
)
