"""DP ranks as separate processes over torch.distributed (gloo on CPU): the stale-rows scenario
and random DP-2 workloads get the in-process engine's verdicts and step records (an illegal
access on rank 1 included); a rank that raises fails the whole run with its error, quickly."""

import threading
import time
from dataclasses import asdict

import pytest

from mambalab.lab.bugs import BugConfig
from mambalab.engine.dp_launcher import (DistributedRunError, route_events, run_workload_distributed,
                                  run_workloads_distributed)
from mambalab.engine.core import Abort, Add, Preempt
from mambalab.lab.scenarios import run_workload, signatures, stale_rows
from mambalab.lab.workload import Workload, random_workload

SEEDS = [0, 1]
CASES = [(seed, fixed) for seed in SEEDS for fixed in (False, True)]
RANDOM_SEED = 102


def _bugs(fixed: bool) -> BugConfig:
    return BugConfig() if fixed else BugConfig.with_bugs("stale-rows")


@pytest.fixture(scope="module")
def runs():
    """Every case in one launch of the two rank processes; the in-process runs meanwhile."""
    keys = CASES + ["random", "crash"]
    work = [(stale_rows(seed), _bugs(fixed)) for seed, fixed in CASES]
    rand = random_workload(RANDOM_SEED, data_parallel_size=2, mamba_cache_mode="all")
    work += [(rand, BugConfig()), (rand, BugConfig.with_bugs("pad-minus-one"))]
    box = {}

    def launch():
        try:
            box["dist"] = run_workloads_distributed(work, timeout_s=300)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            box["error"] = e

    t = threading.Thread(target=launch)
    t.start()
    inproc = [run_workload(w, b) for w, b in work]
    t.join()
    if "error" in box:
        raise box["error"]
    return {k: (d, i, w) for k, d, i, w in zip(keys, box["dist"], inproc, work)}


@pytest.mark.parametrize("seed", SEEDS)
def test_stale_rows_pre_fix_diverges_as_in_process(runs, seed):
    (v, recs), (v_ref, recs_ref), _ = runs[(seed, False)]
    assert not v.ok and v.crash is None and v.first.req_id == "D"
    sig = signatures(recs, v)
    assert any("dummy batch rows point at blocks" in s for s in sig)
    assert asdict(v.first) == asdict(v_ref.first)  # request, step, position, expected, got
    assert v.to_dict() == v_ref.to_dict()
    assert sig == signatures(recs_ref, v_ref)
    assert recs == recs_ref
    assert {r.rank for r in recs if r.kind == "dummy"} == {1}


@pytest.mark.parametrize("seed", SEEDS)
def test_stale_rows_fixed_matches(runs, seed):
    (v, recs), (v_ref, recs_ref), _ = runs[(seed, True)]
    assert v.ok, v.summary()
    assert not any("dummy batch rows point" in s for s in signatures(recs, v))
    assert v.to_dict() == v_ref.to_dict() and recs == recs_ref


def test_random_dp2_workload_fixed_matches_reference(runs):
    (v, recs), (v_ref, recs_ref), (w, _) = runs["random"]
    assert v.ok, v.summary() + "\n" + "\n".join(w.describe())
    assert {r.rank for r in recs} == {0, 1} and any(r.mode == "FULL" for r in recs)
    assert v.to_dict() == v_ref.to_dict() and recs == recs_ref


@pytest.mark.cpu_only
def test_illegal_access_on_rank_1_is_the_same_verdict(runs):
    (v, recs), (v_ref, recs_ref), _ = runs["crash"]
    assert v.illegal is not None and v.illegal.rank == 1 and v.illegal.slot == -1
    assert v.to_dict() == v_ref.to_dict() and recs == recs_ref


def test_events_go_to_the_owning_rank():
    w = Workload(stale_rows(0).cfg, {1: [Add("a", (1, 2), 3, rank=0), Add("b", (3, 4), 3, rank=1)],
                                     2: [Abort("b"), Preempt("a")], 3: [Abort("a")]})
    assert route_events(w, 0) == {1: [Add("a", (1, 2), 3, rank=0)], 2: [Preempt("a")], 3: [Abort("a")]}
    assert route_events(w, 1) == {1: [Add("b", (3, 4), 3, rank=1)], 2: [Abort("b")]}
    with pytest.raises(ValueError, match="rank 2 out of range"):
        run_workload_distributed(Workload(w.cfg, {1: [Add("c", (1,), 2, rank=2)]}), BugConfig())


def test_a_rank_that_raises_fails_the_run():
    t0 = time.monotonic()
    with pytest.raises(DistributedRunError, match=r"rank 1 failed: RuntimeError: injected fault on rank 1 "
                                                  r"at step 3") as err:
        run_workload_distributed(stale_rows(0), BugConfig(), inject_fault=(1, 3), timeout_s=150)
    assert err.value.rank == 1 and "Traceback" in err.value.log
    assert time.monotonic() - t0 < 100  # reported when the rank died, not at the timeout
