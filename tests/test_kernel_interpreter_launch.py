"""The interpreter's launches against the GPU's, on the same inputs.

The SSU and GDN kernels take ``block_h`` heads of a request in one program on the interpreter
(``LaunchConfig.block_h``, ``gated_delta_rule.heads_per_program``) and one on a GPU; the conv's decode
step runs one request a program without a row tile on the interpreter (``causal_conv1d.decode_kernel``)
and the ``ROWS``-requests kernel on a GPU. Both forms run here, outputs NaN-poisoned first: on the
interpreter the results are bit-identical (the same operations on each element), on a GPU within the
kernels' tolerances; untouched slots, the null block included, stay bit-identical either way, and a wild
index is reported with the same kernel, row, operation, argument, index and slot.
"""

from __future__ import annotations

import pytest
import torch
import triton

import mambalab
from mambalab.device import DEVICE, DEVICE_TYPE
from mambalab.kernels import causal_conv1d as conv_mod
from mambalab.kernels import gated_delta_rule as gdn
from mambalab.kernels.causal_conv1d import causal_conv1d_update
from mambalab.kernels.causal_conv1d_kernels import _causal_conv1d_decode_kernel, _causal_conv1d_window_kernel
from mambalab.kernels.causal_conv1d_row_kernels import _causal_conv1d_decode_row_kernel, _causal_conv1d_window_row_kernel
from mambalab.kernels.gated_delta_rule import fused_recurrent_gated_delta_rule, fused_sigmoid_gating_delta_rule_update
from mambalab.kernels.mamba_ssm import LaunchConfig, choose_launch_config, launch_config_override, selective_state_update
from mambalab.kernels.testing import assert_untouched, poison_, random_slot_indices, tolerance, touched_slots
from mambalab.lab import sanitizer
from mambalab.lab.bugs import BugConfig

from test_kernel_causal_conv1d import MULTI_ROW_CASES, Case, _batch_of, _bits, _build, _null_rows, _row_out
from test_kernel_gated_delta_rule import _gen, _nan_empty, make_inputs, make_pool  # noqa: F401
from test_kernel_selective_state_update import gen, make_case, same_layout_copy

EXACT = DEVICE_TYPE != "cuda"  # the interpreter: bit for bit; a GPU compiles the two layouts differently
FIXED = BugConfig.fixed()


def _same(a: torch.Tensor, b: torch.Tensor, family: str, what: str) -> None:
    assert not a.float().isnan().any(), f"{what}: an element was never written"
    if EXACT:
        assert torch.equal(a, b), f"{what}: not bit-identical"
    else:
        rtol, atol = tolerance(family, a.dtype)
        torch.testing.assert_close(a.float(), b.float(), rtol=rtol, atol=atol)


def _first(err: sanitizer.IllegalMemoryAccess):
    return (err.kernel, err.row, err.op, err.arg, err.index, err.slot,
            sorted({(v.row, v.op, v.arg, v.slot) for v in err.violations}))


# -- Mamba2 SSU ------------------------------------------------------------------


def _ssu(case, block_h: int, bugs=FIXED, **extra):
    state = same_layout_copy(case.state)
    x = case.kwargs["x"]
    out = poison_(torch.empty(x.shape, dtype=x.dtype, device=x.device))
    cfg = LaunchConfig(triton.next_power_of_2(x.shape[-1]), 1, block_h)
    with launch_config_override(cfg):
        selective_state_update(state, out=out, bugs=bugs, **case.kwargs, **extra)
    return state, out


# (name, make_case kwargs, index kind, null rows)
SSU_CASES = [
    ("tied-nulls", dict(rows=5, nheads=4, dim=8, dstate=8, tied=True), "1d", 2),
    ("untied-groups-dst", dict(rows=5, nheads=4, dim=9, dstate=12, ngroups=2, slots=16), "dst", 1),
    ("dense-no-extras", dict(rows=3, nheads=2, dim=4, dstate=4, has_D=False, has_z=False, has_dt_bias=False,
                             softplus=False), None, 0),
    ("padded-pool", dict(rows=6, nheads=4, dim=5, dstate=16, slots=12, layout="padded"), "1d", 2),
    ("permuted-strided-x", dict(rows=4, nheads=4, dim=8, dstate=16, layout="permuted", x_strided=True,
                                tied=True), "1d", 1),
    ("six-heads-three-groups", dict(rows=3, nheads=6, dim=4, dstate=8, ngroups=3, tied=True), "1d", 1),
]


