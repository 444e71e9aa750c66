"""Hunter runs judged in parallel worker processes, answered in the order the hunter asks for them.

The hunter is sequential: the search judges workload 0, 1, 2, ... and stops
at the first failure; the shrinker judges its candidates one after another
and keeps the first that still fails. A :class:`RunPool` lets it *look
ahead* without changing what it decides: the next workloads (or candidates)
are submitted to ``jobs`` worker processes while the hunter waits for the
one it needs now, and every answer is consumed in the hunter's own order
(:meth:`mambalab.lab.hunt_run.RunMemo.run`). A run is deterministic, so the
same seed finds the same workload and shrinks it to the same result as a
sequential hunt, with the same count of runs; the look-ahead that the
decision made useless (workloads after the first failure, candidates after
the kept one) is extra CPU time, counted apart as ``wasted``.

On the CPU the workers are forked from a forkserver that imported mambalab
(and so torch and Triton) once; on CUDA they are spawned, as the hunter's
single isolation worker is (:mod:`mambalab.lab.hunt_worker`): a worker whose
run broke its CUDA context reports it and is replaced.
"""

from __future__ import annotations

import atexit
import os
from collections import deque
from multiprocessing.connection import wait
from typing import Hashable

from mambalab.lab.hunt_run import _run_in_worker
from mambalab.lab.hunt_worker import Worker, WorkerDied

PRELOAD = ["mambalab.lab.hunt_pool", "mambalab.lab.hunt_run", "mambalab.lab.scenarios"]


def available_cpus() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_jobs() -> int:
    """The CLI's default ``--jobs``: every available core, at most 4 (one core: 1, sequential)."""
    return max(1, min(4, available_cpus()))


class RunPool:
    """``jobs`` worker processes serving engine runs by key; see the module's docstring.

    :meth:`submit` queues a run (a no-op for a key queued, running or answered);
    :meth:`result` waits for one (moving it to the front of the queue) and
    returns it as :func:`mambalab.lab.hunt_run.run` would; :meth:`cancel_queued`
    drops what no worker has started.
    """

    def __init__(self, jobs: int, method: str | None = None) -> None:
        from mambalab.device import DEVICE_TYPE

        if jobs < 1:
            raise ValueError(f"jobs must be >= 1, got {jobs}")
        method = method or ("spawn" if DEVICE_TYPE == "cuda" else "forkserver")
        if method == "forkserver":
            import multiprocessing as mp

            mp.get_context("forkserver")  # the server imports PRELOAD once; workers fork from it
            mp.set_forkserver_preload(PRELOAD)
        self.jobs = jobs
        self.workers = [Worker(method) for _ in range(jobs)]
        self._jobs: dict[Hashable, tuple] = {}  # key -> (workload, bugs, max_steps), queued or running
        self._queue: deque[Hashable] = deque()
        self._running: dict[int, Hashable] = {}  # worker index -> key
        self._done: dict[Hashable, tuple] = {}  # key -> ("ok", (verdict, records), healthy, error) | ("raise", e)
        self.submitted = 0

    @property
    def starts(self) -> int:
        return sum(w.starts for w in self.workers)

    def has(self, key: Hashable) -> bool:
        return key in self._jobs or key in self._done

    def submit(self, key: Hashable, workload, bugs, max_steps: int) -> None:
        if self.has(key):
            return
        self._jobs[key] = (workload, bugs, max_steps)
        self._queue.append(key)
        self.submitted += 1
        self._pump()

    def _pump(self) -> None:
        for i, w in enumerate(self.workers):
            if not self._queue:
                return
            if i not in self._running:
                key = self._queue.popleft()
                self._running[i] = key
                w.submit(_run_in_worker, *self._jobs[key])  # the isolation worker's job

    def _collect(self, i: int) -> None:
        key = self._running.pop(i)
        del self._jobs[key]
        try:
            self._done[key] = ("ok", *self.workers[i].collect())
        except WorkerDied as e:
            self._done[key] = ("died", e)
        except Exception as e:  # noqa: BLE001 - raised again to whoever asks for this key
            self._done[key] = ("raise", e)

    def _wait_any(self) -> None:
        conns = {self.workers[i].connection: i for i in self._running}
        for c in wait(list(conns)):
            self._collect(conns[c])

    def result(self, key: Hashable):
        """The run's ``(verdict, records)``, as :func:`mambalab.lab.hunt_run.run` returns them."""
        from mambalab.engine.core import EngineDidNotFinish
        from mambalab.lab.hunt_run import _unfinished, worker_answer, worker_died

        if not self.has(key):
            raise KeyError(key)
        while key not in self._done:
            if key in self._queue:  # the hunter needs it now: first in line
                self._queue.remove(key)
                self._queue.appendleft(key)
                self._pump()
            self._wait_any()
            self._pump()
        out = self._done.pop(key)
        if out[0] == "died":
            return worker_died(out[1])
        if out[0] == "raise":
            e = out[1]
            if isinstance(e, EngineDidNotFinish):
                return _unfinished(e.max_steps), []
            raise e
        return worker_answer(out[1:])

    def cancel_queued(self) -> None:
        """Drop the runs no worker has started (what runs now finishes; its answer waits here)."""
        for key in self._queue:
            del self._jobs[key]
        self._queue.clear()

    def forget(self) -> None:
        """Between hunts: drop the queue and the answers nobody asked for. Runs in progress
        finish; their answers stay until the next ``forget`` (a run is deterministic, so an
        answer is right for whoever asks for its key)."""
        self.cancel_queued()
        self._done.clear()

    def close(self) -> None:
        for w in self.workers:
            w.close()
        self._jobs.clear()
        self._queue.clear()
        self._running.clear()
        self._done.clear()


_POOLS: dict[int, RunPool] = {}


def shared_pool(jobs: int) -> RunPool:
    """The process-wide pool of ``jobs`` workers (started on first use, stopped at exit)."""
    pool = _POOLS.get(jobs)
    if pool is None:
        pool = _POOLS[jobs] = RunPool(jobs)
        atexit.register(pool.close)
    return pool


__all__ = ["RunPool", "available_cpus", "default_jobs", "shared_pool"]
