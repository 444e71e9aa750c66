"""Panel for #39064 ``guard-lt-zero``: kernels skip only ``< 0`` while padding became ``0``.

After #35431 padded rows carry the null block 0, but the pre-fix FLA kernels
still skip only negative indices: every padded row loads block 0 as its
initial state and stores its result into it, racing on the null block. A
request that arrives later starts from the null block, which is no longer
the zero state. Knobs: requests at step 1, ``max_num_seqs``, FULL graphs.
"""

from __future__ import annotations

from mambalab.lab import scenarios
from mambalab.worker.model_runner import RunnerConfig
from mambalab.widgets.bug_spec import SEED, BugSpec, padding_note
from mambalab.widgets.controls import Knob

KNOBS = (
    SEED,
    Knob("requests", "requests at step 1", "int", 3, 0, 8,
         help="requests decoding together from step 1 ('late' arrives at step 4 anyway)"),
    Knob("max_num_seqs", "max_num_seqs", "int", 4, 1, 8, help="the largest batch; graph sizes 1, 2, 4, 8 up to it"),
    Knob("cudagraph", "FULL CUDA graphs", "bool", True, help="off: every step runs eagerly, nothing is padded"),
)


def explain(k: dict) -> list[str]:
    rc = RunnerConfig(max_num_seqs=k["max_num_seqs"], cudagraph=k["cudagraph"])
    rows = min(k["requests"], k["max_num_seqs"])
    out = [padding_note(rows, rc, "a padded row writing the null block")] if k["requests"] else [
        "No request at step 1: only 'late' arrives (step 4) and decodes alone."]
    return out


SPEC = BugSpec(
    bug="guard-lt-zero",
    knobs=KNOBS,
    build=scenarios.guard_lt_zero,
    focus_rank=lambda k: 0,
    views=("block_table", "metadata", "state_pool", "timeline", "access_map"),
    first_view="access_map",
    lesson=("Step to step 2 (the first padded FULL-graph decode). Pre-fix the padded row loads the null block 0 "
            "as its initial state and stores into it (Access map: a row in column 0, recorded by the sanitizer; "
            "State pool: ▲ on slot 0) — the null block is no longer zero. From then on whatever starts from "
            "block 0 (the 'late' request, step 4) starts from garbage instead of zeros, and the final states "
            "differ from the reference (verdict). With the fix kernels skip index ≤ 0 and slot 0 stays "
            "untouched."),
    explain=explain,
)
