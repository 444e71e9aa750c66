"""The shrinker's bookkeeping on a stand-in for the engine (no kernels run): memoised runs, delta
debugging over events, the fixed engine checked once on the result with a fall-back when it fails
there, and the small budget for cosmetic families once the reproduction is short."""

import pytest

from mambalab.engine.core import Add, EngineConfig
from mambalab.lab import hunt_run, shrink as S
from mambalab.lab.bugs import BugConfig
from mambalab.lab.hunt_run import RunMemo, failure_kind
from mambalab.lab.verdict import Divergence, Verdict
from mambalab.lab.workload import Workload

BUGS = BugConfig.with_bugs("stale-rows")


def workload(n: int = 8, gap: int = 1) -> Workload:
    return Workload(EngineConfig(), {1 + gap * i: [Add(f"r{i}", (1, 2, 3, 4), 3)] for i in range(n)})


class FakeEngine:
    """A deterministic stand-in for ``hunt_run.run``: a workload runs ``last step + 2`` steps; with
    bugs on it diverges when ``r2`` and ``r5`` are both in it; the fixed engine passes, except where
    ``fixed_fails(workload)``."""

    def __init__(self, fixed_fails=lambda w: False):
        self.calls: list[tuple[str, bool, int]] = []
        self.fixed_fails = fixed_fails

    def __call__(self, w, bugs, max_steps=200, plant=None):
        ids = {e.req_id for evs in w.events.values() for e in evs}
        steps = max(w.events) + 2
        self.calls.append((hunt_run.workload_key(w), bool(bugs.enabled), max_steps))
        if steps > max_steps:
            return hunt_run._unfinished(max_steps), []
        if bugs.enabled and {"r2", "r5"} <= ids:
            return Verdict(ok=False, steps=steps, divergences=[Divergence("token", "r5", 0, steps, 0, 1, 2)]), []
        if not bugs.enabled and self.fixed_fails(w):
            return Verdict(ok=False, steps=steps, divergences=[Divergence("token", "r0", 0, steps, 0, 1, 2)]), []
        return Verdict(ok=True, steps=steps), []


@pytest.fixture
def fake(monkeypatch):
    eng = FakeEngine()
    monkeypatch.setattr(hunt_run, "run", eng)
    monkeypatch.setattr(hunt_run, "isolated", lambda plant=None: False)  # the stand-in runs here, on any device
    return eng


def test_memo_runs_each_workload_once_and_answers_other_limits(fake):
    memo = RunMemo()
    w = workload(6)  # 8 steps
    v1, _ = memo.run(w, BUGS)
    v2, _ = memo.run(w, BUGS, max_steps=50)
    assert v1 is v2 and len(fake.calls) == 1 and memo.hits == 1
    hang, _ = memo.run(w, BUGS, max_steps=5)  # it runs 8 steps: a limit of 5 stops it
    assert failure_kind(hang) == "hang" and hang.steps == 5 and len(fake.calls) == 1
    memo.run(w, BugConfig())  # other switches: another run
    assert len(fake.calls) == 2
    short = workload(6)
    memo2 = RunMemo()
    memo2.run(short, BUGS, max_steps=5)  # a stored hang answers smaller limits only
    memo2.run(short, BUGS, max_steps=4)
    assert len(fake.calls) == 3
    v, _ = memo2.run(short, BUGS, max_steps=20)
    assert len(fake.calls) == 4 and failure_kind(v) == "divergence"


def test_memo_of_a_search_keeps_only_failing_runs(fake):
    memo = RunMemo(remember_passing=False)
    ok = workload(2)
    memo.run(ok, BUGS)
    memo.run(ok, BUGS)
    assert len(fake.calls) == 2
    bad = workload(6)
    memo.run(bad, BUGS)
    memo.run(bad, BUGS)
    assert len(fake.calls) == 3


def test_chunks_drop_halves_then_quarters_with_each_dropped_request_s_events():
    w = workload(8)
    fam = S._families(w, Verdict(ok=True, steps=10), [])[1]
    assert fam.__name__ == "chunks"
    cands = list(fam())
    sizes = [sum(len(evs) for evs in c.events.values()) for _, c in cands]
    assert sizes[:2] == [4, 4] and sizes[2:6] == [6, 6, 6, 6] and len(cands) == 6


def test_shrink_runs_the_fixed_engine_once_on_the_result(fake):
    w = workload(8, gap=2)  # steps 1, 3, ..., 15: 17 steps
    v, r = hunt_run.run(w, BUGS)
    res = S.shrink(w, BUGS, v, r, baseline=BugConfig(), baseline_verdict=Verdict(ok=True, steps=17))
    ids = sorted(e.req_id for evs in res.workload.events.values() for e in evs)
    assert ids == ["r2", "r5"] and failure_kind(res.verdict) == "divergence"
    assert res.baseline is not None and res.baseline.ok
    fixed_runs = [c for c in fake.calls if not c[1]]
    assert len(fixed_runs) == 1 and fixed_runs[0][0] == hunt_run.workload_key(res.workload)
    assert res.runs == len(fake.calls) - 1  # every run counted once (the found workload's is the hunt's)
    # delta debugging: two events dropped in one kept candidate; every gap closed in one
    assert "drop events 1-2 of 8: 17 steps" in res.log and any(x.startswith("every gap closed") for x in res.log)
    assert max(res.workload.events) <= 3


def test_shrink_falls_back_when_the_fixed_engine_fails_the_result(monkeypatch):
    # the fixed engine fails any workload without r7: the result must keep r7
    eng = FakeEngine(fixed_fails=lambda w: "r7" not in {e.req_id for evs in w.events.values() for e in evs})
    monkeypatch.setattr(hunt_run, "run", eng)
    w = workload(8)
    v, r = hunt_run.run(w, BUGS)
    res = S.shrink(w, BUGS, v, r, baseline=BugConfig(), baseline_verdict=Verdict(ok=True, steps=10))
    ids = sorted(e.req_id for evs in res.workload.events.values() for e in evs)
    assert ids == ["r2", "r5", "r7"], res.log
    assert res.baseline.ok and failure_kind(res.verdict) == "divergence"
    assert any(line.startswith("(the fixed engine fails") for line in res.log)


def test_cosmetic_families_get_a_small_budget_once_short(monkeypatch):
    w = Workload(EngineConfig(), {1: [Add("r2", tuple(range(40)), 30), Add("r5", tuple(range(40)), 30)]})
    runs = {}
    for polish in (0, 3, 100):
        eng = FakeEngine()
        monkeypatch.setattr(hunt_run, "run", eng)
        v, r = hunt_run.run(w, BUGS)
        res = S.shrink(w, BUGS, v, r, polish_runs=polish)
        assert failure_kind(res.verdict) == "divergence"
        runs[polish] = res.runs
    assert runs[0] < runs[3] <= runs[0] + 3 < runs[100]
