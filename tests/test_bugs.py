import pytest

from mambalab.lab import bugs as bugmod
from mambalab.lab.bugs import BUGS, CATALOGUE, BugConfig, GuardMode, KernelFamily
from mambalab.constants import NULL_BLOCK_ID, PAD_SLOT_ID

EXPECTED = {
    "pad-minus-one": 35431,
    "stale-rows": 37728,
    "guard-lt-zero": 39064,
    "spec-slots": 41233,
    "stale-is-prefilling": 41873,
    "move-row-stale-source": 49757,
    "zero-accepted": 48475,
    "single-token-extend": 42430,
}


# (status, first release containing the fix) as verified in docs/upstream-family.md section 1.
UPSTREAM = {
    "pad-minus-one": ("merged", "0.20"),
    "stale-rows": ("merged", "0.19"),
    "guard-lt-zero": ("merged", "0.20"),
    "spec-slots": ("merged", "0.22"),
    "stale-is-prefilling": ("merged", "0.22"),
    "move-row-stale-source": ("merged", "0.27"),
    "single-token-extend": ("merged", "0.22"),
    "zero-accepted": ("open", None),
}


def test_catalogue_entries():
    assert {b.id: b.pr for b in CATALOGUE} == EXPECTED
    for b in CATALOGUE:
        assert b.title and b.mechanism and b.symptom and b.upstream_files
        assert all(f.startswith(("vllm/", "tests/", "csrc/")) for f in b.upstream_files)
        assert any(f.startswith("vllm/") for f in b.upstream_files)
        assert b.url.endswith(str(b.pr))


def test_status_and_first_release_as_upstream():
    assert {b.id: (b.status, b.fixed_in) for b in CATALOGUE} == UPSTREAM
    assert BUGS["zero-accepted"].release_note == "open upstream: no vLLM release has the fix"
    assert BUGS["move-row-stale-source"].release_note == "fixed in vLLM 0.27"
    with pytest.raises(ValueError, match="first release"):
        bugmod.Bug("x", 1, "t", "open", "0.1", ("vllm/a.py",), "m", "s")


def test_upstream_files_as_the_prs_changed_them():
    files = {b.id: set(b.upstream_files) for b in CATALOGUE}
    # #41233 also touched mamba_utils.py, models/config.py and kv_cache_interface.py
    assert {"vllm/v1/worker/mamba_utils.py", "vllm/model_executor/models/config.py",
            "vllm/v1/kv_cache_interface.py"} <= files["spec-slots"]
    assert len(files["spec-slots"]) == 10 and len(files["pad-minus-one"]) == 15
    # #41873 changed only the runner and a test
    assert files["stale-is-prefilling"] == {"vllm/v1/worker/gpu_model_runner.py",
                                            "tests/v1/attention/test_attention_splitting.py"}
    # #49757 put the fix in block_table.py, not gpu_input_batch.py
    assert "vllm/v1/worker/gpu_input_batch.py" not in files["move-row-stale-source"]
    # #48475 touches only the two FLA kernels
    assert all("/fla/ops/" in f for f in files["zero-accepted"])


def test_no_unverified_citations():
    text = " ".join(b.mechanism + b.symptom + " ".join(r.note for r in b.related) for b in CATALOGUE)
    assert "51508" not in text
    assert {r.pr: (r.status, r.fixed_in) for r in BUGS["zero-accepted"].related} == {
        50021: ("open", None), 48132: ("merged", "0.26")}


def test_default_is_all_fixed():
    cfg = BugConfig()
    assert not any(cfg.has(b) for b in BUGS)
    assert cfg.bound_accepted and not BugConfig.with_bugs("zero-accepted").bound_accepted
    assert cfg.padded_accepted_count == 1 and BugConfig.with_bugs("zero-accepted").padded_accepted_count == 0
    assert cfg.block_table_pad_value == NULL_BLOCK_ID
    assert cfg.kernel_guard is GuardMode.NULL
    assert str(cfg) == "BugConfig(all fixed)"


