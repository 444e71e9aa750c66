"""causal_conv1d_update: Triton kernel vs the pure-torch reference, and the guard bugs.

Rules from upstream's kernel tests (kernels.md): fresh random inputs (never
zeros), outputs poisoned before every run, the conv state must match the
reference exactly, every slot the batch does not own (the null block 0
included) must stay bit-identical, and so must the padding of a page-padded
pool. On the CPU interpreter everything runs in fp32 with tiny odd shapes; on
CUDA the same tests also run in bf16 / fp16 (marked ``cuda``).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import pytest
import torch

import mambalab  # noqa: F401  (sets TRITON_INTERPRET before kernels are defined)
from mambalab.lab import sanitizer
from mambalab.lab.bugs import BugConfig, GuardMode, use
from mambalab.device import DEVICE
from mambalab.kernels import causal_conv1d as conv_mod
from mambalab.kernels.causal_conv1d import (
    causal_conv1d_update,
    decode_launch_config,
    launch_config,
    make_conv_state,
)
from mambalab.kernels.causal_conv1d_ref import causal_conv1d_update_ref
from mambalab.kernels.testing import assert_untouched, poison_, random_slot_indices, tolerance

DTYPES = [
    pytest.param(torch.float32, id="fp32"),
    pytest.param(torch.bfloat16, id="bf16", marks=pytest.mark.cuda),
    pytest.param(torch.float16, id="fp16", marks=pytest.mark.cuda),
]


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def _dense(t: torch.Tensor) -> torch.Tensor:
    """A copy with standard row-major strides.

    (``Tensor.contiguous()`` keeps a size-1 dim's odd stride, and ``view(uint8)``
    then refuses it: a pool with state_len 1 has exactly that.)
    """
    return torch.empty(t.shape, dtype=t.dtype, device=t.device).copy_(t)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return _dense(t).view(torch.uint8)


def _randn(gen: torch.Generator, *shape, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=gen).to(dtype).to(DEVICE)


def _pool(gen, num_slots, dim, state_len, dtype, pad=0):
    """A random pool (padding included) and a twin for the reference, sharing nothing."""
    pool = make_conv_state(num_slots, dim, state_len, dtype, DEVICE, slot_stride=state_len * dim + pad)
    buf = pool._base
    buf.copy_(torch.randn(buf.shape, generator=gen).to(dtype))
    twin_buf = buf.clone()
    twin = twin_buf.as_strided(pool.shape, pool.stride())
    return pool, twin


@dataclass
class Case:
    dim: int
    width: int
    batch: int
    seqlen: int | None = None  # None: x is (batch, dim); else (batch, dim, seqlen)
    varlen: tuple[int, ...] | None = None  # per-row query lengths (x is (num_tokens, dim))
    bias: bool = True
    act: str | None = "silu"
    num_null: int = 0
    pad: int = 0  # extra elements between slots (page-padded pool)
    extra_state: int = 0  # state_len beyond what is needed
    num_spec: int = 0
    idx2d: int = 0  # > 0: (batch, idx2d) index table, column 0 used
    no_indices: bool = False

    @property
    def max_t(self) -> int:
        if self.varlen is not None:
            return max(max(self.varlen), 1)
        return 1 if self.seqlen is None else self.seqlen


def _build(case: Case, dtype: torch.dtype, seed: int):
    gen = torch.Generator().manual_seed(seed)
    need = case.width - 2 + case.max_t if case.num_spec else case.width - 1
    state_len = need + case.extra_state
    num_slots = case.batch * max(1, case.idx2d) + 4 if not case.no_indices else case.batch
    pool, twin = _pool(gen, num_slots, case.dim, state_len, dtype, case.pad)

    if case.varlen is not None:
        assert len(case.varlen) == case.batch
        lens = torch.tensor(case.varlen)
        qsl = torch.zeros(case.batch + 1, dtype=torch.int32)
        qsl[1:] = torch.cumsum(lens, 0)
        x = _randn(gen, int(qsl[-1]), case.dim, dtype=dtype)
        extra = dict(query_start_loc=qsl.to(DEVICE), max_query_len=case.max_t)
    elif case.seqlen is None:
        x = _randn(gen, case.batch, case.dim, dtype=dtype)
        extra = {}
    else:
        x = _randn(gen, case.batch, case.dim, case.seqlen, dtype=dtype)
        extra = {}

    if case.no_indices:
        indices = None
    else:
        cols = case.idx2d if case.idx2d else None
        idx = random_slot_indices(
            case.batch, num_slots, num_null_rows=case.num_null, columns=cols, generator=gen
        )
        idx = idx[torch.randperm(case.batch, generator=gen)]  # null rows mixed in, not only at the tail
        indices = idx.to(DEVICE)

    if case.num_spec:
        acc = torch.randint(1, case.max_t + 1, (case.batch,), generator=gen, dtype=torch.int32)
        extra["num_accepted_tokens"] = acc.to(DEVICE)

    weight = _randn(gen, case.dim, case.width, dtype=dtype)
    bias = _randn(gen, case.dim, dtype=dtype) if case.bias else None
    args = dict(x=x, weight=weight, bias=bias, activation=case.act, conv_state_indices=indices, **extra)
    return pool, twin, args


def _live_slots(indices, batch, guard=GuardMode.EQ_NULL) -> set[int]:
    """The slots a batch may write under ``guard`` (row b owns slot b without indices)."""
    if indices is None:
        return set(range(batch))
    col0 = indices if indices.dim() == 1 else indices[:, 0]
    vals = [int(v) for v in col0.tolist()]
    if guard in (GuardMode.NULL, GuardMode.EQ_NULL):  # (a -1 under EQ_NULL faults before this)
        return {v for v in vals if v > 0}
    return {v for v in vals if v >= 0}


def _run_both(pool, twin, args, *, bugs=None, guard=GuardMode.EQ_NULL):
    """Kernel on ``pool``, reference on ``twin``; outputs poisoned first."""
    out_k = poison_(torch.empty_like(args["x"]))
    out_r = poison_(torch.empty_like(args["x"]))
    got = causal_conv1d_update(conv_state=pool, out=out_k, bugs=bugs, **args)
    ref = causal_conv1d_update_ref(conv_state=twin, out=out_r, guard=guard, **args)
    assert got is out_k and ref is out_r
    return out_k, out_r


def _snapshot(pool: torch.Tensor) -> torch.Tensor:
    """A copy of the pool's whole backing buffer, viewed like the pool (``._base`` is the buffer)."""
    return pool._base.clone().as_strided(pool.shape, pool.stride())


