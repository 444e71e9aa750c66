"""The step tracer: :func:`trace` runs a bug's scenario (or any workload) step by step while
:class:`_Tracer` records what each engine step did (its metadata and scheduled tokens) and
snapshots the steps asked for, with the kernels' accesses. The verdict is the one
:func:`~mambalab.lab.scenarios.replay` gives: same workload, same judge."""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Iterable

from mambalab.engine.core import Engine, EngineCrash
from mambalab.lab import sanitizer
from mambalab.lab.bugs import BugConfig
from mambalab.lab.reference import judge
from mambalab.lab.scenarios import ReplayResult, scenario_for, signatures
from mambalab.lab.verdict import Crash, Verdict
from mambalab.lab.workload import Workload
from mambalab.workbook.blocks import _owners
from mambalab.workbook.step_trace import Snapshot, Trace


class _Tracer:
    """Wraps the engine's runners (per instance) to keep each step's metadata and scheduled tokens."""

    def __init__(self, engine: Engine, at: set[int]):
        self.engine = engine
        self.at = at
        self.meta: dict[tuple[int, int], tuple[Any, Any, Any]] = {}
        self.scheduled: dict[tuple[int, int], dict[str, int]] = {}
        for rank in engine.ranks:
            self._wrap(rank)

    def _wrap(self, rank) -> None:
        runner = rank.runner
        build = runner.builder.build
        execute = runner.execute_model

        def traced_build(cm, *args, **kwargs):
            md = build(cm, *args, **kwargs)
            if self.engine.step in self.at:
                self.meta[(self.engine.step, rank.index)] = (
                    copy.deepcopy(cm), copy.deepcopy(md), copy.deepcopy(runner.builder))
            return md

        def traced_execute(so, *args, **kwargs):
            self.scheduled[(self.engine.step, rank.index)] = dict(so.num_scheduled_tokens)
            return execute(so, *args, **kwargs)

        runner.builder.build = traced_build
        runner.execute_model = traced_execute

    def snapshot(self, step: int, log: sanitizer.AccessLog | None, crashed: bool = False
                 ) -> dict[tuple[int, int], Snapshot]:
        out = {}
        records = {r.rank: r for r in self.engine.records if r.step == step}
        for rank in self.engine.ranks:
            key = (step, rank.index)
            if rank.index not in records and key not in self.meta:
                continue  # the rank did nothing this step
            cm, md, builder = self.meta.get(key, (None, None, None))
            out[key] = Snapshot(
                step=step, rank=rank.index, record=records.get(rank.index),
                input_batch=copy.deepcopy(rank.runner.input_batch),
                block_pool=copy.deepcopy(rank.manager.block_pool),
                owners=_owners(rank.manager), cm=cm, md=md, builder=builder,
                pools={k: v.detach().clone() for k, v in rank.runner.state.pools.items()},
                log=log if len(self.engine.ranks) == 1 else None,
                scheduled=dict(self.scheduled.get(key, {})),
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
    interpreter; with several DP ranks each rank gets its own log). The
    verdict is the one ``replay`` gives: same workload, same judge.
    """
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
        return Trace(result, None, {}, {})
    tracer = _Tracer(engine, at)
    engine.schedule_events(workload.events)
    snapshots: dict[tuple[int, int], Snapshot] = {}
    crash: EngineCrash | None = None
    multi = len(engine.ranks) > 1
    try:
        while engine.has_work():
            if engine.step >= max_steps:
                raise RuntimeError(f"the workload did not finish within {max_steps} steps")
            step = engine.step + 1
            want = step in at
            logs: list[sanitizer.AccessLog] = []
            crashed = False
            with contextlib.ExitStack() as stack:
                if want and record_access and not multi:
                    logs.append(stack.enter_context(sanitizer.recording()))
                try:
                    if want and record_access and multi:
                        _step_with_rank_logs(engine, logs)
                    else:
                        engine.step_once()
                except EngineCrash:
                    crashed = True
                    raise
                finally:
                    if want:
                        snaps = tracer.snapshot(step, logs[0] if logs and not multi else None, crashed)
                        if multi and logs:
                            for (s, r), snap in snaps.items():
                                snap.log = logs[r] if r < len(logs) else None
                        snapshots.update(snaps)
    except EngineCrash as c:
        crash = c
    verdict = judge(engine, crash)
    result = ReplayResult(name, fixed, seed, verdict, signatures(engine.records, verdict), workload.describe())
    return Trace(result, engine, snapshots, tracer.scheduled)


def _step_with_rank_logs(engine: Engine, logs: list) -> None:
    """``engine.step_once()`` with one access log per DP rank (each rank's runner calls go to its own)."""
    per_rank = [sanitizer.AccessLog() for _ in engine.ranks]
    logs.extend(per_rank)
    originals = []
    for rank, log in zip(engine.ranks, per_rank):
        runner = rank.runner
        ex, dummy = runner.execute_model, runner.dummy_run

        def wrap(fn, log=log):
            def inner(*a, **k):
                with sanitizer.recording() as inner_log:
                    try:
                        return fn(*a, **k)
                    finally:
                        log.accesses.extend(inner_log.accesses)
                        log.violations.extend(inner_log.violations)
                        log.kernels.extend(inner_log.kernels)
            return inner

        originals.append((runner, ex, dummy))
        runner.execute_model, runner.dummy_run = wrap(ex), wrap(dummy)
    try:
        engine.step_once()
    finally:
        for runner, ex, dummy in originals:
            runner.execute_model, runner.dummy_run = ex, dummy
