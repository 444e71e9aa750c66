"""Fix-it exercises (``mambalab.workbook.fix_it``): the learner's code planted in the engine, judged by scenarios.

For each: the notebook's solution passes, the pre-fix behaviour written as a learner's answer fails with
the step and request named, an unanswered stub says so, and the plants leave the library as it was.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

from mambalab.workbook import fix_it

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
cpu_only = pytest.mark.cpu_only(reason="the learner's guard runs inside the kernels under Triton's interpreter")


def solutions(notebook: str):
    if str(NOTEBOOKS) not in sys.path:
        sys.path.insert(0, str(NOTEBOOKS))
    return importlib.import_module(f"solutions.ex{notebook}")


def _nop(*args):
    return None


def _commit(block_table, num_reqs):
    block_table.commit_block_table(num_reqs)


def _clear_gpu_only(table, row):
    table.block_table.gpu[row] = 0


def _stub(*args):
    raise NotImplementedError


@cpu_only
def test_guard_solution_passes_and_each_pre_fix_guard_fails_where_upstream_did():
    assert fix_it.check_fix("01.fix", solutions("01").is_live_slot).passed
    trusting = fix_it.check_fix("01.fix", lambda idx, null: idx == idx)  # pad-minus-one's consumer
    assert not trusting.passed and "ILLEGAL MEMORY ACCESS at step 2" in trusting
    eq_null = fix_it.check_fix("01.fix", lambda idx, null: idx != null)  # Mamba's guard: -1 still reaches it
    lines = str(eq_null).split("\n")
    assert not eq_null.passed
    assert any(l.startswith("  ✗ pad-minus-one") and "slot -1" in l for l in lines)
    assert any(l.startswith("  ✓ guard-lt-zero") for l in lines)
    lt_zero = fix_it.check_fix("01.fix", lambda idx, null: idx >= 0)  # FLA before #39064
    assert not lt_zero.passed and "null block (0) is no longer zero" in lt_zero


@cpu_only
def test_guard_that_skips_live_blocks_or_uses_and_is_named_before_the_engine_runs():
    skips = fix_it.check_fix("01.fix", lambda idx, null: idx > 5)
    assert not skips.passed and "live request's block" in skips
    anded = fix_it.check_fix("01.fix", lambda idx, null: idx >= 0 and idx != null)
    assert not anded.passed and "& and |" in anded
    assert "not answered yet" in fix_it.check_fix("01.fix", _stub)


def test_stale_rows_fix_needs_both_halves_on_the_cpu_mirror():
    ex = solutions("02")
    assert fix_it.check_fix("02.fix", ex.clear_row, ex.dummy_run_commit).passed
    for clear, commit in ((ex.clear_row, _nop), (_nop, _commit), (_clear_gpu_only, _commit)):
        got = fix_it.check_fix("02.fix", clear, commit)
        assert not got.passed
        assert "request D (rank 1)" in got and "dummy batch rows point at blocks" in got


def test_learner_exception_inside_a_step_is_a_verdict_naming_the_step():
    ex = solutions("02")
    got = fix_it.check_fix("02.fix", lambda table, row: table.clear(row), ex.dummy_run_commit)
    assert not got.passed
    assert "CRASH: step 3, rank 1: LearnerError: your clear_row raised AttributeError" in got
    at_capture = fix_it.check_fix("02.fix", ex.clear_row, lambda bt, n: bt.commit_block_table(n, "extra"))
    assert "CRASH: at CUDA-graph capture (engine start-up): LearnerError: your dummy_run_commit" in at_capture
    assert "not answered yet" in fix_it.check_fix("02.fix", _stub, _stub)


def test_spec_gather_solution_passes_and_a_single_slot_gather_fails():
    assert fix_it.check_fix("03.fix", solutions("03").spec_source_slots).passed
    single = fix_it.check_fix("03.fix", lambda d, anchor, ns: d.gather(1, anchor[:, None]))
    assert not single.passed and "DIVERGED: step 4: request r0" in single


def test_is_prefilling_fix_passes_and_wrong_masks_are_caught():
    assert fix_it.check_fix("04.fix", solutions("04").mask_padded_rows).passed
    untouched = fix_it.check_fix("04.fix", lambda flags, n: flags)
    assert not untouched.passed and "a padded row must not say prefill" in untouched
    everything = fix_it.check_fix("04.fix", lambda flags, n: torch.zeros_like(flags))
    assert not everything.passed and "must keep its flag" in everything
    assert fix_it.check_fix("04.fix", _stub) == ("fix 04.fix: your mask_padded_rows in the engine (the "
                                                 "is_prefilling line of _build_attention_metadata): not answered "
                                                 "yet (it raises NotImplementedError)")


def test_a_mask_that_passes_the_properties_is_judged_by_the_engine():
    # Masking from num_reqs + 1 on leaves the first padded row's stale flag: the scenario names C.
    def off_by_one(flags, num_reqs):
        flags[num_reqs + 1:] = False
        return flags

    plants = fix_it.is_prefilling_plants(off_by_one)
    verdict, _ = fix_it.run_planted("stale-is-prefilling", 0, plants)
    assert not verdict.ok and verdict.first.req_id == "C" and verdict.first.step == 4


def test_plants_restore_the_library():
    from mambalab.attention.mamba_metadata import MambaAttentionMetadataBuilder
    from mambalab.kernels import mamba_ssm
    from mambalab.worker import model_runner
    from mambalab.worker.input_batch import InputBatch
    from mambalab.worker.runner_inputs import RunnerBuffers

    before = (mamba_ssm.is_live_slot, InputBatch.remove_request, RunnerBuffers.prepare_dummy_run,
              model_runner.build_attention_metadata, MambaAttentionMetadataBuilder.decode_state_slots)
    fix_it.check_fix("02.fix", _nop, _nop)
    fix_it.check_fix("04.fix", solutions("04").mask_padded_rows)
    fix_it.check_fix("03.fix", solutions("03").spec_source_slots)
    after = (mamba_ssm.is_live_slot, InputBatch.remove_request, RunnerBuffers.prepare_dummy_run,
             model_runner.build_attention_metadata, MambaAttentionMetadataBuilder.decode_state_slots)
    assert before == after


def test_reveal_fix_folds_the_source_with_the_engines_verdict():
    ex = solutions("02")
    shown = fix_it.reveal_fix("02.fix", ex.clear_row, ex.dummy_run_commit)
    assert shown.startswith("def clear_row(table, row):") and "def dummy_run_commit(" in shown
    assert shown.verdict == "fixed: every request matches its reference in every run"
    assert "<details" in shown._repr_html_()
