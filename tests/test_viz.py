"""The drawings: what they say (headless findings and titles) and that they render.

Every state is built with the real core objects (block pool, input batch,
runner buffers, metadata builders, a sanitized kernel launch). Set
``MAMBALAB_VIZ_DIR`` to a folder to keep the example PNGs for a look.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from mambalab.lab import sanitizer

from mambalab import viz
from mambalab.core.block_pool import BlockPool
from mambalab.worker.block_table import BlockTable
from mambalab.lab.bugs import BugConfig
from mambalab.constants import NULL_BLOCK_ID, PAD_SLOT_ID
from mambalab.worker.cudagraph_dispatcher import default_capture_sizes, dispatch
from mambalab.worker.input_batch import CachedRequestState, InputBatch
from mambalab.core.kv_cache_interface import MambaSpec
from mambalab.attention.mamba_metadata import MambaAttentionMetadataBuilder
from mambalab.attention.metadata import build_attention_metadata
from mambalab.worker.runner_inputs import RunnerBuffers

cpu_only = pytest.mark.cpu_only(reason="recording needs the Triton interpreter")


def save(fig: Figure, name: str) -> bytes:
    """Render to PNG (must work), and keep a copy where MAMBALAB_VIZ_DIR says."""
    png = viz.figure_to_png(fig)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    out = os.environ.get("MAMBALAB_VIZ_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        Path(out, f"{name}.png").write_bytes(png)
    return png


def pixels(fig: Figure) -> np.ndarray:
    return viz.figure_to_array(fig, dpi=50)


# -- a small engine made of the core objects ------------------------------------------------


class World:
    """A Mamba group (mode 'none'), a block pool, an input batch and the runner buffers."""

    def __init__(self, bugs: BugConfig, max_num_seqs: int = 8, num_blocks: int = 16):
        self.bugs = bugs
        self.spec = MambaSpec(64, "none", 0)
        self.pool = BlockPool(num_blocks)
        self.ib = InputBatch(max_num_seqs, 64, 64, [self.spec], bugs=bugs, num_blocks=num_blocks)
        self.buf = RunnerBuffers(max_num_seqs, 64)
        self.sizes = default_capture_sizes(max_num_seqs, 1)
        self.mb = MambaAttentionMetadataBuilder(self.spec, 64, max_num_seqs, max(self.sizes), 0, True, bugs=bugs)
        self.max_num_seqs = max_num_seqs

    @property
    def bt(self) -> BlockTable:
        return self.ib.block_table[0]

    def add(self, req_id: str, prompt: int = 4, computed: int = 4) -> int:
        blocks = self.pool.allocate(1, owner=req_id)
        return self.ib.add_request(CachedRequestState(req_id, [1] * prompt, (blocks,), computed))

    def finish(self, req_id: str) -> None:
        row = self.ib.row_of(req_id)
        blocks = [b for b in self.bt.block_table.np[row, :1].tolist() if b > 0]
        self.ib.remove_request(req_id)
        self.pool.free(blocks, owner=req_id)

    def step(self, sched):
        """Prepare inputs, pad for a FULL graph, build the metadata: ``(desc, cm, md)``."""
        sched = np.asarray(sched, dtype=np.int32)
        p = self.buf.prepare_inputs(self.ib, sched)
        desc = dispatch(p.num_tokens, p.num_reqs, uniform_decode=bool((sched == 1).all()),
                        capture_sizes=self.sizes, max_num_seqs=self.max_num_seqs)
        (cm,) = build_attention_metadata(self.ib, self.buf, p.num_reqs, desc.num_reqs_padded,
                                         desc.num_tokens_padded, p.max_query_len, self.bugs)
        md = self.mb.build(cm)
        self._sync()
        return desc, cm, md

    def _sync(self) -> None:
        """The engine synchronises once a step (sampling reads the logits); this harness has no sampling,
        so on CUDA it waits here: the next step rewrites the pinned CPU rows its copies read from."""
        if self.mb.device.type == "cuda":
            torch.cuda.synchronize()

    def dummy_run(self, num_tokens: int):
        """An idle DP rank's dummy batch (``num_reqs == num_reqs_padded``)."""
        p = self.buf.prepare_dummy_run(self.ib, num_tokens, 1, self.max_num_seqs, self.bugs)
        (cm,) = build_attention_metadata(self.ib, self.buf, p.num_reqs, p.num_reqs, num_tokens,
                                         p.max_query_len, self.bugs)
        md = self.mb.build(cm)
        self._sync()
        return p, cm, md


def idle_rank(bugs: BugConfig) -> World:
    """r0 (block 1) and r1 (block 2) decode and finish; r2 later gets block 1; this rank idles (#37728)."""
    w = World(bugs)
    w.add("r0")
    w.add("r1")
    w.step([1, 1])
    w.finish("r0")
    w.finish("r1")
    w.ib.condense()
    w.pool.allocate(13, owner="others")  # blocks 3..15; the free queue now starts with 1, 2
    assert w.pool.allocate(1, owner="r2") == [1]
    w.dummy_run(4)
    return w


# -- block table --------------------------------------------------------------------------------


