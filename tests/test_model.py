"""The tiny hybrid model: the batched kernel decode equals the per-request reference.

What an engine relies on, checked on the Triton interpreter (CPU, fp32) and,
unchanged, on a GPU: decode through the kernels equals ``forward_ref`` with
requests batched, slots permuted and null rows mixed in; prefill chunks
compose; speculative columns hold the state after each token; padded rows
touch nothing (slot 0 included) unless the ``guard-lt-zero`` bug is on.
"""

from __future__ import annotations

import pytest
import torch

from mambalab.lab.bugs import BugConfig
from mambalab.device import DEVICE, DEVICE_TYPE
from mambalab.model.tiny_hybrid import (
    STATE_KEYS,
    ModelState,
    TinyHybridConfig,
    TinyHybridModel,
    rms_norm,
    zero_state,
)
from mambalab.kernels.testing import assert_untouched

ATOL = RTOL = 1e-4
I32 = dict(dtype=torch.int32, device=DEVICE)


def _model(num_spec: int = 0, seed: int = 0) -> TinyHybridModel:
    return TinyHybridModel(TinyHybridConfig(num_speculative_tokens=num_spec, seed=seed), DEVICE)


def _prompt(n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 32, (n,), generator=g).tolist()


def _close(actual: torch.Tensor, expected: torch.Tensor, what: str = "") -> None:
    torch.testing.assert_close(actual.float(), expected.float(), rtol=RTOL, atol=ATOL, msg=lambda m: f"{what}: {m}")


def _states_close(actual: dict, expected: dict, what: str = "") -> None:
    for k in STATE_KEYS:
        _close(actual[k], expected[k], f"{what} {k}")


def _random_pools(cfg: TinyHybridConfig, num_blocks: int, seed: int) -> ModelState:
    """Pools with random contents everywhere but the null block (never test on zeros)."""
    pools = ModelState.allocate(cfg, num_blocks, device=DEVICE)
    g = torch.Generator().manual_seed(seed)
    for p in pools.pools.values():
        p[1:].copy_(torch.randn(p[1:].shape, generator=g))
    return pools


# ---------------------------------------------------------------------------
# Weights, config, state pools
# ---------------------------------------------------------------------------
def test_same_seed_same_logits_different_seed_different():
    prompt = _prompt(6, 1)
    a, _ = _model(seed=3).forward_ref(prompt)
    b, _ = _model(seed=3).forward_ref(prompt)
    c, _ = _model(seed=4).forward_ref(prompt)
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)


def test_logits_are_well_separated_and_greedy_varies():
    m = _model()
    logits, _ = m.forward_ref(_prompt(12, 2))
    top2 = logits.topk(2, dim=-1).values
    assert float((top2[:, 0] - top2[:, 1]).min()) > 1e-3  # far above fp32 kernel/reference noise
    assert float(logits.std()) > 1.0
    tokens = m.greedy_ref(_prompt(5, 3), 12)
    assert len(set(tokens)) >= 4, tokens


def test_greedy_ref_from_a_kept_prefix_equals_greedy_ref_from_scratch():
    """The drafter asks for every request's continuation at every step; greedy_ref starts from the longest
    prefix it has run before. Bit for bit the tokens of a model that never ran anything, including where a
    prompt leaves the greedy path (a spoiled draft) and after a weight changed in place."""
    m = _model(seed=3)
    prompt = _prompt(6, 4)
    seqs = [prompt, prompt + m.greedy_ref(prompt, 3)[:2], prompt + [7, 7], prompt[:4], prompt + [7, 7, 1]]
    for seq in seqs:
        assert m.greedy_ref(seq, 4) == _model(seed=3).greedy_ref(seq, 4), seq
    assert m._ref_prefix(prompt + [7, 7, 1, 0])[0] == len(prompt) + 3  # kept: the longest prefix answers
    m.mamba.D.mul_(-1.0)  # in place: every kept state is stale
    fresh = _model(seed=3)
    fresh.mamba.D.mul_(-1.0)
    for seq in seqs:
        assert m.greedy_ref(seq, 4) == fresh.greedy_ref(seq, 4), seq
    m.gdn.A_log = m.gdn.A_log + 0.5  # replaced: stale too
    fresh.gdn.A_log = fresh.gdn.A_log + 0.5
    assert m.greedy_ref(prompt, 5) == fresh.greedy_ref(prompt, 5)
    with pytest.raises(IndexError):
        m.greedy_ref([], 2)  # as before: no prompt, no logits


