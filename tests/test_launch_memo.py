"""The launch memo (``lab/launch_memo.py``): a repeated launch writes what a real one writes, any change
of what a launch can depend on is another key, and the sanitizer still sees every illegal launch."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from mambalab.lab import launch_memo, sanitizer
from mambalab.lab.launch_memo import LaunchMemo

pytestmark = pytest.mark.cpu_only(reason="the memo serves Triton's interpreter only")


@triton.jit
def _axpy(x_ptr, y_ptr, idx_ptr, a, N: tl.constexpr):
    """``y[idx] += a * x`` for one row of ``N`` elements (``idx`` a state slot, as the state kernels)."""
    slot = tl.load(idx_ptr)
    offs = tl.arange(0, N)
    y = tl.load(y_ptr + slot * N + offs)
    tl.store(y_ptr + slot * N + offs, y + a * tl.load(x_ptr + offs))


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(8, generator=g), torch.randn(4, 8, generator=g), torch.tensor([2])


def _launch(x, y, idx, a=0.5):
    sanitizer.launch(_axpy, (1,), x, y, idx, a, N=8)
    return y


def test_a_repeat_writes_what_a_real_launch_writes(memo):
    x, y, idx = _inputs()
    with launch_memo.disabled():
        want = _launch(x, y.clone(), idx)
    first = _launch(x, y.clone(), idx)
    second = _launch(x.clone(), y.clone(), idx.clone())  # other tensors, the same bytes: a hit
    assert (memo.misses, memo.hits) == (1, 1)
    assert torch.equal(first, want) and torch.equal(second, want)
    assert not torch.equal(want, y)  # the launch did write


def test_every_input_byte_grid_scalar_and_view_is_part_of_the_key(memo):
    x, y, idx = _inputs()
    _launch(x, y.clone(), idx)
    changed = []
    for t in (x, y, idx):
        t2 = t.clone()
        t2.view(-1)[-1 if t is not idx else 0] += 1  # one element, in a part the launch may not even read
        args = [x, y.clone(), idx]
        args[[x is t, y is t, idx is t].index(True)] = t2 if t is not y else t2.clone()
        changed.append(args)
    for args in changed:
        _launch(*args)
    _launch(x, y.clone(), idx, a=0.25)  # a plain argument
    big = torch.zeros(5, 8)
    big[:4] = y
    _launch(x, big[:4], idx)  # the same view's bytes in a bigger storage
    assert memo.hits == 0 and memo.misses == 6


def test_aliasing_between_arguments_is_part_of_the_key(memo):
    buf = torch.randn(4, 8)
    x = buf[2].clone()
    sanitizer.launch(_axpy, (1,), x, buf, torch.tensor([2]), 1.0, N=8)  # x apart from y
    buf2 = torch.randn(4, 8)
    buf2[2] = x
    sanitizer.launch(_axpy, (1,), buf2[2], buf2, torch.tensor([2]), 1.0, N=8)  # x inside y's storage
    assert memo.hits == 0 and memo.misses == 2


def test_a_plant_in_a_kernel_module_is_another_key(memo, monkeypatch):
    """Another function in a kernel module (``guard_plants``) is another key; the original back, a hit."""
    from mambalab.kernels import mamba_ssm_kernels

    x, y, idx = _inputs()
    _launch(x, y.clone(), idx)
    with monkeypatch.context() as m:
        m.setattr(mamba_ssm_kernels, "is_live_slot", lambda idx, null, GUARD: idx == idx)
        _launch(x, y.clone(), idx)
    _launch(x, y.clone(), idx)
    assert (memo.misses, memo.hits) == (2, 1)


def test_a_rebound_language_function_is_another_key(memo, monkeypatch):
    x, y, idx = _inputs()
    _launch(x, y.clone(), idx)
    monkeypatch.setattr(tl, "sum", lambda *a, **k: None)  # never called by _axpy, still another key
    _launch(x, y.clone(), idx)
    assert memo.misses == 2


def test_the_sanitizer_switch_and_overflow_asserts_are_part_of_the_key(memo):
    from mambalab.device import without_overflow_asserts

    x, y, idx = _inputs()
    _launch(x, y.clone(), idx)
    with sanitizer.enabled(False):
        _launch(x, y.clone(), idx)
    with without_overflow_asserts():
        _launch(x, y.clone(), idx)
    assert memo.misses == 3 and memo.hits == 0


def test_an_illegal_launch_is_reported_every_time(memo):
    x, y, _ = _inputs()
    bad = torch.tensor([-1])
    for _ in range(3):
        with pytest.raises(sanitizer.IllegalMemoryAccess, match="_axpy"):
            _launch(x, y.clone(), bad)
    assert memo.hits == 0 and len(memo._entries) == 0


def test_a_repeat_under_recording_records_what_the_launch_recorded(memo):
    """A hit adds the first run's kernel name and accesses to every open log, as a real launch would."""
    x, y, idx = _inputs()
    _launch(x, y.clone(), idx)  # memoised without recording: it must run again to record
    with sanitizer.recording() as first:
        _launch(x, y.clone(), idx)
    assert (memo.misses, memo.hits) == (2, 0) and first.kernels == ["_axpy"] and first.accesses
    with sanitizer.recording() as outer, sanitizer.recording() as inner:
        _launch(x, y.clone(), idx)
    assert memo.hits == 1
    for log in (outer, inner):
        assert log.kernels == first.kernels and log.accesses == first.accesses
    with launch_memo.disabled(), sanitizer.recording() as real:
        _launch(x, y.clone(), idx)
    assert real.accesses == first.accesses
    sanitizer.launch(_axpy, (1,), x, y.clone(), idx, 0.5, N=8, name="axpy (shown as)")  # another name: a miss
    assert memo.misses == 3


