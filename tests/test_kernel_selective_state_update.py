"""Mamba2 decode kernel (``selective_state_update``) against its pure-torch reference.

On the CPU the kernel runs under Triton's interpreter (float32, tiny shapes);
on the GPU machine (``MAMBALAB_DEVICE=cuda``) the same tests also run in
bf16/fp16 and with float32 state under bf16 activations. Rules from upstream's
kernel tests: fresh random inputs (never zeros), outputs poisoned with NaN
before each run, slots not named by a live index (slot 0 included)
bit-identical afterwards.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
import torch

import mambalab
from mambalab.lab import sanitizer
from mambalab.lab.bugs import BugConfig, GuardMode, use
from mambalab.device import DEVICE, DEVICE_TYPE
from mambalab.kernels.mamba_ssm import (
    KERNEL_NAME,
    LaunchConfig,
    choose_launch_config,
    launch_config_override,
    selective_state_update,
)
from mambalab.kernels.mamba_ssm_ref import selective_state_update_ref
from mambalab.kernels.testing import assert_untouched, poison_, random_slot_indices, tolerance, touched_slots

cuda = pytest.mark.cuda
cpu_only = pytest.mark.cpu_only(reason="a wild index on a real GPU faults the whole CUDA context")

# (state dtype, activation dtype): fp32 everywhere; the rest only on the GPU
# (bf16 is unreliable under the interpreter).
DTYPES = [
    pytest.param((torch.float32, torch.float32), id="fp32"),
    pytest.param((torch.bfloat16, torch.bfloat16), id="bf16", marks=cuda),
    pytest.param((torch.float16, torch.float16), id="fp16", marks=cuda),
    pytest.param((torch.float32, torch.bfloat16), id="fp32state-bf16act", marks=cuda),
]


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def rnd(g: torch.Generator, *shape: int, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    """Fresh random CPU float32 values (never zeros), moved later."""
    return torch.randn(*shape, generator=g) * scale + shift


@dataclass
class Case:
    """One problem: every tensor the kernel takes, on DEVICE, in the case's dtypes."""

    state: torch.Tensor
    kwargs: dict
    slots: int


def make_case(
    seed: int,
    *,
    rows: int,
    nheads: int = 4,
    dim: int = 8,
    dstate: int = 16,
    ngroups: int = 1,
    slots: int = 20,
    tokens: int | None = None,
    dtypes=(torch.float32, torch.float32),
    tied: bool = False,
    has_D: bool = True,
    has_dt_bias: bool = True,
    has_z: bool = True,
    softplus: bool = True,
    layout: str = "contiguous",
    x_strided: bool = False,
) -> Case:
    """Random inputs for ``rows`` requests (``tokens`` token rows, default one per request).

    ``layout``: "contiguous", "padded" (each slot is a page with padding after
    it and the pool starts inside a bigger buffer) or "permuted" (dstate not
    innermost).
    """
    state_dtype, act = dtypes
    g = gen(seed)
    tokens = rows if tokens is None else tokens
    H, P, N, G = nheads, dim, dstate, ngroups
    values = rnd(g, slots, H, P, N)
    if layout == "contiguous":
        state = torch.empty(slots, H, P, N, device=DEVICE, dtype=state_dtype)
    elif layout == "padded":
        page = H * P * N + 5
        buf = torch.empty(slots * page + 3, device=DEVICE, dtype=state_dtype)
        state = buf[3:].view(slots, page)[:, : H * P * N].view(slots, H, P, N)
    elif layout == "permuted":
        state = torch.empty(slots, H, N, P, device=DEVICE, dtype=state_dtype).transpose(2, 3)
    else:
        raise ValueError(layout)
    state.copy_(values)

    f32 = torch.float32
    if tied:  # vLLM's decode path: one A / dt / dt_bias / D per head, broadcast
        A = (-rnd(g, H).abs() - 0.5).to(DEVICE, f32)[:, None, None].expand(H, P, N)
        dt = rnd(g, tokens, H, scale=0.5)
        if not softplus:  # keep dt positive without the softplus
            dt = dt.abs() + 0.05
        dt = dt.to(DEVICE, act)[:, :, None].expand(tokens, H, P)
        dt_bias = rnd(g, H, scale=0.3).to(DEVICE, f32)[:, None].expand(H, P)
        D = rnd(g, H).to(DEVICE, f32)[:, None].expand(H, P)
    else:
        A = (-rnd(g, H, P, N).abs() - 0.5).to(DEVICE, f32)
        dt = rnd(g, tokens, H, P, scale=0.5)
        if not softplus:
            dt = dt.abs() + 0.05
        dt = dt.to(DEVICE, act)
        dt_bias = rnd(g, H, P, scale=0.3).to(DEVICE, f32)
        D = rnd(g, H, P).to(DEVICE, f32)
    if x_strided:  # a slice of a wider projection output, like vLLM's hidden_states
        x = rnd(g, tokens, H, P + 3).to(DEVICE, act)[:, :, 1 : P + 1]
    else:
        x = rnd(g, tokens, H, P).to(DEVICE, act)
    B = rnd(g, tokens, G, N).to(DEVICE, act)
    C = rnd(g, tokens, G, N).to(DEVICE, act)
    z = rnd(g, tokens, H, P).to(DEVICE, act)
    kwargs = dict(
        x=x, dt=dt, A=A, B=B, C=C,
        D=D if has_D else None,
        dt_bias=dt_bias if has_dt_bias else None,
        z=z if has_z else None,
        dt_softplus=softplus,
    )
    return Case(state=state, kwargs=kwargs, slots=slots)