def test_stale_rows_are_named_in_the_dummy_run():
    w = idle_rank(BugConfig.with_bugs("stale-rows"))
    found = viz.describe_block_table(w.bt, num_reqs=0, num_reqs_padded=4, pool=w.pool)
    assert found[0] == ("row 0 is stale: it points at block 1, owned by r2: the dummy batch reads and "
                        "writes it this step"), found
    assert found[1].startswith("row 1 is stale: it points at block 2, freed")
    fig = viz.draw_block_table(w.bt, num_reqs=0, num_reqs_padded=4, pool=w.pool)
    title = fig.axes[0].get_title(loc="left")
    assert title.startswith("row 0 is stale: it points at block 1")
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    # a DP dummy batch has num_reqs == num_reqs_padded: its rows are dummy rows, not padding
    assert labels[:2] == ["0  stale", "1  stale"] and labels[2:4] == ["2  dummy", "3  dummy"]
    save(fig, "block_table_stale_rows")


def test_fixed_dummy_run_is_consistent():
    w = idle_rank(BugConfig())
    found = viz.describe_block_table(w.bt, num_reqs=0, num_reqs_padded=4, pool=w.pool)
    assert not any("stale" in s for s in found), found
    fig = viz.draw_block_table(w.bt, num_reqs=0, num_reqs_padded=4, pool=w.pool)
    assert fig.axes[0].get_title(loc="left").startswith("all rows consistent")
    save(fig, "block_table_fixed_dummy_run")


def test_dummy_batch_rows_are_not_drawn_as_padding():
    """Issue 17: an idle DP rank's dummy rows (num_reqs == num_reqs_padded) are no CUDA-graph padding."""
    w = idle_rank(BugConfig())
    found = viz.describe_block_table(w.bt, num_reqs=0, num_reqs_padded=4, pool=w.pool)
    assert "rows 0–3 are the DP dummy batch, holding the null block 0 on the device; num_reqs == " \
           "num_reqs_padded: no padding to mask" in found, found
    assert not any("padding" in s and "no padding" not in s for s in found), found
    fig = viz.draw_block_table(w.bt, num_reqs=0, num_reqs_padded=4, pool=w.pool)
    title = fig.axes[0].get_title(loc="left")
    assert "CUDA-graph padding" not in title and "dummy batch" in title, title
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["0  dummy", "1  dummy", "2  dummy", "3  dummy"]
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert not any("padded rows" in t or ("padding" in t and "no padding" not in t) for t in legend), legend
    assert any("DP dummy batch" in t for t in legend), legend
    # a real step padded for its graph keeps "pad"; told explicitly, the same rows can be either
    assert viz.analyse_block_table(w.bt, num_reqs=0, num_reqs_padded=4, dummy=False).row_label[:4] == ["pad"] * 4
    # the metadata of the dummy step says the same
    _, cm, md = w.dummy_run(4)
    meta = viz.describe_metadata(cm, md, num_reqs=0, builder=w.mb)
    assert any("DP dummy batch of 4 rows" in s and "no padding" in s for s in meta), meta
    assert not any("of them padded" in s for s in meta), meta
    mfig = viz.draw_metadata(cm, md, num_reqs=0, builder=w.mb)
    assert [t.get_text() for t in mfig.axes[0].get_yticklabels()][:4] == [f"{i}  dummy" for i in range(4)]
    save(fig, "block_table_dummy_batch")


def test_stale_row_points_at_another_requests_block():
    bt = BlockTable(64, 4, 2, 16)
    bt.add_row([3], 0)
    bt.add_row([5], 1)
    bt.commit_block_table(2)
    # r1 finished without clear_row; block 5 now belongs to r9
    found = viz.describe_block_table(bt, num_reqs=1, num_reqs_padded=2, req_ids=["r0"],
                                     owners={3: "r0", 5: "r9"})
    assert found[0].startswith("row 1 is stale: it points at block 5, owned by r9")


def test_uncommitted_device_row_is_named():
    w = World(BugConfig())
    w.add("r0")
    w.add("r1")
    w.step([1, 1])
    w.add("r2")  # on the CPU only: no commit yet
    found = viz.describe_block_table(w.ib, num_reqs=3, pool=w.pool)
    assert found[0].startswith("device row 2 ≠ CPU row 2 (not committed)"), found
    fig = viz.draw_block_table(w.ib, num_reqs=3, pool=w.pool)
    assert "device row 2 ≠ CPU row 2 (not committed)" in fig.axes[0].get_title(loc="left")
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["0  r0", "1  r1", "2  r2"]
    save(fig, "block_table_not_committed")
    before = pixels(fig)
    w.bt.commit_block_table(3)
    after = viz.draw_block_table(w.ib, num_reqs=3, pool=w.pool)
    assert after.axes[0].get_title(loc="left").startswith("all rows consistent")
    assert before.shape != pixels(after).shape or not np.array_equal(before, pixels(after))


