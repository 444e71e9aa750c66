"""Panel for #41873 ``stale-is-prefilling``: a padded row's stale counts make it look like a prefill.

A, B, D decode in a FULL graph; D finishes; C and a long X arrive; X is
aborted after its first prefill chunk; then A, B, C decode padded to 4 rows
with X's stale row as padding. Pre-fix ``is_prefilling`` is computed over the
padded rows: row 3 says True, Mamba counts a prefill, skips the CUDA-graph
buffer refresh, and the FULL graph replays last step's slots: C reads and
writes D's freed block. Knobs: ``max_num_seqs``, X's prompt length, whether
X is aborted, FULL graphs.
"""

from __future__ import annotations

from mambalab.lab import scenarios
from mambalab.worker.model_runner import RunnerConfig
from mambalab.widgets.bug_spec import SEED, BugSpec, padding_note
from mambalab.widgets.controls import Knob

KNOBS = (
    SEED,
    Knob("max_num_seqs", "max_num_seqs", "int", 4, 1, 8, help="the largest batch; graph sizes 1, 2, 4, 8 up to it"),
    Knob("x_len", "X prompt length", "int", 36, 1, 44,
         help="a prompt longer than the step's token budget (32) is prefilled in chunks"),
    Knob("abort_x", "abort X at step 4", "bool", True, help="abort X after its first prefill chunk"),
    Knob("cudagraph", "FULL CUDA graphs", "bool", True, help="off: every step runs eagerly, nothing is padded"),
)


def explain(k: dict) -> list[str]:
    rc = RunnerConfig(max_num_seqs=k["max_num_seqs"], max_num_batched_tokens=32, max_model_len=48,
                      cudagraph=k["cudagraph"])
    out = []
    if not k["abort_x"]:
        out.append("X is not aborted: it finishes its prompt and decodes, so no stale 'prefilling' row is left "
                   "behind as padding.")
    elif k["x_len"] <= 24:
        out.append(f"X's prompt ({k['x_len']} tokens) fits the step's token budget (32, shared with A, B and C): "
                   f"it is prefilled in one chunk, so its row may not be left 'prefilling' when it is aborted.")
    rows = min(3, k["max_num_seqs"])
    out.append(padding_note(rows, rc, "a stale padded row"))
    return out


SPEC = BugSpec(
    bug="stale-is-prefilling",
    knobs=KNOBS,
    build=scenarios.stale_is_prefilling,
    focus_rank=lambda k: 0,
    views=("block_table", "metadata", "state_pool", "timeline"),
    first_view="metadata",
    lesson=("Step to step 4. A, B, C decode, padded to 4 rows; row 3 is X's stale row (aborted mid-prefill). "
            "Pre-fix, Metadata shows padded row 3 with is_prefilling=True counted as a prefill: the CUDA-graph "
            "buffers are NOT refreshed and the FULL graph replays last step's slots — C's row reads D's freed, "
            "NaN-poisoned block (State pool) and C's tokens diverge (Timeline). Toggle the fix at step 4: the same "
            "step refreshes the buffers."),
    explain=explain,
)