def test_greedy_ref_leaves_the_model_content_key_unchanged():
    """The kept states live outside the model: the reference memo and the CPU capture memo key a model by
    everything it reaches (``worker/cuda_graph._reach``), which greedy_ref must not change."""
    from mambalab.lab.reference import model_key

    m = _model(seed=3)
    before = model_key(m)
    m.greedy_ref(_prompt(6, 4), 5)
    assert model_key(m) == before == model_key(_model(seed=3))


def test_tied_embeddings_share_the_table():
    m = TinyHybridModel(TinyHybridConfig(tie_word_embeddings=True), DEVICE)
    assert m.lm_head is m.embed
    assert not _model().lm_head.equal(_model().embed)


def test_config_rejects_too_many_spec_tokens():
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        TinyHybridConfig(num_speculative_tokens=4)


@pytest.mark.parametrize("num_spec", [0, 2])
def test_model_state_allocate_and_slot_helpers(num_spec):
    cfg = TinyHybridConfig(num_speculative_tokens=num_spec)
    pools = ModelState.allocate(cfg, 5, device=DEVICE)
    shapes = cfg.state_shapes()
    assert set(pools.pools) == set(STATE_KEYS)
    for k, p in pools.pools.items():
        assert tuple(p.shape) == (5, *shapes[k])
    assert shapes["mamba_conv"] == (cfg.mamba_conv_dim, cfg.conv_width - 1 + num_spec)
    assert pools.mamba_conv.stride(1) == 1 and pools.gdn_conv.stride(1) == 1  # dim-contiguous
    assert all(pools.slot_is_zero(s) for s in range(5))

    st = {k: torch.randn(s, device=DEVICE) for k, s in shapes.items()}
    pools.write_slot(2, st)
    got = pools.read_slot(2)
    assert all(torch.equal(got[k], st[k]) for k in STATE_KEYS)
    got[STATE_KEYS[0]].zero_()  # a copy, not a view
    assert torch.equal(pools.read_slot(2)[STATE_KEYS[0]], st[STATE_KEYS[0]])
    pools.copy_slot(2, 3)
    assert all(torch.equal(pools.read_slot(3)[k], st[k]) for k in STATE_KEYS)
    pools.poison_slot(3)
    assert all(bool(v.isnan().all()) for v in pools.read_slot(3).values())
    pools.zero_slot(3)
    assert pools.slot_is_zero(3) and pools.slot_is_zero(0)
    with pytest.raises(IndexError):
        pools.read_slot(5)


def test_forward_ref_none_state_is_zero_state():
    m = _model()
    prompt = _prompt(4, 5)
    a, sa = m.forward_ref(prompt)
    b, sb = m.forward_ref(prompt, zero_state(m.cfg, DEVICE))
    assert torch.equal(a, b)
    assert all(torch.equal(sa[k], sb[k]) for k in STATE_KEYS)


# ---------------------------------------------------------------------------
# Prefill: the parallel form equals the recurrent form
# ---------------------------------------------------------------------------
def test_chunked_prefill_equals_one_prefill_equals_reference():
    m = _model()
    ids = _prompt(11, 6)
    ref_logits, ref_state = m.forward_ref(ids)

    pools = ModelState.allocate(m.cfg, 6, device=DEVICE)
    one = m.prefill(ids, 0, 1, pools, has_initial_state=False)
    _close(one, ref_logits[-1], "one prefill")
    _states_close(pools.read_slot(1), ref_state, "one prefill")

    pools.poison_slot(2)  # a freshly allocated block may hold anything
    pools.poison_slot(3)
    first = m.prefill(ids[:4], 0, 2, pools, has_initial_state=False)
    _close(first, ref_logits[3], "chunk [0:4]")
    second = m.prefill(ids[4:], 2, 3, pools, has_initial_state=True)  # read 2, write 3
    _close(second, ref_logits[-1], "chunk [4:11]")
    _states_close(pools.read_slot(3), ref_state, "chunked prefill")
    _states_close(pools.read_slot(3), pools.read_slot(1), "chunked vs one")
    assert pools.slot_is_zero(0)