@pytest.mark.parametrize("bugs, pad", [(BugConfig(), NULL_BLOCK_ID), (BugConfig.with_bugs("pad-minus-one"), PAD_SLOT_ID)])
def test_padded_rows_and_the_minus_one(bugs, pad):
    w = World(bugs)
    for r in ("r0", "r1", "r2"):
        w.add(r)
    desc, cm, md = w.step([1, 1, 1])
    assert desc.num_reqs_padded == 4 and int(w.bt.block_table.gpu[3, 0]) == pad
    found = viz.describe_block_table(w.ib, num_reqs=3, num_reqs_padded=4, pool=w.pool)
    fig = viz.draw_block_table(w.ib, num_reqs=3, num_reqs_padded=4, pool=w.pool)
    title = fig.axes[0].get_title(loc="left")
    if pad == PAD_SLOT_ID:
        assert found[0].startswith("row 3 holds -1 (PAD_SLOT_ID) on the device")
        assert title.startswith("row 3 holds -1")
        save(fig, "block_table_pad_minus_one")
    else:
        assert "row 3 is CUDA-graph padding, holding the null block 0 on the device" in found
        assert title.startswith("all rows consistent")
        save(fig, "block_table_null_padding")
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()][3] == "3  pad"


def test_block_table_image_changes_with_the_state():
    bt = BlockTable(64, 4, 1, 16)
    bt.add_row([2], 0)
    bt.commit_block_table(1)
    a = pixels(viz.draw_block_table(bt, num_reqs=1))
    bt.add_row([9], 0)
    bt.commit_block_table(1)
    b = pixels(viz.draw_block_table(bt, num_reqs=1))
    assert a.shape == b.shape and not np.array_equal(a, b)
    # deterministic: the same state renders to the same bytes
    assert save(viz.draw_block_table(bt, num_reqs=1), "x") == save(viz.draw_block_table(bt, num_reqs=1), "x")


def test_block_table_truncates_big_tables_and_shows_huge_ids():
    bt = BlockTable(16, 24, 32, 64)
    for r in range(24):
        bt.add_row([r * 32 + c + 1 for c in range(32)], r)
    bt.block_table.np[0, :3] = [2**31 - 1, 123_456, 99_999_999]
    bt.commit_block_table(24)
    fig = viz.draw_block_table(bt, num_reqs=20, num_reqs_padded=24)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "2.1G" in texts and "123k" in texts
    assert any("8 rows not shown (12–19; dotted line)" in t and "columns 20–31 not shown" in t for t in texts)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert len(labels) == 16 and labels[0] == "0  live" and labels[-4:] == [f"{r}  stale" for r in range(20, 24)]
    save(fig, "block_table_big")


def test_block_table_extremes_do_not_raise():
    bt = BlockTable(64, 4, 1, 16)
    fig = viz.draw_block_table(bt, num_reqs=0)  # nothing at all
    assert "nothing to draw" in " ".join(t.get_text() for t in fig.axes[0].texts)
    assert viz.describe_block_table(bt, num_reqs=0) == ["no request in this step"]
    save(fig, "block_table_empty")
    fig = viz.draw_block_table(bt, num_reqs=0, num_reqs_padded=4)  # every row padded
    assert fig.axes[0].get_title(loc="left").startswith("all rows consistent")
    save(viz.draw_block_table(bt, num_reqs=0, num_reqs_padded=1), "block_table_capture_size_1")
    save(viz.draw_block_table(bt, num_reqs=9, num_reqs_padded=99), "block_table_clamped")
    assert viz.describe_block_table(bt, num_reqs=9, num_reqs_padded=99)[0].endswith("clamped")
    save(viz.draw_block_table(object(), num_reqs=1), "block_table_not_a_table")


def test_draws_into_a_given_axes_and_figure():
    bt = BlockTable(64, 2, 1, 16)
    fig = Figure()
    ax = fig.add_subplot()
    assert viz.draw_block_table(bt, num_reqs=0, num_reqs_padded=2, ax=ax) is fig
    assert viz.draw_block_table(bt, num_reqs=0, num_reqs_padded=2, fig=fig) is fig
    assert len(fig.axes) == 1  # redrawn in place, not stacked


# -- state pool and access map: a real kernel launch ---------------------------------------------


def ssu_inputs(rows: int, slots: int = 8, H: int = 2, P: int = 4, N: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)

    def r(*s):
        return torch.randn(*s, generator=g)

    state = r(slots, H, P, N)
    state[NULL_BLOCK_ID] = 0
    kw = dict(x=r(rows, H, P), dt=r(rows, H, P) * 0.5, A=-(r(H, P, N).abs() + 0.5), B=r(rows, 1, N),
              C=r(rows, 1, N), D=r(H, P), dt_bias=r(H, P) * 0.3, z=r(rows, H, P), dt_softplus=True)
    return state, kw


def run_ssu(indices, bugs):
    """The kernel under ``bugs`` (recorded) and the fixed pure-torch reference on a copy."""
    from mambalab.kernels.mamba_ssm import selective_state_update
    from mambalab.kernels.mamba_ssm_ref import selective_state_update_ref

    state, kw = ssu_inputs(len(indices))
    ref = state.clone()
    idx = torch.tensor(indices, dtype=torch.int32)
    with sanitizer.recording() as log:
        selective_state_update(state, state_batch_indices=idx, bugs=bugs, **kw)
    selective_state_update_ref(ref, state_batch_indices=idx, **kw)
    return state, ref, log


