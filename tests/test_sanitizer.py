"""The interpreter's sanitizer: out-of-bounds state accesses are reported, never performed.

The kernels here are miniature state updates, ``state[idx[row]] = 2 * state[idx[row]] + 1``
with the old row copied to ``out``, launched on a (head, row) grid like the
decode kernels. Pools are views into bigger buffers with guard slots around
them, so an escaped store would show up as a changed guard byte instead of
corrupting the test process.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from mambalab.lab import sanitizer
from mambalab.lab.sanitizer import IllegalMemoryAccess, SanitizerUnsupported, launch

pytestmark = [
    pytest.mark.cpu_only(reason="the sanitizer guards the Triton interpreter only"),
    pytest.mark.usefixtures("no_launch_memo"),  # every launch runs checked (lab/launch_memo.py has its own tests)
]

H, D, BLOCK = 2, 8, 16  # BLOCK > D: every access has masked-off lanes
GUARD = 2
NAME = "toy_state_update"


@triton.jit
def _state_update(state_ptr, idx_ptr, out_ptr, stride_slot, WILD: tl.constexpr,
                  D: tl.constexpr, BLOCK: tl.constexpr):
    h = tl.program_id(0)
    row = tl.program_id(1)
    slot = tl.load(idx_ptr + row)
    offs = tl.arange(0, BLOCK)
    live = offs < D
    # masked-off lanes point far away (WILD elements off): they are not accesses
    cols = tl.where(live, h * D + offs, WILD)
    ptrs = state_ptr + slot * stride_slot + cols
    x = tl.load(ptrs, mask=live, other=0.0)
    tl.store(ptrs, x * 2.0 + 1.0, mask=live)
    tl.store(out_ptr + row * (2 * D) + cols, x, mask=live)


@triton.jit
def _strided_update(state_ptr, idx_ptr, s0, s1, s2, W: tl.constexpr, C: tl.constexpr):
    """state[idx[row]] += 1 for a [slots, W, C] tensor of any strides."""
    row = tl.program_id(0)
    slot = tl.load(idx_ptr + row).to(tl.int64)
    w = tl.arange(0, W)[:, None]
    c = tl.arange(0, C)[None, :]
    ptrs = state_ptr + slot * s0 + w * s1 + c * s2
    tl.store(ptrs, tl.load(ptrs) + 1.0)


@triton.jit
def _pick(a_ptr, b_ptr, out_ptr, N: tl.constexpr):
    """out = a[:N/2] ++ b[N/2:] through one load whose pointers mix two tensors."""
    offs = tl.arange(0, N)
    ptrs = tl.where(offs < N // 2, a_ptr + offs, b_ptr + offs)
    tl.store(out_ptr + offs, tl.load(ptrs))


@triton.jit
def _count(counter_ptr, idx_ptr, flags_ptr):
    row = tl.program_id(0)
    slot = tl.load(idx_ptr + row)
    tl.atomic_add(counter_ptr + slot, 1)
    tl.atomic_cas(flags_ptr + slot, 0, 1)


@triton.jit
def _far(x_ptr, far):
    tl.store(x_ptr + far, 1.0)


def _pool(num_slots: int, width: int = H * D, *, pad: int = 0, lead: int = 0):
    """(buffer, state): ``state`` is ``num_slots`` rows inside ``buffer`` with guard rows around."""
    buf = torch.randn(GUARD + num_slots + GUARD, lead + width + pad)
    return buf, buf[GUARD:GUARD + num_slots, lead:lead + width]


def _run(state, idx, out=None, **kw):
    if out is None:
        out = torch.full((idx.numel(), 2 * D), float("nan"))
    launch(_state_update, (H, idx.numel()), state, idx, out, state.stride(0),
           WILD=kw.pop("wild", 1 << 28), D=D, BLOCK=BLOCK, name=NAME, row_axis=1, **kw)
    return out


def _builder_originals():
    from triton.runtime import interpreter as interp

    return {
        "create_masked_load": interp.InterpreterBuilder.__dict__["create_masked_load"],
        "create_masked_store": interp.InterpreterBuilder.__dict__["create_masked_store"],
        "create_atomic_cas": interp.InterpreterBuilder.__dict__["create_atomic_cas"],
        "create_atomic_rmw": interp.InterpreterBuilder.__dict__["create_atomic_rmw"],
        "_implicit_cvt": interp._implicit_cvt,
    }


@pytest.fixture(scope="module")
def originals():
    assert not sanitizer.hooks_installed()
    return _builder_originals()


def test_on_by_default_under_the_interpreter(monkeypatch):
    monkeypatch.delenv("MAMBALAB_SANITIZER", raising=False)
    assert sanitizer.is_active()
    monkeypatch.setenv("MAMBALAB_SANITIZER", "0")
    assert not sanitizer.is_active()
    with sanitizer.enabled(True):
        assert sanitizer.is_active()
    monkeypatch.setenv("MAMBALAB_SANITIZER", "maybe")
    with pytest.raises(ValueError, match="MAMBALAB_SANITIZER"):
        sanitizer.is_active()


def test_valid_launch_updates_state_and_records_slots():
    buf, state = _pool(8)
    idx = torch.tensor([3, 1, 6, 2], dtype=torch.int32)
    before_buf, before = buf.clone(), state.clone()
    with sanitizer.recording() as log:
        out = _run(state, idx)
    rows = idx.long()
    torch.testing.assert_close(out, before[rows])
    torch.testing.assert_close(state[rows], before[rows] * 2 + 1)
    untouched = [s for s in range(8) if s not in rows.tolist()]
    assert torch.equal(state[untouched], before[untouched])
    assert torch.equal(buf[:GUARD], before_buf[:GUARD]) and torch.equal(buf[-GUARD:], before_buf[-GUARD:])

    expected = {r: {int(s)} for r, s in enumerate(idx)}
    assert log.slots("state_ptr", "load") == expected
    assert log.slots("state", "store") == expected  # "state" also names state_ptr
    assert log.slots("out_ptr", "store") == {r: {r} for r in range(4)}
    assert log.slots("idx_ptr", "load") == {r: {r} for r in range(4)}
    assert all(a.legal for a in log) and not log.violations
    assert log.kernels == [NAME]
    assert set(log.programs("state_ptr", "store")) == {(h, r, 0) for h in range(H) for r in range(4)}
    per_load = log.select("state_ptr", "load")
    assert len(per_load) == H * 4 and all(a.elements == D for a in per_load)


def test_recording_shows_two_rows_sharing_a_slot():
    _, state = _pool(4)
    idx = torch.tensor([2, 2, 1], dtype=torch.int32)
    with sanitizer.recording() as log:
        _run(state, idx)
    assert log.rows_by_slot("state_ptr", "store") == {2: {0, 1}, 1: {2}}


def test_minus_one_index_is_reported_and_never_performed(originals):
    buf, state = _pool(6)
    idx = torch.tensor([3, -1, 5], dtype=torch.int32)
    before_buf, before = buf.clone(), state.clone()
    with sanitizer.recording() as log:
        with pytest.raises(IllegalMemoryAccess) as info:
            _run(state, idx)
    err = info.value
    stride0 = state.stride(0)
    assert isinstance(err, RuntimeError)
    assert (err.kernel, err.pid, err.row, err.op, err.arg) == (NAME, (0, 1, 0), 1, "load", "state_ptr")
    assert (err.index, err.slot, err.num_slots, err.numel) == (-stride0, -1, 6, 6 * H * D)
    msg = str(err)
    for part in (NAME, "row 1", "load", "'state_ptr'", f"element {-stride0}", "slot -1",
                 "6 slots", f"{6 * H * D} elements", "(0, 1, 0)"):
        assert part in msg, (part, msg)
    # every program of row 1 loads and stores out of bounds: 2 heads x (load, store)
    assert err.total == len(err.violations) == 2 * H
    assert {(v.pid, v.op) for v in err.violations} == {
        ((h, 1, 0), op) for h in range(H) for op in ("load", "store")
    }
    assert {v.slot for v in err.violations} == {-1}
    assert sorted(v.index for v in err.violations if v.op == "store") == [-stride0, -stride0 + D]
    assert all(v.lanes == D for v in err.violations)
    # the guard rows before and after the pool are bit-identical: nothing escaped
    assert torch.equal(buf[:GUARD], before_buf[:GUARD]) and torch.equal(buf[-GUARD:], before_buf[-GUARD:])
    # the legal rows ran; the illegal loads yielded 0.0
    torch.testing.assert_close(state[[3, 5]], before[[3, 5]] * 2 + 1)
    assert torch.equal(state[[0, 1, 2, 4]], before[[0, 1, 2, 4]])
    assert log.slots("state_ptr", "store", legal=False) == {1: {-1}}
    assert log.slots("state_ptr", "store", legal=True) == {0: {3}, 2: {5}}
    assert len(log.violations) == 2 * H
    # the hooks are gone and the next, valid launch works
    assert _builder_originals() == originals
    out = _run(state, torch.tensor([0, 4], dtype=torch.int32))
    torch.testing.assert_close(out, before[[0, 4]])


def test_index_past_the_end_is_reported():
    buf, state = _pool(5)
    idx = torch.tensor([0, 5], dtype=torch.int32)
    before_buf = buf.clone()
    with pytest.raises(IllegalMemoryAccess) as info:
        _run(state, idx)
    err = info.value
    assert (err.row, err.slot, err.num_slots, err.index) == (1, 5, 5, 5 * state.stride(0))
    assert "slot 5" in str(err) and "5 slots" in str(err)
    assert torch.equal(buf[-GUARD:], before_buf[-GUARD:])


@pytest.mark.parametrize("wild", [1 << 28, -(1 << 28)])
def test_masked_off_lanes_with_wild_addresses_are_not_accesses(wild):
    _, state = _pool(4)
    idx = torch.tensor([1, 3], dtype=torch.int32)
    with sanitizer.recording() as log:
        _run(state, idx, wild=wild)
    assert not log.violations
    assert log.slots("state_ptr") == {0: {1}, 1: {3}}


def test_pointer_inside_an_adjacent_argument_is_still_reported():
    # 'out' is allocated directly before 'state': state[-1] IS out's last row
    rows = 3
    buf = torch.randn(rows + 4, 2 * D)
    out, state = buf[:rows], buf[rows:]
    assert state.data_ptr() - state.stride(0) * 4 == out[rows - 1].data_ptr()
    idx = torch.tensor([-1, 0, 2], dtype=torch.int32)
    with pytest.raises(IllegalMemoryAccess) as info:
        _run(state, idx, out=out)
    err = info.value
    assert (err.arg, err.slot, err.row) == ("state_ptr", -1, 0)
    assert {v.arg for v in err.violations} == {"state_ptr"}


def test_provenance_survives_where_between_two_tensors():
    a, b, out = torch.randn(16), torch.randn(16), torch.zeros(16)
    with sanitizer.recording() as log:
        launch(_pick, (1,), a, b, out, N=16, name="pick")
    torch.testing.assert_close(out, torch.cat([a[:8], b[8:]]))
    assert log.slots("a_ptr", "load") == {0: set(range(8))}
    assert log.slots("b_ptr", "load") == {0: set(range(8, 16))}
    short = torch.randn(8)  # b[8:] is now out of bounds, a is untouched by that
    with pytest.raises(IllegalMemoryAccess) as info:
        launch(_pick, (1,), a, short, out, N=16, name="pick")
    assert info.value.arg == "b_ptr" and info.value.index == 8 and info.value.violations[0].lanes == 8


def test_padded_pool_view_with_storage_offset():
    # a page-padded pool: rows of H*D live in rows of H*D + 8, starting 3 columns in
    buf, state = _pool(6, pad=5, lead=3)
    assert state.stride(0) == H * D + 8 and state.storage_offset() > 0
    idx = torch.tensor([5, 0, 2], dtype=torch.int32)
    before_buf, before = buf.clone(), state.clone()
    with sanitizer.recording() as log:
        _run(state, idx)
    torch.testing.assert_close(state[[5, 0, 2]], before[[5, 0, 2]] * 2 + 1)
    inner = torch.zeros_like(buf, dtype=torch.bool)
    inner[GUARD:GUARD + 6, 3:3 + H * D] = True
    assert torch.equal(buf[~inner], before_buf[~inner])  # padding, lead and guards untouched
    assert log.slots("state_ptr", "store") == {0: {5}, 1: {0}, 2: {2}}

    for bad, slot in ((6, 6), (-1, -1)):
        with pytest.raises(IllegalMemoryAccess) as info:
            _run(state, torch.tensor([1, bad], dtype=torch.int32))
        err = info.value
        assert (err.slot, err.index, err.row) == (slot, slot * state.stride(0), 1)
    assert torch.equal(buf[~inner], before_buf[~inner])


def test_transposed_conv_state_view():
    # conv state [slots, W, C] stored dim-contiguous: physical [slots, C, W] transposed
    S, W, C = 5, 4, 8
    buf = torch.randn(GUARD + S + GUARD, C, W)
    state = buf[GUARD:GUARD + S].transpose(1, 2)
    assert state.shape == (S, W, C) and state.stride() == (C * W, 1, W)
    before_buf = buf.clone()
    idx = torch.tensor([4, 1], dtype=torch.int32)
    with sanitizer.recording() as log:
        launch(_strided_update, (2,), state, idx, *state.stride(), W=W, C=C, name="conv", row_axis=0)
    torch.testing.assert_close(state[[4, 1]], before_buf[GUARD:GUARD + S].transpose(1, 2)[[4, 1]] + 1)
    assert log.slots("state_ptr", "store") == {0: {4}, 1: {1}}
    with pytest.raises(IllegalMemoryAccess) as info:
        launch(_strided_update, (2,), state, torch.tensor([2, S], dtype=torch.int32), *state.stride(),
               W=W, C=C, name="conv", row_axis=0)
    assert (info.value.row, info.value.slot, info.value.num_slots) == (1, S, S)
    assert torch.equal(buf[GUARD + S:], before_buf[GUARD + S:])


def test_atomics_are_checked():
    counter = torch.zeros(GUARD + 4 + GUARD, dtype=torch.int32)
    flags = torch.zeros(GUARD + 4 + GUARD, dtype=torch.int32)
    c, f = counter[GUARD:GUARD + 4], flags[GUARD:GUARD + 4]
    launch(_count, (3,), c, torch.tensor([1, 1, 3], dtype=torch.int32), f, name="count")
    assert c.tolist() == [0, 2, 0, 1] and f.tolist() == [0, 1, 0, 1]
    with pytest.raises(IllegalMemoryAccess) as info:
        launch(_count, (2,), c, torch.tensor([2, -1], dtype=torch.int32), f, name="count")
    assert {(v.op, v.arg, v.slot, v.row) for v in info.value.violations} == {
        ("atomic", "counter_ptr", -1, 1), ("atomic", "flags_ptr", -1, 1)
    }
    assert counter[:GUARD].tolist() == [0, 0] and flags[:GUARD].tolist() == [0, 0]
    assert c.tolist() == [0, 2, 1, 1]


def test_pointer_not_derived_from_any_argument():
    x = torch.zeros(4)
    with pytest.raises(IllegalMemoryAccess) as info:
        launch(_far, (1,), x, 1 << 51, name="far")  # 2**53 bytes away: off its tensor's tag
    assert info.value.arg is None
    assert "not derived from any tensor argument" in str(info.value)


def test_disabled_sanitizer_installs_nothing(originals, monkeypatch):
    seen = []

    def grid(meta):
        seen.append((sanitizer.hooks_installed(), _builder_originals() == originals))
        return (H, 2)

    buf, state = _pool(4)
    before_buf = buf.clone()
    idx = torch.tensor([2, -1], dtype=torch.int32)  # -1 lands in our own guard row
    with sanitizer.enabled(False), sanitizer.recording() as log:
        assert not sanitizer.is_active()
        launch(_state_update, grid, state, idx, torch.empty(2, 2 * D), state.stride(0),
               WILD=0, D=D, BLOCK=BLOCK, name=NAME, row_axis=1)
    assert seen == [(False, True)]
    assert len(log) == 0
    # unguarded, the -1 store silently rewrote the guard row before the pool
    assert not torch.equal(buf[GUARD - 1], before_buf[GUARD - 1])
    assert torch.equal(buf[: GUARD - 1], before_buf[: GUARD - 1])

    monkeypatch.setenv("MAMBALAB_SANITIZER", "0")
    seen.clear()
    launch(_state_update, grid, state, torch.tensor([0, 1], dtype=torch.int32), torch.empty(2, 2 * D),
           state.stride(0), WILD=0, D=D, BLOCK=BLOCK, name=NAME, row_axis=1)
    assert seen == [(False, True)]


def test_hooks_only_during_a_launch(originals):
    seen = []

    def grid(meta):
        seen.append(sanitizer.hooks_installed())
        return (H, 1)

    _, state = _pool(2)
    out = torch.empty(1, 2 * D)
    launch(_state_update, grid, state, torch.tensor([1], dtype=torch.int32), out, state.stride(0),
           WILD=0, D=D, BLOCK=BLOCK, name=NAME, row_axis=1)
    assert seen == [True] and not sanitizer.hooks_installed() and _builder_originals() == originals

    with pytest.raises(IllegalMemoryAccess):
        launch(_state_update, grid, state, torch.tensor([2], dtype=torch.int32), out, state.stride(0),
               WILD=0, D=D, BLOCK=BLOCK, name=NAME, row_axis=1)
    assert not sanitizer.hooks_installed() and _builder_originals() == originals

    def failing_grid(meta):
        raise ZeroDivisionError("grid")

    with pytest.raises(ZeroDivisionError):
        launch(_state_update, failing_grid, state, torch.tensor([1], dtype=torch.int32), out,
               state.stride(0), WILD=0, D=D, BLOCK=BLOCK, name=NAME, row_axis=1)
    assert not sanitizer.hooks_installed() and _builder_originals() == originals


def test_unsupported_interpreter_is_refused(monkeypatch):
    from triton.runtime import interpreter as interp

    def create_masked_load(self, ptrs, mask, other, *args):
        return None

    _, state = _pool(2)
    before = state.clone()
    sanitizer._SUPPORT.clear()
    try:
        monkeypatch.setattr(interp.InterpreterBuilder, "create_masked_load", create_masked_load)
        with pytest.raises(SanitizerUnsupported, match="cannot guard Triton"):
            sanitizer.check_supported()
        with pytest.raises(SanitizerUnsupported, match="MAMBALAB_SANITIZER=0"):
            _run(state, torch.tensor([1], dtype=torch.int32))
        assert torch.equal(state, before)  # nothing ran
        monkeypatch.undo()
        sanitizer._SUPPORT.clear()
        monkeypatch.setattr(triton, "__version__", "3.5.1")
        with pytest.raises(SanitizerUnsupported, match="older than 3.6"):
            sanitizer.check_supported()
    finally:
        monkeypatch.undo()
        sanitizer._SUPPORT.clear()
    sanitizer.check_supported()