def _check(pool, twin, before, out_k, out_r, args, dtype, guard=GuardMode.EQ_NULL):
    """``before`` is a :func:`_snapshot` taken before the run."""
    # every output element written (poison gone) and close to the reference
    assert not torch.isnan(out_k).any(), "kernel left poisoned (unwritten) output elements"
    rtol, atol = tolerance("conv", dtype)
    torch.testing.assert_close(out_k.float(), out_r.float(), rtol=rtol, atol=atol)
    # the state matches exactly: slots, padding, everything
    assert torch.equal(_bits(pool._base), _bits(twin._base)), "conv state differs from the reference"
    # slots the batch does not own (the null block included) are bit-identical
    touched = _live_slots(args["conv_state_indices"], _batch_of(args), guard)
    assert_untouched(_dense(before), _dense(pool), touched, what="conv_state")
    # and so is the padding of a page-padded pool
    stride0, per_slot = pool.stride(0), pool.shape[1] * pool.shape[2]
    if stride0 > per_slot:
        assert torch.equal(
            _bits(_padding(pool._base, stride0, per_slot)), _bits(_padding(before._base, stride0, per_slot))
        ), "pool padding was written"


def _batch_of(args) -> int:
    qsl = args.get("query_start_loc")
    return args["x"].shape[0] if qsl is None else qsl.shape[0] - 1


def _padding(buf, stride0, per_slot):
    return buf.view(-1, stride0)[:, per_slot:]


def _null_rows(args) -> list[int]:
    idx = args["conv_state_indices"]
    if idx is None:
        return []
    col0 = idx if idx.dim() == 1 else idx[:, 0]
    return [b for b, v in enumerate(col0.tolist()) if v <= 0]


def _row_out(out, args, b):
    qsl = args.get("query_start_loc")
    if qsl is None:
        return out[b]
    return out[int(qsl[b]) : int(qsl[b + 1])]


