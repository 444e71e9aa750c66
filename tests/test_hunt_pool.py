"""The hunter's look-ahead in worker processes decides as the sequential hunter does.

The fast tests use an in-process stand-in for the pool (answers computed when asked, in any
order) over the shrinker tests' stand-in engine: the result, the log and the count of runs are
those of a sequential shrink. The slow ones run real hunts with ``jobs=2`` (a forkserver's
workers) against ``jobs=1``, and the worker start-up against a script without a main guard.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mambalab.lab import hunt_run, shrink as S
from mambalab.lab.bugs import BugConfig
from mambalab.lab.hunt_run import RunMemo, failure_kind
from mambalab.lab.verdict import Verdict

from test_hunt_shrink import BUGS, FakeEngine, workload  # noqa: E402  (tests/ is on the path)

ROOT = Path(__file__).resolve().parents[1]


class FakePool:
    """``RunPool``'s interface, in this process: a submitted run is computed when the hunter asks
    for it, or (``eager``) at once, as a worker ahead of the hunter would."""

    def __init__(self, jobs: int = 2, eager: bool = True):
        self.jobs, self.eager = jobs, eager
        self._pending: dict = {}
        self._done: dict = {}
        self.submitted = self.cancelled = 0

    def has(self, key):
        return key in self._pending or key in self._done

    def submit(self, key, workload, bugs, max_steps):
        if self.has(key):
            return
        self.submitted += 1
        if self.eager:
            self._done[key] = hunt_run.run(workload, bugs, max_steps)
        else:
            self._pending[key] = (workload, bugs, max_steps)

    def result(self, key):
        if key in self._pending:
            self._done[key] = hunt_run.run(*self._pending.pop(key))
        return self._done.pop(key)

    def cancel_queued(self):
        self.cancelled += len(self._pending)
        self._pending.clear()


@pytest.fixture
def fake(monkeypatch):
    eng = FakeEngine()
    monkeypatch.setattr(hunt_run, "run", eng)
    monkeypatch.setattr(hunt_run, "isolated", lambda plant=None: False)
    return eng


def test_ahead_peeks_without_changing_what_it_yields_nor_when_it_raises():
    def gen():
        yield from range(5)
        raise ValueError("a candidate the generator cannot make")

    it = S._Ahead(gen())
    assert next(it) == 0
    assert it.peek(2, lambda x: x % 2 == 0) == [2, 4]  # looks past 3, keeps it
    assert it.peek(9, lambda x: True) == [1, 2, 3, 4]  # the exception waits in line
    assert [next(it) for _ in range(4)] == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="cannot make"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)
    assert list(S._Ahead(iter([]))) == []


def test_memo_answers_a_prefetched_run_once_and_counts_it_when_asked(fake):
    pool = FakePool()
    memo = RunMemo(pool=pool)
    a, b = workload(6), workload(3)
    memo.prefetch(a, BUGS)
    memo.prefetch(b, BUGS)
    memo.prefetch(a, BUGS)  # already in flight: nothing new
    assert pool.submitted == 2 and memo.misses == 0
    va, _ = memo.run(a, BUGS)
    assert failure_kind(va) == "divergence" and memo.misses == 1
    memo.run(a, BUGS)  # stored now
    memo.prefetch(a, BUGS)  # the memo answers it: not sent again
    assert memo.hits == 1 and pool.submitted == 2 and len(fake.calls) == 2


@pytest.mark.parametrize("eager", [True, False])
def test_shrink_with_look_ahead_keeps_the_sequential_result_and_run_count(monkeypatch, eager):
    outcomes = []
    for pool in (None, FakePool(jobs=3, eager=eager)):
        eng = FakeEngine(fixed_fails=lambda w: "r7" not in {e.req_id for evs in w.events.values() for e in evs})
        monkeypatch.setattr(hunt_run, "run", eng)
        monkeypatch.setattr(hunt_run, "isolated", lambda plant=None: False)
        w = workload(8, gap=2)
        v, r = hunt_run.run(w, BUGS)
        res = S.shrink(w, BUGS, v, r, baseline=BugConfig(), baseline_verdict=Verdict(ok=True, steps=17),
                       memo=RunMemo(pool=pool))
        outcomes.append((hunt_run.workload_key(res.workload), res.log, res.runs, res.baseline.ok, len(eng.calls)))
    (seq_key, seq_log, seq_runs, seq_ok, seq_calls), (key, log, runs, ok, calls) = outcomes
    assert (key, log, runs, ok) == (seq_key, seq_log, seq_runs, seq_ok)
    assert calls >= seq_calls  # the look-ahead may run candidates the decision made useless


def test_hunt_cli_takes_jobs_and_refuses_zero(capsys):
    from mambalab.lab import hunt as H

    assert H.main(["--jobs", "0"]) == 2
    assert "--jobs >= 1" in capsys.readouterr().err


def test_default_jobs_use_the_available_cores_at_most_four(monkeypatch):
    from mambalab.lab import hunt_pool

    monkeypatch.setattr(hunt_pool, "available_cpus", lambda: 1)
    assert hunt_pool.default_jobs() == 1
    monkeypatch.setattr(hunt_pool, "available_cpus", lambda: 16)
    assert hunt_pool.default_jobs() == 4


def _outcome(r) -> dict:
    d = r.to_dict()
    for k in ("seconds", "cpu_seconds", "total_seconds", "total_cpu_seconds", "workloads_per_second",
              "shrink_seconds", "worker_starts", "jobs"):
        d.pop(k, None)
    return d


@pytest.mark.parametrize("bug,seed", [("pad-minus-one", 0), ("spec-slots/width", 1)])
def test_hunt_with_jobs_finds_and_shrinks_as_the_sequential_hunt(bug, seed):
    from mambalab.lab.hunt import hunt

    seq = hunt(BugConfig.with_bugs(bug), seed=seed, budget=30, shrink_runs=40)
    par = hunt(BugConfig.with_bugs(bug), seed=seed, budget=30, shrink_runs=40, jobs=2)
    assert seq.found is not None and par.jobs == 2 and seq.jobs == 1
    assert _outcome(par) == _outcome(seq)
    assert par.total_cpu_seconds >= par.cpu_seconds > 0


def test_hunt_with_jobs_on_a_clean_budget_finds_nothing_as_sequential():
    from mambalab.lab.hunt import hunt

    seq = hunt(BugConfig(), seed=7, budget=3)
    par = hunt(BugConfig(), seed=7, budget=3, jobs=2)
    assert _outcome(par) == _outcome(seq) and par.found is None and par.workloads == 3


def test_a_worker_started_from_a_script_without_a_main_guard_does_not_rerun_it(tmp_path):
    script = tmp_path / "no_guard.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(ROOT / 'lib')!r})
        from mambalab.lab.hunt_worker import Worker
        print("script body", flush=True)
        for method in ("spawn", "forkserver"):
            w = Worker(method)
            assert w.call(os.getpid)[0] != os.getpid()
            w.close()
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("script body") == 1