def run_gdn(indices, bugs):
    """The GDN decode kernel (an FLA kernel: the family #39064 fixed) under ``bugs``, recorded, and the
    fixed pure-torch reference on a copy of the pool."""
    from mambalab.kernels.gated_delta_rule import fused_recurrent_gated_delta_rule
    from mambalab.kernels.gated_delta_rule_ref import fused_recurrent_gated_delta_rule_ref

    g = torch.Generator().manual_seed(0)
    B, H, K, V = len(indices), 2, 4, 4
    q, k = torch.randn(1, B, H, K, generator=g), torch.randn(1, B, H, K, generator=g)
    v = torch.randn(1, B, H, V, generator=g)
    gate, beta = -torch.rand(1, B, H, generator=g), torch.rand(1, B, H, generator=g)
    state = torch.zeros(8, H, V, K)
    state[1:] = torch.randn(7, H, V, K, generator=g)
    ref = state.clone()
    kw = dict(cu_seqlens=torch.arange(B + 1, dtype=torch.int32),
              ssm_state_indices=torch.tensor(indices, dtype=torch.int32))
    with sanitizer.recording() as log:
        fused_recurrent_gated_delta_rule(q, k, v, gate, beta, initial_state=state, bugs=bugs, **kw)
    fused_recurrent_gated_delta_rule_ref(q, k, v, gate, beta, initial_state=ref, **kw)
    return state, ref, log


@cpu_only
@pytest.mark.parametrize("bugs", [BugConfig.with_bugs("guard-lt-zero"), BugConfig()], ids=["guard-lt-zero", "fixed"])
def test_null_block_written_by_padded_rows(bugs):
    state, ref, log = run_gdn([3, 5, 2, 0, 0, 0], bugs)
    reads, writes = log.slots("h0", "load"), log.slots("h0", "store")
    found = viz.describe_state_pool(state, reads=reads, writes=writes, reference=ref)
    fig = viz.draw_state_pool(state, reads=reads, writes=writes, reference=ref, owners={3: "r0", 5: "r1", 2: "r2"})
    title = fig.axes[0].get_title(loc="left")
    amap = viz.draw_access_map(log, arg="h0", num_slots=8)
    if bugs.has("guard-lt-zero"):
        assert found[0].startswith("null block 0 was written by rows 3, 4, 5"), found
        assert title.startswith("null block 0 was written by rows 3, 4, 5")
        assert "it is no longer zero" in found[0]
        assert "slot 0 differs from the reference" in found  # the live rows' slots agree
        assert amap.axes[0].get_title(loc="left").startswith("rows 3, 4, 5 loaded from and stored to null block 0")
        save(fig, "state_pool_guard_lt_zero")
        save(amap, "access_map_guard_lt_zero")
    else:
        assert not any("null block 0 was written" in s for s in found)
        assert title.startswith("state pool consistent")
        assert "every row touched only its own slots" in amap.axes[0].get_title(loc="left")
        save(fig, "state_pool_fixed")
        save(amap, "access_map_fixed")


@cpu_only
def test_minus_one_index_is_an_illegal_access_on_the_map():
    from mambalab.kernels.mamba_ssm import selective_state_update

    state, kw = ssu_inputs(5)
    idx = torch.tensor([3, 5, 2, PAD_SLOT_ID, PAD_SLOT_ID], dtype=torch.int32)
    with sanitizer.recording() as log:
        with pytest.raises(sanitizer.IllegalMemoryAccess):
            selective_state_update(state, state_batch_indices=idx, bugs=BugConfig.with_bugs("pad-minus-one"), **kw)
    found = viz.describe_access_map(log)
    assert found[0].startswith("rows 3, 4 loaded from and stored to slot -1 (illegal, element -32): "
                               "4 illegal accesses"), found
    fig = viz.draw_access_map(log)
    assert fig.axes[0].get_title(loc="left").startswith("rows 3, 4 loaded from and stored to slot -1 (illegal")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "-1\nelem\n-32" in texts and "outside" in texts
    save(fig, "access_map_minus_one")
    # the same -1 read as a state pool: an "outside" cell and a sentence
    pool_found = viz.describe_state_pool(state, reads=log.slots("state", "load"), writes=log.slots("state", "store"))
    assert pool_found[0] == "rows 3, 4 read and wrote slot -1, outside the pool of 8 slots"
    save(viz.draw_state_pool(state, reads=log.slots("state", "load"), writes=log.slots("state", "store")),
         "state_pool_minus_one")


def test_state_pool_from_values_nan_and_changes():
    vals = torch.zeros(6, 3)
    vals[2] = 1.0
    vals[4] = float("nan")
    found = viz.describe_state_pool(vals, reads={0: {2}, 1: {4}}, writes={0: {2}, 1: {2}})
    assert found[0] == "row 1 read slot 4, which is NaN (a freed, poisoned block)"
    assert "slot 2 was written by rows 0, 1 (race)" in found
    assert "slot 4 is NaN-poisoned: freed" in found
    a = pixels(viz.draw_state_pool(vals, reads={0: {2}}))
    vals[0] = 5.0  # the null block turns non-zero
    assert viz.describe_state_pool(vals)[0].startswith("null block 0 is not zero")
    b = pixels(viz.draw_state_pool(vals, reads={0: {2}}))
    assert a.shape == b.shape and not np.array_equal(a, b)