@pytest.mark.parametrize("name,shape,kind,null_rows", SSU_CASES, ids=[c[0] for c in SSU_CASES])
def test_ssu_heads_match_one_head(name, shape, kind, null_rows):
    seed = sum(map(ord, name))
    case = make_case(seed, **shape)
    rows, nheads = shape["rows"], shape["nheads"]
    extra: dict = {}
    touched = set(range(rows))
    if kind is not None:
        idx = random_slot_indices(rows, case.slots, num_null_rows=null_rows, generator=gen(seed + 1))
        extra["state_batch_indices"] = idx.to(DEVICE)
        touched = touched_slots(idx)
        if kind == "dst":
            free = sorted(set(range(1, case.slots)) - touched)
            dst = torch.tensor(free[:rows], dtype=torch.int32)
            dst[0] = mambalab.NULL_BLOCK_ID
            extra["dst_state_batch_indices"] = dst.to(DEVICE)
            touched = touched_slots(dst)
    s1, o1 = _ssu(case, 1, **extra)
    for block_h in sorted({2, nheads & -nheads}):
        sh, oh = _ssu(case, block_h, **extra)
        _same(oh, o1, "ssu", f"out, {block_h} heads a program")
        _same(sh, s1, "ssu", f"state, {block_h} heads a program")
        assert_untouched(case.state, sh, touched)
    if null_rows:
        assert torch.equal(o1[rows - null_rows:], torch.zeros_like(o1[rows - null_rows:]))


@pytest.mark.parametrize("T", [1, 3])
def test_ssu_heads_spec_decode_varlen(T):
    """cu_seqlens, num_accepted 0..T + 1 (clamped), a null store column, a row without tokens, a padded row."""
    lens = [T, T, max(1, T - 1), 0, T]
    R = len(lens)
    cols = T + 1
    slots = 1 + R * cols + 2
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32)
    case = make_case(300 + T, rows=R, tokens=int(cu[-1]), nheads=4, dim=5, dstate=8, ngroups=2, slots=slots,
                     tied=T > 1)
    idx = random_slot_indices(R, slots, num_null_rows=1, columns=cols, generator=gen(301))
    idx[1, 0] = mambalab.NULL_BLOCK_ID
    kw = dict(state_batch_indices=idx.to(DEVICE), cu_seqlens=cu.to(DEVICE),
              num_accepted_tokens=torch.tensor([0, 1, T + 1, 1, 1], dtype=torch.int32, device=DEVICE))
    s1, o1 = _ssu(case, 1, **kw)
    sh, oh = _ssu(case, 4, **kw)
    _same(oh, o1, "ssu", "out")
    _same(sh, s1, "ssu", "state")
    written = {int(idx[r, t]) for r in range(R) for t in range(lens[r]) if int(idx[r, t]) > 0}
    assert_untouched(case.state, sh, written)


def test_ssu_launch_rule_heads():
    """The interpreter stacks the largest power of two of heads dividing nheads; a GPU takes one
    (``test_launch_rule_for_real_shapes``); an override whose block_h does not divide nheads is refused."""
    cpu = torch.device("cpu")
    assert choose_launch_config(2, 4, 4, 2, torch.float32, cpu).block_h == 2
    assert choose_launch_config(6, 4, 4, 2, torch.float32, cpu).block_h == 2
    assert choose_launch_config(3, 4, 4, 2, torch.float32, cpu).block_h == 1
    assert LaunchConfig(16, 1).block_h == 1
    with pytest.raises(ValueError, match="power of two"):
        LaunchConfig(4, 1, 3)
    case = make_case(5, rows=2, nheads=6, dim=4, dstate=4)
    with pytest.raises(ValueError, match="does not divide"):
        _ssu(case, 4)


