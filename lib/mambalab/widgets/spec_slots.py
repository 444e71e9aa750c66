"""Panel for #41233 ``spec-slots``: ``mamba_cache_mode="all"`` + speculative decoding, three parts.

* ``/width``: the persistent ``state_indices_tensor_d`` lacks the speculative
  columns: CUDA-graph capture fails at engine start-up (shape mismatch);
* ``/padding``: the ``block_idx_*`` buffers are sliced by the decode *token*
  count with a stale tail: also caught at capture;
* ``/gather``: the mixer gathers one slot at ``block_idx_last_computed_token``
  instead of ``1 + num_spec`` slots from last step's anchor: after a partial
  acceptance the next step starts from the wrong state.

Knobs: the part, speculative tokens (up to 3), the acceptance (the
scenario's partial-acceptance schedule or a fixed rate), requests.
"""

from __future__ import annotations

from mambalab.lab import scenarios
from mambalab.widgets.bug_spec import SEED, BugSpec
from mambalab.widgets.controls import Knob

PARTS = (
    ("all three parts (spec-slots)", "spec-slots"),
    ("width: missing spec columns", "spec-slots/width"),
    ("padding: wrong buffer padding", "spec-slots/padding"),
    ("gather: single-slot gather", "spec-slots/gather"),
)

KNOBS = (
    SEED,
    Knob("num_spec", "speculative tokens", "choice", "auto",
         options=(("auto: 1 + seed % 2", "auto"), ("0 (no speculation)", 0), ("1", 1), ("2", 2), ("3 (maximum)", 3)),
         help="draft tokens verified per decode step"),
    Knob("acceptance", "acceptance", "choice", "schedule",
         options=(("scenario schedule (partial)", "schedule"), ("0.0", 0.0), ("0.25", 0.25), ("0.5", 0.5),
                  ("0.75", 0.75), ("1.0 (all accepted)", 1.0)),
         help="how many drafts the target model accepts"),
    Knob("requests", "requests", "int", 2, 0, 4, help="requests decoding together"),
)


def explain(k: dict) -> list[str]:
    ns = 1 + k["seed"] % 2 if k["num_spec"] == "auto" else int(k["num_spec"])
    out = []
    if ns == 0:
        out.append("No speculative tokens: there are no spec columns, no partial acceptance and no multi-slot "
                   "gather, so no part of #41233 can show.")
    elif ns == 3:
        out.append("3 speculative tokens, the maximum here: each decode row verifies 4 tokens and touches 4 "
                   "state slots per step (the interpreter is slowest here).")
    if ns and k["acceptance"] == 1.0:
        out.append("Every draft is accepted: the /gather symptom follows a partial acceptance, so it may not show.")
    if k["requests"] == 0:
        out.append("No requests: only start-up (CUDA-graph capture) runs; /width and /padding still fail there.")
    return out


SPEC = BugSpec(
    bug="spec-slots",
    knobs=KNOBS,
    build=scenarios.spec_slots,
    focus_rank=lambda k: 0,
    views=("block_table", "metadata", "state_pool", "timeline"),
    first_view="metadata",
    lesson=("<b>width</b> and <b>padding</b> fail while CUDA graphs are captured at start-up: the panel shows the "
            "crash and there is nothing to step. Choose <b>gather</b> to step: in 'all' mode each decode row "
            "needs 1 + num_spec state slots from the previous step's anchor (Metadata: the block_idx_* columns); "
            "pre-fix one slot at block_idx_last_computed_token is read, so after a partial acceptance the next "
            "step starts from the wrong state (Timeline)."),
    explain=explain,
    parts=PARTS,
)
