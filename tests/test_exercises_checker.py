"""The exercises' checker: random cases (property style, seeded), the expected value shown only on request."""

from __future__ import annotations

from mambalab import workbook as wb
from mambalab.workbook.exercises import CASES, EXERCISES


def test_every_exercise_draws_many_distinct_seeded_cases():
    for eid, ex in EXERCISES.items():
        cases = ex.cases()
        assert len(cases) == CASES, eid
        assert repr(cases) == repr(ex.cases()), eid  # seeded by the id: the same on every run
        assert len({repr(args) for args, _ in cases}) >= CASES // 4, eid  # not three fixed ones


def test_a_miss_hides_the_expected_value_until_asked():
    def wrong(num_reqs, max_num_seqs):
        return -1

    hidden = wb.check("00.1", wrong)
    assert not hidden.passed and "returned -1" in hidden and "expected" in hidden
    assert "show_expected=True" in hidden and ", expected " not in hidden
    shown = wb.check("00.1", wrong, show_expected=True)
    assert ", expected " in shown and "show_expected" not in shown


def test_random_cases_catch_an_answer_that_fits_power_of_two_batches_only():
    # Pads requests to min(next capture size, max_num_seqs): right whenever max_num_seqs is itself a capture
    # size, wrong where the next size has no FULL decode graph (PIECEWISE: requests are not padded).
    def capped(num_reqs, max_num_seqs):
        from mambalab.worker.cudagraph_dispatcher import default_capture_sizes

        size = min(s for s in default_capture_sizes(max_num_seqs) if s >= num_reqs)
        return max(num_reqs, min(size, max_num_seqs))

    assert not wb.check("00.1", capped).passed


def test_guard_effects_cover_every_guard_and_outcome():
    seen = {(args[1], expected) for args, expected in EXERCISES["01.2"].cases()}
    assert {g for g, _ in seen} == {"NONE", "EQ_NULL", "NEGATIVE", "NULL"}
    assert {e for _, e in seen} == {"illegal", "null block", "own slot", "skipped"}
    assert ("NULL", "skipped") in seen and ("EQ_NULL", "illegal") in seen and ("NEGATIVE", "null block") in seen


def test_rows_on_wrong_state_needs_the_graph_and_the_skipped_refresh():
    outcomes = [expected for _, expected in EXERCISES["04.3"].cases()]
    assert any(outcomes) and any(not o for o in outcomes)

    def compare_only(prev, own, qlens, pref):  # the old question's answer: ignores when the graph replays
        return [i for i, o in enumerate(own) if prev[i] != o]

    assert not wb.check("04.3", compare_only).passed