# ---------------------------------------------------------------------------
# kernel vs reference
# ---------------------------------------------------------------------------
CASES = [
    pytest.param(Case(dim=5, width=4, batch=1, num_null=0), id="one-row"),
    pytest.param(Case(dim=13, width=4, batch=7, num_null=2), id="2d-nulls"),
    pytest.param(Case(dim=37, width=3, batch=16, num_null=5, bias=False), id="16rows-nobias"),
    pytest.param(Case(dim=9, width=2, batch=5, act=None, num_null=1), id="width2-noact"),
    pytest.param(Case(dim=11, width=4, batch=4, seqlen=3, num_null=1), id="3d-seqlen3"),
    pytest.param(Case(dim=7, width=3, batch=3, seqlen=4, act="swish"), id="3d-seqlen>width"),
    pytest.param(Case(dim=21, width=4, batch=6, num_null=2, pad=17), id="padded-pool"),
    pytest.param(
        Case(dim=15, width=4, batch=5, seqlen=2, pad=5, extra_state=2, num_null=1), id="padded-3d-longstate"
    ),
    pytest.param(Case(dim=19, width=4, batch=6, varlen=(1, 3, 0, 2, 4, 1), num_null=2), id="varlen"),
    pytest.param(Case(dim=5, width=3, batch=4, varlen=(2, 1, 1, 2), bias=False, act=None), id="varlen-nobias"),
    pytest.param(Case(dim=17, width=4, batch=5, idx2d=3, num_null=1), id="indices-2d"),
    pytest.param(Case(dim=3, width=4, batch=4, no_indices=True), id="no-indices"),
    pytest.param(Case(dim=1, width=2, batch=3, num_null=1), id="dim1"),
    pytest.param(Case(dim=10, width=5, batch=4, num_null=1), id="width5-general-kernel"),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_matches_reference(case: Case, dtype):
    pool, twin, args = _build(case, dtype, seed=zlib.crc32(repr(case).encode()))
    before = _snapshot(pool)
    out_k, out_r = _run_both(pool, twin, args)
    _check(pool, twin, before, out_k, out_r, args, dtype)
    for b in _null_rows(args):  # a padded row's output is its input (upstream: in place over x)
        assert torch.equal(_row_out(out_k, args, b), _row_out(args["x"], args, b))
    if args["conv_state_indices"] is None:  # a dense batch: row 0 owns slot 0 like any other
        assert not torch.equal(_bits(pool[0]), _bits(before[0]))
        assert torch.count_nonzero(_row_out(out_k, args, 0)) > 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_null_block_untouched_and_twice_in_a_row(dtype):
    """Two consecutive steps on the same pool (the state written is the state read next)."""
    case = Case(dim=13, width=4, batch=6, num_null=2)
    pool, twin, args = _build(case, dtype, seed=11)
    null0 = pool[0].clone()
    gen = torch.Generator().manual_seed(12)
    for _ in range(2):
        before = _snapshot(pool)
        out_k, out_r = _run_both(pool, twin, args)
        _check(pool, twin, before, out_k, out_r, args, dtype)
        args["x"] = _randn(gen, *args["x"].shape, dtype=dtype)
    assert torch.equal(_bits(pool[0]), _bits(null0))


# ---------------------------------------------------------------------------
# speculative decoding
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("num_spec,width", [(1, 4), (2, 4), (3, 4), (2, 2), (3, 3), (1, 2)])
def test_spec_decode_every_num_accepted(num_spec, width, dtype):
    t_len = 1 + num_spec
    # one row per num_accepted in 1..T, plus a 0 (read as 1) and two null rows
    accepted = list(range(1, t_len + 1)) + [0]
    batch = len(accepted) + 2
    case = Case(dim=9, width=width, batch=batch, seqlen=t_len, num_spec=num_spec, num_null=2, pad=3)
    pool, twin, args = _build(case, dtype, seed=100 * num_spec + width)
    idx = args["conv_state_indices"].cpu()
    live_rows = [b for b in range(batch) if int(idx[b]) > 0]
    acc = torch.ones(batch, dtype=torch.int32)
    for b, a in zip(live_rows, accepted):
        acc[b] = a
    args["num_accepted_tokens"] = acc.to(DEVICE)
    before = _snapshot(pool)
    out_k, out_r = _run_both(pool, twin, args)
    _check(pool, twin, before, out_k, out_r, args, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_spec_decode_varlen(dtype):
    case = Case(dim=11, width=4, batch=6, varlen=(3, 1, 3, 0, 2, 3), num_spec=2, num_null=1, extra_state=1)
    pool, twin, args = _build(case, dtype, seed=7)
    before = _snapshot(pool)
    out_k, out_r = _run_both(pool, twin, args)
    _check(pool, twin, before, out_k, out_r, args, dtype)


def _dense_conv(seq, weight, bias, silu: bool = False) -> torch.Tensor:
    """Causal depthwise conv of a whole ``(L, dim)`` sequence by ``F.conv1d``.

    Independent of both implementations under test; row ``i`` is the output at
    input ``i``. Computed on the CPU in fp32 (cuDNN could use TF32).
    """
    dim, width = weight.shape
    y = torch.nn.functional.conv1d(
        seq.float().cpu().t().unsqueeze(0),
        weight.float().cpu().unsqueeze(1),
        bias.float().cpu(),
        padding=width - 1,
        groups=dim,
    )[0, :, : seq.shape[0]].t()
    return (torch.nn.functional.silu(y) if silu else y).to(seq.device)


@pytest.mark.parametrize("num_spec,width", [(2, 4), (3, 3)])
def test_spec_decode_matches_dense_history(num_spec, width):
    """Two spec steps with partial acceptance equal a conv over the accepted sequence.

    Step 1 (after a prefill, num_accepted = 1) feeds drafts d; the first ``a``
    are accepted. Step 2 feeds drafts e with num_accepted = a: its outputs
    must be the conv over [history, d[:a], e], with no trace of d[a:].
    """
    dtype, dim, t_len = torch.float32, 7, 1 + num_spec
    gen = torch.Generator().manual_seed(5)
    hist = width - 1
    accepted = list(range(1, t_len + 1))  # one row per outcome
    batch = len(accepted)
    pool = make_conv_state(batch + 1, dim, hist + num_spec, dtype, DEVICE)
    pool._base.copy_(torch.randn(pool._base.shape, generator=gen))  # stale values everywhere
    idx = torch.arange(1, batch + 1, dtype=torch.int32, device=DEVICE)
    histories = _randn(gen, batch, dim, hist)
    pool[1:, :, :hist] = histories  # what a prefill leaves: the last width-1 inputs at columns [0, hist)
    weight, bias = _randn(gen, dim, width), _randn(gen, dim)

    d = _randn(gen, batch, dim, t_len)
    ones = torch.ones(batch, dtype=torch.int32, device=DEVICE)
    out1 = causal_conv1d_update(d, pool, weight, bias, None, idx, num_accepted_tokens=ones)
    for b in range(batch):
        want1 = _dense_conv(torch.cat([histories[b].t(), d[b].t()]), weight, bias)[-t_len:]
        torch.testing.assert_close(out1[b].t(), want1, rtol=3e-4, atol=1e-3)
    e = _randn(gen, batch, dim, t_len)
    acc = torch.tensor(accepted, dtype=torch.int32, device=DEVICE)
    out = causal_conv1d_update(e, pool, weight, bias, None, idx, num_accepted_tokens=acc)

    for b, a in enumerate(accepted):
        seq = torch.cat([histories[b].t(), d[b, :, :a].t(), e[b].t()])  # (hist + a + T, dim)
        want = _dense_conv(seq, weight, bias)[-t_len:]  # outputs at the T new tokens
        torch.testing.assert_close(out[b].t(), want, rtol=3e-4, atol=1e-3)


# ---------------------------------------------------------------------------
# the recurrent-form invariant
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("width,t_len,pad", [(4, 3, 0), (2, 4, 9), (3, 4, 0)])
def test_many_tokens_at_once_equals_one_at_a_time(width, t_len, pad):
    dtype, dim, batch = torch.float32, 11, 3
    gen = torch.Generator().manual_seed(width * 10 + t_len)
    pool_a, pool_b = _pool(gen, batch + 2, dim, width - 1, dtype, pad)
    idx = torch.tensor([3, 0, 1], dtype=torch.int32, device=DEVICE)
    x = _randn(gen, batch, dim, t_len)
    weight, bias = _randn(gen, dim, width), _randn(gen, dim)

    history = {b: pool_a[int(idx[b]), :, :].t().clone() for b in range(batch) if int(idx[b]) > 0}
    out_all = causal_conv1d_update(x, pool_a, weight, bias, "silu", idx)
    outs = [causal_conv1d_update(x[:, :, t], pool_b, weight, bias, "silu", idx) for t in range(t_len)]
    torch.testing.assert_close(out_all, torch.stack(outs, dim=-1), rtol=3e-4, atol=1e-3)
    assert torch.equal(_bits(pool_a._base), _bits(pool_b._base))
    # both equal the conv over the whole sequence, and the state keeps its last width-1 inputs
    for b, h in history.items():
        seq = torch.cat([h, x[b].t()])
        want = _dense_conv(seq, weight, bias, silu=True)[-t_len:]
        torch.testing.assert_close(out_all[b].t(), want, rtol=3e-4, atol=1e-3)
        assert torch.equal(pool_a[int(idx[b])].t(), seq[-(width - 1) :])

    # and a row run alone equals the same row inside the batch
    gen2 = torch.Generator().manual_seed(0)
    pool_c, _ = _pool(gen2, batch + 2, dim, width - 1, dtype, pad)
    pool_c._base.copy_(pool_a._base)
    x2 = _randn(gen2, batch, dim)
    together = causal_conv1d_update(x2, pool_a, weight, bias, None, idx)
    alone = causal_conv1d_update(x2[2:3], pool_c, weight, bias, None, idx[2:3])
    torch.testing.assert_close(together[2:3], alone, rtol=1e-6, atol=1e-6)
    assert torch.equal(_bits(pool_a[1]), _bits(pool_c[1]))


@pytest.mark.parametrize(
    "state_dtype,x_dtype",
    [
        pytest.param(torch.float16, torch.float32, id="state16-x32"),
        pytest.param(torch.float32, torch.float16, id="state32-x16"),
        pytest.param(torch.bfloat16, torch.float32, id="statebf16-x32", marks=pytest.mark.cuda),
        pytest.param(torch.float32, torch.bfloat16, id="state32-xbf16", marks=pytest.mark.cuda),
    ],
)
def test_mixed_dtypes(state_dtype, x_dtype):
    """x is rounded to the state's dtype (what the state keeps); out has x's dtype."""
    case = Case(dim=13, width=4, batch=4, seqlen=2, num_null=1)
    pool, twin, args = _build(case, state_dtype, seed=31)
    gen = torch.Generator().manual_seed(32)
    args["x"] = _randn(gen, *args["x"].shape, dtype=x_dtype)
    args["weight"] = args["weight"].float()
    before = _snapshot(pool)
    out_k, out_r = _run_both(pool, twin, args)
    assert out_k.dtype == x_dtype
    low = state_dtype if state_dtype != torch.float32 else x_dtype
    _check(pool, twin, before, out_k, out_r, args, low)


# ---------------------------------------------------------------------------
# the guard: fixed, guard-lt-zero (#39064), pad-minus-one (#35431)
# ---------------------------------------------------------------------------
def _guard_case(seed):
    case = Case(dim=9, width=4, batch=5, num_null=1)  # ONE padded row: no race on slot 0
    return _build(case, torch.float32, seed=seed)


def test_fixed_guard_leaves_null_block_alone():
    pool, twin, args = _guard_case(21)
    before = _snapshot(pool)
    out_k, out_r = _run_both(pool, twin, args, bugs=BugConfig.fixed())
    assert torch.equal(_bits(pool[0]), _bits(before[0]))
    _check(pool, twin, before, out_k, out_r, args, torch.float32)


def test_guard_lt_zero_leaves_the_conv_alone():
    """#39064 changed only the FLA kernels: the conv returns on == null_block_id since #35431,
    so under ``guard-lt-zero`` its padded row still leaves the null block alone."""
    pool, twin, args = _guard_case(22)
    before = _snapshot(pool)
    bugs = BugConfig.with_bugs("guard-lt-zero")
    out_k, out_r = _run_both(pool, twin, args, bugs=bugs)
    assert torch.equal(_bits(pool[0]), _bits(before[0])), "the conv must not touch the null block"
    (b,) = _null_rows(args)
    assert torch.equal(out_k[b], args["x"][b])  # its input: what the GDN layer after it sees
    _check(pool, twin, before, out_k, out_r, args, torch.float32)


def test_negative_rule_reads_and_writes_null_block_in_the_reference():
    """GuardMode.NEGATIVE (the FLA kernels' pre-#39064 rule) as the reference models it."""
    pool, twin, args = _guard_case(22)
    before = _snapshot(twin)
    out_r = causal_conv1d_update_ref(conv_state=twin, guard=GuardMode.NEGATIVE, **args)
    assert not torch.equal(_bits(twin[0]), _bits(before[0]))
    (b,) = _null_rows(args)
    assert torch.count_nonzero(out_r[b]) > 0


def test_guard_follows_active_bug_config():
    pool, twin, args = _guard_case(23)
    before = _snapshot(pool)
    with use(BugConfig.with_bugs("pad-minus-one")):
        out_k = causal_conv1d_update(conv_state=pool, **args)  # bugs=None: the active config
    out_r = causal_conv1d_update_ref(conv_state=twin, guard=GuardMode.NONE, **args)
    assert not torch.equal(_bits(pool[0]), _bits(before[0]))
    assert torch.equal(_bits(pool._base), _bits(twin._base))
    torch.testing.assert_close(out_k, out_r, rtol=3e-4, atol=1e-3)
    pool, twin, args = _guard_case(23)
    before = _snapshot(pool)
    causal_conv1d_update(conv_state=pool, **args)  # default: fixed
    assert torch.equal(_bits(pool[0]), _bits(before[0]))


def test_trusting_consumer_several_padded_rows_race_on_slot0():
    case = Case(dim=9, width=4, batch=6, num_null=3)
    pool, twin, args = _build(case, torch.float32, seed=24)
    before = _snapshot(pool)
    causal_conv1d_update(conv_state=pool, bugs=BugConfig.with_bugs("pad-minus-one"), **args)
    assert not torch.equal(_bits(pool[0]), _bits(before[0]))
    owned = _live_slots(args["conv_state_indices"], case.batch, GuardMode.NONE)  # includes slot 0
    assert_untouched(_dense(before), _dense(pool), owned)


@pytest.mark.cpu_only(reason="the sanitizer checks the interpreter; on a GPU a -1 is a real wild access")
@pytest.mark.parametrize("bugs", [BugConfig.with_bugs("pad-minus-one"), BugConfig()], ids=["pad-minus-one", "fixed"])
def test_minus_one_is_an_illegal_memory_access(bugs):
    """A -1 reaching the conv: the trusting consumer of the #35431 world, and the conv's own
    fixed guard too (v0.33 returns only on == null_block_id), exactly as upstream would fault."""
    pool, twin, args = _guard_case(25)
    idx = args["conv_state_indices"].clone()
    idx[idx == 0] = -1  # the pad-minus-one world: padded rows carry PAD_SLOT_ID
    args["conv_state_indices"] = idx
    with pytest.raises(sanitizer.IllegalMemoryAccess) as info:
        causal_conv1d_update(conv_state=pool, bugs=bugs, **args)
    err = info.value
    assert err.kernel == "causal_conv1d_update"
    assert err.slot == -1 and err.arg in ("state", "state_ptr")
    assert err.row == int((idx == -1).nonzero()[0, 0])
    # the reference models the same: an index outside the pool is an error
    with pytest.raises(IndexError, match="outside the pool"):
        causal_conv1d_update_ref(conv_state=twin, bugs=bugs, **args)


def test_pad_minus_one_treats_zero_as_a_real_slot():
    """With GuardMode.NONE index 0 is an ordinary slot (the -1 world has no null block)."""
    pool, twin, args = _guard_case(26)
    before = _snapshot(pool)
    bugs = BugConfig.with_bugs("pad-minus-one")
    out_k, out_r = _run_both(pool, twin, args, bugs=bugs, guard=GuardMode.NONE)
    assert not torch.equal(_bits(pool[0]), _bits(before[0]))
    _check(pool, twin, before, out_k, out_r, args, torch.float32, guard=GuardMode.NONE)


# ---------------------------------------------------------------------------
# the pool and the launch rule
# ---------------------------------------------------------------------------
def test_make_conv_state_layout():
    pool = make_conv_state(5, 7, 3, torch.float32, DEVICE)
    assert pool.shape == (5, 7, 3) and pool.stride() == (21, 1, 7)
    assert pool._base.numel() == 5 * 21 and torch.count_nonzero(pool) == 0
    padded = make_conv_state(5, 7, 3, torch.float16, DEVICE, slot_stride=32)
    assert padded.stride() == (32, 1, 7) and padded._base.numel() == 5 * 32
    with pytest.raises(ValueError, match="slot_stride"):
        make_conv_state(5, 7, 3, slot_stride=20)
    with pytest.raises(ValueError, match="state_len"):
        make_conv_state(5, 7, 0)


def test_launch_config_rule():
    cpu = torch.device("cpu")
    assert launch_config(8192, 64, torch.bfloat16, cpu) == (128, 1)
    assert launch_config(8192, 64, torch.float32, cpu) == (64, 1)
    assert launch_config(37, 3, torch.float32, cpu) == (64, 1)
    # the decode kernel: on the interpreter every channel and one request a program (no mask when exact)
    assert decode_launch_config(8192, 64, torch.float32, cpu) == (8192, 1, 1)
    assert decode_launch_config(20, 3, torch.float32, cpu) == (32, 1, 1)
    # on a GPU: DECODE_COLUMN_BYTES of each column, DECODE_ROWS requests (fewer for a tiny batch)
    gpu = torch.device("cuda", 0)
    rows = conv_mod.DECODE_ROWS
    assert decode_launch_config(8192, 256, torch.float32, gpu) == (conv_mod.DECODE_COLUMN_BYTES // 4, 1, rows)
    assert decode_launch_config(8192, 256, torch.bfloat16, gpu)[0] == conv_mod.DECODE_COLUMN_BYTES // 2
    assert decode_launch_config(8192, 1, torch.float32, gpu)[2] == 1
    assert decode_launch_config(20, 256, torch.float32, gpu)[0] == 32


# ---------------------------------------------------------------------------
# the decode kernel with several requests per program (its GPU launch), on any device
# ---------------------------------------------------------------------------
MULTI_ROW_CASES = [
    pytest.param(Case(dim=13, width=4, batch=7, num_null=3), id="w4-7rows-nulls"),
    pytest.param(Case(dim=9, width=3, batch=5, num_null=1, bias=False), id="w3-nobias"),
    pytest.param(Case(dim=6, width=2, batch=6, num_null=2, act=None), id="w2-noact"),
    pytest.param(Case(dim=11, width=4, batch=5, seqlen=1, num_null=1, pad=7), id="3d-seqlen1-padded"),
    pytest.param(Case(dim=17, width=4, batch=6, idx2d=3, num_null=2), id="indices-2d"),
    pytest.param(Case(dim=5, width=4, batch=3, no_indices=True), id="no-indices"),
]


@pytest.mark.parametrize("rows", [2, 4])
@pytest.mark.parametrize("case", MULTI_ROW_CASES)
def test_decode_kernel_several_rows_per_program(case, rows, monkeypatch):
    """The GPU launch of the decode kernel (ROWS requests, wide channel blocks) on any device."""
    monkeypatch.setattr(conv_mod, "decode_launch_config", lambda dim, batch, dtype, device: (8, 1, rows))
    pool, twin, args = _build(case, torch.float32, seed=zlib.crc32(repr(case).encode()) + rows)
    before = _snapshot(pool)
    out_k, out_r = _run_both(pool, twin, args)
    _check(pool, twin, before, out_k, out_r, args, torch.float32)
    for b in _null_rows(args):
        assert torch.equal(_row_out(out_k, args, b), _row_out(args["x"], args, b))


@pytest.mark.parametrize("guard_bug,guard,dirty", [("guard-lt-zero", GuardMode.EQ_NULL, False),
                                                   ("pad-minus-one", GuardMode.NONE, True)])
def test_decode_kernel_several_rows_follows_the_guard(guard_bug, guard, dirty, monkeypatch):
    """Pre-fix switches with several requests per program: under pad-minus-one index 0 is a real
    slot (one padded row); guard-lt-zero leaves the conv's own guard alone (#39064 is FLA-only)."""
    monkeypatch.setattr(conv_mod, "decode_launch_config", lambda dim, batch, dtype, device: (8, 1, 4))
    pool, twin, args = _guard_case(27)
    before = _snapshot(pool)
    out_k, out_r = _run_both(pool, twin, args, bugs=BugConfig.with_bugs(guard_bug), guard=guard)
    assert torch.equal(_bits(pool[0]), _bits(before[0])) is not dirty
    _check(pool, twin, before, out_k, out_r, args, torch.float32, guard=guard)


# ---------------------------------------------------------------------------
# bad inputs: clear errors naming the argument (host checks only, no launch)
# ---------------------------------------------------------------------------
def _good():
    gen = torch.Generator().manual_seed(0)
    dim, width, batch = 6, 4, 3
    pool = make_conv_state(5, dim, width - 1, torch.float32, DEVICE)
    return dict(
        x=_randn(gen, batch, dim),
        conv_state=pool,
        weight=_randn(gen, dim, width),
        bias=_randn(gen, dim),
        activation="silu",
        conv_state_indices=torch.tensor([1, 2, 0], dtype=torch.int32, device=DEVICE),
    )


def _i32(*vals):
    return torch.tensor(vals, dtype=torch.int32, device=DEVICE)


def _pool_of(num_slots, dim, state_len, dtype=torch.float32):
    return make_conv_state(num_slots, dim, state_len, dtype, DEVICE)


# (id, change to the good arguments, exception, message pattern)
BAD = [
    ("x-int", lambda a: {**a, "x": a["x"].to(torch.int32)}, TypeError, r"x has dtype"),
    ("x-4d", lambda a: {**a, "x": a["x"][:, :, None, None]}, ValueError, r"x has shape"),
    ("x-not-tensor", lambda a: {**a, "x": a["x"].tolist()}, TypeError, r"x must be a torch.Tensor"),
    ("weight-dim", lambda a: {**a, "weight": a["weight"][:-1]}, ValueError, r"weight has shape"),
    ("weight-width1", lambda a: {**a, "weight": a["weight"][:, :1]}, ValueError, r"width >= 2"),
    ("weight-device", lambda a: {**a, "weight": torch.ones(6, 4, device="meta")}, ValueError, r"weight is on meta"),
    ("bias-shape", lambda a: {**a, "bias": a["bias"][:-1]}, ValueError, r"bias has shape"),
    ("activation", lambda a: {**a, "activation": "relu"}, ValueError, r"activation='relu'"),
    (
        "state-not-dim-contiguous",
        lambda a: {**a, "conv_state": torch.zeros(5, 6, 3, device=DEVICE)},
        ValueError,
        r"conv_state .*stride\(1\) == 1",
    ),
    ("state-too-short", lambda a: {**a, "conv_state": _pool_of(5, 6, 2)}, ValueError, r"state_len 2.*width - 1 = 3"),
    ("state-dim", lambda a: {**a, "conv_state": _pool_of(5, 7, 3)}, ValueError, r"conv_state has shape"),
    ("state-dtype", lambda a: {**a, "conv_state": _pool_of(5, 6, 3, torch.float64)}, TypeError, r"conv_state has dtype"),
    (
        "spec-state-too-short",
        lambda a: {**a, "x": a["x"][:, :, None].expand(3, 6, 3).contiguous(), "num_accepted_tokens": _i32(1, 1, 1)},
        ValueError,
        r"state_len 3.*speculative",
    ),
    (
        "indices-dtype",
        lambda a: {**a, "conv_state_indices": a["conv_state_indices"].float()},
        TypeError,
        r"conv_state_indices has dtype",
    ),
    ("indices-shape", lambda a: {**a, "conv_state_indices": _i32(1, 2)}, ValueError, r"conv_state_indices has shape"),
    (
        "indices-device",
        lambda a: {**a, "conv_state_indices": torch.ones(3, dtype=torch.int32, device="meta")},
        ValueError,
        r"conv_state_indices is on meta",
    ),
    (
        "no-indices-too-few-slots",
        lambda a: {**a, "conv_state_indices": None, "conv_state": _pool_of(2, 6, 3)},
        ValueError,
        r"2 slots but there are 3 rows",
    ),
    ("accepted-shape", lambda a: {**a, "num_accepted_tokens": _i32(1, 1)}, ValueError, r"num_accepted_tokens has shape"),
    (
        "accepted-dtype",
        lambda a: {**a, "num_accepted_tokens": torch.ones(3, device=DEVICE)},
        TypeError,
        r"num_accepted_tokens has dtype",
    ),
    (
        "varlen-3d",
        lambda a: {**a, "x": a["x"][:, :, None], "query_start_loc": _i32(0, 1, 2, 3), "max_query_len": 1},
        ValueError,
        r"query_start_loc",
    ),
    ("varlen-no-max", lambda a: {**a, "query_start_loc": _i32(0, 1, 2, 3)}, ValueError, r"max_query_len"),
    (
        "varlen-qsl-dtype",
        lambda a: {**a, "query_start_loc": torch.arange(4, device=DEVICE).float(), "max_query_len": 1},
        TypeError,
        r"query_start_loc has dtype",
    ),
    ("out-shape", lambda a: {**a, "out": torch.empty(3, 5, device=DEVICE)}, ValueError, r"out has shape"),
]


@pytest.mark.parametrize("mutate,exc,match", [pytest.param(m, e, r, id=i) for i, m, e, r in BAD])
def test_bad_inputs_raise_clear_errors(mutate, exc, match):
    args = mutate(_good())
    before = args["conv_state"].clone() if isinstance(args.get("conv_state"), torch.Tensor) else None
    with pytest.raises(exc, match=match):
        causal_conv1d_update(**args)
    if before is not None and args["conv_state"].device.type != "meta":
        assert torch.equal(args["conv_state"], before)
