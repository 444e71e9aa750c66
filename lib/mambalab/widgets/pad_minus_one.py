"""Panel for #35431 ``pad-minus-one``: padded block-table rows hold ``-1`` and a trusting kernel follows it.

Three requests decode in a FULL CUDA graph of 4 rows: row 3 is padding. Pre-fix
its block-table row (and its decode state index) is ``PAD_SLOT_ID = -1``; a
kernel that trusts the index computes ``state_ptr + (-1) * stride`` and the
sanitizer reports the illegal access (a CUDA illegal memory access on a GPU).
Knobs: how many requests decode together, ``max_num_seqs`` (hence the graph
sizes, down to capture size 1) and FULL graphs on/off.
"""

from __future__ import annotations

from mambalab.lab import scenarios
from mambalab.worker.model_runner import RunnerConfig
from mambalab.widgets.bug_spec import SEED, BugSpec, padding_note
from mambalab.widgets.controls import Knob

KNOBS = (
    SEED,
    Knob("requests", "requests", "int", 3, 0, 8, help="requests that arrive at step 1 and decode together"),
    Knob("max_num_seqs", "max_num_seqs", "int", 4, 1, 8,
         help="the largest batch; FULL decode graphs are captured for 1, 2, 4, 8 rows up to it"),
    Knob("cudagraph", "FULL CUDA graphs", "bool", True, help="off: every step runs eagerly, nothing is padded"),
)


def explain(k: dict) -> list[str]:
    rc = RunnerConfig(max_num_seqs=k["max_num_seqs"], cudagraph=k["cudagraph"])
    rows = min(k["requests"], k["max_num_seqs"])
    if k["requests"] == 0:
        return ["No requests: nothing is scheduled, no graph is padded and no -1 can reach a kernel."]
    return [padding_note(rows, rc, "the -1 of a padded row")]


SPEC = BugSpec(
    bug="pad-minus-one",
    knobs=KNOBS,
    build=scenarios.pad_minus_one,
    focus_rank=lambda k: 0,
    views=("block_table", "metadata", "state_pool", "timeline", "access_map"),
    first_view="block_table",
    lesson=("Step twice. Step 1 prefills eagerly; step 2 replays the FULL decode graph padded to 4 rows. "
            "Pre-fix, padded row 3 of the device block table and of <code>state_indices_tensor_d</code> holds "
            "<b>-1</b>; the decode kernel trusts it and the sanitizer stops the engine with an illegal memory "
            "access at slot -1 (Access map). With the fix, padded rows hold the null block 0, which every "
            "kernel skips."),
    explain=explain,
)