@pytest.mark.skipif(DEVICE_TYPE == "cuda", reason="a wild index on a real GPU faults the whole CUDA context")
@pytest.mark.parametrize("where", ["load", "store"])
def test_ssu_heads_report_a_minus_one_as_one_head_does(where):
    case = make_case(51, rows=3, nheads=4, dim=4, dstate=4, slots=6)
    if where == "load":
        kw = dict(state_batch_indices=torch.tensor([2, -1, 4], dtype=torch.int32))
    else:
        kw = dict(state_batch_indices=torch.tensor([2, 3, 4], dtype=torch.int32),
                  dst_state_batch_indices=torch.tensor([2, 3, -1], dtype=torch.int32))
    bugs = BugConfig.with_bugs("pad-minus-one")
    found = []
    for block_h in (1, 4):
        with pytest.raises(sanitizer.IllegalMemoryAccess) as err:
            _ssu(case, block_h, bugs=bugs, **kw)
        found.append(_first(err.value))
    assert found[0] == found[1]
    assert found[0][1] == (1 if where == "load" else 2) and found[0][2] == where and found[0][5] == -1


# -- gated delta rule ------------------------------------------------------------------


def _gdn(args, pool, block_h, fn=fused_recurrent_gated_delta_rule, **kw):
    pool = pool.clone() if pool is not None else None
    o, final = fn(*args, initial_state=pool, block_h=block_h, **kw)
    return o, final


GDN_CASES = [
    # (name, N, T, H, HV, K, V, null rows, extra)
    ("decode-l2norm", 5, 1, 1, 2, 8, 8, 2, dict(use_qk_l2norm_in_kernel=True)),
    ("four-heads-odd-kv", 4, 1, 2, 4, 12, 20, 1, dict(scale=0.3)),
    ("six-heads", 3, 2, 3, 6, 8, 4, 1, dict(use_qk_l2norm_in_kernel=True)),
    ("fresh-final-state", 3, 2, 1, 2, 8, 8, 1, dict(inplace_final_state=False)),
    ("no-beta-no-indices", 3, 1, 1, 2, 4, 4, 0, dict(beta=None)),
]


@pytest.mark.parametrize("name,N,T,H,HV,K,V,nulls,extra", GDN_CASES, ids=[c[0] for c in GDN_CASES])
def test_gdn_heads_match_one_head(name, N, T, H, HV, K, V, nulls, extra):
    g = _gen(sum(map(ord, name)))
    q, k, v, gg, beta = make_inputs(g, B=N, T=T, H=H, HV=HV, K=K, V=V)
    slots = N + 3
    _, pool = make_pool(g, slots, HV, V, K)
    kw = dict(extra)
    if "beta" in kw:
        beta = kw.pop("beta")
    touched = set(range(N))
    if name != "no-beta-no-indices":
        idx = random_slot_indices(N, slots, num_null_rows=nulls, generator=g).to(DEVICE)
        kw["ssm_state_indices"] = idx
        touched = touched_slots(idx)
    args = (q, k, v, gg, beta)
    o1, f1 = _gdn(args, pool, 1, bugs=FIXED, **kw)
    for block_h in sorted({2, HV & -HV}):
        oh, fh = _gdn(args, pool, block_h, bugs=FIXED, **kw)
        _same(oh, o1, "gdn", f"o, {block_h} heads a program")
        _same(fh, f1, "gdn", f"final state, {block_h} heads a program")
        if kw.get("inplace_final_state", True):
            assert_untouched(pool, fh, touched)


