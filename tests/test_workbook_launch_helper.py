"""A one-launch demo with a negative index on a GPU machine: the launch runs on the CPU interpreter in a
helper process (workbook/kernel_launch.py), so notebook 01's sentinel lesson runs unchanged on a GPU."""

from __future__ import annotations

import pickle

import torch

from mambalab.lab import sanitizer
from mambalab.lab.bugs import BugConfig
from mambalab.lab.verdict import Verdict
from mambalab.workbook import kernel_launch
from mambalab.workbook.kernel_launch import launch_gdn, launch_ssu, on_the_interpreter


def _same(a, b):
    assert a.report() == b.report() and a.indices == b.indices and a.bugs == b.bugs
    for name in ("before", "state", "reference"):
        assert torch.equal(getattr(a, name).cpu(), getattr(b, name).cpu()), name
    assert a.log.slots("state", "load") == b.log.slots("state", "load")
    assert a.log.slots("state", "store") == b.log.slots("state", "store")


def test_the_helper_process_gives_the_in_process_interpreter_run(monkeypatch):
    bug = BugConfig.with_bugs("pad-minus-one")
    here = launch_ssu([3, 5, 2, -1], bug) if kernel_launch.INTERPRET else None
    there = on_the_interpreter("launch_ssu", [3, 5, 2, -1], bug)
    assert there.error is not None and there.error.slot == -1 and there.error.row == 3
    if here is not None:
        _same(here, there)
    # on a GPU (INTERPRET off) a negative index goes to the helper instead of faulting here
    monkeypatch.setattr(kernel_launch, "INTERPRET", False)
    routed = launch_gdn([3, -1], BugConfig.with_bugs("pad-minus-one"), slots=6)
    assert routed.error is not None and routed.error.kernel == "fused_recurrent_gated_delta_rule"
    assert routed.num_slots == 6 and routed.index_name == "ssm_state_indices"


def test_an_illegal_access_report_survives_pickling():
    run = on_the_interpreter("launch_ssu", [2, -1], BugConfig.with_bugs("pad-minus-one"))
    e = pickle.loads(pickle.dumps(run.error))
    assert isinstance(e, sanitizer.IllegalMemoryAccess) and str(e) == str(run.error)
    assert (e.kernel, e.row, e.slot, e.total) == (run.error.kernel, run.error.row, run.error.slot, run.error.total)


def test_a_verdict_with_only_notes_says_it_was_not_run():
    assert Verdict(ok=False, notes=["needs Triton's interpreter"]).summary() == "NOT RUN: needs Triton's interpreter"
