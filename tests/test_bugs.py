import pytest

from mambalab.lab import bugs as bugmod
from mambalab.lab.bugs import BUGS, CATALOGUE, BugConfig, GuardMode
from mambalab.constants import NULL_BLOCK_ID, PAD_SLOT_ID

EXPECTED = {
    "pad-minus-one": 35431,
    "stale-rows": 37728,
    "guard-lt-zero": 39064,
    "spec-slots": 41233,
    "stale-is-prefilling": 41873,
    "move-row-stale-source": 49757,
    "zero-accepted": 48475,
}


def test_catalogue_entries():
    assert {b.id: b.pr for b in CATALOGUE} == EXPECTED
    for b in CATALOGUE:
        assert b.title and b.mechanism and b.symptom and b.upstream_files
        assert all(f.startswith("vllm/") for f in b.upstream_files)
        assert b.url.endswith(str(b.pr))


def test_default_is_all_fixed():
    cfg = BugConfig()
    assert not any(cfg.has(b) for b in BUGS)
    assert cfg.clamp_accepted and not BugConfig.with_bugs("zero-accepted").clamp_accepted
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