def test_a_fresh_output_s_uninitialised_bytes_are_no_input(memo):
    """The GDN wrapper allocates its output with ``torch.empty``: two calls on the same inputs are one
    launch, and the second call's output equals a real launch's."""
    from mambalab.kernels.gated_delta_rule import fused_recurrent_gated_delta_rule

    g = torch.Generator().manual_seed(3)
    B, H, K, V = 3, 2, 8, 8
    q, k, v = (torch.randn(B, 1, H, K, generator=g) for _ in range(3))
    gate, beta = -torch.rand(B, 1, H, generator=g), torch.rand(B, 1, H, generator=g)
    pool = torch.randn(5, H, V, K, generator=g)
    idx = torch.tensor([4, 1, 3])

    def call(p):
        return fused_recurrent_gated_delta_rule(q, k, v, gate, beta, initial_state=p, inplace_final_state=True,
                                                ssm_state_indices=idx)[0]

    with launch_memo.disabled():
        p0 = pool.clone()
        want = call(p0)
    torch.empty(B, 1, H, V).fill_(float("nan"))  # garbage for the allocator to hand out
    outs, pools = [], []
    for _ in range(2):
        p = pool.clone()
        outs.append(call(p))
        pools.append(p)
    assert (memo.misses, memo.hits) == (1, 1)
    for o, p in zip(outs, pools):
        assert torch.equal(o, want) and torch.equal(p, p0)


def test_entries_are_evicted_beyond_the_byte_budget(memo):
    memo.max_bytes = 3 * 4 * 4 * 8  # three launches' writes (y's storage, float32)
    x, y, idx = _inputs()
    for a in (0.1, 0.2, 0.3, 0.4):
        _launch(x, y.clone(), idx, a)
    assert len(memo._entries) == 3 and memo._bytes <= memo.max_bytes
    _launch(x, y.clone(), idx, 0.1)  # the oldest was evicted: a miss
    _launch(x, y.clone(), idx, 0.4)  # the newest kept: a hit
    assert (memo.misses, memo.hits) == (5, 1)


def test_a_replay_runs_the_same_with_and_without_the_memo():
    """A whole scenario through the engine (DP 2, dummy runs on the idle rank, a removal, ``stale-rows`` on):
    the same verdict, tokens and records as with every launch really run; the second replay mostly served."""
    from mambalab.lab.bugs import BugConfig
    from mambalab.lab.scenarios import run_workload, stale_rows

    def replay():
        verdict, records = run_workload(stale_rows(0), BugConfig.with_bugs("stale-rows"))
        return verdict.summary(), verdict.ok, repr(records)

    with launch_memo.disabled():
        plain = replay()
    m = LaunchMemo()
    m.enabled = True
    old, launch_memo.MEMO = launch_memo.MEMO, m
    try:
        first = replay()
        hits, misses = m.hits, m.misses
        second = replay()
    finally:
        launch_memo.MEMO = old
    assert first == plain and second == plain and not plain[1]  # the bug shows, the same way
    assert m.hits - hits > 100 and m.misses == misses  # the second replay: every launch served


def test_the_first_launch_of_a_kernel_module_is_served_on_its_repeat(memo, tmp_path, monkeypatch):
    """Triton's interpreter adds its helpers (``GridExecutor``, ``InterpretedFunction``, ...) to a kernel's
    module at that module's first launch; the entry is stored under the code as the run left it, so the
    repeat is a hit (it was a miss when the first launch of a test's worker was this one)."""
    import importlib
    import textwrap
    import uuid

    name = f"_memo_fresh_kernels_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent("""
        import triton
        import triton.language as tl


        @triton.jit
        def double(x_ptr, o_ptr, N: tl.constexpr):
            offs = tl.arange(0, N)
            tl.store(o_ptr + offs, 2 * tl.load(x_ptr + offs))
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module(name)
    x = torch.randn(8, generator=torch.Generator().manual_seed(3))
    outs = [torch.zeros(8), torch.zeros(8)]
    for out in outs:
        sanitizer.launch(mod.double, (1,), x, out, N=8)
    assert (memo.misses, memo.hits) == (1, 1)
    assert torch.equal(outs[0], 2 * x) and torch.equal(outs[1], 2 * x)
