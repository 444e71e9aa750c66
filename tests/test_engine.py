"""The fixed engine matches every request run alone: tokens and final states."""

import pytest

from mambalab.lab.bugs import BugConfig
from mambalab.engine.core import Abort, Add, Engine, EngineConfig
from mambalab.worker.model_runner import RunnerConfig
from mambalab.lab.reference import judge, run_and_judge
from mambalab.lab.workload import random_workload

CONFIGS = {
    "plain": dict(),
    "spec1": dict(num_speculative_tokens=1, acceptance=0.5),
    "spec2": dict(num_speculative_tokens=2, acceptance=0.7),
    "all": dict(mamba_cache_mode="all"),
    "all-spec1": dict(mamba_cache_mode="all", num_speculative_tokens=1),
    "dp2": dict(data_parallel_size=2),
    "dp2-all": dict(data_parallel_size=2, mamba_cache_mode="all"),
}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_fixed_engine_matches_reference(name, seed):
    w = random_workload(100 + seed, **CONFIGS[name])
    engine = Engine(w.cfg, BugConfig())
    engine.schedule_events(w.events)
    verdict = run_and_judge(engine)
    assert verdict.ok, verdict.summary() + "\n" + "\n".join(w.describe())
    assert engine.step > 3
    # the workload exercised the engine: graphs replayed, and requests finished with outputs
    assert any(r.mode == "FULL" for r in engine.records)
    assert any(res.status == "finished" and res.output for res in engine.results.values())
    if name.startswith("dp2"):
        assert any(r.kind == "dummy" for r in engine.records) or len({r.rank for r in engine.records}) == 2


def test_final_states_are_compared():
    w = random_workload(7)
    engine = Engine(w.cfg)
    engine.schedule_events(w.events)
    engine.run()
    finished = [r for r in engine.results.values() if r.final_state is not None]
    assert finished
    # corrupt one kept state: the verdict must notice
    finished[0].final_state["mamba_ssm"] += 1.0
    v = judge(engine)
    assert not v.ok and any(d.kind == "state" for d in v.divergences)


def test_abort_mid_prefill_and_preemption_resume():
    cfg = EngineConfig(RunnerConfig(max_num_seqs=4, max_num_batched_tokens=16))
    engine = Engine(cfg)
    engine.schedule_events({
        1: [Add("a", (1, 2, 3), 6), Add("long", tuple(range(2, 30)), 3)],
        2: [Abort("long")],
        3: [Add("b", (5, 6, 7, 8), 5)],
    })
    engine.step_once()
    engine.step_once()  # the abort lands: the worker removes "long" mid-prefill
    # the aborted request left a stale "still prefilling" row behind condense
    ib = engine.ranks[0].runner.input_batch
    stale = [i for i in range(ib.num_reqs, ib.max_num_reqs)
             if ib.num_computed_tokens_cpu[i] < ib.num_prompt_tokens[i]]
    assert stale
    engine.run()
    assert engine.results["long"].status == "aborted" and engine.results["long"].output == []
    assert judge(engine).ok
    engine2 = Engine(cfg)
    engine2.schedule_events({1: [Add("p", (3, 1, 4, 1, 5), 8)], 4: [], })
    engine2.step_once(), engine2.step_once()
    engine2.preempt_request("p")
    engine2.run()
    assert engine2.results["p"].status == "finished" and judge(engine2).ok


def test_freed_blocks_are_poisoned():
    engine = Engine(EngineConfig(RunnerConfig(max_num_seqs=2)))
    engine.add_request("x", [1, 2, 3], 2)
    engine.run()
    block = engine.ranks[0].manager.block_pool.free_block_ids()[-1]
    st = engine.ranks[0].runner.state.read_slot(block)
    assert all(t.isnan().all() for t in st.values())


def test_engine_bad_input():
    with pytest.raises(ValueError, match="data_parallel_size"):
        Engine(EngineConfig(data_parallel_size=0))
    engine = Engine()
    with pytest.raises(ValueError, match="rank"):
        engine.add_request("a", [1, 2], 2, rank=3)
    engine.add_request("a", [1, 2], 2)
    with pytest.raises(ValueError, match="already"):
        engine.add_request("a", [1, 2], 2)