@pytest.mark.parametrize("bugs", [
    FIXED,
    pytest.param(BugConfig.with_bugs("guard-lt-zero"), marks=pytest.mark.skipif(
        DEVICE_TYPE == "cuda", reason="on a GPU the rows writing block 0 race (the bug), so runs differ there")),
], ids=["fixed", "guard-lt-zero"])
def test_gdn_heads_varlen_spec_and_gating(bugs):
    """Varlen rows of 1, 0, 2, 3 tokens with 2-D indices, num_accepted (0 skips the row under the fixed
    bound), a null store column; null rows that the pre-#39064 guard reads and writes (slot 0); gating."""
    g = _gen(77)
    lens = [1, 0, 2, 3, 2]
    N, H, HV, K, V = len(lens), 1, 2, 8, 8
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device=DEVICE)
    q, k, v, gg, beta = make_inputs(g, B=1, T=int(cu[-1]), H=H, HV=HV, K=K, V=V)
    cols = 3
    slots = 1 + N * cols + 1
    _, pool = make_pool(g, slots, HV, V, K)
    idx = random_slot_indices(N, slots, num_null_rows=1, columns=cols, generator=g).to(DEVICE)
    idx[2, 1] = mambalab.NULL_BLOCK_ID
    acc = torch.tensor([1, 1, 0, 2, 1], dtype=torch.int32, device=DEVICE)
    kw = dict(cu_seqlens=cu, ssm_state_indices=idx, num_accepted_tokens=acc, use_qk_l2norm_in_kernel=True, bugs=bugs)
    o1, f1 = _gdn((q, k, v, gg, beta), pool, 1, **kw)
    oh, fh = _gdn((q, k, v, gg, beta), pool, 2, **kw)
    _same(oh, o1, "gdn", "o")
    _same(fh, f1, "gdn", "pool")
    gates = (torch.randn(HV, generator=g).to(DEVICE), gg, beta, torch.randn(HV, generator=g).to(DEVICE))
    A_log, a, b, dt_bias = gates
    outs = [fused_sigmoid_gating_delta_rule_update(A_log, a, b, dt_bias, q, k, v, initial_state=pool.clone(),
                                                   block_h=bh, **kw) for bh in (1, 2)]
    _same(outs[1][0], outs[0][0], "gdn", "gated o")
    _same(outs[1][1], outs[0][1], "gdn", "gated pool")


def test_gdn_heads_rule():
    assert gdn.heads_per_program(2, torch.device("cpu")) == 2
    assert gdn.heads_per_program(6, torch.device("cpu")) == 2
    assert gdn.heads_per_program(32, torch.device("cuda")) == 1
    g = _gen(3)
    q, k, v, gg, beta = make_inputs(g, B=2, T=1, H=1, HV=6, K=4, V=4)
    _, pool = make_pool(g, 3, 6, 4, 4)
    with pytest.raises(ValueError, match="block_h"):
        fused_recurrent_gated_delta_rule(q, k, v, gg, beta, initial_state=pool, block_h=4)


@pytest.mark.skipif(DEVICE_TYPE == "cuda", reason="a wild index on a real GPU faults the whole CUDA context")
@pytest.mark.parametrize("bug", ["zero-accepted", "pad-minus-one"])
def test_gdn_heads_report_wild_indices_as_one_head_does(bug):
    """Column -1 of the unbounded spec load (zero-accepted), a -1 slot trusted (pad-minus-one)."""
    g = _gen(11)
    N, HV = 3, 2
    q, k, v, gg, beta = make_inputs(g, B=N, T=1, H=1, HV=HV, K=4, V=4)
    _, pool = make_pool(g, 8, HV, 4, 4)
    if bug == "zero-accepted":
        kw = dict(ssm_state_indices=torch.tensor([[1, 2], [3, 4], [5, 6]], dtype=torch.int32),
                  num_accepted_tokens=torch.tensor([0, 1, 2], dtype=torch.int32))
    else:
        kw = dict(ssm_state_indices=torch.tensor([1, -1, 3], dtype=torch.int32))
    found, pools = [], []
    for block_h in (1, 2):
        p = pool.clone()
        with pytest.raises(sanitizer.IllegalMemoryAccess) as err:
            fused_recurrent_gated_delta_rule(q, k, v, gg, beta, initial_state=p, block_h=block_h,
                                             bugs=BugConfig.with_bugs(bug), **kw)
        found.append(_first(err.value))
        pools.append(p)
    assert found[0] == found[1]
    assert found[0][0] == gdn.KERNEL_NAME and found[0][5] == -1
    assert torch.equal(pools[0], pools[1])


