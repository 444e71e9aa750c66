"""An engine built from a workload, stepped on demand, with a snapshot after every step.

A :class:`Session` is what a panel's Step / Replay / Reset buttons drive:

* ``advance()`` takes the next step of the engine's one step loop
  (:meth:`Engine.steps`, each rank's part inside its own sanitizer
  ``recording()``), a crash being the step's outcome as for the verdict, and
  appends a :class:`~.snapshot.StepSnapshot`;
* ``run_to_end()`` steps until the workload is done (or crashed) and returns
  the same :class:`~mambalab.lab.scenarios.ReplayResult` that
  ``mambalab.lab.scenarios.replay`` builds for that workload and bug switch;
* ``verdict_so_far(step)`` compares what was produced up to a step with the
  per-request reference.

Sessions are deterministic, so they are cached by their settings
(:func:`session_for`): toggling the fix back and forth or returning to a knob
value reuses the steps already computed. The per-request references come
from the reference's memo (``lab/reference.py``, keyed by the model's content):
the fixed and pre-fix engines of one seed share them, and the verdict does not
run them twice.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from time import perf_counter
from typing import Hashable

from mambalab.lab.bugs import BugConfig
from mambalab.engine.core import Engine, EngineCrash
from mambalab.lab.reference import (clear_reference_memo, judge, model_key, reference_jobs, reference_output,
                                    reference_submit)
from mambalab.lab.sanitizer import AccessLog, recording
from mambalab.lab.scenarios import ReplayResult, signatures
from mambalab.lab.step_observer import StepObserver
from mambalab.lab.verdict import Crash, Verdict
from mambalab.lab.workload import Workload
from mambalab.widgets.snapshot import StepSnapshot, pool_holders, take_snapshot

MAX_STEPS = 200  # as ``scenarios.run_workload``

class Session:
    """One engine for one (workload, bug switch), with the snapshot of every step so far."""

    def __init__(self, workload: Workload, bugs: BugConfig, *, label: str, fixed: bool, seed: int,
                 max_steps: int = MAX_STEPS) -> None:
        self.workload = workload
        self.bugs = bugs
        self.label = label
        self.fixed = fixed
        self.seed = seed
        self.max_steps = max_steps
        self.engine: Engine | None = None
        self.startup_error: str | None = None
        self.crash: EngineCrash | None = None
        self.error: str | None = None  # a step that failed outside the engine's own crash handling
        self.result: ReplayResult | None = None
        self._expected: dict[str, list[int]] = {}
        self._expected_due: list[tuple[str, list[int], int]] = []  # (request, prompt, max_tokens), in order
        self.model_key: str | None = None  # the reference memo's key of the engine's model
        self.step_seconds: list[float] = []
        t = perf_counter()
        try:
            self.engine = Engine(workload.cfg, bugs)
            self.model_key = model_key(self.engine.model)
            self.engine.schedule_events(workload.events)
            # the references are computed beside the engine's steps, in a second process when one is ready
            # (lab/reference_pool.py); :attr:`expected` collects them
            reference_submit(self.engine, workload, self.model_key)
        except Exception as e:  # noqa: BLE001 - e.g. a CUDA graph that cannot be captured (#41233)
            self.startup_crash = Crash.at_startup(e)
            self.startup_error = self.startup_crash.describe()
            self.engine = None
        self.init_seconds = perf_counter() - t
        self.history: list[StepSnapshot] = []
        self.observer: StepObserver | None = None
        self._logs: dict[int, AccessLog] = {}
        if self.engine is not None:
            self.observer = StepObserver(self.engine)
            self.engine.rank_context = self._rank_log
            self._steps = self.engine.steps(max_steps)
            self.history.append(take_snapshot(self.engine, bugs, records=[], logs={}, observed=self.observer,
                                              holders_before=None, status_before=None, crash=None, previous=None))

    @contextlib.contextmanager
    def _rank_log(self, rank: int):
        """Each rank's part of a step records its own accesses (the sanitizer's log per DP rank)."""
        with recording() as log:
            self._logs[rank] = log
            yield

    # -- state -----------------------------------------------------------------------------
    @property
    def expected(self) -> dict[str, list[int]]:
        """Each request's reference (greedy tokens run alone), for every request the engine has seen so far.
        A step notes the new requests; their references are computed (or collected from the reference
        pool, which computed them while the engine stepped) when this is read, in the order they came."""
        while self._expected_due:
            rid, prompt, max_tokens = self._expected_due.pop(0)
            self._expected[rid] = reference_output(self.engine, prompt, max_tokens, self.model_key)
        return self._expected

    @property
    def num_ranks(self) -> int:
        return self.workload.cfg.data_parallel_size

    @property
    def last_step(self) -> int:
        """The last step computed so far (0: none)."""
        return len(self.history) - 1 if self.history else 0

    @property
    def finished(self) -> bool:
        """Nothing more to step: start-up failed, the engine crashed, or the workload is done."""
        if self.engine is None or self.crash is not None or self.error is not None:
            return True
        return not self.engine.has_work() or self.engine.step >= self.max_steps

    @property
    def over_limit(self) -> bool:
        return self.engine is not None and self.engine.has_work() and self.engine.step >= self.max_steps

    def snapshot(self, step: int) -> StepSnapshot | None:
        if not self.history:
            return None
        return self.history[max(0, min(step, len(self.history) - 1))]

    # -- stepping ------------------------------------------------------------------------------
    def advance(self) -> StepSnapshot | None:
        """One engine step (None when there is nothing left to step)."""
        if self.finished:
            return None
        eng = self.engine
        assert eng is not None
        holders = pool_holders(eng)
        status = {rid: res.status for rid, res in eng.results.items()}
        crash = None
        records = []
        self._logs = {}
        t = perf_counter()
        try:
            outcome = next(self._steps)
            records, crash = outcome.records, outcome.crash
        except Exception as e:  # noqa: BLE001 - an event the engine refused (e.g. a prompt too long)
            crash = EngineCrash(eng.step, -1, e)
        if crash is not None:
            self.crash = crash
        due = {r for r, _p, _n in self._expected_due}
        for rid, res in eng.results.items():
            if rid not in self._expected and rid not in due:
                self._expected_due.append((rid, list(res.prompt), res.max_tokens))
        snap = take_snapshot(eng, self.bugs, records=records, logs=self._logs, observed=self.observer,
                             holders_before=holders, status_before=status, crash=crash,
                             previous=self.history[-1] if self.history else None)
        snap.step_seconds = perf_counter() - t
        self.step_seconds.append(snap.step_seconds)
        self.history.append(snap)
        return snap

    def reference_jobs(self):
        """One call per request of the workload whose reference is not memoised yet (work for idle time:
        the steps and the verdict then find them computed; :func:`mambalab.lab.reference.reference_jobs`)."""
        if self.engine is None:
            return
        yield from reference_jobs(self.engine, self.workload, self.model_key)

    def advance_to(self, step: int) -> int:
        """Step until ``step`` is computed or nothing is left; returns the last step computed."""
        while self.last_step < step and not self.finished:
            self.advance()
        return self.last_step

    def run_to_end(self) -> ReplayResult:
        """Step to the end and judge it, exactly as ``scenarios.run_workload`` + ``replay`` do."""
        if self.result is not None:
            return self.result
        while not self.finished:
            self.advance()
        self.result = self._judge()
        return self.result

    def _judge(self) -> ReplayResult:
        if self.engine is None:
            verdict = Verdict(ok=False, crash=self.startup_crash)
            records = []
        else:
            records = self.engine.records
            if self.crash is not None:
                verdict = judge(self.engine, self.crash)
            elif self.over_limit:
                verdict = Verdict(ok=False, crash=Crash.unfinished(self.max_steps),
                                  steps=self.engine.step)
            else:
                verdict = judge(self.engine)
        return ReplayResult(self.label, self.fixed, self.seed, verdict, signatures(records, verdict),
                            self.workload.describe())

    # -- words -------------------------------------------------------------------------------
    def verdict_so_far(self, step: int) -> tuple[str, bool | None]:
        """A one-line verdict of the tokens produced up to ``step``: ``(text, ok)`` (ok None: nothing yet)."""
        if self.engine is None:
            return f"CRASH: {self.startup_error}", False
        snap = self.snapshot(step)
        if snap is None:
            return "nothing has run yet", None
        if snap.crash is not None:
            if self.result is not None:
                return self.result.verdict.summary(), False
            return judge(self.engine, snap.crash).summary(), False
        first = None
        compared = 0
        for rid, got in snap.got.items():
            exp = self.expected.get(rid, [])
            for i, (e, g) in enumerate(zip(exp, got)):
                compared += 1
                if e != g:
                    step_of = self._token_step(rid, i)
                    cand = (step_of, rid, i, e, g)
                    if first is None or cand[:2] < first[:2]:
                        first = cand
                    break
        if first is not None:
            s, rid, i, e, g = first
            n = sum(1 for r, got in snap.got.items()
                    if any(a != b for a, b in zip(self.expected.get(r, []), got)))
            return (f"DIVERGED so far: step {s}: request {rid} (rank {snap.rank_of.get(rid, 0)}) output token "
                    f"#{i}: expected {e}, got {g} ({n} request(s) differ)"), False
        if not snap.got:
            return "no request has arrived yet", None
        if compared == 0:
            return f"no output token yet ({len(snap.got)} request(s) in the engine)", None
        return f"so far every token matches the reference ({compared} tokens compared)", True

    def _token_step(self, rid: str, pos: int) -> int:
        res = self.engine.results.get(rid) if self.engine else None
        if res is not None and pos < len(res.token_steps):
            return res.token_steps[pos]
        return self.engine.step if self.engine else 0


# -- cache -------------------------------------------------------------------------------------

_SESSIONS: OrderedDict[Hashable, Session] = OrderedDict()
MAX_SESSIONS = 12


def session_for(key: Hashable, make, *, fresh: bool = False) -> Session:
    """The cached session for ``key`` (``make()`` builds one); ``fresh``: always a new engine."""
    if not fresh and key in _SESSIONS:
        _SESSIONS.move_to_end(key)
        return _SESSIONS[key]
    s = make()
    _SESSIONS[key] = s
    _SESSIONS.move_to_end(key)
    while len(_SESSIONS) > MAX_SESSIONS:
        _SESSIONS.popitem(last=False)
    return s


def clear_sessions() -> None:
    _SESSIONS.clear()
    clear_reference_memo()


@contextlib.contextmanager
def no_session_cache():
    """Build sessions without the cache (benchmarks)."""
    saved = dict(_SESSIONS)
    _SESSIONS.clear()
    try:
        yield
    finally:
        _SESSIONS.clear()
        _SESSIONS.update(saved)


__all__ = ["Session", "session_for", "clear_sessions", "MAX_STEPS"]
