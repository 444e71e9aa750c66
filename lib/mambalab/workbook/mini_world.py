"""The bookkeeping alone, driven by hand: :class:`MiniWorld` (a block pool, an input batch, the
runner buffers and a Mamba metadata builder, with no model), and :func:`idle_rank`, which walks one
into #37728."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from mambalab.attention.mamba_metadata import MambaAttentionMetadataBuilder
from mambalab.attention.metadata import build_attention_metadata
from mambalab.constants import NULL_BLOCK_ID
from mambalab.core.block_pool import BlockPool
from mambalab.core.kv_cache_interface import MambaSpec
from mambalab.lab.bugs import BugConfig
from mambalab.viz.text import Text
from mambalab.worker.cudagraph_dispatcher import cudagraph_capture_sizes, dispatch
from mambalab.worker.input_batch import CachedRequestState, InputBatch
from mambalab.worker.runner_inputs import RunnerBuffers
from mambalab.workbook.blocks import _block_status


class MiniWorld:
    """One rank's bookkeeping without a model: block pool, input batch, runner buffers, Mamba builder.

    Driven by hand, one upstream call per method, so a notebook can walk
    into a bug one operation at a time and draw the state in between; every
    operation is logged in ``history``. ``mode="none"``: one state block per
    request; ``mode="all"`` (prefix caching): one block per ``block_size``
    tokens plus ``num_spec`` speculative blocks. Block ids come from the pool
    (block 0 is the null block and is never handed out).
    """

    def __init__(self, bugs: BugConfig | None = None, *, max_num_seqs: int = 4, num_blocks: int = 12,
                 max_model_len: int = 64, mode: str = "none", block_size: int = 4, num_spec: int = 0) -> None:
        self.bugs = bugs if bugs is not None else BugConfig()
        self.max_num_seqs = max_num_seqs
        self.mode = mode
        self.num_spec = num_spec
        self.uq = 1 + num_spec
        bs = max_model_len if mode == "none" else block_size
        self.spec = MambaSpec(bs, mode, num_spec)
        self.pool = BlockPool(num_blocks)
        self.ib = InputBatch(max_num_seqs, max_model_len, 64, [self.spec], device="cpu", bugs=self.bugs,
                             num_blocks=num_blocks)
        self.buffers = RunnerBuffers(max_num_seqs, 64, device="cpu")
        self.capture_sizes = cudagraph_capture_sizes(max_num_seqs, 64, num_spec)  # as ModelRunner
        self.builder = MambaAttentionMetadataBuilder(self.spec, max_model_len, max_num_seqs,
                                                     max(self.capture_sizes), num_spec,
                                                     True, device="cpu", bugs=self.bugs)
        self.last: tuple | None = None  # (num_reqs, num_reqs_padded, cm, md) of the last step/dummy run
        self.history: list[str] = []

    @property
    def block_table(self):
        return self.ib.block_table[0]

    def _log(self, text: str) -> None:
        self.history.append(text)

    def add(self, req_id: str, prompt_len: int = 4, computed: int | None = None, num_blocks: int | None = None) -> int:
        """A new request with fresh blocks (``computed`` prompt tokens already done); returns its row."""
        computed = prompt_len if computed is None else computed
        if num_blocks is None:
            if self.mode == "none":
                num_blocks = 1 + self.num_spec
            else:
                num_blocks = -(-(prompt_len + self.uq) // self.spec.block_size) + self.num_spec
        blocks = self.pool.allocate(num_blocks, owner=req_id)
        row = self.ib.add_request(CachedRequestState(req_id, [1] * prompt_len, (blocks,), computed))
        self._log(f"add {req_id}: row {row}, blocks {blocks}, {computed}/{prompt_len} prompt tokens computed")
        return row

    def finish(self, req_id: str, *, clear_row: bool | None = None, keep_cached: bool = False) -> int:
        """The request leaves: ``remove_request``, and its blocks go back to the pool; returns its old row.

        ``clear_row``: override whether the block-table row is cleared (the
        first half of the #37728 fix); default: what the configuration does.
        ``keep_cached``: its blocks stay in the prefix cache once free (a
        later request with the same prefix would start from their state).
        """
        row = self.ib.row_of(req_id)
        blocks = [b for b in self.block_table.row(row) if b != NULL_BLOCK_ID]
        if keep_cached:
            for i, b in enumerate(blocks):
                self.pool.cache_block(b, ("prefix of", req_id, i))
        self.ib.remove_request(req_id)
        if clear_row is True:
            self.block_table.clear_row(row)
        elif clear_row is False and not self.bugs.has("stale-rows"):
            self.block_table.block_table.np[row, : len(blocks)] = blocks  # undo the fix's clear
            self.block_table.num_blocks_per_row[row] = len(blocks)
        self.pool.free(blocks, owner=req_id)
        cleared = bool((self.block_table.block_table.np[row] == NULL_BLOCK_ID).all())
        cached = " (kept in the prefix cache)" if keep_cached else ""
        self._log(f"finish {req_id}: row {row} {'cleared' if cleared else 'NOT cleared'}, "
                  f"blocks {blocks} freed{cached}")
        return row

    def allocate(self, n: int, owner: str) -> list[int]:
        """Hand ``n`` free blocks to someone else (e.g. a request that arrives on this rank)."""
        blocks = self.pool.allocate(n, owner=owner)
        self._log(f"allocate {blocks} to {owner}")
        return blocks

    def condense(self) -> None:
        self.ib.condense()
        self._log(f"condense: live rows now {list(self.ib.req_ids)}")

    def step(self, num_scheduled: Sequence[int]):
        """A step: prepare inputs, pad for a CUDA graph, build the metadata. Returns ``(desc, cm, md)``."""
        sched = np.asarray(num_scheduled, dtype=np.int32)
        p = self.buffers.prepare_inputs(self.ib, sched)
        desc = dispatch(p.num_tokens, p.num_reqs, uniform_decode=bool((sched == self.uq).all()),
                        capture_sizes=self.capture_sizes, max_num_seqs=self.max_num_seqs,
                        num_spec_tokens=self.num_spec)
        (cm,) = build_attention_metadata(self.ib, self.buffers, p.num_reqs, desc.num_reqs_padded,
                                         desc.num_tokens_padded, p.max_query_len, self.bugs)
        md = self.builder.build(cm, self.buffers.num_accepted_tokens.gpu if self.num_spec else None)
        self.last = (p.num_reqs, desc.num_reqs_padded, cm, md)
        self._log(f"step {list(int(x) for x in sched)}: {p.num_reqs} rows padded to {desc.num_reqs_padded} "
                  f"[{desc.cudagraph_mode.name}]; Mamba split: {md.num_decodes} decode, {md.num_prefills} "
                  f"prefill row(s); graph buffers {'refreshed' if md.cudagraph_buffers_refreshed else 'NOT refreshed'}")
        return desc, cm, md

    def dummy_run(self, num_tokens: int, *, commit: bool | None = None):
        """An idle DP rank's dummy batch (``num_reqs == num_reqs_padded``). Returns ``(cm, md)``.

        ``commit``: override whether the block table is committed first (the
        second half of the #37728 fix); default: what the configuration does.
        """
        bugs = self.bugs
        if commit is not None:
            bugs = BugConfig(frozenset(b for b in self.bugs.enabled if b != "stale-rows")
                             | (frozenset() if commit else {"stale-rows"}))
        p = self.buffers.prepare_dummy_run(self.ib, num_tokens, self.uq, self.max_num_seqs, bugs)
        (cm,) = build_attention_metadata(self.ib, self.buffers, p.num_reqs, p.num_reqs, num_tokens,
                                         p.max_query_len, self.bugs)
        md = self.builder.build(cm, self.buffers.num_accepted_tokens.gpu if self.num_spec else None)
        self.last = (0, p.num_reqs, cm, md)
        committed = not bugs.has("stale-rows")
        self._log(f"dummy run of {p.num_reqs} rows (block table {'committed' if committed else 'NOT committed'}): "
                  f"rows read blocks {self.dummy_blocks()}")
        return cm, md

    def device_blocks(self) -> list[int]:
        """Per row of the last step or dummy batch (padded rows included): device ``block_table[row, 0]``.

        Without prefix caching that is the state slot the row's kernels read and write.
        """
        if self.last is None:
            return []
        _, padded, _, _ = self.last
        return [int(b) for b in self.block_table.block_table.gpu[:padded, 0].tolist()]

    dummy_blocks = device_blocks  # what a dummy batch's rows read and write

    def block_status(self, block: int) -> str:
        """Whose block ``block`` is now: a request's, free and cached, free, or the null block."""
        owners = {b: self.pool.owner_of(b) for b in range(1, self.pool.num_blocks) if self.pool.is_allocated(b)}
        return _block_status(self.pool, {b: o for b, o in owners.items() if o}, block)

    def who_is_touched(self) -> Text:
        """Per row of the last batch: the block its kernels use (device column 0), and whose it is."""
        if self.last is None:
            return Text("no step yet")
        n = self.last[0]
        lines = []
        for row, b in enumerate(self.device_blocks()):
            kind = "live" if row < n else ("dummy" if n == 0 else "padded")
            if b == NULL_BLOCK_ID:
                lines.append(f"{kind} row {row} -> block 0, the null block: the kernels skip it")
            else:
                lines.append(f"{kind} row {row} -> block {b}, read and written: {self.block_status(b)}")
        return Text("\n".join(lines))

    def rows(self, n: int | None = None) -> Text:
        """The input batch's rows: request, counts, ``is_prefilling`` and block-table column 0 (CPU | device)."""
        n = self.max_num_seqs if n is None else n
        ib = self.ib
        ids = {row: rid for rid, row in ib.req_id_to_index.items()}
        pref = ib.is_prefilling(n)
        lines = ["row  request  computed  prompt  is_prefilling  block[0] cpu|device"]
        for r in range(n):
            cpu, dev = int(self.block_table.block_table.np[r, 0]), int(self.block_table.block_table.gpu[r, 0])
            lines.append(f"{r:>3}  {ids.get(r, '-'):<7}  {int(ib.num_computed_tokens_cpu[r]):>8}  "
                         f"{int(ib.num_prompt_tokens[r]):>6}  {str(bool(pref[r])):<13}  {cpu:>5} | {dev}")
        return Text("\n".join(lines))

    def print_history(self) -> Text:
        return Text("\n".join(self.history))

    # -- drawings --------------------------------------------------------------------
    def draw_block_table(self, **kw):
        from mambalab import viz

        n, padded = (self.ib.num_reqs, None) if self.last is None else self.last[:2]
        kw.setdefault("num_reqs", n)
        kw.setdefault("num_reqs_padded", padded)
        return viz.draw_block_table(self.ib, pool=self.pool, **kw)

    def draw_metadata(self, **kw):
        from mambalab import viz

        if self.last is None:
            raise ValueError("no step yet: call step() or dummy_run() first")
        n, _, cm, md = self.last
        kw.setdefault("req_ids", self.ib.req_ids)
        return viz.draw_metadata(cm, md, num_reqs=n, builder=self.builder, **kw)

    def describe_block_table(self) -> Text:
        from mambalab import viz

        n, padded = (self.ib.num_reqs, None) if self.last is None else self.last[:2]
        return Text("\n".join(viz.describe_block_table(self.ib, num_reqs=n, num_reqs_padded=padded,
                                                       pool=self.pool)))


def idle_rank(bugs: BugConfig | None = None, *, clear_row: bool | None = None, commit: bool | None = None) -> MiniWorld:
    """The DP rank of #37728, by hand: r0 and r1 decode and finish, r0's block stays cached, the rank idles.

    Operations (see ``history``): add r0, r1; a decode step (commits rows 0-1);
    finish both (r0's block kept in the prefix cache); condense; then the
    idle rank's dummy batch of 4 rows. ``clear_row``/``commit`` switch the
    two halves of the fix independently (default: from ``bugs``).
    """
    w = MiniWorld(bugs, num_blocks=4)
    w.add("r0")
    w.add("r1")
    w.step([1, 1])
    w.finish("r0", clear_row=clear_row, keep_cached=True)
    w.finish("r1", clear_row=clear_row)
    w.condense()
    w.dummy_run(4, commit=commit)
    return w
