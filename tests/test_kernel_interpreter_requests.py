"""Every request of a one-token launch in one program (the interpreter), against one request a program.

Under the interpreter a one-token decode launch whose requests are all live, a power of two of them and on
slots of their own runs the ``*_requests`` kernels (``mamba_ssm_requests``, ``gated_delta_rule_requests``,
``causal_conv1d_requests``): one program for the whole batch, its lanes reported by the sanitizer as each
request's own program would report them (``lab/sanitizer_rows.py``). Here each launch runs both ways on
the same fresh random inputs, outputs NaN-poisoned: the outputs and every pool bit-identical, the same
access records in the same order, the same violations (kernel, program id, row, operation, argument, index,
slot, lanes) and the same error; and the launches that must keep one request a program (a padded or shared
slot, a batch of 3, a planted guard) do.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import triton
import triton.language as tl

from mambalab.device import DEVICE, DEVICE_TYPE
from mambalab.kernels import common
from mambalab.kernels.causal_conv1d import causal_conv1d_update, make_conv_state
from mambalab.kernels.gated_delta_rule import fused_recurrent_gated_delta_rule, fused_sigmoid_gating_delta_rule_update
from mambalab.kernels.mamba_ssm import selective_state_update
from mambalab.lab import launch_memo, sanitizer
from mambalab.lab.bugs import BugConfig, GuardMode
from mambalab.lab.sanitizer_report import IllegalMemoryAccess, SanitizerUnsupported

interpreter_only = pytest.mark.skipif(DEVICE_TYPE == "cuda", reason="the interpreter's launches (a GPU never runs them)")

FIXED, PAD_MINUS_ONE, LT_ZERO = BugConfig(), BugConfig.with_bugs("pad-minus-one"), BugConfig.with_bugs("guard-lt-zero")


@pytest.fixture
def rows_used(monkeypatch):
    """The ``rows_per_program`` of every sanitized launch."""
    seen: list[int] = []
    launch = sanitizer.launch

    def spy(*args, **kwargs):
        seen.append(kwargs.get("rows_per_program", 1))
        return launch(*args, **kwargs)

    monkeypatch.setattr(sanitizer, "launch", spy)
    yield seen
    common.REQUESTS_A_PROGRAM = True



def _run(make, requests: bool):
    """``make(gen)`` builds fresh inputs and returns a launch that returns the tensors to compare (outputs and
    pools); launched with the memo off, accesses recorded."""
    common.REQUESTS_A_PROGRAM = requests
    go = make(torch.Generator().manual_seed(1234))
    error, tensors = None, []
    with launch_memo.disabled(), sanitizer.recording() as log:
        try:
            tensors = go()
        except IllegalMemoryAccess as e:
            error = str(e)
    violations = [dataclasses.replace(v, address=0) for v in log.violations]  # absolute: differs run to run
    return tensors, list(log.accesses), violations, error, list(log.kernels)


def _same_both_ways(make, rows_used, expect_rows: int) -> tuple:
    one = _run(make, False)
    n_one = len(rows_used)
    many = _run(make, True)
    assert set(rows_used[:n_one]) == {1}
    assert rows_used[n_one:] == [expect_rows], rows_used
    assert len(one[0]) == len(many[0])
    for a, b in zip(one[0], many[0]):
        assert torch.equal(a.nan_to_num(12345.0), b.nan_to_num(12345.0)) and torch.equal(a.isnan(), b.isnan())
    assert one[1] == many[1], "access records"
    assert one[2] == many[2], "violations"
    assert one[3] == many[3], "error"
    assert one[4] == many[4]
    return one


def _ssu(idx, dst=None, bugs=FIXED, tied=True, z=True, dim=4, state_dtype=torch.float32):
    def make(g):
        n, nh, ds = len(idx), 2, 4
        state = torch.randn(8, nh, dim, ds, generator=g).to(DEVICE, state_dtype)
        x = torch.randn(n, nh, dim, generator=g)
        if tied:
            dt = torch.randn(n, nh, 1, generator=g).expand(n, nh, dim)
            A = (-torch.rand(nh, 1, 1, generator=g)).expand(nh, dim, ds)
            dt_bias = torch.randn(nh, 1, generator=g).expand(nh, dim)
        else:
            dt, A = torch.randn(n, nh, dim, generator=g), -torch.rand(nh, dim, ds, generator=g)
            dt_bias = torch.randn(nh, dim, generator=g)
        B, C = torch.randn(n, 1, ds, generator=g), torch.randn(n, 1, ds, generator=g)
        D, zz = torch.randn(nh, dim, generator=g), torch.randn(n, nh, dim, generator=g) if z else None
        x, dt, A, dt_bias, B, C, D, zz = (t if t is None else t.to(DEVICE) for t in (x, dt, A, dt_bias, B, C, D, zz))
        out = torch.full((n, nh, dim), float("nan"), device=DEVICE)
        src = torch.tensor(idx, dtype=torch.int32, device=DEVICE)
        dst_t = None if dst is None else torch.tensor(dst, dtype=torch.int32, device=DEVICE)

        def go():
            selective_state_update(state, x, dt, A, B, C, D, dt_bias, zz, True, src, dst_t, out=out, bugs=bugs)
            return [state, out]
        return go
    return make


@interpreter_only
@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("z", [True, False])
@pytest.mark.parametrize("dim", [4, 3])
@pytest.mark.parametrize("idx,dst", [([3, 5], None), ([6, 1, 2, 7], None), ([6, 1, 2, 7], [4, 5, 0, 3])])
def test_ssu_one_program_equals_one_request_a_program(rows_used, tied, z, dim, idx, dst):
    # dst with a 0: the null block is skipped as a destination, so the launch keeps one request a program
    expect = 1 if dst is not None and 0 in dst else len(idx)
    _same_both_ways(_ssu(idx, dst, tied=tied, z=z, dim=dim), rows_used, expect)


@interpreter_only
@pytest.mark.parametrize("bugs", [FIXED, PAD_MINUS_ONE])
def test_ssu_minus_one_is_reported_alike(rows_used, bugs):
    """-1 is live for the SSU's guard (EQ_NULL) and under pad-minus-one: one program, the same report."""
    one = _same_both_ways(_ssu([3, -1, 5, -1], bugs=bugs), rows_used, 4)
    assert one[3] is not None and "row 1" in one[3]
    assert [(v.pid, v.row, v.op, v.slot) for v in one[2]] == [((0, 1, 0), 1, "load", -1), ((0, 1, 0), 1, "store", -1),
                                                              ((0, 3, 0), 3, "load", -1), ((0, 3, 0), 3, "store", -1)]


