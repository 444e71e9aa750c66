"""The DP launcher on two GPUs: one process per GPU, NCCL, real CUDA graphs on each rank (issue 15).

Marked ``multi_gpu`` and skipped where fewer than two CUDA GPUs are visible (CI has
none). Run on a two-GPU machine with ``scripts/dp_gpus.sh`` (which also records the
result: ``MAMBALAB_DP_RECORD=DIR`` writes ``DIR/dp-check.{json,txt}``). One module
fixture runs :func:`mambalab.gpu.dp_check.run_check` once: the #37728 and #49757
scenarios pre-fix and fixed on three seeds and ten random DP-2 workloads with every
fix on, over NCCL on ``cuda:0`` / ``cuda:1`` and with the in-process engine on the
CPU; then a kernel fault planted on rank 1, and the run after it.
"""

from __future__ import annotations

import os

import pytest
import torch

from mambalab.gpu import dp_check

NUM_GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = [
    pytest.mark.multi_gpu,
    pytest.mark.skipif(NUM_GPUS < 2, reason=f"needs two CUDA GPUs, {NUM_GPUS} visible "
                                            "(run scripts/dp_gpus.sh on a two-GPU machine)"),
]

REPLAYS = [(bug, seed, fixed) for bug in dp_check.REPLAY_BUGS for seed in dp_check.SEEDS for fixed in (False, True)]


@pytest.fixture(scope="module")
def check():
    result = dp_check.run_check("cuda")
    if os.environ.get("MAMBALAB_DP_RECORD"):
        dp_check.write(result, os.environ["MAMBALAB_DP_RECORD"])
    return result


def _row(check, name):
    return next(r for r in check["rows"] if r["name"] == name)


def _real_graphs_on_both_gpus(row):
    ranks = sorted(row["ranks"], key=lambda g: g["rank"])
    assert [g["device"] for g in ranks] == ["cuda:0", "cuda:1"], ranks
    for g in ranks:
        assert g["backend"] == "nccl" and g["captured"], g
        assert g["cuda_graphs"] == len(g["captured"]), g  # every captured size is a torch.cuda.CUDAGraph
        assert g["replays"] > 0, g


@pytest.mark.parametrize("bug,seed,fixed", REPLAYS, ids=[f"{b}-{s}-{'fixed' if f else 'pre-fix'}" for b, s, f in REPLAYS])
def test_replay_over_nccl_gives_the_cpu_verdict(check, bug, seed, fixed):
    row = _row(check, f"{bug} seed {seed} {'fixed' if fixed else 'pre-fix'}")
    why = (row["cpu"], row["device"])
    assert row["same_verdict"] and row["same_first"], why
    assert row["same_signatures"] and row["same_records"], why
    assert row["device_key"]["ok"] == fixed, why
    if not fixed:
        assert row["device_key"]["first"][3] == "D", why  # D, served by rank 1 after its dummy steps
        assert any("dummy batch rows point at blocks" in s for s in row["signatures"]), row["signatures"]
    assert 1 in row["dummy_ranks"] and row["full_dummy_replays"] > 0  # the idle rank replays its graph
    _real_graphs_on_both_gpus(row)


def test_random_dp2_workloads_match_reference_over_nccl(check):
    rows = [r for r in check["rows"] if r["kind"] == "random"]
    assert len(rows) == dp_check.NUM_RANDOM
    for row in rows:
        assert row["device_key"]["ok"] and row["cpu_key"]["ok"], (row["name"], row["device"])
        assert row["same_records"], row["name"]
        _real_graphs_on_both_gpus(row)
    assert any(r["full_dummy_replays"] for r in rows)  # some idle rank ran its dummy batch through a graph


def test_every_stage_ran(check):
    assert not check["errors"], check["errors"]
    assert len(check["rows"]) == len(REPLAYS) + dp_check.NUM_RANDOM


def test_planted_kernel_fault_on_rank_1_is_a_clear_error(check):
    f = check["fault"]
    assert f["raised"] and f["error_type"] == "DistributedRunError", f
    assert f["rank"] == 1 and "rank 1 (cuda:1) failed" in f["message"], f
    assert "CUDA error" in f["message"], f
    assert f["elapsed_s"] < dp_check.FAULT_LIMIT_S, f


def test_the_run_after_a_fault_starts_clean(check):
    a = check["after_fault"]
    assert a["ok"], a
    assert all(g["cuda_graphs"] for g in a["ranks"]), a