def test_state_pool_extremes_do_not_raise():
    from mambalab.model.tiny_hybrid import ModelState, TinyHybridConfig

    fig = viz.draw_state_pool(torch.zeros(0, 4))
    assert "empty pool" in " ".join(t.get_text() for t in fig.axes[0].texts)
    save(fig, "state_pool_empty")
    save(viz.draw_state_pool([0.0, 1.5, 2.0]), "state_pool_values")
    fig = viz.draw_state_pool(np.arange(100.0), writes={0: range(20)}, reads={1: [90]})
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "90" in texts and "▼1" in texts and any(t.startswith("36 slots not shown") for t in texts)
    save(fig, "state_pool_100_slots")
    ms = ModelState.allocate(TinyHybridConfig(), 5, device="cpu")
    ms.poison_slot(3)
    assert "slot 3 is NaN-poisoned: freed" in viz.describe_state_pool(ms)
    save(viz.draw_state_pool(ms, reads={}, writes={}), "state_pool_model_state")
    save(viz.draw_state_pool("not a pool"), "state_pool_garbage")


def test_access_map_empty_log():
    fig = viz.draw_access_map(sanitizer.AccessLog())
    assert "no recorded access to 'state'" in " ".join(t.get_text() for t in fig.axes[0].texts)
    assert viz.describe_access_map(sanitizer.AccessLog()) == []
    save(fig, "access_map_empty")


# -- metadata ---------------------------------------------------------------------------------


def stale_is_prefilling(bugs: BugConfig):
    """Step 1: r0, r1, r2 decode, r3 prefills. r3 aborts mid-prefill and r2 finishes.
    Step 2: r0, r1, r4 decode in a FULL graph padded to 4 rows; row 3 still says computed < prompt."""
    w = World(bugs)
    for r in ("r0", "r1", "r2"):
        w.add(r)
    w.add("r3", prompt=10, computed=2)
    w.step([1, 1, 1, 8])
    w.finish("r3")
    w.finish("r2")
    w.ib.condense()
    w.add("r4")
    return w, w.step([1, 1, 1])


def test_metadata_names_the_stale_padded_prefill():
    w, (desc, cm, md) = stale_is_prefilling(BugConfig.with_bugs("stale-is-prefilling"))
    assert desc.num_reqs_padded == 4 and not md.cudagraph_buffers_refreshed
    found = viz.describe_metadata(cm, md, num_reqs=3, builder=w.mb)
    assert found[0] == "padded row 3 counted as a prefill (stale is_prefilling)"
    assert any(s.startswith("graph buffers NOT refreshed") for s in found)
    assert any(s.startswith("row 2 replays") and "block table says" in s for s in found), found
    fig = viz.draw_metadata(cm, md, num_reqs=3, builder=w.mb, req_ids=w.ib.req_ids)
    title = fig.axes[0].get_title(loc="left")
    assert title.startswith("padded row 3 counted as a prefill (stale is_prefilling): graph buffers NOT refreshed")
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()][3] == "3  pad"
    save(fig, "metadata_stale_is_prefilling")
    # without the Mamba metadata the split is recomputed the way Mamba does it
    assert viz.describe_metadata(cm, num_reqs=3)[0] == "padded row 3 counted as a prefill (stale is_prefilling)"

    w2, (_, cm2, md2) = stale_is_prefilling(BugConfig())
    fig2 = viz.draw_metadata(cm2, md2, num_reqs=3, builder=w2.mb)
    assert fig2.axes[0].get_title(loc="left") == "3 decodes + 1 padded row, 0 prefills: graph buffers refreshed"
    save(fig2, "metadata_fixed")
    assert not np.array_equal(pixels(fig), pixels(viz.draw_metadata(cm, md, num_reqs=3)))


def test_metadata_no_replay_finding_without_a_full_graph():
    """Issue 17: a prefill step (PIECEWISE or eager) replays no FULL graph, so a graph buffer that
    disagrees with its block table is read by nobody: no "replays ... NOT refreshed" finding there."""
    w = World(BugConfig())
    for r in ("r0", "r1"):
        w.add(r)
    w.step([1, 1])  # a FULL decode step: the graph buffer now holds r0's and r1's slots
    w.finish("r0")
    w.finish("r1")
    w.ib.condense()
    w.add("r2", prompt=10, computed=2)  # a prefill: the Mamba builder does not refresh the buffer
    desc, cm, md = w.step([8])
    assert not md.cudagraph_buffers_refreshed and md.num_prefills == 1
    buf = w.mb.state_indices_tensor_d.reshape(w.mb.state_indices_tensor_d.shape[0], -1)
    assert int(buf[0, 0]) != int(cm.block_table_tensor[0, 0])  # stale, but read by no graph
    found = viz.describe_metadata(cm, md, num_reqs=1, builder=w.mb)
    assert not any("replays" in s or "NOT refreshed" in s for s in found), found
    fig = viz.draw_metadata(cm, md, num_reqs=1, builder=w.mb)
    title = fig.axes[0].get_title(loc="left")
    assert "replays" not in title and "NOT refreshed" not in title, title
    texts = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "replayed" not in texts, texts
    # told that the step ran FULL, the same buffer is what the graph reads: the finding comes back
    assert any(s.startswith("row 0 replays") for s in viz.describe_metadata(cm, md, num_reqs=1, builder=w.mb,
                                                                              mode="FULL"))
    save(fig, "metadata_prefill_step_no_replay")