@interpreter_only
@pytest.mark.parametrize("idx,bugs", [([3, 0], FIXED), ([3, 5, 1], FIXED), ([2, 2], FIXED), ([0, 0, 4, 5], PAD_MINUS_ONE)])
def test_ssu_launches_that_keep_one_request_a_program(rows_used, idx, bugs):
    """A padded row (0), a batch of 3, two requests on one slot, the null block shared under pad-minus-one."""
    _same_both_ways(_ssu(idx, bugs=bugs), rows_used, 1)


def _gdn(idx, bugs=FIXED, inplace=True, gating=False, two_d=False, K=4, beta_on=True, block_h=None):
    def make(g):
        n, HV, V = len(idx), 2, 4
        q, k = torch.randn(n, 1, 1, K, generator=g), torch.randn(n, 1, 1, K, generator=g)
        v = torch.randn(n, 1, HV, V, generator=g)
        a, b = -torch.rand(n, 1, HV, generator=g), torch.rand(n, 1, HV, generator=g)
        h0 = torch.randn(8, HV, V, K, generator=g)
        A_log, dt_bias = torch.randn(HV, generator=g), torch.randn(HV, generator=g)
        q, k, v, a, b, h0, A_log, dt_bias = (t.to(DEVICE) for t in (q, k, v, a, b, h0, A_log, dt_bias))
        ix = torch.tensor(idx, dtype=torch.int32, device=DEVICE)
        ix = ix[:, None].repeat(1, 2) if two_d else ix
        kwargs = dict(initial_state=h0, inplace_final_state=inplace, ssm_state_indices=ix,
                      use_qk_l2norm_in_kernel=True, bugs=bugs, block_h=block_h)

        def go():
            if gating:
                o, ht = fused_sigmoid_gating_delta_rule_update(A_log, a, b, dt_bias, q, k, v, **kwargs)
            else:
                o, ht = fused_recurrent_gated_delta_rule(q, k, v, a, b if beta_on else None, **kwargs)
            return [h0, o, ht]
        return go
    return make