# ---------------------------------------------------------------------------
# Plain decode through the kernels
# ---------------------------------------------------------------------------
def test_batched_decode_equals_reference_with_null_rows_and_permuted_slots():
    """Three requests, prefilled into scattered slots, decoded greedily in one batch.

    Each step the rows are reordered and null rows (block 0) are mixed in;
    every request's logits and final state equal its own reference run, the
    greedy tokens are identical, and every other slot (the poisoned free ones,
    the null block) is bit-identical.
    """
    m = _model()
    cfg = m.cfg
    prompts = [_prompt(5, 10), _prompt(3, 11), _prompt(7, 12)]
    slots = [7, 2, 5]
    steps = 4
    pools = ModelState.allocate(cfg, 9, device=DEVICE)
    for s in range(1, 9):
        pools.poison_slot(s)  # free blocks are poisoned: a stale read shows as NaN

    expected = [m.greedy_ref(p, steps + 1) for p in prompts]
    nxt = []
    for p, slot, exp in zip(prompts, slots, expected):
        last = m.prefill(p, 0, slot, pools, has_initial_state=False)
        nxt.append(int(last.argmax()))
        assert nxt[-1] == exp[0]

    generated = [[t] for t in nxt]
    orders = [[0, 1, 2], [2, None, 0, 1], [None, 1, None, 2, 0], [1, 0, None, 2]]
    for step in range(steps):
        order = orders[step % len(orders)]
        ids = torch.tensor([nxt[r] if r is not None else 3 for r in order], dtype=torch.int64, device=DEVICE)
        idx = torch.tensor([slots[r] if r is not None else 0 for r in order], **I32)
        before = pools.snapshot()
        logits = m.forward_decode(ids, pools, idx, idx)
        assert not logits.isnan().any()
        for k in STATE_KEYS:
            assert_untouched(before[k], pools.pools[k], set(slots), what=k)
        for row, r in enumerate(order):
            if r is None:
                continue
            nxt[r] = int(logits[row].argmax())
            generated[r].append(nxt[r])

    for r, (p, slot) in enumerate(zip(prompts, slots)):
        assert generated[r] == expected[r], f"request {r}: greedy tokens differ"
        seq = p + generated[r][:-1]  # the last generated token has not been fed yet
        ref_logits, ref_state = m.forward_ref(seq)
        _states_close(pools.read_slot(slot), ref_state, f"request {r}")
    assert pools.slot_is_zero(0)


def test_prefill_then_decode_logits_equal_reference_over_whole_sequence():
    m = _model()
    seq = _prompt(9, 20)
    k = 5
    ref_logits, ref_state = m.forward_ref(seq)
    pools = _random_pools(m.cfg, 4, seed=21)
    got = [m.prefill(seq[:k], 0, 3, pools, has_initial_state=False)]
    idx = torch.tensor([3], **I32)
    for tok in seq[k:]:
        got.append(m.forward_decode(torch.tensor([tok], device=DEVICE), pools, idx)[0])
    _close(torch.stack(got), ref_logits[k - 1 :], "prefill + decode")
    _states_close(pools.read_slot(3), ref_state, "final state")


def test_batching_independence():
    """Two requests in one batch give what each gives alone."""
    m = _model()
    pa, pb = _prompt(4, 30), _prompt(6, 31)
    together = ModelState.allocate(m.cfg, 4, device=DEVICE)
    alone = ModelState.allocate(m.cfg, 4, device=DEVICE)
    for pools in (together, alone):
        m.prefill(pa, 0, 1, pools, False)
        m.prefill(pb, 0, 3, pools, False)
    ids = torch.tensor([9, 17], device=DEVICE)
    both = m.forward_decode(ids, together, torch.tensor([1, 3], **I32))
    la = m.forward_decode(ids[:1], alone, torch.tensor([1], **I32))
    lb = m.forward_decode(ids[1:], alone, torch.tensor([3], **I32))
    torch.testing.assert_close(both, torch.cat([la, lb]), rtol=1e-5, atol=1e-5)
    for k in STATE_KEYS:
        torch.testing.assert_close(together.pools[k], alone.pools[k], rtol=1e-5, atol=1e-5)


def test_decode_reading_one_slot_and_writing_another():
    """``mamba_cache_mode="all"``: src != dst; the source is left as it was."""
    m = _model()
    p = _prompt(5, 40)
    pools = _random_pools(m.cfg, 6, seed=41)
    m.prefill(p, 0, 2, pools, False)
    before = pools.snapshot()
    src = torch.tensor([2, 0], **I32)
    dst = torch.tensor([4, 0], **I32)
    logits = m.forward_decode(torch.tensor([11, 3], device=DEVICE), pools, src, dst)
    ref_logits, ref_state = m.forward_ref(p + [11])
    _close(logits[0], ref_logits[-1], "src != dst")
    _states_close(pools.read_slot(4), ref_state, "dst slot")
    for k in STATE_KEYS:
        assert_untouched(before[k], pools.pools[k], {4}, what=k)