def test_metadata_all_mode_spec_and_padding_bug():
    bugs = BugConfig.with_bugs("spec-slots/padding")
    spec = MambaSpec(4, "all", 1)
    ib = InputBatch(8, 64, 64, [spec], bugs=bugs)
    buf = RunnerBuffers(8, 64)
    sizes = default_capture_sizes(8, 2)
    mb = MambaAttentionMetadataBuilder(spec, 64, 8, max(sizes), 1, True, bugs=bugs)
    mb.block_idx_last_scheduled_token.fill_(7)  # an older step's values
    for i in range(3):
        ib.add_request(CachedRequestState(f"r{i}", [1] * 8, (list(range(10 + 17 * i, 27 + 17 * i)),), 9, [3, 4]))
    p = buf.prepare_inputs(ib, np.array([2, 2, 2], dtype=np.int32))
    desc = dispatch(p.num_tokens, 3, uniform_decode=True, capture_sizes=sizes, max_num_seqs=8, num_spec_tokens=1)
    (cm,) = build_attention_metadata(ib, buf, 3, desc.num_reqs_padded, desc.num_tokens_padded, p.max_query_len, bugs)
    md = mb.build(cm, buf.num_accepted_tokens.gpu)
    found = viz.describe_metadata(cm, md, num_reqs=3, builder=mb)
    assert any("block_idx_last_scheduled_token has 8 entries for 4 rows" in s and "hold 7 (stale)" in s
               for s in found), found
    save(viz.draw_metadata(cm, md, num_reqs=3, builder=mb), "metadata_all_mode_spec_padding")


def test_metadata_extremes_do_not_raise():
    w = World(BugConfig())
    _, cm, md = w.dummy_run(1)  # capture size 1, a dummy row
    save(viz.draw_metadata(cm, md, num_reqs=0), "metadata_capture_size_1")
    empty = build_attention_metadata(w.ib, w.buf, 0, 0, 0, 0)[0]
    fig = viz.draw_metadata(empty, num_reqs=0)
    assert "no rows" in " ".join(t.get_text() for t in fig.axes[0].texts)
    save(viz.draw_metadata(None, num_reqs=2), "metadata_garbage")


# -- timeline ---------------------------------------------------------------------------------


def test_timeline_marks_first_divergence():
    expected = {"r0": [5, 9, 2, 7], "r1": [4, 4, 6, 1, 2], "r2": [1, 2, 3]}
    got = {"r0": [5, 9, 2, 7], "r1": [4, 4, 6, 0, 0], "r2": [1, 2]}
    assert viz.first_divergence(expected["r1"], got["r1"]) == 3
    found = viz.describe_timeline(expected, got)
    assert found[0] == "r1 diverges at output position 3: got 0, expected 1 (only token 0 from there on)"
    steps = [{"step": 0, "scheduled": {"r0": 6, "r1": 5, "r2": 3}},
             {"step": 1, "req_ids": ["r0", "r1", "r2"], "num_reqs_padded": 4},
             {"step": 2, "req_ids": ["r0", "r1"], "num_reqs_padded": 2, "label": "r2 aborted"},
             {"step": 3, "req_ids": ["r0", "r1"], "num_reqs_padded": 4, "label": "dummy run"}]
    fig = viz.draw_timeline(expected, got, steps=steps)
    assert len(fig.axes) == 2
    assert fig.axes[0].get_title(loc="left").startswith("r1 diverges at output position 3")
    save(fig, "timeline")
    ok = viz.draw_timeline(expected, expected)
    assert ok.axes[0].get_title(loc="left") == "all 3 requests match the reference (12 tokens compared)"
    assert not np.array_equal(pixels(ok), pixels(viz.draw_timeline(expected, got)))


def test_timeline_draws_dummy_batches_apart_from_padding():
    """Issue 17: an idle rank's dummy batch is drawn in a row of its own, not counted as padding."""
    expected = {"D": [5, 6]}
    steps = [{"step": 1, "scheduled": {"A": 4}},
             {"step": 2, "scheduled": {}, "num_reqs_padded": 2, "dummy": True},
             {"step": 3, "scheduled": {"D": 1}, "num_reqs_padded": 2}]
    fig = viz.draw_timeline(expected, expected, steps=steps)
    labels = [t.get_text() for t in fig.axes[1].get_yticklabels()]
    assert labels[-2:] == ["padding", "dummy batch"], labels
    only_dummy = viz.draw_timeline(expected, expected, steps=steps[:2])
    labels = [t.get_text() for t in only_dummy.axes[1].get_yticklabels()]
    assert "padding" not in labels and labels[-1] == "dummy batch", labels
    save(fig, "timeline_dummy_batch")


def test_timeline_extremes_do_not_raise():
    save(viz.draw_timeline({}, {}), "timeline_empty")
    save(viz.draw_timeline({"r0": []}, {"r0": []}, steps=[{}]), "timeline_no_tokens")
    long = {f"req-{i}": [151_000 + t for t in range(60)] for i in range(6)}
    got = {k: v[:50] + [0] * 10 for k, v in long.items()}
    fig = viz.draw_timeline(long, got, steps=[{"req_ids": list(long)}] * 45)
    assert any("positions 40–59 of 60" in t.get_text() for t in fig.axes[0].texts)
    assert "steps 40–44 not shown" in fig.axes[1].get_title(loc="left")
    save(fig, "timeline_long")
    long = {f"req-{i}": list(range(8)) for i in range(20)}
    got = dict(long, **{"req-19": [0] * 8})
    f = Figure()
    axes = f.subplots(2, 1)
    assert viz.draw_timeline(long, got, steps=[{"req_ids": ["req-1"]}], ax=axes) is f
    assert any("4 more requests not shown (1 diverging)" in t.get_text() for t in axes[0].texts)