@interpreter_only
@pytest.mark.parametrize("gating", [False, True])
@pytest.mark.parametrize("K", [4, 3])
@pytest.mark.parametrize("idx,inplace,two_d", [([3, 5], True, False), ([3, 5], False, False), ([6, 1, 2, 7], True, False),
                                               ([6, 1, 2, 7], False, False), ([6, 1, 2, 7], True, True)])
def test_gdn_one_program_equals_one_request_a_program(rows_used, inplace, gating, K, idx, two_d):
    _same_both_ways(_gdn(idx, inplace=inplace, gating=gating, two_d=two_d, K=K), rows_used, len(idx))


@interpreter_only
@pytest.mark.parametrize("idx,bugs,rows", [([3, -1], PAD_MINUS_ONE, 2), ([3, 0], FIXED, 1), ([0, 0, 4, 5], LT_ZERO, 1),
                                           ([3, 0, 4, 5], LT_ZERO, 4)])
def test_gdn_guards(rows_used, idx, bugs, rows):
    """pad-minus-one's -1 (live, illegal, reported alike); a padded 0; guard-lt-zero's shared null block (one
    request a program: the second reads what the first wrote); guard-lt-zero's one 0 (live, its own slot)."""
    _same_both_ways(_gdn(idx, bugs=bugs), rows_used, rows)


def _conv(idx, bugs=FIXED, dim=8, width=4, bias=True, act="silu", dtype=torch.float32, two_d=False):
    def make(g):
        n = len(idx)
        x = torch.randn(n, dim, generator=g).to(DEVICE)
        state = make_conv_state(8, dim, width - 1, dtype, DEVICE)
        state.copy_(torch.randn(8, dim, width - 1, generator=g))
        w, b = torch.randn(dim, width, generator=g).to(DEVICE), torch.randn(dim, generator=g).to(DEVICE)
        ix = torch.tensor(idx, dtype=torch.int32, device=DEVICE)
        ix = ix[:, None].repeat(1, 3) if two_d else ix
        out = torch.full((n, dim), float("nan"), device=DEVICE)

        def go():
            causal_conv1d_update(x, state, w, b if bias else None, act, conv_state_indices=ix, out=out, bugs=bugs)
            return [state, out]
        return go
    return make