# ---------------------------------------------------------------------------
# Padded rows and the null block
# ---------------------------------------------------------------------------
def test_null_rows_touch_nothing_and_output_zero_mixers():
    m = _model()
    pools = _random_pools(m.cfg, 8, seed=50)
    pools.poison_slot(6)
    before = pools.snapshot()
    ids = torch.tensor([4, 8, 15, 16], device=DEVICE)
    idx = torch.tensor([0, 3, 0, 5], **I32)
    logits = m.forward_decode(ids, pools, idx, bugs=BugConfig.fixed())
    for k in STATE_KEYS:
        assert_untouched(before[k], pools.pools[k], {3, 5}, what=k)
    assert pools.slot_is_zero(0)
    # a null row's mixers contribute zeros: its logits are those of the bare embedding
    bare = rms_norm(m.embed[ids[[0, 2]]], m.norm_final) @ m.lm_head.t()
    _close(logits[[0, 2]], bare, "null rows")


def test_guard_lt_zero_dirties_the_null_block_fixed_keeps_it_zero():
    m = _model()
    p = _prompt(4, 60)
    idx = torch.tensor([2, 0, 0], **I32)
    ids = torch.tensor([7, 1, 2], device=DEVICE)
    results = {}
    for name, bugs in (("fixed", BugConfig.fixed()), ("buggy", BugConfig.with_bugs("guard-lt-zero"))):
        pools = ModelState.allocate(m.cfg, 4, device=DEVICE)
        m.prefill(p, 0, 2, pools, False)
        logits = m.forward_decode(ids, pools, idx, bugs=bugs)
        results[name] = (pools, logits)
    fixed, buggy = results["fixed"][0], results["buggy"][0]
    assert fixed.slot_is_zero(0)
    assert not buggy.slot_is_zero(0)
    dirty = [k for k in STATE_KEYS if not bool((buggy.pools[k][0] == 0).all())]
    # #39064 changed only the FLA (GDN) kernels' guard: the SSU and the conv compare with the null
    # block since #35431, so only the GDN recurrent state lets the padded rows in (as upstream)
    assert set(dirty) == {"gdn_recurrent"}, dirty
    # the live row is the same either way: only the null block suffers (for now)
    _close(results["buggy"][1][0], results["fixed"][1][0], "live row")


# ---------------------------------------------------------------------------
# Speculative decoding
# ---------------------------------------------------------------------------
def _conv_window(conv: torch.Tensor, start: int, width: int) -> torch.Tensor:
    return conv[:, start : start + width - 1]