def test_figures_are_not_pyplot_figures_and_render_themselves():
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    fig = viz.draw_timeline({"r0": [1, 2]}, {"r0": [1, 3]})
    assert plt.get_fignums() == before  # nothing registered: a notebook shows it once, nothing to close
    png = fig._repr_png_()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert png == viz.figure_to_png(viz.draw_timeline({"r0": [1, 2]}, {"r0": [1, 3]}))  # deterministic


# -- issue 17: drawn, not told ----------------------------------------------------------------------


def _legend_labels(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]


def test_pipeline_names_every_stage_with_its_vllm_file():
    stages = viz.pipeline_stages()
    names = [s.name for s in stages]
    assert names[0].startswith("Scheduler") and names[-1].startswith("Kernel")
    assert names.index("BlockTable: CPU mirror") + 1 == names.index("BlockTable: device copy")
    assert names.index("Mamba metadata builder") < names.index("CUDA-graph buffers")
    fig = viz.draw_pipeline()
    texts = [t.get_text() for t in fig.axes[0].texts]
    for s in stages:
        assert s.name in texts and s.upstream in texts
        assert s.upstream.startswith("vllm/") or s.upstream.startswith("mamba_attn.py")
    assert [s.device for s in stages].index(True) == names.index("BlockTable: device copy")  # the CPU→GPU line
    assert "7 hand-offs" in fig.axes[0].get_title(loc="left")
    save(fig, "pipeline")
    from matplotlib.colors import to_hex

    marked = viz.draw_pipeline(highlight="CUDA-graph buffers")
    edges = [to_hex(p.get_edgecolor()) for p in marked.axes[0].patches if p.get_linewidth() > 2]
    assert edges == [viz.PALETTE["vermillion"].lower()]
    typo = viz.draw_pipeline(highlight="graph buffers")  # a message naming the stages, not a silent plain map
    assert "no stage named 'graph buffers'" in " ".join(t.get_text() for t in typo.axes[0].texts)


def test_spec_columns_mark_the_window_the_start_the_writes_and_the_missing_column():
    row = [1, 2, 3, 4, 9] + [0] * 12
    a = viz.analyse_spec_columns(row, anchor=2, num_accepted=2, last_scheduled=3, num_spec=1,
                                 num_speculative_blocks=1, last_computed=2)
    assert (a["gather"], a["start"], a["writes"], a["missing"]) == ([2, 3], 3, [3, 4], [16])
    found = viz.describe_spec_columns(row, anchor=2, num_accepted=1, last_scheduled=3, num_spec=1,
                                      last_computed=2)
    assert found[0].startswith("starts from column 2 (block 3) = anchor 2 + num_accepted_tokens 1 - 1")
    assert not any("pre-fix (/gather)" in f for f in found)  # it starts where the pre-fix read: no difference
    # a request at the end of its row writes the column the pre-fix buffer lacks
    late = viz.describe_spec_columns(list(range(1, 18)), anchor=15, num_accepted=1, last_scheduled=15, num_spec=1)
    assert late[0] == "column 16 of this step's windows is missing from the pre-fix buffer (/width)"
    fig = viz.draw_spec_columns(row, anchor=2, num_accepted=2, last_scheduled=3, num_spec=1, last_computed=2,
                                req_id="r0")
    labels = _legend_labels(fig)
    assert len(labels) == len(set(labels)) == 6
    assert any("/width" in x for x in labels) and any("/gather" in x for x in labels)
    assert "gather window (read)" in labels and "the column the kernel starts from" in labels
    save(fig, "spec_columns")


def test_state_pool_shows_the_change_with_a_colour_bar_and_frames_a_store_into_a_slot_not_owned():
    before = torch.zeros(6, 2)
    before[1] = 1.0
    after = before.clone()
    after[1] = 3.0  # row 0 (r0) rewrote its own slot 1
    after[4] = 2.0  # row 1, a padded row, wrote slot 4, r1's
    kw = dict(writes={0: {1}, 1: {4}}, owners={1: "r0", 4: "r1"}, row_requests={0: "r0"})
    found = viz.describe_state_pool(after, before=before, before_label="since step 2", **kw)
    assert found[0] == "row 1 (no request) stored slot 4 (r1's block): not its own"
    assert "slots 1, 4 changed since step 2" in found
    assert not any("row 0" in f for f in found)
    fig = viz.draw_state_pool(after, before=before, before_label="since step 2", **kw)
    a = fig.axes[0]
    assert [c.yaxis.label.get_text() for c in a.child_axes] == ["|change since step 2|"]
    texts = [t.get_text() for t in a.texts]
    assert "1.4→4.2" in texts and "0→2.8" in texts  # before→after where it changed
    assert "0" in texts  # an unchanged slot shows its value alone
    framed = [p for p in a.patches if not p.get_fill() and p.get_linestyle() == "--"]
    assert len(framed) == 1  # slot 4 only: row 0's store into its own slot is no finding
    labels = _legend_labels(fig)
    assert len(labels) == len(set(labels))
    assert "stored by a row that does not own it" in labels
    assert not any("reference" in x for x in labels)  # no reference given: no black-frame entry
    # without row_requests nothing is framed: who owns a row is not guessed
    plain = viz.draw_state_pool(after, writes={0: {1}, 1: {4}}, owners={1: "r0", 4: "r1"})
    assert not [p for p in plain.axes[0].patches if not p.get_fill()]
    assert [c.yaxis.label.get_text() for c in plain.axes[0].child_axes] == ["|state| (L2 norm)"]
    save(fig, "state_pool_before_after")


