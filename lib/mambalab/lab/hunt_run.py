"""One hunter run: a workload through the engine, judged, and its failure classified.

On CUDA every run goes to a worker process (:mod:`mambalab.lab.hunt_worker`):
a real GPU fault breaks the CUDA context of the process that made it, so it
ends the worker, which is replaced, and is reported as an ``illegal`` verdict.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Hashable

from mambalab.lab.bugs import BugConfig
from mambalab.engine.core import EngineDidNotFinish
from mambalab.worker.model_runner import StepRecord
from mambalab.lab.planted import Plant
from mambalab.lab.verdict import Crash, IllegalAccess, Verdict
from mambalab.lab.workload import Workload

if TYPE_CHECKING:
    from mambalab.lab.hunt_pool import RunPool

FAILURE_KINDS = ("divergence", "illegal", "crash", "hang")


def failure_kind(verdict: Verdict) -> str | None:
    """``None`` for a passing verdict, else ``illegal`` / ``crash`` / ``hang`` / ``divergence``."""
    if verdict.ok:
        return None
    if verdict.illegal is not None:
        return "illegal"
    if verdict.crash is not None:
        return "hang" if verdict.crash.kind == "unfinished" else "crash"
    return "divergence"


def _gpu_fault(step: int, steps: int, message: str) -> Verdict:
    """A fault the GPU reported outside a step (without the step's record) as an illegal verdict;
    ``step`` 0 where the step is unknown (then ``steps`` is the run's limit)."""
    return Verdict(ok=False, steps=steps, illegal=IllegalAccess(step=step, rank=None, message=message))


def _run_in_worker(workload: Workload, bugs: BugConfig, max_steps: int) -> tuple[Verdict, list[StepRecord]]:
    """The worker's side of :func:`run`: an exception that broke the CUDA context is a verdict too."""
    from mambalab.lab.hunt_worker import context_healthy
    from mambalab.lab.scenarios import run_workload

    try:
        return run_workload(workload, bugs, max_steps=max_steps)
    except Exception as e:  # noqa: BLE001
        healthy, error = context_healthy()
        if healthy:
            raise
        return _gpu_fault(0, max_steps, f"{error} (raised outside a step: {type(e).__name__})"), []


def worker_answer(answer: tuple) -> tuple[Verdict, list[StepRecord]]:
    """A worker's ``((verdict, records), healthy, error)`` for :func:`_run_in_worker` as :func:`run`
    returns it: a fault that surfaced only at the worker's final check is an ``illegal`` verdict."""
    (verdict, records), healthy, error = answer
    if not healthy and verdict.ok:
        return _gpu_fault(verdict.steps, verdict.steps, f"{error} (seen after the last step)"), records
    return verdict, records


def worker_died(e: Exception) -> tuple[Verdict, list[StepRecord]]:
    """A worker process that ended in the middle of a run, as a ``crash`` verdict."""
    return Verdict(ok=False, crash=Crash("worker", str(e))), []


def isolated(plant: Plant | None = None) -> bool:
    """Whether :func:`run` uses the worker process: on CUDA, unless a plant is active (a plant swaps
    a function of *this* process, and a learner's function defined in a notebook cannot be sent)."""
    from mambalab.device import DEVICE_TYPE

    return DEVICE_TYPE == "cuda" and plant is None


def run(workload: Workload, bugs: BugConfig, max_steps: int = 200,
        plant: Plant | None = None) -> tuple[Verdict, list[StepRecord]]:
    """:func:`scenarios.run_workload` (under ``plant`` when given), a workload that never
    finishes reported as a ``hang``.

    On CUDA the run happens in :func:`mambalab.lab.hunt_worker.shared_worker`'s
    process: a real fault ends that process (reported as an ``illegal``
    verdict), not the hunt.
    """
    from mambalab.lab.scenarios import run_workload

    try:
        if isolated(plant):
            from mambalab.lab.hunt_worker import WorkerDied, shared_worker

            try:
                answer = shared_worker().call(_run_in_worker, workload, bugs, max_steps)
            except WorkerDied as e:
                return worker_died(e)
            return worker_answer(answer)
        with plant if plant is not None else contextlib.nullcontext():
            return run_workload(workload, bugs, max_steps=max_steps)
    except EngineDidNotFinish as e:
        return Verdict(ok=False, crash=Crash.unfinished(e.max_steps), steps=max_steps), []


def workload_key(w: Workload) -> str:
    """A workload's identity: its configuration and events (equal keys: the same engine run)."""
    return repr((w.cfg, sorted((s, tuple(evs)) for s, evs in w.events.items())))


class RunMemo:
    """The runs of one hunt, by (workload, bug switches, plant): the search, its control run and the
    shrinker share them, so no workload is run twice under the same switches.

    A run is deterministic, and ``max_steps`` only stops it: a stored run that ended (finished or
    crashed) at step ``s`` answers any limit ``>= s`` as it is, and any smaller limit as the hang
    :func:`run` reports there; a stored hang at limit ``M`` answers every limit ``<= M``.
    """

    def __init__(self, remember_passing: bool = True, pool: "RunPool | None" = None) -> None:
        self._runs: dict[Hashable, tuple[int, Verdict, list[StepRecord]]] = {}
        self.hits = 0
        self.misses = 0
        # A hunt's search keeps only failing runs (the shrinker starts from one; thousands of clean
        # workloads need not stay in memory); the shrinker keeps every run.
        self.remember_passing = remember_passing
        # Worker processes (mambalab.lab.hunt_pool): prefetch() starts runs there ahead of need;
        # run() answers from them in the caller's order, so the decisions are the sequential ones.
        self.pool = pool

    @staticmethod
    def _key(workload: Workload, bugs: BugConfig, plant: Plant | None) -> Hashable:
        return (workload_key(workload), tuple(sorted(bugs.enabled)), id(plant) if plant is not None else None)

    @property
    def lookahead(self) -> int:
        """How many runs :meth:`prefetch` keeps in flight (0: no pool, everything sequential)."""
        return self.pool.jobs if self.pool is not None else 0

    def prefetch(self, workload: Workload, bugs: BugConfig, max_steps: int = 200,
                 plant: Plant | None = None) -> None:
        """Start the run in a pool worker unless this memo answers it already (no pool, or a plant
        that lives in this process only: nothing)."""
        if self.pool is None or plant is not None:
            return
        key = self._key(workload, bugs, plant)
        got = self._runs.get(key)
        if got is not None and not (isolated(plant) and got[0] != max_steps) and (
                failure_kind(got[1]) != "hang" or max_steps <= got[0]):
            return  # run() answers it from what is stored
        self.pool.submit((key, max_steps), workload, bugs, max_steps)

    def cancel(self) -> None:
        """Drop the prefetched runs that no worker has started yet."""
        if self.pool is not None:
            self.pool.cancel_queued()

    def run(self, workload: Workload, bugs: BugConfig, max_steps: int = 200,
            plant: Plant | None = None) -> tuple[Verdict, list[StepRecord]]:
        key = self._key(workload, bugs, plant)
        got = self._runs.get(key)
        if got is not None and isolated(plant) and got[0] != max_steps:
            got = None  # on CUDA a fault outside a step has no step: only the same limit answers
        if got is not None:
            limit, verdict, records = got
            hang = failure_kind(verdict) == "hang"
            if hang and max_steps <= limit:
                self.hits += 1
                return _unfinished(max_steps), []
            if not hang and verdict.steps <= max_steps:
                self.hits += 1
                return verdict, records
            if not hang:  # it ran longer than this limit allows: the engine stops at the limit
                self.hits += 1
                return _unfinished(max_steps), []
        self.misses += 1
        if self.pool is not None and plant is None:
            self.pool.submit((key, max_steps), workload, bugs, max_steps)  # a no-op when prefetched
            verdict, records = self.pool.result((key, max_steps))
        else:
            verdict, records = run(workload, bugs, max_steps, plant)
        if (got is None or max_steps > got[0]) and (self.remember_passing or not verdict.ok):
            self._runs[key] = (max_steps, verdict, records)
        return verdict, records


def _unfinished(max_steps: int) -> Verdict:
    return Verdict(ok=False, crash=Crash.unfinished(max_steps), steps=max_steps)


__all__ = ["FAILURE_KINDS", "RunMemo", "failure_kind", "isolated", "run", "workload_key"]