def same_layout_copy(state: torch.Tensor) -> torch.Tensor:
    """A copy of ``state`` with the same strides and the same padding (clone() would compact it)."""
    if state.is_contiguous():
        return state.clone()
    base = state.as_strided((state.untyped_storage().nbytes() // state.element_size(),), (1,), 0)
    new_base = base.clone()
    return new_base.as_strided(state.shape, state.stride(), state.storage_offset())


def run_both(case: Case, *, guard=GuardMode.EQ_NULL, bugs=None, **extra):
    """Kernel and reference on clones of the state, each into a NaN-poisoned ``out``."""
    s_kernel = same_layout_copy(case.state)
    s_ref = same_layout_copy(case.state)
    x = case.kwargs["x"]
    out_kernel = poison_(torch.empty(x.shape, dtype=x.dtype, device=x.device))
    out_ref = poison_(torch.empty_like(out_kernel))
    kw = dict(case.kwargs, **extra)
    ret = selective_state_update(s_kernel, out=out_kernel, bugs=bugs, **kw)
    assert ret is out_kernel
    selective_state_update_ref(s_ref, out=out_ref, guard=guard, **kw)
    return s_kernel, out_kernel, s_ref, out_ref


def assert_close(actual, expected, family, dtype, what):
    """Compare with the tolerance of the dtype the values are stored in."""
    rtol, atol = tolerance(family, dtype)
    torch.testing.assert_close(actual.float(), expected.float(), rtol=rtol, atol=atol,
                               msg=lambda m: f"{what}: {m}")


# -- kernel vs reference ---------------------------------------------------------

# (name, make_case kwargs, index kind, null rows, launch override)
SHAPES = [
    ("one-row-no-indices", dict(rows=1, dim=8, dstate=8, has_z=False, softplus=False), None, 0, None),
    ("no-indices-rows-3", dict(rows=3, dim=9, dstate=16, ngroups=2, has_D=False), None, 0, None),
    ("groups-all-extras", dict(rows=3, dim=13, dstate=16, ngroups=2), "1d", 0, None),
    ("tied-nulls", dict(rows=7, dim=17, dstate=8, ngroups=4, tied=True), "1d", 3, None),
    ("padded-pool-16-rows", dict(rows=16, dim=9, dstate=16, slots=24, layout="padded", softplus=False,
                                 has_dt_bias=False), "1d", 5, None),
    ("odd-dstate-dst", dict(rows=5, dim=11, dstate=12, ngroups=2, slots=16), "dst", 1, None),
    ("permuted-state-strided-x", dict(rows=4, dim=8, dstate=16, layout="permuted", x_strided=True,
                                      tied=True, has_dt_bias=False), "1d", 1, None),
    ("multi-tile-int64", dict(rows=6, dim=13, dstate=8, ngroups=2), "1d64", 2, LaunchConfig(4, 1)),
    ("tied-no-extras-tiles", dict(rows=2, dim=17, dstate=16, tied=True, has_D=False, has_z=False,
                                  has_dt_bias=False), "1d", 0, LaunchConfig(8, 2)),
]


@pytest.mark.parametrize("dtypes", DTYPES)
@pytest.mark.parametrize("name,shape,index_kind,null_rows,config", SHAPES, ids=[s[0] for s in SHAPES])
def test_matches_reference(name, shape, index_kind, null_rows, config, dtypes):
    seed = sum(map(ord, name))
    case = make_case(seed, dtypes=dtypes, **shape)
    rows = shape["rows"]
    extra = {}
    touched: set[int]
    if index_kind is None:
        touched = set(range(rows))
    else:
        idx = random_slot_indices(rows, case.slots, num_null_rows=null_rows, generator=gen(seed + 1))
        if index_kind == "1d64":
            idx = idx.to(torch.int64)
        extra["state_batch_indices"] = idx.to(DEVICE)
        touched = touched_slots(idx)
        if index_kind == "dst":  # read one set of slots, write another (one dst null)
            pool = sorted(set(range(1, case.slots)) - touched)
            dst = torch.tensor(pool[:rows], dtype=torch.int32)
            dst[0] = mambalab.NULL_BLOCK_ID
            extra["dst_state_batch_indices"] = dst.to(DEVICE)
            touched = touched_slots(dst)
    if config is not None:
        with launch_config_override(config):
            s_k, o_k, s_r, o_r = run_both(case, **extra)
    else:
        s_k, o_k, s_r, o_r = run_both(case, **extra)

    assert not o_k.isnan().any(), "some output elements were never written"
    assert_close(o_k, o_r, "ssu", o_k.dtype, "out")
    assert_close(s_k, s_r, "ssu", s_k.dtype, "state")
    if shape.get("layout") == "padded":
        assert s_k.stride(0) > s_k[0].numel() and s_k.storage_offset() > 0
    assert_untouched(case.state, s_k, touched)
    assert_untouched(case.state, s_r, touched, what="reference state")
    if null_rows:
        live_rows = rows - null_rows
        assert torch.equal(o_k[live_rows:], torch.zeros_like(o_k[live_rows:])), "padded rows' out must be 0"
        assert 0 not in touched


def test_headless_form_matches_headful():
    """vLLM's head-less shapes (state (slots, dim, dstate), x (batch, dim)) = one head."""
    case = make_case(11, rows=3, nheads=1, dim=9, dstate=8)
    idx = random_slot_indices(3, case.slots, num_null_rows=1, generator=gen(12)).to(DEVICE)
    kw = {k: v for k, v in case.kwargs.items()}
    s4 = case.state.clone()
    o4 = selective_state_update(s4, state_batch_indices=idx, **kw)
    s3 = case.state[:, 0].clone()
    squeeze = dict(x=1, dt=1, B=1, C=1, z=1, A=0, D=0, dt_bias=0)
    kw3 = {k: (v.squeeze(squeeze[k]) if k in squeeze and v is not None else v) for k, v in kw.items()}
    out3 = poison_(torch.empty(3, 9, device=DEVICE))
    o3 = selective_state_update(s3, state_batch_indices=idx, out=out3, **kw3)
    assert o3 is out3 and o3.shape == (3, 9)
    torch.testing.assert_close(o3, o4[:, 0])
    torch.testing.assert_close(s3, s4[:, 0])


def test_out_is_allocated_and_returned():
    case = make_case(5, rows=2, dim=8, dstate=8)
    out = selective_state_update(case.state.clone(), **case.kwargs)
    assert out.shape == case.kwargs["x"].shape and out.dtype == case.kwargs["x"].dtype
    assert not out.isnan().any()


def test_softplus_threshold_keeps_large_dt_finite():
    """dt > 20 passes through the softplus unchanged (log(1 + exp(100)) would overflow)."""
    case = make_case(13, rows=2, dim=8, dstate=8)
    dt = case.kwargs["dt"].clone()
    dt[0, :2] = 100.0
    dt[1, 1, :3] = 25.0
    case.kwargs["dt"] = dt
    s_k, o_k, s_r, o_r = run_both(case)
    assert o_k.isfinite().all() and s_k.isfinite().all()
    assert_close(o_k, o_r, "ssu", o_k.dtype, "out")
    assert_close(s_k, s_r, "ssu", s_k.dtype, "state")


def test_empty_batch_launches_nothing():
    case = make_case(14, rows=0, dim=8, dstate=8)
    state = case.state.clone()
    out = selective_state_update(state, **case.kwargs)
    assert out.shape == (0, 4, 8)
    assert torch.equal(state, case.state)


def test_launch_rule_for_real_shapes(monkeypatch):
    """The rule on the real shapes of kernels.md (a pure function: checked without a GPU)."""
    import mambalab.kernels.mamba_ssm as ssu

    dev = DEVICE
    if ssu.INTERPRET:  # the GPU branch of the rule, with an H100's 132 SMs
        monkeypatch.setattr(ssu, "INTERPRET", False)
        dev = torch.device("cuda", 0)
    big_fp32 = choose_launch_config(128, 64, 128, 64, torch.float32, dev)
    big_bf16 = choose_launch_config(128, 64, 128, 256, torch.bfloat16, dev)
    # measured on an H200 against vLLM 0.33 (docs/benchmarks.md): one warp, 16-row tiles from batch 16
    assert big_fp32 == LaunchConfig(16, 1)
    assert big_bf16 == LaunchConfig(16, 1)
    # fp32 at batch 1: 8 rows; at 2 the big tiles (calls 71 and 74, with the heads-first grid); at 3-8 8 rows on 2 warps
    # (call 143); from 9 the big tiles again
    assert choose_launch_config(128, 64, 128, 1, torch.float32, dev) == LaunchConfig(8, 1)
    assert choose_launch_config(128, 64, 128, 2, torch.float32, dev) == LaunchConfig(16, 1)
    assert choose_launch_config(128, 64, 128, 3, torch.float32, dev) == LaunchConfig(8, 2)
    assert choose_launch_config(128, 64, 128, 8, torch.float32, dev) == LaunchConfig(8, 2)
    assert choose_launch_config(128, 64, 128, 9, torch.float32, dev) == LaunchConfig(16, 1)
    assert choose_launch_config(128, 64, 128, 4, torch.bfloat16, dev) == LaunchConfig(16, 1)
    assert choose_launch_config(128, 64, 128, 1, torch.bfloat16, dev) == LaunchConfig(16, 1)
    # speculative decoding / varlen (several tokens a request), and A / dt per element
    assert choose_launch_config(128, 64, 128, 64, torch.float32, dev, multi_token=True) == LaunchConfig(8, 1)
    assert choose_launch_config(128, 64, 128, 64, torch.bfloat16, dev, multi_token=True) == LaunchConfig(16, 1)
    # ... at batch 1 (128 request-heads): 4 rows (call 47), at batch 2 the small-batch tiles again
    assert choose_launch_config(128, 64, 128, 1, torch.bfloat16, dev, multi_token=True) == LaunchConfig(4, 1)
    assert choose_launch_config(128, 64, 128, 1, torch.float32, dev, multi_token=True) == LaunchConfig(4, 1)
    assert choose_launch_config(128, 64, 128, 2, torch.bfloat16, dev, multi_token=True) == LaunchConfig(16, 1)
    assert choose_launch_config(128, 64, 128, 64, torch.float32, dev, tied=False).block_m == ssu.UNTIED_BLOCK_M[4]
    # never taller than the (padded) head dim
    assert choose_launch_config(8, 8, 16, 64, torch.bfloat16, dev).block_m == 8
    with launch_config_override(LaunchConfig(2, 1)):
        assert choose_launch_config(128, 64, 128, 64, torch.float32, dev) == LaunchConfig(2, 1)


def test_pdl_only_on_a_hopper_gpu(monkeypatch):
    """Programmatic dependent launch is never asked for on the interpreter or a CPU tensor, and
    MAMBALAB_PDL=0 turns it off on a GPU."""
    import mambalab.kernels.common as common

    assert common.use_pdl(torch.device("cpu")) is False
    monkeypatch.setattr(common, "INTERPRET", False)
    monkeypatch.setattr(common, "_capability", lambda index: 90)
    assert common.use_pdl(torch.device("cuda", 0)) is True
    monkeypatch.setenv("MAMBALAB_PDL", "0")
    assert common.use_pdl(torch.device("cuda", 0)) is False
    monkeypatch.delenv("MAMBALAB_PDL")
    monkeypatch.setattr(common, "_capability", lambda index: 80)
    assert common.use_pdl(torch.device("cuda", 0)) is False


# -- speculative decoding --------------------------------------------------------


@pytest.mark.parametrize("dtypes", DTYPES)
@pytest.mark.parametrize("T", [2, 3, 4])
def test_spec_decode_varlen(T, dtypes):
    """cu_seqlens varlen, every num_accepted in 1..T, per-token dst columns, null columns."""
    seed = 100 + T
    g = gen(seed)
    # One request per num_accepted value (each with T tokens), one with fewer
    # tokens, one live request with zero tokens, one fully padded request.
    lens = [T] * T + [max(1, T - 1), 0, T]
    R = len(lens)
    num_accepted = list(range(1, T + 1)) + [T, 1, 1]
    cols = T + 1  # C > max T: the last column is never written
    slots = 1 + (R - 1) * cols + 2
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32)
    case = make_case(seed, rows=R, tokens=int(cu[-1]), dim=9, dstate=8, ngroups=2, slots=slots,
                     dtypes=dtypes, tied=(T % 2 == 0))
    idx = random_slot_indices(R, slots, num_null_rows=1, columns=cols, generator=g)
    idx[1, 0] = mambalab.NULL_BLOCK_ID  # a null store column of a live request
    pad_row = R - 1  # source column null: the whole request is skipped
    kw = dict(state_batch_indices=idx.to(DEVICE),
              num_accepted_tokens=torch.tensor(num_accepted, dtype=torch.int32, device=DEVICE),
              cu_seqlens=cu.to(DEVICE))
    s_k, o_k, s_r, o_r = run_both(case, **kw)

    family = "ssu_spec"
    assert not o_k.isnan().any()
    assert_close(o_k, o_r, family, o_k.dtype, "out")
    assert_close(s_k, s_r, family, s_k.dtype, "state")
    # Only the columns of tokens that exist are written (and never a null one).
    written = {int(idx[r, t]) for r in range(R) for t in range(lens[r]) if int(idx[r, t]) > 0}
    assert_untouched(case.state, s_k, written)
    for slot in written:
        assert not torch.equal(s_k[slot], case.state[slot]), f"slot {slot} was not written"
    pad_tokens = slice(int(cu[pad_row]), int(cu[pad_row + 1]))
    assert torch.equal(o_k[pad_tokens], torch.zeros_like(o_k[pad_tokens]))


@cpu_only
def test_skipped_rows_touch_no_state():
    """Padded rows and zero-token requests return before loading or storing any state."""
    case = make_case(71, rows=4, tokens=4, dim=8, dstate=8, slots=12)
    idx = random_slot_indices(4, 12, num_null_rows=1, columns=2, generator=gen(72)).to(DEVICE)
    # Row 1 is live with no tokens this step; row 3 is padding (null slot) with none either.
    cu = torch.tensor([0, 2, 2, 4, 4], dtype=torch.int32, device=DEVICE)
    with sanitizer.recording() as log:
        selective_state_update(case.state.clone(), state_batch_indices=idx, cu_seqlens=cu, **case.kwargs)
    loads = log.slots("state_ptr", "load")
    stores = log.slots("state_ptr", "store")
    assert set(loads) == {0, 2} and set(stores) == {0, 2}  # rows with tokens and a live slot
    assert loads[0] == {int(idx[0, 0])} and stores[0] == {int(idx[0, 0]), int(idx[0, 1])}

    # A padded row (null source) with tokens: loads nothing, stores nothing.
    cu2 = torch.tensor([0, 1, 2, 3, 4], dtype=torch.int32, device=DEVICE)
    with sanitizer.recording() as log:
        selective_state_update(case.state.clone(), state_batch_indices=idx, cu_seqlens=cu2, **case.kwargs)
    assert 3 not in log.slots("state_ptr") and set(log.slots("state_ptr", "load")) == {0, 1, 2}


def test_spec_decode_equals_token_by_token():
    """T speculative tokens in one launch == T one-token launches chained through slots."""
    T, R = 3, 3
    case = make_case(7, rows=R, tokens=R * T, dim=8, dstate=8, slots=16)
    idx = random_slot_indices(R, 16, columns=T, generator=gen(8)).to(DEVICE)
    num_acc = torch.tensor([2, 1, 3], dtype=torch.int32, device=DEVICE)
    cu = torch.arange(0, R * T + 1, T, dtype=torch.int32, device=DEVICE)
    s_spec = case.state.clone()
    o_spec = selective_state_update(s_spec, state_batch_indices=idx, num_accepted_tokens=num_acc,
                                    cu_seqlens=cu, **case.kwargs)

    s_seq = case.state.clone()
    src = idx[torch.arange(R), num_acc.long() - 1]
    for t in range(T):
        tok = torch.arange(R, device=DEVICE) * T + t
        kw = {k: (v[tok] if k in ("x", "dt", "B", "C", "z") else v) for k, v in case.kwargs.items()}
        o_t = selective_state_update(s_seq, state_batch_indices=src, dst_state_batch_indices=idx[:, t],
                                     **kw)
        torch.testing.assert_close(o_t, o_spec[tok], rtol=1e-5, atol=1e-5)
        src = idx[:, t]
    torch.testing.assert_close(s_seq, s_spec, rtol=1e-5, atol=1e-5)


def test_num_accepted_out_of_range_is_clamped():
    """num_accepted 0 reads column 0 (upstream's max(n - 1, 0)); past C, the last column."""
    case = make_case(15, rows=2, tokens=2, dim=8, dstate=8, slots=10)
    idx = random_slot_indices(2, 10, columns=3, generator=gen(16)).to(DEVICE)
    kw = dict(state_batch_indices=idx,
              num_accepted_tokens=torch.tensor([0, 7], dtype=torch.int32, device=DEVICE))
    s_k, o_k, s_r, o_r = run_both(case, **kw)
    assert_close(o_k, o_r, "ssu", o_k.dtype, "out")
    assert_close(s_k, s_r, "ssu", s_k.dtype, "state")
    clamped = dict(kw, num_accepted_tokens=torch.tensor([1, 3], dtype=torch.int32, device=DEVICE))
    s_c, o_c, _, _ = run_both(case, **clamped)
    assert torch.equal(o_c, o_k) and torch.equal(s_c, s_k)


@pytest.mark.parametrize("dtypes", DTYPES)
def test_batched_spec_form_equals_varlen(dtypes):
    """x (R, T, nheads, dim) with 2-D indices == the same tokens laid out flat with cu_seqlens."""
    R, T, H, P, N = 3, 2, 4, 9, 8
    case = make_case(21, rows=R, tokens=R * T, nheads=H, dim=P, dstate=N, slots=12, dtypes=dtypes)
    idx = random_slot_indices(R, 12, num_null_rows=1, columns=T, generator=gen(22)).to(DEVICE)
    num_acc = torch.tensor([2, 1, 1], dtype=torch.int32, device=DEVICE)
    cu = torch.arange(0, R * T + 1, T, dtype=torch.int32, device=DEVICE)
    s_flat = case.state.clone()
    o_flat = selective_state_update(s_flat, state_batch_indices=idx, num_accepted_tokens=num_acc,
                                    cu_seqlens=cu, **case.kwargs)
    batched = {k: (v.reshape(R, T, *v.shape[1:]) if k in ("x", "dt", "B", "C", "z") else v)
               for k, v in case.kwargs.items()}
    s_b = case.state.clone()
    out_b = poison_(torch.empty(R, T, H, P, dtype=o_flat.dtype, device=DEVICE))
    o_b = selective_state_update(s_b, state_batch_indices=idx, num_accepted_tokens=num_acc, out=out_b,
                                 **batched)
    assert o_b is out_b
    torch.testing.assert_close(o_b.reshape(R * T, H, P), o_flat)
    torch.testing.assert_close(s_b, s_flat)
    s_r = case.state.clone()
    o_r = selective_state_update_ref(s_r, state_batch_indices=idx, num_accepted_tokens=num_acc, **batched)
    assert_close(o_b, o_r, "ssu_spec", o_b.dtype, "out")
    assert_close(s_b, s_r, "ssu_spec", s_b.dtype, "state")


# -- the guard: fixed and pre-fix --------------------------------------------------


def _padded_batch(seed: int, pad: list[int], dtypes=(torch.float32, torch.float32)):
    """Two live rows then one row per value of ``pad`` (0 or -1)."""
    case = make_case(seed, rows=2 + len(pad), dim=9, dstate=8, slots=10, dtypes=dtypes)
    live = random_slot_indices(2, 10, generator=gen(seed + 1))
    idx = torch.cat([live, torch.tensor(pad, dtype=torch.int32)]).to(DEVICE)
    return case, idx, touched_slots(live)


@pytest.mark.parametrize("dtypes", DTYPES)
def test_fixed_guard_skips_the_null_block(dtypes):
    """v0.33's SSU masks ``!= null_block_id``: a null-block row is skipped (zeros out)."""
    case, idx, live = _padded_batch(31, [0, 0], dtypes)
    s_k, o_k, s_r, o_r = run_both(case, bugs=BugConfig.fixed(), state_batch_indices=idx)
    assert_untouched(case.state, s_k, live)  # slot 0 bit-identical
    assert torch.equal(o_k[2:], torch.zeros_like(o_k[2:]))
    assert_close(o_k, o_r, "ssu", o_k.dtype, "out")


@cpu_only
def test_fixed_guard_does_not_skip_a_negative_index():
    """The SSU's own guard is equality with the null block (as vLLM 0.33): a -1 that reaches
    it is used, i.e. an illegal access, exactly as upstream would fault. (Before, the lab's
    SSU skipped every index <= 0, which is the FLA kernels' guard, not the SSU's.)"""
    case, idx, live = _padded_batch(31, [0, -1])
    with pytest.raises(sanitizer.IllegalMemoryAccess) as err:
        selective_state_update(case.state.clone(), bugs=BugConfig.fixed(), state_batch_indices=idx,
                               **case.kwargs)
    assert err.value.row == 3 and err.value.slot == -1
    with pytest.raises(IndexError):
        selective_state_update_ref(case.state.clone(), state_batch_indices=idx, **case.kwargs)


def test_guard_lt_zero_leaves_the_ssu_alone():
    """#39064 changed only the FLA kernels: under ``guard-lt-zero`` the SSU still skips the
    null block (it compares with null_block_id since #35431)."""
    case, idx, live = _padded_batch(41, [0, 0])
    bugs = BugConfig.with_bugs("guard-lt-zero")
    s_k, o_k, s_r, o_r = run_both(case, bugs=bugs, state_batch_indices=idx)
    assert torch.equal(s_k[0], case.state[0]), "the SSU must not touch the null block"
    assert_untouched(case.state, s_k, live)
    assert_close(o_k, o_r, "ssu", torch.float32, "out")
    assert torch.equal(o_k[2:], torch.zeros_like(o_k[2:]))


def test_negative_mode_loads_and_stores_the_null_block_in_the_reference():
    """GuardMode.NEGATIVE (the FLA kernels' pre-#39064 rule) as the reference models it."""
    case, idx, live = _padded_batch(41, [0, -1])
    s_r = case.state.clone()
    o_r = selective_state_update_ref(s_r, state_batch_indices=idx, guard=GuardMode.NEGATIVE, **case.kwargs)
    assert not torch.equal(s_r[0], case.state[0])
    assert not torch.equal(o_r[2], torch.zeros_like(o_r[2]))  # the 0 row computed an output
    assert torch.equal(o_r[3], torch.zeros_like(o_r[3]))  # -1 is skipped by that rule


def test_guard_follows_the_active_config():
    case, idx, live = _padded_batch(43, [0])
    state = case.state.clone()
    with use(BugConfig.with_bugs("pad-minus-one")):  # the trusting consumer: 0 is a slot
        selective_state_update(state, state_batch_indices=idx, **case.kwargs)
    assert not torch.equal(state[0], case.state[0])
    state = case.state.clone()
    selective_state_update(state, state_batch_indices=idx, **case.kwargs)  # default: fixed
    assert torch.equal(state[0], case.state[0])


def test_null_store_column_is_skipped_by_the_ssu():
    """A null store column is skipped, with or without ``guard-lt-zero`` (the SSU's guard)."""
    case = make_case(45, rows=2, tokens=4, dim=8, dstate=8, slots=10)
    idx = random_slot_indices(2, 10, columns=2, generator=gen(46))
    idx[0, 1] = 0
    kw = dict(state_batch_indices=idx.to(DEVICE),
              cu_seqlens=torch.tensor([0, 2, 4], dtype=torch.int32, device=DEVICE))
    for bugs in (BugConfig.with_bugs("guard-lt-zero"), None):
        s_k, o_k, s_r, o_r = run_both(case, bugs=bugs, **kw)
        assert torch.equal(s_k[0], case.state[0])
        assert_close(s_k, s_r, "ssu", torch.float32, "state")
    s_r = case.state.clone()  # the NEGATIVE rule would have stored it
    selective_state_update_ref(s_r, guard=GuardMode.NEGATIVE, **kw, **case.kwargs)
    assert not torch.equal(s_r[0], case.state[0])


@cpu_only
@pytest.mark.parametrize("where", ["load", "store"])
@pytest.mark.parametrize("bugs", [BugConfig.with_bugs("pad-minus-one"), BugConfig()], ids=["pad-minus-one", "fixed"])
def test_minus_one_is_an_illegal_access(where, bugs):
    """A -1 reaching the SSU computes state_ptr + (-1) * stride: under the trusting consumer
    of the #35431 world, and under the SSU's own fixed guard (v0.33 masks only != 0)."""
    case = make_case(51, rows=3, tokens=3, dim=8, dstate=8, slots=6)
    # The pool starts one slot into a bigger buffer, so even an unguarded -1
    # stays inside memory this test owns; the sanitizer guards the view's edges.
    big = torch.empty(7, *case.state.shape[1:], device=DEVICE)
    big[0] = 0
    pool = big[1:].copy_(case.state)
    if where == "load":
        idx = torch.tensor([2, -1, 4], dtype=torch.int32)
        kw = dict(state_batch_indices=idx)
        bad_row = 1
    else:
        idx = torch.tensor([[2], [3], [4]], dtype=torch.int32)
        dst = torch.tensor([[2], [3], [-1]], dtype=torch.int32)
        kw = dict(state_batch_indices=idx, dst_state_batch_indices=dst)
        bad_row = 2
    with pytest.raises(sanitizer.IllegalMemoryAccess) as err:
        selective_state_update(pool, bugs=bugs, **kw, **case.kwargs)
    assert KERNEL_NAME in str(err.value)
    assert err.value.row == bad_row
    assert err.value.op == where
    assert err.value.slot == -1
    # The reference refuses the same index instead of wrapping it to the last slot.
    with pytest.raises(IndexError):
        selective_state_update_ref(case.state.clone(), guard=bugs.kernel_guard_for("mamba"), **kw,
                                   **case.kwargs)


# -- argument checks ---------------------------------------------------------------


def _base():
    case = make_case(61, rows=2, dim=8, dstate=8, ngroups=2, slots=6)
    return case.state, dict(case.kwargs)


def _bad(**change):
    state, kw = _base()
    state = change.pop("state", state)
    kw.update(change)
    return state, kw


BAD = [
    ("x-wrong-ndim", lambda s, k: k.update(x=k["x"][0]), ValueError, "x must be 3-D"),
    ("x-wrong-heads", lambda s, k: k.update(x=k["x"][:, :3]), ValueError, "x must be"),
    ("dt-shape", lambda s, k: k.update(dt=k["dt"][:, :, :5]), ValueError, "dt must have"),
    ("A-shape", lambda s, k: k.update(A=k["A"][:, :, :4]), ValueError, "A must be"),
    ("B-dstate", lambda s, k: k.update(B=k["B"][:, :, :4]), ValueError, "B must be"),
    ("C-shape", lambda s, k: k.update(C=k["C"][:, :1]), ValueError, "C must have"),
    ("groups", lambda s, k: k.update(B=torch.randn(2, 3, 8), C=torch.randn(2, 3, 8)), ValueError,
     "multiple of ngroups"),
    ("D-shape", lambda s, k: k.update(D=k["D"][:2]), ValueError, "D must be"),
    ("dt_bias-shape", lambda s, k: k.update(dt_bias=k["dt_bias"][:, :3]), ValueError, "dt_bias must be"),
    ("z-shape", lambda s, k: k.update(z=k["z"][:1]), ValueError, "z must have"),
    ("out-shape", lambda s, k: k.update(out=torch.empty(3, 4, 8)), ValueError, "out must have"),
    ("B-dtype", lambda s, k: k.update(B=k["B"].double()), TypeError, "B has dtype"),
    ("out-dtype", lambda s, k: k.update(out=torch.empty(2, 4, 8, dtype=torch.float16)), TypeError,
     "out has dtype"),
    ("x-int", lambda s, k: k.update(x=k["x"].int()), TypeError, "x must be a floating-point"),
    ("idx-float", lambda s, k: k.update(state_batch_indices=torch.tensor([1.0, 2.0])), TypeError,
     "state_batch_indices must be int32 or int64"),
    ("idx-rows", lambda s, k: k.update(state_batch_indices=torch.tensor([1, 2, 3])), ValueError,
     "one row per request"),
    ("idx-3d", lambda s, k: k.update(state_batch_indices=torch.ones(2, 1, 1, dtype=torch.int32)),
     ValueError, "1-D (N,) or 2-D"),
    ("cu-without-2d", lambda s, k: k.update(state_batch_indices=torch.tensor([1, 2]),
                                            cu_seqlens=torch.tensor([0, 1, 2])), ValueError,
     "cu_seqlens (varlen speculative decoding) needs 2-D"),
    ("cu-without-indices", lambda s, k: k.update(cu_seqlens=torch.tensor([0, 1, 2])), ValueError,
     "cu_seqlens"),
    ("cu-rows", lambda s, k: k.update(state_batch_indices=torch.ones(2, 2, dtype=torch.int32),
                                      cu_seqlens=torch.tensor([0, 2])), ValueError, "one row per request"),
    ("num-accepted-1d", lambda s, k: k.update(state_batch_indices=torch.tensor([1, 2]),
                                              num_accepted_tokens=torch.tensor([1, 1])), ValueError,
     "num_accepted_tokens (speculative decoding) needs 2-D"),
    ("num-accepted-shape", lambda s, k: k.update(state_batch_indices=torch.ones(2, 2, dtype=torch.int32),
                                                 num_accepted_tokens=torch.tensor([1])), ValueError,
     "num_accepted_tokens must be"),
    ("dst-without-src", lambda s, k: k.update(dst_state_batch_indices=torch.tensor([1, 2])), ValueError,
     "dst_state_batch_indices needs state_batch_indices"),
    ("dst-ndim", lambda s, k: k.update(state_batch_indices=torch.tensor([1, 2]),
                                       dst_state_batch_indices=torch.ones(2, 2, dtype=torch.int32)),
     ValueError, "dst_state_batch_indices must have"),
    ("too-many-rows", lambda s, k: k.update(x=torch.randn(7, 4, 8), dt=torch.randn(7, 4, 8),
                                            B=torch.randn(7, 2, 8), C=torch.randn(7, 2, 8),
                                            z=torch.randn(7, 4, 8)), ValueError, "only 6 slots"),
    ("null-block-tensor", lambda s, k: k.update(null_block_id=torch.tensor(0)), TypeError,
     "null_block_id must be a Python int"),
    ("softplus-tensor", lambda s, k: k.update(dt_softplus=torch.tensor(True)), TypeError,
     "dt_softplus must be a bool"),
    ("A-none", lambda s, k: k.update(A=None), TypeError, "A must be a torch.Tensor"),
]


@pytest.mark.parametrize("mutate,exc,match", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_arguments_are_named(mutate, exc, match):
    state, kw = _base()
    kw = {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    mutate(state, kw)
    kw = {k: (v.to(DEVICE) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    with pytest.raises(exc, match=re.escape(match)):
        selective_state_update(state, **kw)
    with pytest.raises(exc, match=re.escape(match)):
        selective_state_update_ref(state, **kw)


def test_bad_state_ndim_and_dtype():
    state, kw = _base()
    with pytest.raises(ValueError, match="state must be 4-D"):
        selective_state_update(state[0, 0, 0], **kw)
    with pytest.raises(TypeError, match="state must be float32"):
        selective_state_update(state.double(), **kw)


@cuda
def test_device_mismatch_is_named():
    state, kw = _base()
    kw["B"] = kw["B"].cpu()
    with pytest.raises(ValueError, match="B is on cpu"):
        selective_state_update(state, **kw)


def test_batched_form_needs_enough_columns():
    state, kw = _base()
    kw = {k: (v.reshape(1, 2, *v.shape[1:]) if k in ("x", "dt", "B", "C", "z") else v) for k, v in kw.items()}
    with pytest.raises(ValueError, match="need >= T=2 columns"):
        selective_state_update(state, state_batch_indices=torch.ones(1, 1, dtype=torch.int32,
                                                                     device=DEVICE), **kw)
    with pytest.raises(ValueError, match="needs 2-D state_batch_indices"):
        selective_state_update(state, **kw)
