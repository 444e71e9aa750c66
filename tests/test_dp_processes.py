"""DP ranks as separate processes over torch.distributed (gloo on CPU): the stale-rows scenario
and random DP-2 workloads get the in-process engine's verdicts and step records (an illegal
access on rank 1 included); a rank that raises fails the whole run with its error, quickly.
The GPU path's choices are checked here without a GPU (backend, each rank's environment and
device, a planted kernel fault); tests/test_dp_gpus.py runs it on two GPUs."""

import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict

import pytest

from mambalab.lab.bugs import BugConfig
from mambalab.engine import dp_launcher
from mambalab.engine.dp_launcher import (PLANTED_BLOCK, DistributedRunError, backend_for, rank_env, route_events,
                                         run_workload_distributed, run_workloads_distributed)
from mambalab.engine.core import Abort, Add, Preempt
from mambalab.lab.scenarios import run_workload, signatures, stale_rows
from mambalab.lab.workload import Workload, random_workload

# The CPU path (gloo, one process per rank on one machine); on a GPU the launcher needs one GPU per
# rank, which tests/test_dp_gpus.py covers.
pytestmark = pytest.mark.cpu_only(reason="DP processes over gloo; the NCCL path is tests/test_dp_gpus.py")

SEEDS = [0, 1]
CASES = [(seed, fixed) for seed in SEEDS for fixed in (False, True)]
RANDOM_SEED = 2  # pad-minus-one crashes on rank 1 with slot -1 (the DP ranks agree on the graph mode)


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


def test_each_rank_reports_where_it_ran_and_its_graphs(runs):
    run, _, _ = runs[(0, False)]
    assert [g["rank"] for g in run.ranks] == [0, 1]
    for g in run.ranks:
        assert g["device"] == "cpu" and g["backend"] == "gloo" and g["captured"] == [1, 2, 4]
        assert g["cuda_graphs"] == 0 and g["replays"] > 0  # the CPU's graphs are closures (cuda_graph.py)
    assert "rank 1 on cpu (gloo)" in run.describe_ranks()[1]