# -- causal conv, the plain decode step ----------------------------------------------


def _conv(pool, args, kernel, monkeypatch, bugs=FIXED):
    monkeypatch.setattr(conv_mod, "decode_kernel", lambda rows, device: kernel)
    monkeypatch.setattr(conv_mod, "decode_launch_config", lambda dim, batch, dtype, device: (8, 1, 1))
    pool = pool.clone() if pool._base is None else pool._base.clone().as_strided(pool.shape, pool.stride(),
                                                                                   pool.storage_offset())
    out = poison_(torch.empty_like(args["x"]))
    causal_conv1d_update(conv_state=pool, out=out, bugs=bugs, **args)
    return pool, out


CONV_CASES = MULTI_ROW_CASES  # the GPU kernel's cases: the row kernel must agree on each


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_decode_row_kernel_matches_the_decode_kernel(case, monkeypatch):
    """The interpreter's kernel against the GPU's with one request a program (its batch-1 launch), several
    channel blocks a row; a padded row's output is its input."""
    pool, _, args = _build(case, torch.float32, seed=sum(map(ord, repr(case))))
    before = _bits(pool).clone()
    p1, o1 = _conv(pool, args, _causal_conv1d_decode_kernel, monkeypatch)
    p2, o2 = _conv(pool, args, _causal_conv1d_decode_row_kernel, monkeypatch)
    _same(o2, o1, "conv", "out")
    assert torch.equal(_bits(p2), _bits(p1)), "state not bit-identical"
    assert not torch.equal(_bits(p2), before) or case.batch == case.num_null
    for b in _null_rows(args):
        assert torch.equal(_row_out(o2, args, b), _row_out(args["x"], args, b))


@pytest.mark.parametrize("bug", ["guard-lt-zero", "pad-minus-one"])
def test_conv_decode_row_kernel_follows_the_guard(bug, monkeypatch):
    """Under pad-minus-one index 0 is a real slot (read and written); under guard-lt-zero the conv's own
    guard is unchanged (#39064 is FLA-only); both forms the same."""
    # One null row: under pad-minus-one every null row reads and writes block 0, so two of them race on a GPU.
    pool, _, args = _build(Case(dim=8, width=4, batch=4, num_null=1), torch.float32, seed=5)
    bugs = BugConfig.with_bugs(bug)
    p1, o1 = _conv(pool, args, _causal_conv1d_decode_kernel, monkeypatch, bugs)
    p2, o2 = _conv(pool, args, _causal_conv1d_decode_row_kernel, monkeypatch, bugs)
    _same(o2, o1, "conv", "out")
    assert torch.equal(_bits(p2), _bits(p1))
    assert torch.equal(_bits(p2[0]), _bits(pool[0])) is (bug == "guard-lt-zero")


@pytest.mark.skipif(DEVICE_TYPE == "cuda", reason="a wild index on a real GPU faults the whole CUDA context")
def test_conv_decode_row_kernel_reports_a_minus_one_as_the_decode_kernel_does(monkeypatch):
    pool, _, args = _build(Case(dim=8, width=4, batch=4), torch.float32, seed=6)
    args["conv_state_indices"] = torch.tensor([2, 3, -1, 1], dtype=torch.int32, device=DEVICE)
    found = []
    for kernel in (_causal_conv1d_decode_kernel, _causal_conv1d_decode_row_kernel):
        with pytest.raises(sanitizer.IllegalMemoryAccess) as err:
            _conv(pool, args, kernel, monkeypatch, BugConfig.with_bugs("pad-minus-one"))
        found.append(_first(err.value))
    assert found[0] == found[1] and found[0][1] == 2 and found[0][5] == -1


