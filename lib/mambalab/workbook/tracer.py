"""The step tracer: :func:`trace` runs a bug's scenario (or any workload) through the engine's
one step loop (:meth:`Engine.steps`) and snapshots the steps asked for: the metadata the runner
built (seen through :class:`~mambalab.lab.step_observer.StepObserver`), the block table, the
pools and the kernels' accesses. The verdict is the one :func:`~mambalab.lab.scenarios.replay`
gives: same workload, same judge."""

from __future__ import annotations

import contextlib
import copy
from typing import Callable, ContextManager, Iterable

from mambalab.engine.core import Engine, EngineCrash
from mambalab.lab import sanitizer
from mambalab.lab.bugs import BugConfig
from mambalab.lab.reference import judge
from mambalab.lab.scenarios import ReplayResult, scenario_for, signatures
from mambalab.lab.step_observer import StepObserver
from mambalab.lab.verdict import Crash, Verdict
from mambalab.lab.workload import Workload
from mambalab.workbook.blocks import _owners
from mambalab.workbook.step_trace import Snapshot, Trace


def _snapshots(engine: Engine, observer: StepObserver, step: int, logs: dict[int, sanitizer.AccessLog],
               crashed: bool) -> dict[tuple[int, int], Snapshot]:
    """Every rank that did something in ``step``, right after it."""
    out = {}
    records = {r.rank: r for r in engine.records if r.step == step}
    for rank in engine.ranks:
        seen = observer.get(step, rank.index)
        if rank.index not in records and seen is None:
            continue  # the rank did nothing this step
        rec = records.get(rank.index)
        out[(step, rank.index)] = Snapshot(
            step=step, rank=rank.index, record=rec,
            input_batch=copy.deepcopy(rank.runner.input_batch),
            block_pool=copy.deepcopy(rank.manager.block_pool),
            owners=_owners(rank.manager),
            cm=seen.cm if seen else None, md=seen.md if seen else None, builder=seen.builder if seen else None,
            pools={k: v.detach().clone() for k, v in rank.runner.state.pools.items()},
            log=logs.get(rank.index),
            scheduled=dict(rec.scheduled) if rec is not None else {},
            crashed=crashed,
        )
    return out


def trace(
    what: str | Workload,
    *,
    fixed: bool = False,
    bugs: BugConfig | None = None,
    seed: int = 0,
    at: Iterable[int] = (),
    record_access: bool = True,
    max_steps: int = 200,
) -> Trace:
    """Run a bug's scenario (``what`` = bug id) or a workload step by step and keep snapshots.

    ``fixed`` / ``bugs``: the bug's pre-fix behaviour (default), the fix
    (``fixed=True``), or any configuration (``bugs``). ``at``: the steps to
    snapshot (after the step; the kernels' accesses of those steps are
    recorded when ``record_access`` and the kernels run under the
    interpreter; each DP rank gets its own log). The verdict is the one
    ``replay`` gives: same workload, same judge.
    """
    return finish(trace_units(what, fixed=fixed, bugs=bugs, seed=seed, at=at, record_access=record_access,
                              max_steps=max_steps))


def finish(units):
    """Run a generator of units (:func:`trace_units`, ``fix_it.run_workload_planted_units``) to its end;
    its return value."""
    while True:
        try:
            next(units)
        except StopIteration as stop:
            return stop.value


def trace_units(
    what: str | Workload,
    *,
    fixed: bool = False,
    bugs: BugConfig | None = None,
    seed: int = 0,
    at: Iterable[int] = (),
    record_access: bool = True,
    max_steps: int = 200,
    around: Callable[[], ContextManager] = contextlib.nullcontext,
):
    """:func:`trace` in units, a generator whose return value is the :class:`Trace`: the start-up, one
    engine step per ``next``, then the verdict. Each unit runs inside ``around()`` (e.g. plants, active
    inside a unit only, so that other work can run between two units without them: a panel's idle time); the
    verdict is judged outside it, as ``fix_it.run_workload_planted`` judges (the reference memo then serves
    every combination of plants)."""
    with around():
        if isinstance(what, Workload):
            workload, name = what, "workload"
            cfg = bugs if bugs is not None else BugConfig()
        else:
            workload, name = scenario_for(what)(seed), what
            cfg = bugs if bugs is not None else (BugConfig() if fixed else BugConfig.with_bugs(what))
        fixed = fixed or not cfg.enabled
        at = {int(s) for s in at}
        try:
            engine = Engine(workload.cfg, cfg)
        except Exception as e:  # noqa: BLE001 - e.g. a graph that cannot be captured (as run_workload)
            verdict = Verdict(ok=False, crash=Crash.at_startup(e))
            result = ReplayResult(name, fixed, seed, verdict, signatures([], verdict), workload.describe())
            return Trace(result, None, {})
        observer = StepObserver(engine, want=lambda step: step in at)
        engine.schedule_events(workload.events)
    logs: dict[int, sanitizer.AccessLog] = {}

    @contextlib.contextmanager
    def rank_log(rank: int):
        if engine.step in at and record_access:
            with sanitizer.recording() as log:
                logs[rank] = log
                yield
        else:
            yield

    engine.rank_context = rank_log
    snapshots: dict[tuple[int, int], Snapshot] = {}
    crash: EngineCrash | None = None
    steps = engine.steps(max_steps)
    while True:
        yield
        with around():
            try:
                outcome = next(steps)
            except StopIteration:
                break
            crash = outcome.crash
            if outcome.step in at:
                snapshots.update(_snapshots(engine, observer, outcome.step, logs, crash is not None))
            logs.clear()
    yield
    engine.rank_context = None
    observer.detach()
    verdict = judge(engine, crash)  # outside ``around()``: the reference is the model as shipped (no plant)
    result = ReplayResult(name, fixed, seed, verdict, signatures(engine.records, verdict), workload.describe())
    return Trace(result, engine, snapshots)
