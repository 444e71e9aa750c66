"""Typed verdicts: code decides on fields, the text is rendered from them."""

import pickle

import pytest

from mambalab.lab.verdict import Crash, Divergence, IllegalAccess, Verdict


def test_crash_kinds_render_their_sentence():
    assert Crash.at_startup(TypeError("boom")).describe() == "at CUDA-graph capture (engine start-up): TypeError: boom"
    assert Crash.in_step(4, 1, ValueError("x")).describe() == "step 4, rank 1: ValueError: x"
    assert Crash.unfinished(50).describe() == "hang: the workload did not finish within 50 steps"
    with pytest.raises(ValueError, match="unknown crash kind"):
        Crash("weird", "x")


def test_failure_step_comes_from_the_fields_not_the_text():
    assert Verdict(ok=False, crash=Crash.in_step(7, 0, RuntimeError("step 99"))).failure_step == 7
    assert Verdict(ok=False, crash=Crash.at_startup("at step 3")).failure_step == 0
    assert Verdict(ok=False, crash=Crash.unfinished(40), steps=40).failure_step == 0
    assert Verdict(ok=False, illegal=IllegalAccess(step=5, rank=1)).failure_step == 5
    d = Divergence("token", "B", 0, 6, 2, 3, 4)
    assert Verdict(ok=False, divergences=[d], steps=9).failure_step == 6
    assert Verdict(ok=True, steps=9).failure_step == 9


def test_illegal_access_from_the_sanitizer_and_from_cuda():
    ima = IllegalAccess(step=2, rank=0, kernel="ssu", row=3, op="load", arg="state", slot=-1, index=-64, num_slots=9)
    assert ima.from_sanitizer and "kernel ssu, row 3, load of state at slot -1" in Verdict(ok=False, illegal=ima).summary()
    gpu = IllegalAccess(step=2, rank=1, message="CUDA error: an illegal memory access was encountered")
    assert not gpu.from_sanitizer and Verdict(ok=False, illegal=gpu).summary().endswith("(CUDA): CUDA error: an "
                                                                                     "illegal memory access was encountered")


def test_verdicts_survive_pickling_and_json_shape():
    v = Verdict(ok=False, crash=Crash.in_step(1, 0, RuntimeError("r")))
    assert pickle.loads(pickle.dumps(v)) == v
    d = Verdict(ok=False, illegal=IllegalAccess(step=1, rank=0, slot=-1)).to_dict()
    assert d["illegal"]["slot"] == -1 and d["crash"] is None and d["summary"].startswith("ILLEGAL")


def test_a_startup_crash_keeps_the_sanitizers_report():
    from mambalab.lab.sanitizer_report import IllegalMemoryAccess, Violation

    v = Violation(kernel="fused_recurrent_gated_delta_rule", pid=(0, 0, 0), row=0, op="load", arg="state_indices",
                  index=-1, slot=-1, num_slots=8, numel=8, shape=(4, 2), address=0, nbytes=4, lanes=1)
    try:
        try:
            raise IllegalMemoryAccess([v])
        except IllegalMemoryAccess as e:
            raise RuntimeError("CUDA-graph capture failed") from e
    except RuntimeError as err:
        crash = Crash.at_startup(err)
    assert crash.kind == "startup" and crash.illegal is not None
    assert crash.illegal.kernel == "fused_recurrent_gated_delta_rule" and crash.illegal.arg == "state_indices"
    assert Crash.at_startup(ValueError("no access")).illegal is None and Crash.at_startup("text").illegal is None