def test_conv_decode_kernel_rule():
    assert conv_mod.decode_kernel(1, torch.device("cpu")) is _causal_conv1d_decode_row_kernel
    assert conv_mod.decode_kernel(1, torch.device("cuda")) is _causal_conv1d_decode_kernel
    assert conv_mod.decode_kernel(2, torch.device("cpu")) is _causal_conv1d_decode_kernel


# -- causal conv, few tokens a row (speculative decoding, short varlen rows) -----------


def _window(pool, args, kernel, monkeypatch, bugs=FIXED, preload=True):
    monkeypatch.setattr(conv_mod, "window_kernel", lambda device: kernel)
    monkeypatch.setattr(conv_mod, "WINDOW_PRELOAD_X", preload)
    pool = pool._base.clone().as_strided(pool.shape, pool.stride(), pool.storage_offset())
    out = poison_(torch.empty_like(args["x"]))
    causal_conv1d_update(conv_state=pool, out=out, bugs=bugs, **args)
    return pool, out


WINDOW_CASES = [  # dim 16: the tiny model's conv (the block is the channels: no masks)
    pytest.param(Case(dim=16, width=4, batch=5, varlen=(2, 1, 0, 2, 1), num_null=1), id="model-varlen"),
    pytest.param(Case(dim=16, width=4, batch=6, varlen=(2, 2, 1, 0, 2, 2), num_spec=1, num_null=2, extra_state=1),
                 id="model-varlen-spec"),
    pytest.param(Case(dim=37, width=4, batch=6, seqlen=4, num_spec=1, num_null=2, pad=5), id="w4-T4-spec-masked"),
    pytest.param(Case(dim=9, width=3, batch=5, seqlen=3, num_null=1, bias=False), id="w3-T3-nobias"),
    pytest.param(Case(dim=8, width=2, batch=4, seqlen=2, num_spec=1, act=None, idx2d=3, num_null=1),
                 id="w2-T2-spec-2d-noact"),
    pytest.param(Case(dim=5, width=4, batch=3, seqlen=2, no_indices=True), id="no-indices"),
    pytest.param(Case(dim=16, width=4, batch=4, varlen=(3, 0, 1, 2), num_spec=1, no_indices=True),
                 id="no-indices-varlen-spec"),
    pytest.param(Case(dim=13, width=4, batch=4, varlen=(6, 1, 0, 5), num_null=1), id="T6-varlen"),
    pytest.param(Case(dim=16, width=3, batch=5, varlen=(6, 2, 0, 5, 1), num_spec=1, num_null=1), id="T6-varlen-spec"),
]


def _window_case(case, seed):
    pool, _, args = _build(case, torch.float32, seed=seed)
    if case.num_spec:  # every count 0..T (0 reads as 1)
        batch = _batch_of(args)
        args["num_accepted_tokens"] = (torch.arange(batch, dtype=torch.int32) % (case.max_t + 1)).to(DEVICE)
    return pool, args


@pytest.mark.parametrize("preload", [True, False], ids=["x-preloaded", "x-per-token"])
@pytest.mark.parametrize("case", WINDOW_CASES)
def test_conv_window_row_kernel_matches_the_window_kernel(case, preload, monkeypatch):
    """The interpreter's form (every channel a program, short rows' tokens skipped) against the GPU's window
    kernel (channel blocks, tokens masked); a padded or empty row's output is its input, other slots untouched."""
    pool, args = _window_case(case, sum(map(ord, repr(case))))
    p1, o1 = _window(pool, args, _causal_conv1d_window_kernel, monkeypatch, preload=preload)
    p2, o2 = _window(pool, args, _causal_conv1d_window_row_kernel, monkeypatch)
    _same(o2, o1, "conv", "out")
    assert torch.equal(_bits(p2._base), _bits(p1._base)), "pool (padding included) not bit-identical"
    idx = args["conv_state_indices"]
    touched = set(range(_batch_of(args))) if idx is None else touched_slots(idx if idx.dim() == 1 else idx[:, 0])
    assert_untouched(pool, p2, touched)
    for b in _null_rows(args):
        assert torch.equal(_row_out(o2, args, b), _row_out(args["x"], args, b))