@pytest.mark.parametrize("num_spec", [1, 2])
def test_spec_decode_columns_hold_state_after_each_token(num_spec):
    """A 2-D step writes the state after token t to column t; the next step resumes at num_accepted - 1.

    Two live requests plus a null padded row (query length 0) and padded
    trailing tokens, as a FULL CUDA graph for uniform decode sees them.
    """
    m = _model(num_spec=num_spec)
    cfg = m.cfg
    T = 1 + num_spec
    W = cfg.conv_width
    prompts = [_prompt(5, 70), _prompt(4, 71)]
    blocks = [[3, 8, 5][:T], [1, 6, 4][:T]]  # request r owns blocks[r]; column 0 holds the conv history
    pools = ModelState.allocate(cfg, 9, device=DEVICE)
    for s in range(1, 9):
        pools.poison_slot(s)
    for p, b in zip(prompts, blocks):
        m.prefill(p, 0, b[0], pools, False)

    idx = torch.tensor(blocks + [[0] * T], **I32)  # third row: CUDA-graph padding
    qsl = torch.tensor([0, T, 2 * T, 2 * T], **I32)
    drafts = [_prompt(T, 72), _prompt(T, 73)]
    ids = torch.tensor(drafts[0] + drafts[1] + [0] * T, device=DEVICE)  # padded tail tokens
    na = torch.ones(3, **I32)
    before = pools.snapshot()
    logits = m.forward_decode(ids, pools, idx, idx, num_accepted_tokens=na, query_start_loc=qsl)
    used = {s for b in blocks for s in b}
    for k in STATE_KEYS:
        assert_untouched(before[k], pools.pools[k], used, what=k)
    assert pools.slot_is_zero(0)
    assert not logits.isnan().any()

    for r in range(2):
        ref_logits, _ = m.forward_ref(prompts[r] + drafts[r])
        _close(logits[r * T : (r + 1) * T], ref_logits[-T:], f"request {r} step 1 logits")
        for t in range(T):
            _, st = m.forward_ref(prompts[r] + drafts[r][: t + 1])
            got = pools.read_slot(blocks[r][t])
            for k in ("mamba_ssm", "gdn_recurrent"):
                _close(got[k], st[k], f"request {r} column {t} {k}")
            for k in ("mamba_conv", "gdn_conv"):  # conv: one slot, window at offset t
                conv = pools.read_slot(blocks[r][0])[k]
                _close(_conv_window(conv, t, W), st[k][:, : W - 1], f"request {r} offset {t} {k}")

    # Step 2: request 0 accepted everything, request 1 only its first token (num_accepted = 1 or T).
    accepted = [T, 1]
    na2 = torch.tensor(accepted + [1], **I32)
    nexts = [_prompt(T, 74), _prompt(T, 75)]
    ids2 = torch.tensor(nexts[0] + nexts[1] + [0] * T, device=DEVICE)
    logits2 = m.forward_decode(ids2, pools, idx, idx, num_accepted_tokens=na2, query_start_loc=qsl)
    for r in range(2):
        prefix = prompts[r] + drafts[r][: accepted[r]]
        ref_logits, _ = m.forward_ref(prefix + nexts[r])
        _close(logits2[r * T : (r + 1) * T], ref_logits[-T:], f"request {r} step 2 logits")
        _, st = m.forward_ref(prefix + nexts[r])
        _close(pools.read_slot(blocks[r][T - 1])["gdn_recurrent"], st["gdn_recurrent"], f"request {r} step 2")
        _close(pools.read_slot(blocks[r][T - 1])["mamba_ssm"], st["mamba_ssm"], f"request {r} step 2")
    assert pools.slot_is_zero(0)


def test_spec_decode_partial_acceptance_in_the_middle():
    """num_spec 2, num_accepted 2: the next step starts from column 1 (state after the first draft)."""
    m = _model(num_spec=2)
    p = _prompt(6, 80)
    b = [2, 4, 6]
    pools = _random_pools(m.cfg, 7, seed=81)
    m.prefill(p, 0, b[0], pools, False)
    idx = torch.tensor([b], **I32)
    qsl = torch.tensor([0, 3], **I32)
    d1, d2 = _prompt(3, 82), _prompt(3, 83)
    m.forward_decode(torch.tensor(d1, device=DEVICE), pools, idx, idx, torch.ones(1, **I32), qsl)
    logits = m.forward_decode(torch.tensor(d2, device=DEVICE), pools, idx, idx, torch.full((1,), 2, **I32), qsl)
    ref_logits, ref_state = m.forward_ref(p + d1[:2] + d2)
    _close(logits, ref_logits[-3:], "after partial acceptance")
    _close(pools.read_slot(b[2])["mamba_ssm"], ref_state["mamba_ssm"], "column 2")
    _close(pools.read_slot(b[2])["gdn_recurrent"], ref_state["gdn_recurrent"], "column 2")