@interpreter_only
@pytest.mark.parametrize("width", [2, 3, 4])
@pytest.mark.parametrize("dim,bias,act", [(8, True, "silu"), (6, False, None)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("idx,two_d", [([3, 5], False), ([6, 1, 2, 7], True)])
def test_conv_one_program_equals_one_request_a_program(rows_used, width, dim, bias, act, dtype, idx, two_d):
    _same_both_ways(_conv(idx, dim=dim, width=width, bias=bias, act=act, dtype=dtype, two_d=two_d), rows_used,
                    len(idx))


@interpreter_only
@pytest.mark.parametrize("idx,bugs,rows", [([3, -1, -1, 2], FIXED, 4), ([3, 0], FIXED, 1), ([0, 0], PAD_MINUS_ONE, 1)])
def test_conv_guards(rows_used, idx, bugs, rows):
    _same_both_ways(_conv(idx, bugs=bugs), rows_used, rows)


@triton.jit
def _skip_negative(idx, null_block_id):
    return idx >= 0


@interpreter_only
def test_a_planted_guard_keeps_one_request_a_program(rows_used, monkeypatch):
    """A guard planted as the workbook plants one (``workbook/fix_it.guard_plants``: ``is_live_slot`` replaced in
    the kernels' modules, the wrapper's among them) decides per index inside the one-request kernels; the
    requests kernels test no index, so such a launch keeps one request a program. (Planted here by hand:
    this file also runs in the compat environment, which has no matplotlib for the workbook.)"""
    from mambalab.kernels import mamba_ssm, mamba_ssm_kernels

    def planted(idx, null_block_id, GUARD):  # noqa: N803 - the kernels pass it by this name
        return _skip_negative(idx, null_block_id)

    for module in (mamba_ssm, mamba_ssm_kernels):
        monkeypatch.setattr(module, "is_live_slot", triton.jit(planted))
    _same_both_ways(_ssu([3, -1], bugs=PAD_MINUS_ONE), rows_used, 1)


@interpreter_only
def test_requests_a_program_reads_only_cpu_indices():
    meta = torch.empty(4, dtype=torch.int32, device="meta")  # any read of it raises
    null = int(GuardMode.NULL)
    assert common.requests_a_program(4, null, 0, meta) == 0
    cpu = torch.tensor([4, 5, 6, 7], dtype=torch.int32)
    assert common.requests_a_program(4, null, 0, cpu) == 4
    assert common.requests_a_program(4, null, 0, cpu, cpu) == 4  # src and dst: each request its own slot
    assert common.requests_a_program(4, null, 0, cpu, cpu.flip(0)) == 0  # writes into another's slot
    assert common.requests_a_program(3, null, 0, cpu) == 0
    assert common.requests_a_program(4, null, 0) == 4  # no indices: request r on slot r
    assert common.requests_a_program(4, null, 0, cpu, live_test=_skip_negative) == 0
    common.REQUESTS_A_PROGRAM = False
    try:
        assert common.requests_a_program(4, null, 0, cpu) == 0
    finally:
        common.REQUESTS_A_PROGRAM = True


@triton.jit
def _scalar_copy(x_ptr, y_ptr):
    tl.store(y_ptr, tl.load(x_ptr))


@interpreter_only
def test_sanitizer_refuses_an_access_without_the_rows_in_front():
    """rows_per_program needs every access to lead with the program's rows: a one-lane load is refused."""
    x, y = torch.ones(2), torch.zeros(2)
    with launch_memo.disabled(), pytest.raises(SanitizerUnsupported, match="lead with the program's rows"):
        sanitizer.launch(_scalar_copy, (1,), x, y, rows_per_program=2)


@pytest.mark.skipif(DEVICE_TYPE != "cuda", reason="needs a CUDA GPU (run with MAMBALAB_DEVICE=cuda on the GPU machine)")
def test_a_gpu_never_launches_several_requests_a_program(rows_used):
    """On a GPU every launch keeps its own programs: the heads rule gives one head a program there, and a
    forced several-heads launch's indices are on the device, which requests_a_program never reads."""
    from mambalab.kernels.mamba_ssm import LaunchConfig, launch_config_override

    gen = torch.Generator().manual_seed(5)
    for make in (_ssu([3, 5, 1, 2]), _gdn([3, 5, 1, 2]), _conv([3, 5, 1, 2]), _gdn([3, 5, 1, 2], block_h=2)):
        make(gen)()
    with launch_config_override(LaunchConfig(block_m=4, num_warps=1, block_h=2)):
        _ssu([3, 5, 1, 2])(gen)()
    assert len(rows_used) == 5 and set(rows_used) == {1}, rows_used
