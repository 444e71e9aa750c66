"""The hunter's worker process: results and exceptions come back, a dead or faulted worker is replaced.

The CPU tests run the worker machinery itself (spawned children, a child
that dies mid-call, the hunter's runs sent through it). The test marked
``cuda`` makes a real illegal address on the GPU inside the worker and
checks that the parent process, and the next call, are unaffected.
"""

from __future__ import annotations

import os
import random

import pytest
import torch
import triton
import triton.language as tl

from mambalab.lab import hunt_generator, hunt_run, hunt_worker
from mambalab.lab.bugs import BugConfig
from mambalab.lab.hunt_worker import Worker, WorkerDied


@pytest.fixture
def worker():
    w = Worker()
    yield w
    w.close()


def test_results_and_exceptions_come_back_and_the_child_is_reused(worker):
    (pid, healthy, error) = worker.call(os.getpid)
    assert pid != os.getpid() and healthy and error == ""
    with pytest.raises(ValueError, match="invalid literal"):
        worker.call(int, "not a number")
    assert worker.call(os.getpid)[0] == pid  # an exception does not cost a new process
    assert worker.starts == 1


def test_a_child_that_dies_mid_call_is_reported_and_replaced(worker):
    pid = worker.call(os.getpid)[0]
    with pytest.raises(WorkerDied, match=r"exit code 3"):
        worker.call(os._exit, 3)
    new_pid = worker.call(os.getpid)[0]
    assert new_pid != pid and worker.starts == 2


def test_hunter_runs_through_the_worker_give_the_in_process_verdicts(monkeypatch):
    w = hunt_generator.random_hunt_workload(random.Random(hunt_generator.workload_seed(0, 3)))
    bugs = BugConfig.with_bugs("stale-rows")
    here, here_records = hunt_run.run(w, bugs)
    monkeypatch.setattr(hunt_run, "isolated", lambda plant=None: True)
    there, there_records = hunt_run.run(w, bugs)
    assert there == here and there_records == here_records
    assert hunt_worker.shared_worker().starts >= 1


def test_a_broken_context_turns_into_an_illegal_verdict(monkeypatch):
    w = hunt_generator.random_hunt_workload(random.Random(1))

    class Faulted:  # a worker whose call left its (pretend) CUDA context broken
        def call(self, fn, *args):
            return fn(*args), False, "AcceleratorError: CUDA error: an illegal memory access was encountered"

    monkeypatch.setattr(hunt_run, "isolated", lambda plant=None: True)
    monkeypatch.setattr(hunt_worker, "shared_worker", lambda: Faulted())
    v, _ = hunt_run.run(w, BugConfig())
    assert hunt_run.failure_kind(v) == "illegal" and "seen after the last step" in v.summary()

    # An exception that broke the context (here: raised while judging) is a verdict, not a crash of
    # the hunt; one that left the context healthy is an ordinary exception.
    def boom(*a, **k):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr("mambalab.lab.scenarios.run_workload", boom)
    monkeypatch.setattr(hunt_worker, "context_healthy", lambda: (False, "AcceleratorError: CUDA error"))
    v, records = hunt_run._run_in_worker(w, BugConfig(), 50)
    assert hunt_run.failure_kind(v) == "illegal" and v.steps == 50 and records == []
    monkeypatch.setattr(hunt_worker, "context_healthy", lambda: (True, ""))
    with pytest.raises(RuntimeError, match="illegal memory access"):
        hunt_run._run_in_worker(w, BugConfig(), 50)


@triton.jit
def _far_load(x_ptr, out_ptr, offset):
    tl.store(out_ptr, tl.load(x_ptr + offset))


def _fault_on_gpu() -> None:
    """A load from an address far outside every allocation: a real illegal address on the GPU."""
    x = torch.zeros(4, device="cuda")
    out = torch.zeros(1, device="cuda")
    _far_load[(1,)](x, out, 1 << 40)
    torch.cuda.synchronize()


@pytest.mark.cuda
def test_a_real_gpu_fault_ends_the_worker_not_the_caller(worker):
    with pytest.raises(Exception, match="(?i)illegal|CUDA"):
        worker.call(_fault_on_gpu)
    # the child's context is gone and the child with it; the next call gets a fresh one
    assert worker._proc is None and worker.starts == 1
    assert worker.call(hunt_worker.context_healthy)[0] == (True, "")
    assert worker.starts == 2
    torch.zeros(1, device="cuda").add_(1).item()  # and this process never saw the fault