def test_state_pool_legend_has_one_meaning_per_entry():
    pool = torch.zeros(5, 2)
    pool[0] = 1.0  # null block written
    pool[3] = float("nan")
    ref = torch.zeros(5, 2)
    fig = viz.draw_state_pool(pool, reads={0: {-1}}, writes={1: {0}}, reference=ref)
    labels = _legend_labels(fig)
    assert len(labels) == len(set(labels))
    assert "null block no longer zero" in labels and "index outside the pool (illegal)" in labels
    assert "differs from the reference (requests run alone)" in labels
    assert "▼ rows that loaded it" in labels and "▲ rows that stored it" in labels
    assert not any(" / " in x or "changed" in x for x in labels)


def test_timeline_hatches_padding_apart_from_past_the_end_and_names_the_step_axis():
    from mambalab.viz.timeline import PAD_HATCH

    expected = {"r0": [1, 2], "r1": [3, 4]}
    got = {"r0": [1, 2, 5], "r1": [3, 4]}
    steps = [{"step": 1, "scheduled": {"r0": 3, "r1": 3}},
             {"step": 2, "scheduled": {"r0": 1, "r1": 1}, "num_reqs_padded": 4},
             {"step": 3, "scheduled": {}, "dummy_rows": 2, "padded": 0}]
    fig = viz.draw_timeline(expected, got, steps=steps, step_label="step (rank 1)")
    tokens, strip = fig.axes
    hatches_tokens = {p.get_hatch() for p in tokens.patches if getattr(p, "get_hatch", None) and p.get_hatch()}
    hatches_strip = {p.get_hatch() for p in strip.patches if getattr(p, "get_hatch", None) and p.get_hatch()}
    assert ".." in hatches_tokens and PAD_HATCH in hatches_strip and PAD_HATCH != ".."
    assert any(t.get_text() == "step (rank 1)" for t in strip.texts)
    assert [t.get_text() for t in strip.get_yticklabels()][-2:] == ["padding", "dummy batch"]
    labels = _legend_labels(fig)
    assert len(labels) == len(set(labels))
    assert "past the reference's end" in labels and "CUDA-graph padded rows (count)" in labels
    assert "mismatch (top: got, bottom: expected)" not in labels  # nothing diverges: no entry for it


def test_titles_carry_one_finding():
    from mambalab.viz._common import ERROR, WARNING, Finding, title_from

    found = [Finding(WARNING, "b", 1), Finding(ERROR, "a", 5), Finding(ERROR, "c", 9)]
    assert title_from(found, "ok") == "a (+2 more problems)"
    assert title_from(found[:2], "ok") == "a (+1 more problem)"
    fig = viz.draw_timeline({"r0": [1, 2, 3], "r1": [4, 5, 6]}, {"r0": [1, 9, 9], "r1": [4, 5, 7]})
    title = fig.axes[0].get_title(loc="left")
    assert "also" not in title and "r1" not in title.split("(")[0]
    assert " ".join(title.split()) == ("r0 diverges at output position 1: got 9, expected 2 (only token 9 from there on) "
                                       "(2 of 2 requests diverge)")


def test_state_pool_judges_ownership_by_the_rows_blocks_of_the_step():
    """A request that finishes in the step read and wrote its own block, freed (and poisoned) after it."""
    pool = torch.zeros(4, 2)
    pool[2] = float("nan")  # row 0's block, freed at the end of this step
    kw = dict(reads={0: {2}, 1: {3}}, writes={0: {2}, 1: {3}}, owners={}, row_requests={0: "r0", 1: "r1"})
    judged = viz.describe_state_pool(pool, row_blocks={0: {2}, 1: {1}}, **kw)
    assert judged[0] == "row 1 (r1) stored slot 3 (free): not its own"  # r1's row says block 1
    assert not any("row 0" in f for f in judged)
    # without the step's rows, ownership after the step is all there is: the finished request looks foreign
    after = viz.describe_state_pool(pool, **kw)
    assert "row 0 (r0) stored slot 2 (free): not its own" in after
    assert "row 0 read slot 2, which is NaN (a freed, poisoned block)" in after


def test_timeline_says_a_label_repeated_on_consecutive_steps_once():
    steps = [{"step": k, "scheduled": {"r0": 1}, **({"label": "graph buffers not refreshed"} if 4 <= k <= 7 else {})}
             for k in range(1, 10)] + [{"step": 10, "scheduled": {"r0": 1}, "label": "graph buffers not refreshed"}]
    fig = viz.draw_timeline({"r0": [1] * 10}, {"r0": [1] * 10}, steps=steps)
    header = fig.axes[1].get_title(loc="left")
    assert "★ steps 4–7: graph buffers not refreshed" in header and "★ step 10: graph buffers not refreshed" in header
    assert sum(t.get_text() == "★" for t in fig.axes[1].texts) == 5  # every marked step keeps its star