def test_backend_device_and_environment_per_rank():
    assert backend_for("cpu") == "gloo" and backend_for("cuda") == "nccl"
    with pytest.raises(ValueError):
        backend_for("tpu")
    base = {"NCCL_NVLS_ENABLE": "0", "PATH": "/bin"}
    env = rank_env(1, 2, 29500, "cuda", base)
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["MASTER_PORT"]) == ("1", "1", "2", "29500")
    assert env["MAMBALAB_DEVICE"] == "cuda" and env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
    assert env["NCCL_NVLS_ENABLE"] == "0"  # NVLink multicast stays off
    kept = rank_env(0, 2, 29500, "cuda", {"NCCL_NVLS_ENABLE": "0", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"})
    assert kept["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"  # the machine's settings are never overridden
    cpu = rank_env(0, 2, 29500, "cpu", {})
    assert cpu["MAMBALAB_DEVICE"] == "cpu" and "NCCL_NVLS_ENABLE" not in cpu


def test_cuda_needs_one_gpu_per_rank(monkeypatch):
    monkeypatch.setattr(dp_launcher.torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match="needs 2 GPUs"):
        run_workload_distributed(stale_rows(0), BugConfig(), device="cuda")


def test_planted_kernel_fault_is_stopped_on_the_cpu():
    """On the CPU the planted block id never reaches memory (on a GPU it faults: test_dp_gpus)."""
    v, recs = run_workload_distributed(stale_rows(0), BugConfig(), inject_fault=(1, 5, "kernel"), timeout_s=150)
    assert v.crash is not None and (v.crash.step, v.crash.rank) == (5, 1), v.summary()
    assert PLANTED_BLOCK in recs[-1].block_table_rows[0] and recs[-1].rank == 1


def test_cli_replay_dp_procs():
    env = dict(os.environ, MAMBALAB_DEVICE="cpu")
    r = subprocess.run([sys.executable, "-m", "mambalab", "replay", "stale-rows", "--dp-procs"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "DIVERGED: step 11: request D (rank 1)" in r.stdout
    assert "rank 1 on cpu (gloo): 3 graphs" in r.stdout


def test_a_rank_killed_without_a_report_is_named_with_its_cuda_error(tmp_path):
    """NCCL's watchdog may abort a faulting rank before it writes its error: its log names it."""

    class Proc:
        def __init__(self, rc):
            self.returncode = rc

    logs = [tmp_path / "rank-0.log", tmp_path / "rank-1.log"]
    logs[0].write_text("")
    logs[1].write_text("...\nRuntimeError: CUDA error: an illegal memory access was encountered\nmore\n")
    (tmp_path / "error-0.txt").write_text("peer\nPeerLost: all_reduce (control) failed (a peer is gone?)\n")
    err = dp_launcher._failure([Proc(1), Proc(-6)], logs, tmp_path, "cuda")
    assert err.rank == 1
    assert str(err).startswith("rank 1 (cuda:1) failed: exited with code -6: CUDA error: an illegal memory access")


def test_three_ranks_give_the_in_process_verdict_and_records():
    """``--dp N`` is the same launcher with N processes (on GPUs: one per GPU)."""
    w = random_workload(4, num_requests=8, data_parallel_size=3)
    bugs = BugConfig.with_bugs("stale-rows")
    run = run_workload_distributed(w, bugs, timeout_s=200)
    v_ref, recs_ref = run_workload(w, bugs)
    assert run.verdict.to_dict() == v_ref.to_dict() and run.records == recs_ref
    assert [g["rank"] for g in run.ranks] == [0, 1, 2]


def test_recorded_two_gpu_run_is_shown_beside_the_cpu_verdict(tmp_path):
    """Notebook 02's cell (mambalab.gpu.dp_check.beside_cpu) without two GPUs: the recorded run."""
    from mambalab.gpu import dp_check
    from mambalab.lab.verdict import Divergence, Verdict

    v = Verdict(ok=False, divergences=[Divergence("token", "D", 1, 11, 1, 17, 22)], steps=18)
    ranks = [dict(rank=r, device=f"cuda:{r}", backend="nccl", captured=[1, 2, 4], cuda_graphs=3, replays=9)
             for r in (0, 1)]
    row = dict(name="stale-rows seed 0 pre-fix", kind="replay", device=v.summary(), device_key=dp_check.verdict_key(v),
               cpu_key=dp_check.verdict_key(v), same_verdict=True, same_records=True, ranks=ranks)
    rec = dict(environment=dict(date="2026-11-23", gpus=["NVIDIA H200"] * 2, torch="2.11", nccl="2.28"), rows=[row],
               fault=dict(raised=True, rank=1, message="rank 1 (cuda:1) failed: CUDA error", elapsed_s=12.0))
    path = tmp_path / "dp.json"
    path.write_text(dp_check.json.dumps(rec))
    text = dp_check.beside_cpu({"stale-rows": v}, live=False, recorded=path)
    assert "No two GPUs here: the recorded run" in text and "same verdict and first divergence: yes" in text
    assert "rank 1 on cuda:1 (nccl): 3 real CUDA graphs" in text and "ended the run in under 20 seconds" in text
    assert "No two-GPU run is recorded" in dp_check.beside_cpu({"stale-rows": v}, live=False,
                                                                recorded=tmp_path / "none.json")


def test_the_shipped_two_gpu_record():
    """The run on two H200s that notebook 02 shows (package data): what the issue asked of it."""
    from mambalab.gpu import dp_check

    rec = dp_check.load_recorded()
    assert rec is not None and rec["environment"]["gpus"] == ["NVIDIA H200"] * 2
    s = dp_check.summary(rec)
    assert (s["replays_matching"], s["replays"], s["random_ok"], s["random"]) == (12, 12, 10, 10)
    assert s["fault_raised"] and s["fault_s"] < dp_check.FAULT_LIMIT_S and s["after_fault_ok"]
    assert all(g["cuda_graphs"] == 3 and g["backend"] == "nccl" for row in rec["rows"] for g in row["ranks"])
