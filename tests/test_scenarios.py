"""Every catalogue bug: its scenario diverges with the bug and matches with the fix, on several
seeds, and the verdict names the mechanism's signature."""

import pytest

from mambalab.lab.scenarios import SCENARIOS, replay, valid_bug_ids

SEEDS = [0, 1, 2]


@pytest.mark.cpu_only
@pytest.mark.parametrize("seed", SEEDS)
def test_pad_minus_one(seed):
    r = replay("pad-minus-one", seed=seed)
    assert r.exit_code == 1 and r.verdict.illegal is not None
    assert r.verdict.illegal.slot == -1 and r.verdict.illegal.row == 3  # the padded row
    assert "reached address arithmetic" in " ".join(r.signatures)
    assert replay("pad-minus-one", fixed=True, seed=seed).exit_code == 0


@pytest.mark.parametrize("seed", SEEDS)
def test_stale_rows(seed):
    r = replay("stale-rows", seed=seed)
    assert r.exit_code == 1
    assert r.verdict.first.req_id == "D"  # the request that inherited the corrupted cached block
    assert any("dummy batch rows point at blocks" in s for s in r.signatures)
    fixed = replay("stale-rows", fixed=True, seed=seed)
    assert fixed.exit_code == 0, fixed.report()
    assert not any("dummy batch rows point" in s for s in fixed.signatures)


@pytest.mark.parametrize("seed", SEEDS)
def test_guard_lt_zero(seed):
    r = replay("guard-lt-zero", seed=seed)
    assert r.exit_code == 1
    assert any("null block (0) is no longer zero" in s for s in r.signatures)
    fixed = replay("guard-lt-zero", fixed=True, seed=seed)
    assert fixed.exit_code == 0 and not fixed.signatures


@pytest.mark.parametrize("part", ["spec-slots/width", "spec-slots/padding"])
@pytest.mark.parametrize("seed", SEEDS[:2])
def test_spec_slots_capture_crash(part, seed):
    r = replay(part, seed=seed)
    assert r.exit_code == 1 and r.verdict.crash.kind == "startup" and "capture" in r.verdict.summary()
    assert replay(part, fixed=True, seed=seed).exit_code == 0


@pytest.mark.parametrize("seed", SEEDS)
def test_spec_slots_gather_wrong_start_state(seed):
    r = replay("spec-slots/gather", seed=seed)
    assert r.exit_code == 1 and r.verdict.divergences and r.verdict.crash is None
    assert replay("spec-slots/gather", fixed=True, seed=seed).exit_code == 0


def test_spec_slots_whole_bug_crashes_at_capture():
    r = replay("spec-slots")
    assert r.exit_code == 1 and "missing speculative columns" in r.verdict.crash.message


@pytest.mark.parametrize("seed", SEEDS)
def test_stale_is_prefilling(seed):
    r = replay("stale-is-prefilling", seed=seed)
    assert r.exit_code == 1 and r.verdict.first.req_id == "C"
    sig = " ".join(r.signatures)
    assert "classified as prefill (stale is_prefilling)" in sig and "not refreshed" in sig
    # the first such step is the step of the first divergence
    assert f"step {r.verdict.first.step}," in r.signatures[0]
    fixed = replay("stale-is-prefilling", fixed=True, seed=seed)
    assert fixed.exit_code == 0 and not fixed.signatures


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_move_row_stale_source(seed):
    r = replay("move-row-stale-source", seed=seed)
    assert r.exit_code == 1 and r.verdict.first.req_id == "D"
    assert any("dummy batch rows point at blocks" in s for s in r.signatures)
    fixed = replay("move-row-stale-source", fixed=True, seed=seed)
    assert fixed.exit_code == 0 and not fixed.signatures


@pytest.mark.cpu_only
@pytest.mark.parametrize("seed", SEEDS[:2])
def test_zero_accepted(seed):
    r = replay("zero-accepted", seed=seed)
    assert r.exit_code == 1
    assert any("num_accepted_tokens = 0" in s for s in r.signatures)
    # the GDN kernel (the speculative call of Qwen3-Next's layer, as upstream's traces name it), not the SSU (which
    # has always clamped max(num_accepted - 1, 0))
    assert "fused_sigmoid_gating_delta_rule_update" in r.verdict.summary()
    assert "selective_state_update" not in r.verdict.summary()
    assert any("GDN kernel loads column num_accepted_tokens - 1 = -1" in s for s in r.signatures)
    assert replay("zero-accepted", fixed=True, seed=seed).exit_code == 0


@pytest.mark.parametrize("seed", SEEDS)
def test_single_token_extend(seed):
    """#42430: a one-token last prompt chunk replays the uniform decode graph (shape-based
    dispatch); pre-fix the builder counts it as a prefill and the buffer refresh is skipped."""
    r = replay("single-token-extend", seed=seed)
    assert r.exit_code == 1 and r.verdict.first.req_id in ("A", "B", "X")
    sig = " ".join(r.signatures)
    assert "one-token prompt chunk with prior state" in sig and "not refreshed" in sig
    fixed = replay("single-token-extend", fixed=True, seed=seed)
    assert fixed.exit_code == 0 and not fixed.signatures


def test_every_catalogue_bug_has_a_scenario():
    for bug in valid_bug_ids():
        assert bug.split("/")[0] in SCENARIOS