def test_spec_decode_all_mode_reads_previous_window_writes_new_window():
    """``mamba_cache_mode="all"`` + spec (#41233): read ``1 + ns`` slots from the previous anchor, write new ones.

    Step 1 reads the prefill block and writes blocks ``b``; step 2 reads ``b``
    from column ``num_accepted - 1`` and writes blocks ``c``. A null row rides
    along. The read-only windows are left as they were.
    """
    m = _model(num_spec=2)
    p = _prompt(5, 110)
    pools = _random_pools(m.cfg, 12, seed=111)
    m.prefill(p, 0, 1, pools, False)
    qsl = torch.tensor([0, 3, 3], **I32)
    d1, d2 = _prompt(3, 112), _prompt(3, 113)
    ids1 = torch.tensor(d1 + [0, 0, 0], device=DEVICE)
    ids2 = torch.tensor(d2 + [0, 0, 0], device=DEVICE)

    src1, dst1 = torch.tensor([[1, 2, 3], [0, 0, 0]], **I32), torch.tensor([[4, 5, 6], [0, 0, 0]], **I32)
    before = pools.snapshot()
    l1 = m.forward_decode(ids1, pools, src1, dst1, torch.tensor([1, 1], **I32), qsl)
    for k in STATE_KEYS:
        assert_untouched(before[k], pools.pools[k], {4, 5, 6}, what=k)
    ref1, _ = m.forward_ref(p + d1)
    _close(l1[:3], ref1[-3:], "all-mode step 1")

    src2, dst2 = dst1, torch.tensor([[7, 8, 9], [0, 0, 0]], **I32)
    l2 = m.forward_decode(ids2, pools, src2, dst2, torch.tensor([2, 1], **I32), qsl)
    ref2, st2 = m.forward_ref(p + d1[:2] + d2)
    _close(l2[:3], ref2[-3:], "all-mode step 2 after partial acceptance")
    _close(pools.read_slot(9)["gdn_recurrent"], st2["gdn_recurrent"], "column 2")
    _close(pools.read_slot(9)["mamba_ssm"], st2["mamba_ssm"], "column 2")
    assert pools.slot_is_zero(0)

    # Pre-#41233 gather (spec-slots/gather): one source column, no num_accepted.
    # The model accepts the shapes; after a partial acceptance the answer is wrong.
    bad = _random_pools(m.cfg, 12, seed=111)
    m.prefill(p, 0, 1, bad, False)
    m.forward_decode(ids1, bad, src1[:, :1], dst1, None, qsl)
    lb = m.forward_decode(ids2, bad, dst1[:, :1], dst2, None, qsl)
    assert not torch.allclose(lb[:3], ref2[-3:], rtol=RTOL, atol=ATOL)


# ---------------------------------------------------------------------------
# Lower-precision state and the GPU (CUDA graph capture)
# ---------------------------------------------------------------------------
def test_bf16_state_pool_decode_is_close():
    m = _model()
    p = _prompt(5, 90)
    pools = ModelState.allocate(m.cfg, 3, dtype=torch.bfloat16, device=DEVICE)
    m.prefill(p, 0, 1, pools, False)
    idx = torch.tensor([1, 0], **I32)
    logits = m.forward_decode(torch.tensor([12, 0], device=DEVICE), pools, idx)
    ref_logits, _ = m.forward_ref(p + [12])
    torch.testing.assert_close(logits[0], ref_logits[-1], rtol=5e-2, atol=1e-1)
    assert pools.slot_is_zero(0)


@pytest.mark.cuda
def test_forward_decode_replays_in_a_cuda_graph():
    """The decode body captures into a CUDA graph and replays equal to eager, slots refreshed in place."""
    assert DEVICE_TYPE == "cuda"
    m = _model(num_spec=1)
    T = 2
    p = [_prompt(5, 100), _prompt(3, 101)]
    eager = ModelState.allocate(m.cfg, 8, device=DEVICE)
    graph_pools = ModelState.allocate(m.cfg, 8, device=DEVICE)
    for pools in (eager, graph_pools):
        m.prefill(p[0], 0, 2, pools, False)
        m.prefill(p[1], 0, 5, pools, False)
    idx = torch.zeros(3, T, **I32)  # persistent buffers, as the runner's
    na = torch.ones(3, **I32)
    qsl = torch.zeros(4, **I32)
    ids = torch.zeros(3 * T, dtype=torch.int64, device=DEVICE)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    scratch = ModelState.allocate(m.cfg, 8, device=DEVICE)
    with torch.cuda.stream(side):  # warm-up (compiles the kernels) on a scratch pool
        m.forward_decode(ids, scratch, idx, idx, na, qsl)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = m.forward_decode(ids, graph_pools, idx, idx, na, qsl)
    # capture records but does not run: refresh the buffers, then replay
    idx.copy_(torch.tensor([[2, 3], [5, 6], [0, 0]], **I32))
    qsl.copy_(torch.tensor([0, T, 2 * T, 2 * T], **I32))
    ids.copy_(torch.tensor([4, 9, 13, 1, 0, 0], device=DEVICE))
    graph.replay()
    ref = m.forward_decode(ids, eager, idx, idx, na, qsl)
    torch.testing.assert_close(out[: 2 * T], ref[: 2 * T], rtol=1e-5, atol=1e-5)
    for k in STATE_KEYS:
        torch.testing.assert_close(graph_pools.pools[k], eager.pools[k], rtol=1e-5, atol=1e-5)
