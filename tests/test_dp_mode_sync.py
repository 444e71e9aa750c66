"""The DP ranks agree on one CUDA-graph mode, the minimum of their own
(``_post_process_cudagraph_mode`` in ``vllm/v1/worker/dp_utils.py``)."""

from __future__ import annotations

from mambalab.engine.core import Add, EngineConfig
from mambalab.lab.bugs import BugConfig
from mambalab.lab.scenarios import run_workload
from mambalab.lab.workload import Workload
from mambalab.worker.cudagraph_dispatcher import (
    BatchDescriptor, CUDAGraphMode, cap_cudagraph_mode, synchronize_cudagraph_mode)
from mambalab.worker.model_runner import RunnerConfig

FULL, PIECEWISE, NONE = CUDAGraphMode.FULL, CUDAGraphMode.PIECEWISE, CUDAGraphMode.NONE


def test_the_minimum_mode_wins():
    assert synchronize_cudagraph_mode([FULL, FULL]) is FULL
    assert synchronize_cudagraph_mode([FULL, PIECEWISE]) is PIECEWISE
    assert synchronize_cudagraph_mode([PIECEWISE, NONE, FULL]) is NONE


def test_cap_keeps_or_lowers_a_descriptor():
    full = BatchDescriptor(3, 3, 4, 4, True, 1, FULL)
    assert cap_cudagraph_mode(full, None) is full and cap_cudagraph_mode(full, FULL) is full
    pw = cap_cudagraph_mode(full, PIECEWISE)
    assert (pw.cudagraph_mode, pw.num_tokens_padded, pw.num_reqs_padded) == (PIECEWISE, 4, 3)
    none = cap_cudagraph_mode(full, NONE)
    assert (none.cudagraph_mode, none.num_tokens_padded, none.num_reqs_padded) == (NONE, 3, 3)
    mixed = BatchDescriptor(5, 2, 8, 2, False, 1, PIECEWISE)
    assert cap_cudagraph_mode(mixed, FULL) is mixed


def _records(bugs: BugConfig):
    # DP 2: rank 1 decodes one request while rank 0 prefills a prompt over several chunked steps.
    rc = RunnerConfig(max_num_seqs=2, max_num_batched_tokens=4, max_model_len=32, block_size=4,
                      num_blocks=24)
    w = Workload(EngineConfig(rc, data_parallel_size=2, model_seed=3),
                 {1: [Add("a", (5, 7), 6, 1)], 3: [Add("b", tuple(range(1, 12)), 2, 0)]})
    return run_workload(w, bugs)


def test_a_mixed_rank_keeps_every_rank_off_its_full_graph():
    verdict, records = _records(BugConfig())
    assert verdict.ok, verdict.summary()
    by_step: dict[int, list] = {}
    for r in records:
        by_step.setdefault(r.step, []).append(r)
    mixed_steps = [s for s, rs in by_step.items() if any(r.kind == "step" and r.num_prefills for r in rs)]
    assert mixed_steps, "the workload must have steps where one rank prefills"
    for s in mixed_steps:
        assert all(r.mode != "FULL" for r in by_step[s]), (s, [(r.rank, r.kind, r.mode) for r in by_step[s]])
    # Once b's prompt is done both ranks decode: FULL again on both.
    assert any(len(rs) == 2 and all(r.mode == "FULL" for r in rs) for rs in by_step.values())
