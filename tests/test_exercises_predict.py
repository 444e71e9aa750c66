"""Predict, then Step (``mambalab.workbook.predict``): truths from the library, verdicts that hide them until asked."""

from __future__ import annotations

import pytest

from mambalab.workbook.predict import PREDICTIONS, predict


# 01.a and 01.c are read off a launch that reaches slot -1: only the interpreter's sanitizer can run it.
_SANITIZER = pytest.mark.cpu_only(reason="the truth is read off the sanitizer's report of a -1")
_PIDS = [pytest.param(pid, marks=_SANITIZER) if pid in ("01.a", "01.c") else pid for pid in sorted(PREDICTIONS)]


@pytest.mark.parametrize("pid", _PIDS)
def test_the_truth_is_right_and_a_wrong_guess_is_told_without_the_truth(pid):
    p = PREDICTIONS[pid]
    truth = p.truth()
    assert predict(pid, None).right is None and "not answered yet" in predict(pid, None)
    assert predict(pid, truth).right is True
    wrong = [-7] if isinstance(p.normalise(truth), list) else ("zzz" if isinstance(truth, str) else -7)
    told = predict(pid, wrong)
    verdict = told[len(f"prediction {pid} ({p.question})"):]  # the question may hold the digit
    assert told.right is False and repr(p.normalise(truth)) not in verdict and "next cell" in told
    assert repr(p.normalise(truth)) in predict(pid, wrong, reveal=True)


@_SANITIZER
def test_known_truths_of_the_chapters():
    assert PREDICTIONS["01.a"].truth() == -32  # slot -1 of an (8, 2, 4, 4) pool
    assert PREDICTIONS["01.b"].truth() == [3, 4, 5]
    assert predict("01.c", "the conv").right and not predict("01.c", "SSU").right
    assert PREDICTIONS["02.a"].truth() == [1, 2] and PREDICTIONS["02.b"].truth() == "D"
    assert predict("02.b", " d ").right
    assert PREDICTIONS["02.c"].truth() == [1]  # the row condense vacated, not the cleared one
    assert PREDICTIONS["04.a"].truth() == 1 and PREDICTIONS["04.b"].truth() == 3
    assert PREDICTIONS["04.c"].truth() == 2  # A and B; X's one-token chunk counts as a prefill


def test_an_unreadable_answer_is_a_verdict_not_an_error():
    got = predict("01.b", 5)
    assert got.right is False and "could not read 5" in got


def test_known_truths_of_chapter_03():
    assert PREDICTIONS["03.a"].truth() == 4  # anchor column 2 + num_accepted_tokens 2 - 1 = column 3: block 4
    assert PREDICTIONS["03.b"].truth() == 3  # pre-fix: one slot, at block_idx_last_computed_token (column 2)