@pytest.mark.parametrize("bug", ["guard-lt-zero", "pad-minus-one"])
@pytest.mark.parametrize("spec", [False, True], ids=["varlen", "varlen-spec"])
def test_conv_window_row_kernel_follows_the_guard(bug, spec, monkeypatch):
    """Under pad-minus-one index 0 is a real slot (read and written); under guard-lt-zero the conv keeps its
    own guard (#39064 is FLA-only); both forms the same."""
    case = Case(dim=16, width=4, batch=5, varlen=(2, 1, 2, 0, 2), num_null=2, num_spec=int(spec), extra_state=1)
    pool, args = _window_case(case, 8 + spec)
    bugs = BugConfig.with_bugs(bug)
    p1, o1 = _window(pool, args, _causal_conv1d_window_kernel, monkeypatch, bugs)
    p2, o2 = _window(pool, args, _causal_conv1d_window_row_kernel, monkeypatch, bugs)
    _same(o2, o1, "conv", "out")
    assert torch.equal(_bits(p2._base), _bits(p1._base))
    assert torch.equal(_bits(p2[0]), _bits(pool[0])) is (bug == "guard-lt-zero")


@pytest.mark.skipif(DEVICE_TYPE == "cuda", reason="a wild index on a real GPU faults the whole CUDA context")
@pytest.mark.parametrize("spec", [False, True], ids=["varlen", "varlen-spec"])
def test_conv_window_row_kernel_reports_a_minus_one_as_the_window_kernel_does(spec, monkeypatch):
    case = Case(dim=16, width=4, batch=4, varlen=(2, 1, 2, 2), num_spec=int(spec))
    pool, args = _window_case(case, 9)
    args["conv_state_indices"] = torch.tensor([2, 3, -1, 1], dtype=torch.int32, device=DEVICE)
    found, pools = [], []
    for kernel in (_causal_conv1d_window_kernel, _causal_conv1d_window_row_kernel):
        monkeypatch.setattr(conv_mod, "window_kernel", lambda device, k=kernel: k)
        p = pool._base.clone().as_strided(pool.shape, pool.stride(), pool.storage_offset())
        with pytest.raises(sanitizer.IllegalMemoryAccess) as err:
            causal_conv1d_update(conv_state=p, bugs=BugConfig.with_bugs("pad-minus-one"), **args)
        found.append(_first(err.value))
        pools.append(p)
    assert found[0] == found[1] and found[0][1] == 2 and found[0][5] == -1
    assert torch.equal(_bits(pools[0]._base), _bits(pools[1]._base))


def test_conv_window_kernel_rule():
    assert conv_mod.window_kernel(torch.device("cpu")) is _causal_conv1d_window_row_kernel
    assert conv_mod.window_kernel(torch.device("cuda")) is _causal_conv1d_window_kernel


def test_guard_plants_cover_every_kernel_module():
    """The learner's guard (notebook 01's fix-it, the guard grid) replaces ``is_live_slot`` in every module
    whose kernels call it, the interpreter's forms included."""
    import importlib
    import pkgutil

    pytest.importorskip("matplotlib", reason="mambalab.workbook (guard_plants) draws: not in the core install")
    import mambalab.kernels
    from mambalab.kernels.common import is_live_slot
    from mambalab.workbook.fix_it import guard_plants

    users = set()
    for info in pkgutil.iter_modules(mambalab.kernels.__path__):
        mod = importlib.import_module(f"mambalab.kernels.{info.name}")
        if info.name != "common" and vars(mod).get("is_live_slot") is is_live_slot:
            users.add(mod.__name__)
    planted = {p.owner.__name__ for p in guard_plants(lambda idx, null_block_id: idx != null_block_id)}
    assert "mambalab.kernels.causal_conv1d_row_kernels" in users
    assert users <= planted, users - planted
