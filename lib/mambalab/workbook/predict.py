"""Predict, then Step: a question the learner answers before the cell that shows the answer runs.

A notebook asks (markdown), the learner sets ``my_answer`` and calls
:func:`predict`, then the next cell steps the engine (or the kernel) and shows
what happened. Each :class:`Prediction`'s truth is computed with the library
(a scenario replay, a kernel launch, the bookkeeping), never typed in, and
only once the learner has answered. The verdict says right or not; it shows
the true value only when asked (``reveal=True``): the next cell shows it anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from mambalab.viz.text import Text


@dataclass(frozen=True)
class Prediction:
    id: str
    question: str
    truth: Callable[[], Any]
    normalise: Callable[[Any], Any] = lambda x: x
    why: str = ""


def _as_rows(x) -> list[int]:
    return sorted(int(v) for v in x)


def _kernel(x) -> str:
    """A kernel named loosely ("conv", "SSU") as its function name."""
    w = str(x).strip().lower()
    if "conv" in w:
        return "causal_conv1d_update"
    if "ssu" in w or "selective" in w or "ssm" in w:
        return "selective_state_update"
    if "gdn" in w or "delta" in w or "recurrent" in w:
        return "fused_recurrent_gated_delta_rule"
    return w


def _01_a():
    from mambalab.lab.bugs import BugConfig
    from mambalab.workbook.kernel_launch import launch_ssu

    run = launch_ssu([3, 5, 2, -1], BugConfig.with_bugs("pad-minus-one"))
    return -1 * int(run.state.stride(0))


def _01_b():
    from mambalab.constants import NULL_BLOCK_ID
    from mambalab.lab.bugs import GuardMode

    indices = [3, 5, 2, 0, 0, 0]
    return [r for r, i in enumerate(indices) if GuardMode.NEGATIVE.is_live(i) and i == NULL_BLOCK_ID]


def _01_c():
    from mambalab.lab.scenarios import replay

    return replay("pad-minus-one").verdict.illegal.kernel


def _02_a():
    from mambalab.lab.bugs import BugConfig
    from mambalab.workbook.mini_world import idle_rank

    return sorted(set(idle_rank(BugConfig.with_bugs("stale-rows"), clear_row=True).dummy_blocks()) - {0})


def _02_b():
    from mambalab.lab.scenarios import replay

    return replay("stale-rows").verdict.first.req_id


def _02_c():
    from mambalab.lab.bugs import BugConfig
    from mambalab.lab.scenarios import move_row_stale_source, run_workload

    _, records = run_workload(move_row_stale_source(0), BugConfig.with_bugs("move-row-stale-source"))
    rec = next(r for r in records if r.step == 4 and r.rank == 1)
    return sorted(row for row, slots in rec.kernel_writes.items() if any(s > 0 for s in slots))


def _03_start_slot(bug: str, fixed: bool, step: int = 4, row: int = 0) -> int:
    """The slot a speculative decode row's kernel starts from (``spec-slots``' scenario, seed 0)."""
    from mambalab.workbook.tracer import trace

    return trace(bug, fixed=fixed, at=[step]).start_slot(step, row)


def _03_a():
    return _03_start_slot("spec-slots", fixed=True)


def _03_b():
    return _03_start_slot("spec-slots/gather", fixed=False)


def _04_c():
    from mambalab.lab.bugs import BugConfig
    from mambalab.lab.scenarios import run_workload, single_token_extend

    _, records = run_workload(single_token_extend(0), BugConfig.with_bugs("single-token-extend"))
    return next(r for r in records if r.step == 5 and r.kind == "step").num_decodes


def _04_record(step: int = 4):
    from mambalab.lab.bugs import BugConfig
    from mambalab.lab.scenarios import run_workload, stale_is_prefilling

    _, records = run_workload(stale_is_prefilling(0), BugConfig.with_bugs("stale-is-prefilling"))
    return next(r for r in records if r.step == step and r.kind == "step")


def _04_a():
    return _04_record().num_prefills


def _04_b():
    rec = _04_record()
    row = rec.req_ids.index("C")
    return int(rec.state_slots[row][0])


PREDICTIONS: dict[str, Prediction] = {p.id: p for p in [
    Prediction("01.a", "the element offset of row 3's first load (index -1, pool (8, 2, 4, 4))", _01_a, int,
               "slot -1 starts one whole slot (2*4*4 = 32 floats) before the pool"),
    Prediction("01.b", "the rows that store into block 0 under the '< 0' guard", _01_b, _as_rows,
               "to '< 0' a padded row's 0 is a real slot: every such row loads and stores block 0"),
    Prediction("01.c", "the first kernel of step 2 to meet the padded row's -1", _01_c, _kernel,
               "the causal conv runs before the SSU in the Mamba2 mixer"),
    Prediction("02.a", "the live blocks the dummy batch reads with clear_row but no commit", _02_a, _as_rows,
               "the dummy batch reads the device copy, which no commit has touched since the last real step"),
    Prediction("02.b", "the request whose tokens diverge (A, C or D)", _02_b, lambda x: str(x).strip().upper(),
               "D starts from the cached block of A's prompt, which the dummy rows rewrote"),
    Prediction("02.c", "the dummy rows of rank 1's step 4 that store into a live block", _02_c, _as_rows,
               "row 0 was cleared when B finished; row 1 is the copy move_row left behind"),
    Prediction("03.a", "the block r0's kernel starts from at step 4 (fixed)", _03_a, int,
               "the gather window starts at the anchor (column 2) and num_accepted_tokens = 2 picks its second "
               "column, 3: block 4, the state after the last token step 3 accepted"),
    Prediction("03.b", "the block r0 starts from at step 4 under the pre-fix /gather", _03_b, int,
               "one slot at block_idx_last_computed_token (column 2: block 3), whatever step 3 accepted: "
               "the state after step 3's first token, not after its accepted draft"),
    Prediction("04.a", "how many prefills Mamba's split counts in step 4", _04_a, int,
               "the padded row's stale flag, ORed into the split, is one prefill"),
    Prediction("04.b", "the slot C (row 2) reads in the replayed graph at step 4", _04_b, int,
               "the graph reads last step's buffer: row 2 held D's slot then"),
    Prediction("04.c", "how many rows the pre-fix builder counts as decodes in step 5", _04_c, int,
               "X's row still has is_prefilling set: the split ends the decodes before it"),
]}


class PredictResult(Text):
    """A prediction's verdict: one line; ``right`` is None while unanswered."""

    def __new__(cls, pid: str, line: str, right: bool | None) -> "PredictResult":
        self = super().__new__(cls, line)
        self.prediction_id, self.right = pid, right
        return self

    def __getnewargs__(self):
        return self.prediction_id, str(self), self.right


def predict(prediction_id: str, answer: Any, reveal: bool = False) -> PredictResult:
    """Judge the learner's ``answer`` (``None``: not answered yet) against the library's truth."""
    p = PREDICTIONS[prediction_id]
    head = f"prediction {p.id} ({p.question})"
    if answer is None:
        return PredictResult(p.id, f"{head}: not answered yet (set my_answer, then run this cell)", None)
    truth = p.normalise(p.truth())
    try:
        mine = p.normalise(answer)
    except Exception as e:  # noqa: BLE001 - reported to the learner
        return PredictResult(p.id, f"{head}: could not read {answer!r} ({type(e).__name__}: {e})", False)
    if mine == truth:
        return PredictResult(p.id, f"{head}: ✓ {mine!r} is what happens: {p.why}", True)
    told = f" It is {truth!r}: {p.why}." if reveal else " Run the next cell to see what happens."
    return PredictResult(p.id, f"{head}: ✗ not {mine!r}.{told}", False)


__all__ = ["PREDICTIONS", "Prediction", "PredictResult", "predict"]