def test_eager_dummy_run_touches_no_state():
    """DP 2 without CUDA graphs. Rank 0 prefills 3 tokens while rank 1 is idle, its finished
    one-token request still counted as prefilling in row 0. The idle rank's dummy batch of 3 has
    no graph to replay, so (as vLLM's ``_dummy_run``) it runs with no attention metadata: no
    split, no kernel, no state read or written. (With graphs, v0.33's sizes include
    ``max_num_seqs``, so every dummy size the engine picks is captured.)"""
    from mambalab.lab.scenarios import run_workload
    from mambalab.lab.workload import Workload

    rc = RunnerConfig(max_num_seqs=3, max_num_batched_tokens=8, max_model_len=32, block_size=4,
                      num_blocks=48, mamba_cache_mode="none", cudagraph=False)
    w = Workload(EngineConfig(rc, data_parallel_size=2, model_seed=9),
                 {1: [Add("r0", (1,), 1, 1)], 2: [Add("r1", (11, 6, 16), 1, 0)]})
    verdict, records = run_workload(w, BugConfig())
    assert verdict.ok, verdict.summary()
    dummy = [r for r in records if r.kind == "dummy" and r.step == 2]
    assert len(dummy) == 1 and dummy[0].mode == "NONE" and dummy[0].num_tokens == 3
    assert dummy[0].state_slots == [] and dummy[0].num_decodes == dummy[0].num_prefills == 0


def test_short_speculative_decode_keeps_its_anchor():
    """"all" + 2 speculative tokens: near max_tokens the drafter proposes fewer drafts, so a decode
    row schedules fewer than 1 + num_spec tokens (an eager step). Its states are still written
    from block_idx_last_scheduled_token on, so the next step must start from there, not from the
    block-boundary fallback (found by the hunter's clean run)."""
    from mambalab.lab.scenarios import run_workload
    from mambalab.lab.workload import Workload

    rc = RunnerConfig(max_num_seqs=1, max_num_batched_tokens=8, max_model_len=32, block_size=4,
                      num_blocks=68, mamba_cache_mode="all", num_speculative_tokens=2)
    w = Workload(EngineConfig(rc, model_seed=14, acceptance=(0, 0, 0, 1), drafter_seed=332),
                 {1: [Add("r0", (2, 25, 19, 28, 7, 18), 4)]})
    verdict, records = run_workload(w, BugConfig())
    assert verdict.ok, verdict.summary()
    # v0.33 sizes for q = 3, max_num_seqs 1: [3, 6]; the 6-token prefill pads to 6 (PIECEWISE)
    assert [r.mode for r in records] == ["PIECEWISE", "FULL", "PIECEWISE", "PIECEWISE"]


def test_a_prompt_remainder_of_uniform_length_does_not_replay_the_decode_graph():
    # Speculative decoding (uniform query length 2) and a token budget of 8: a 10-token prompt is
    # prefilled as 8 + 2. The 2-token remainder has the decode graph's shape, but the Mamba builder
    # classifies it as a prefill (no reclassification: it is not one token), so replaying the graph
    # would read its stale buffers. The runner keeps it eager and the request matches its reference.
    from mambalab.lab.scenarios import run_workload
    from mambalab.lab.workload import Workload

    rc = RunnerConfig(max_num_seqs=4, max_num_batched_tokens=8, max_model_len=32, block_size=4, num_blocks=20,
                      num_speculative_tokens=1)
    w = Workload(EngineConfig(rc, model_seed=6, acceptance=(1, 0, 1, 1), drafter_seed=747),
                 {1: [Add("r2", (12, 16, 5, 27, 1, 23, 15, 27, 19, 22), 5)]})
    verdict, records = run_workload(w, BugConfig())
    assert verdict.ok, verdict.summary()
    remainder = [r for r in records if r.scheduled == {"r2": 2} and r.num_prefills == 1]
    assert remainder and all(r.mode != "FULL" for r in remainder), [(r.step, r.mode) for r in records]
