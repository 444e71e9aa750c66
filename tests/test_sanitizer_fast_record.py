"""The sanitizer's one-pass check while accesses are recorded (``_Launch.guard``): a load or store whose active
lanes all lie inside one argument is recorded as one legal access without the general path's per-tag grouping,
and records exactly what the general path records; anything else still takes the general path."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from mambalab.lab import sanitizer
from mambalab.lab.sanitizer import IllegalMemoryAccess

pytestmark = [
    pytest.mark.cpu_only(reason="the sanitizer guards the Triton interpreter only"),
    pytest.mark.usefixtures("no_launch_memo"),
]

D, BLOCK = 4, 8  # BLOCK > D: the masked load and store have masked-off lanes


@triton.jit
def _bump(state_ptr, idx_ptr, D: tl.constexpr, BLOCK: tl.constexpr):
    """``state[idx[row], :D] += 1`` (masked), and an unmasked load of the index."""
    row = tl.program_id(0)
    slot = tl.load(idx_ptr + row)
    offs = tl.arange(0, BLOCK)
    ptrs = state_ptr + slot * D + offs
    tl.store(ptrs, tl.load(ptrs, mask=offs < D, other=0.0) + 1.0, mask=offs < D)


def _records(idx):
    state = torch.zeros(6, D)
    with sanitizer.recording() as log:
        sanitizer.launch(_bump, (len(idx),), state, torch.tensor(idx, dtype=torch.int32), D=D, BLOCK=BLOCK)
    return state, [(a.kernel, a.pid, a.row, a.op, a.arg, a.slots, a.elements, a.legal) for a in log]


def test_legal_accesses_are_recorded_without_the_general_path(monkeypatch):
    def general(*a, **k):
        raise AssertionError("the general path ran for a launch whose every access is legal")

    monkeypatch.setattr(sanitizer._Launch, "_note", general)
    state, got = _records([3, 1])
    assert state[3].tolist() == [1.0] * D and state[1].tolist() == [1.0] * D
    want = []
    for row, slot in enumerate([3, 1]):
        pid = (row, 0, 0)
        want += [("_bump", pid, row, "load", "idx_ptr", (row,), 1, True),
                 ("_bump", pid, row, "load", "state_ptr", (slot,), D, True),
                 ("_bump", pid, row, "store", "state_ptr", (slot,), D, True)]
    assert got == want


def test_an_illegal_access_still_takes_the_general_path_and_records_both_sides():
    calls = []
    real = sanitizer._Launch._note

    def note(self, *a, **k):
        calls.append(a[1])
        return real(self, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sanitizer._Launch, "_note", note)
        with pytest.raises(IllegalMemoryAccess) as info:
            _records([2, 7])  # slot 7 of 6: its load and store are out of bounds
    assert calls == ["load", "store"]
    assert {(v.row, v.op) for v in info.value.violations} == {(1, "load"), (1, "store")}