def test_switches():
    cfg = BugConfig.with_bugs("pad-minus-one")
    assert cfg.block_table_pad_value == PAD_SLOT_ID and cfg.kernel_guard is GuardMode.NONE
    assert BugConfig.with_bugs("guard-lt-zero").kernel_guard is GuardMode.NEGATIVE
    assert BugConfig.with_bugs("guard-lt-zero").block_table_pad_value == NULL_BLOCK_ID


def test_parts():
    whole = BugConfig.with_bugs("spec-slots")
    assert all(whole.has(f"spec-slots/{p}") for p in ("width", "padding", "gather"))
    one = BugConfig.with_bugs("spec-slots/gather")
    assert one.has("spec-slots") and one.has("spec-slots/gather") and not one.has("spec-slots/width")
    assert "spec-slots/gather" in str(one)


def test_comma_lists_and_unknown_ids():
    cfg = BugConfig.with_bugs("stale-rows, stale-is-prefilling")
    assert cfg.has("stale-rows") and cfg.has("stale-is-prefilling")
    with pytest.raises(ValueError, match="valid ids: pad-minus-one"):
        BugConfig.with_bugs("nope")
    with pytest.raises(ValueError, match="unknown bug id"):
        BugConfig().has("spec-slots/typo")


def test_active_context():
    assert bugmod.active() == BugConfig()
    cfg = BugConfig.with_bugs("guard-lt-zero")
    with bugmod.use(cfg):
        assert bugmod.active() is cfg
    assert bugmod.active() == BugConfig()
    with pytest.raises(TypeError):
        with bugmod.use("guard-lt-zero"):
            pass


def test_each_kernel_family_has_its_own_guard_as_in_v033():
    """v0.33: the SSU masks != null_block_id and the conv returns on == null_block_id (a negative
    index reaches them); only the FLA/GDN kernels skip <= 0 (load) / store > 0 (#39064)."""
    fixed = BugConfig()
    assert fixed.kernel_guard_for(KernelFamily.MAMBA) is GuardMode.EQ_NULL
    assert fixed.kernel_guard_for(KernelFamily.FLA) is GuardMode.NULL
    mamba, fla = GuardMode.EQ_NULL, GuardMode.NULL
    assert not mamba.is_live(0) and mamba.is_live(-1) and mamba.is_live(3)
    assert not fla.is_live(0) and not fla.is_live(-1) and fla.is_live(3)
    # #39064 changed only the FLA kernels: guard-lt-zero leaves the SSU/conv guard alone
    lt = BugConfig.with_bugs("guard-lt-zero")
    assert lt.kernel_guard_for(KernelFamily.FLA) is GuardMode.NEGATIVE
    assert lt.kernel_guard_for(KernelFamily.MAMBA) is GuardMode.EQ_NULL
    # the pad-minus-one world's trusting stand-in consumer
    pm = BugConfig.with_bugs("pad-minus-one")
    assert {pm.kernel_guard_for(f) for f in KernelFamily} == {GuardMode.NONE}
    assert fixed.kernel_guard_for("mamba") is GuardMode.EQ_NULL  # by value too


def test_padded_rows_carry_the_zero_only_under_the_switch():
    """The lab's stand-in source of #48475's zero: padded rows (upstream fills 1)."""
    import numpy as np

    from mambalab.core.kv_cache_interface import MambaSpec
    from mambalab.worker.input_batch import InputBatch
    from mambalab.worker.runner_inputs import RunnerBuffers

    for bugs, pad in ((BugConfig(), 1), (BugConfig.with_bugs("zero-accepted"), 0)):
        ib = InputBatch(4, 32, 64, [MambaSpec(32)], device="cpu", bugs=bugs)
        buf = RunnerBuffers(4, 64, device="cpu")
        p = buf.prepare_dummy_run(ib, 2, 1, 4, bugs)
        assert buf.num_accepted_tokens.np[: p.num_reqs].tolist() == [pad] * p.num_reqs
        buf.prepare_inputs(ib, np.zeros(0, dtype=np.int32))
        assert buf.num_accepted_tokens.np.tolist() == [pad] * 4
