"""What the drawings need from one engine step, copied out of the engine so it can be redrawn later.

A panel redraws after every knob change, tab switch or step; the engine
meanwhile moves on (or is rebuilt). So after each engine step one
:class:`StepSnapshot` is taken: per DP rank a :class:`RankView` holding small
copies of the block table, the pool's holders, the step's attention metadata,
the state pool (one number per slot) and which rows read and wrote which
slots. Drawing then reads only the snapshot: fast, deterministic, and the
same picture whenever the learner comes back to that step.

The runner does not keep the metadata it built, so it is rebuilt read-only
from the :class:`StepRecord` and the runner's persistent buffers, which still
hold that step's values when the step returns (nothing writes them until the
rank's next step):

* ``query_start_loc`` / ``seq_lens``: ``runner.buffers`` (the very tensors
  ``build_attention_metadata`` slices);
* ``is_prefilling``: ``input_batch.is_prefilling`` (counts change only at the
  next ``_update_states``), zeroed past the live rows except where the
  record says padded rows were prefilling;
* the block table the kernels saw: ``StepRecord.block_table_rows``;
* the decode split, ``state_indices_tensor_d`` and the refresh flag: the
  record; the graph buffer: ``runner.builder.state_indices_tensor_d``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from mambalab.lab.bugs import BugConfig, GuardMode
from mambalab.constants import NULL_BLOCK_ID
from mambalab.engine.core import Engine, EngineCrash
from mambalab.attention.mamba_metadata import MambaAttentionMetadata
from mambalab.attention.metadata import CommonAttentionMetadata
from mambalab.worker.model_runner import StepRecord
from mambalab.lab.sanitizer import AccessLog
from mambalab.viz import slot_summary


@dataclass(frozen=True)
class PoolView:
    """A frozen block pool: which requests held which blocks while the step ran.

    Quacks like :class:`~mambalab.core.block_pool.BlockPool` for the block-table
    drawing (``num_blocks``, ``owners_of``, ``is_allocated``).
    """

    num_blocks: int
    holders: dict[int, tuple[str | None, ...]] = field(default_factory=dict)
    cached: frozenset[int] = frozenset()  # blocks with a prefix-cache hash (free or not)

    def owners_of(self, block_id: int) -> list[str | None]:
        return list(self.holders.get(int(block_id), ()))

    def is_allocated(self, block_id: int) -> bool:
        return int(block_id) in self.holders

    def labels(self) -> dict[int, str]:
        """Block id → a short label of its holders (for the state-pool drawing)."""
        return {b: "/".join("?" if o is None else str(o) for o in hs) for b, hs in self.holders.items() if hs}


def pool_holders(engine: Engine) -> list[dict[int, tuple[str | None, ...]]]:
    """Per rank: allocated block → its holders, now."""
    out = []
    for rank in engine.ranks:
        pool = rank.manager.block_pool
        out.append({int(b): tuple(pool.owners_of(b)) for b in pool.allocated_block_ids()})
    return out


@dataclass
class RankView:
    """One DP rank at one engine step, as the drawings need it."""

    rank: int
    step: int
    kind: str  # "start" | "step" | "dummy" | "idle" | "crash"
    record: StepRecord | None
    ran_at: int | None  # the step whose metadata is shown (this one, or the rank's last step)
    n: int  # live rows of the block table as drawn (0 for a dummy batch: every row is padding)
    p: int  # rows the kernels ran over (live + padded)
    meta_n: int  # live rows of the metadata shown (that of ``ran_at``)
    row_ids: list[str | None]
    table: Any  # a frozen BlockTable look-alike (block_table.np / .gpu, num_blocks_per_row, num_blocks)
    pool: PoolView
    cm: CommonAttentionMetadata | None
    md: MambaAttentionMetadata | None
    builder: Any
    meta_req_ids: list[str]
    slot_values: np.ndarray  # one number per state slot (NaN: poisoned)
    reads: dict[int, set[int]] | None
    writes: dict[int, set[int]] | None
    access_source: str | None  # "sanitizer" | "derived" | None
    log: AccessLog | None
    timeline_steps: list[dict] = field(default_factory=list)
    note: str = ""
    poisoned_after: list[int] = field(default_factory=list)  # freed at the end of this step, poisoned after it


@dataclass
class StepSnapshot:
    """The whole engine after one step (``step`` 0: before the first)."""

    step: int
    ranks: list[RankView]
    got: dict[str, list[int]]
    status: dict[str, str]
    rank_of: dict[str, int]
    crash: EngineCrash | None = None
    ran: bool = True  # False: nothing was scheduled on any rank at this step
    step_seconds: float = 0.0


# -- pieces -----------------------------------------------------------------------------------


def _frozen_table(input_batch) -> tuple[SimpleNamespace, list[str | None]]:
    bt = input_batch.block_table.block_tables[0]
    cpu = np.array(bt.block_table.np, dtype=np.int64, copy=True)
    gpu = bt.block_table.gpu.detach().to("cpu").numpy().astype(np.int64, copy=True)
    table = SimpleNamespace(block_table=SimpleNamespace(np=cpu, gpu=gpu),
                            num_blocks_per_row=np.array(bt.num_blocks_per_row, copy=True),
                            num_blocks=bt.num_blocks)
    row_ids: list[str | None] = [None] * cpu.shape[0]
    for rid, row in input_batch.req_id_to_index.items():
        if 0 <= row < len(row_ids):
            row_ids[row] = rid
    return table, row_ids


def _frozen_builder(builder) -> SimpleNamespace:
    return SimpleNamespace(
        state_indices_tensor_d=builder.state_indices_tensor_d.detach().to("cpu").clone(),
        reorder_batch_threshold=builder.reorder_batch_threshold,
        full_cudagraph=builder.full_cudagraph,
        decode_cudagraph_max_bs=builder.decode_cudagraph_max_bs,
        block_size=builder.block_size,
        mode=builder.mode,
        num_spec=builder.num_spec,
        block_idx_last_computed_token=_clone(builder.block_idx_last_computed_token),
        block_idx_last_scheduled_token=_clone(builder.block_idx_last_scheduled_token),
        block_idx_last_scheduled_token_prev_step=_clone(builder.block_idx_last_scheduled_token_prev_step),
    )


def _clone(t):
    return None if t is None else t.detach().to("cpu").clone()


def _slot_values(state) -> np.ndarray:
    vals, nan = slot_summary(state)
    out = np.array(vals, dtype=np.float64, copy=True)
    out[nan] = np.nan
    return out


def _cdiv(a: torch.Tensor, b: int) -> torch.Tensor:
    return torch.div(a + b - 1, b, rounding_mode="floor")


def rebuild_metadata(runner, rec: StepRecord | None, *, num_reqs: int | None = None, num_reqs_padded: int | None = None,
                     bugs: BugConfig | None = None):
    """``(CommonAttentionMetadata, MambaAttentionMetadata | None)`` of the runner's last step, read-only.

    With a record, everything the record holds is taken from it; without one
    (the step crashed before returning it) ``num_reqs``/``num_reqs_padded``
    must be given and the Mamba metadata is left out (the drawing recomputes
    the split as Mamba does).
    """
    ib, buf = runner.input_batch, runner.buffers
    if rec is not None:
        P = int(rec.num_reqs_padded)
        n = int(rec.num_reqs) if rec.kind == "step" else P
    else:
        n = int(num_reqs or 0)
        P = max(n, int(num_reqs_padded or n))
    P = max(0, min(P, ib.max_num_reqs))
    qsl = buf.query_start_loc.cpu[: P + 1].detach().clone()
    seq = buf.seq_lens.cpu[:P].detach().clone()
    pref = torch.from_numpy(np.array(ib.is_prefilling(P), dtype=bool, copy=True))
    if rec is not None:
        if rec.kind == "step":
            pref[n:] = False
            for r in rec.padded_rows_prefilling:
                if 0 <= r < P:
                    pref[r] = True
        blk = torch.tensor(rec.block_table_rows, dtype=torch.int64) if rec.block_table_rows else None
    else:
        if not (bugs or runner.bugs).has("stale-is-prefilling"):
            pref[n:] = False
        blk = None
    if blk is None or blk.dim() != 2:
        width = ib.block_table.block_tables[0].max_num_blocks_per_req
        blk = ib.block_table.block_tables[0].block_table.gpu[:P].detach().to("cpu", torch.int64).clone()
        blk = blk.reshape(P, width)
    qlen = qsl[1:] - qsl[:-1] if P else torch.zeros(0, dtype=qsl.dtype)
    cm = CommonAttentionMetadata(
        query_start_loc=qsl, query_start_loc_cpu=qsl, seq_lens=seq, seq_lens_cpu=seq, num_reqs=P,
        num_actual_tokens=int(rec.num_tokens_padded) if rec is not None else int(qsl[-1]) if P else 0,
        max_query_len=int(qlen.max()) if P else 0, max_seq_len=int(seq.max()) if P else 0,
        block_table_tensor=blk, slot_mapping=torch.zeros(0, dtype=torch.int64), is_prefilling=pref)
    if rec is None:
        return cm, None
    nd = int(rec.num_decodes)
    d = (torch.tensor(rec.intended_slots, dtype=torch.int64) if rec.intended_slots
         else torch.zeros((0, 1), dtype=torch.int64))
    md = MambaAttentionMetadata(
        num_prefills=int(rec.num_prefills), num_prefill_tokens=0, num_decodes=nd, num_decode_tokens=0,
        num_reqs=P, has_initial_states_p=None, query_start_loc_p=None, num_computed_tokens_p=None,
        state_indices_tensor_p=None, state_indices_tensor_d=d, query_start_loc_d=None, num_accepted_tokens=None,
        cudagraph_buffers_refreshed=bool(rec.refreshed))
    b = runner.builder
    if b.mode == "all":
        if rec.refreshed:
            md.block_idx_last_computed_token = b.block_idx_last_computed_token[:P].detach().to("cpu").clone()
            md.block_idx_last_scheduled_token = b.block_idx_last_scheduled_token[:P].detach().to("cpu").clone()
        else:
            B = b.block_size
            nc = (seq - qlen).to(torch.int64)
            md.block_idx_last_computed_token = torch.clamp(_cdiv(nc, B) - 1, min=0)[:nd]
            md.block_idx_last_scheduled_token = torch.clamp(_cdiv(seq.to(torch.int64), B) - 1, min=0)[:nd]
    return cm, md


def _skipped(slot: int, guard: GuardMode) -> bool:
    if guard is GuardMode.NULL:
        return slot <= NULL_BLOCK_ID
    if guard is GuardMode.NEGATIVE:
        return slot < 0
    return False


def derived_accesses(rec: StepRecord, cm: CommonAttentionMetadata, builder, bugs: BugConfig
                     ) -> tuple[dict[int, set[int]], dict[int, set[int]]]:
    """Which slots each decode-kernel row read and wrote, worked out from the record.

    Used where the sanitizer's log cannot be split per rank (data parallel) or
    is empty (CUDA). Mirrors ``decode_state_slots`` and the kernels' guard:
    a FULL graph runs every padded row, an eager step its decode rows.
    """
    reads: dict[int, set[int]] = {}
    writes: dict[int, set[int]] = {}
    rows = rec.state_slots
    n_rows = len(rows) if rec.mode == "FULL" else min(len(rows), int(rec.num_decodes))
    guard = bugs.kernel_guard
    qsl = cm.query_start_loc_cpu.to(torch.int64)
    seq = cm.seq_lens_cpu.to(torch.int64)
    B = int(getattr(builder, "block_size", 1) or 1)
    mode = getattr(builder, "mode", "none")
    ns = int(getattr(builder, "num_spec", 0) or 0)
    for r in range(n_rows):
        d = [int(x) for x in rows[r]]
        if not d:
            continue
        if mode == "all" and r < len(seq):
            qlen = int(qsl[r + 1] - qsl[r]) if r + 1 < len(qsl) else 1
            s = int(seq[r])
            nc = s - qlen
            lc = max(0, -(-nc // B) - 1)
            ls = max(0, -(-s // B) - 1)
            src = d[lc:lc + 1 + ns] if ns else d[lc:lc + 1]
            dst = d[ls:ls + 1 + ns] if ns else d[ls:ls + 1]
        else:
            src = dst = d[: 1 + ns]
        rs = {x for x in src if not _skipped(x, guard)}
        ws = {x for x in dst if not _skipped(x, guard)}
        if rs:
            reads[r] = rs
        if ws:
            writes[r] = ws
    return reads, writes


def _timeline_entry(step: int, rec: StepRecord | None, cm: CommonAttentionMetadata | None,
                    crashed: bool) -> dict | None:
    """This step in the timeline's strip: what the rank scheduled (tokens per request) and its padding."""
    if crashed:
        return {"step": step, "req_ids": [], "label": "crash"}
    if rec is None:
        return None
    entry: dict = {"step": step, "num_reqs_padded": int(rec.num_reqs_padded)}
    if rec.kind == "dummy":
        entry["req_ids"] = []
        entry["label"] = "dummy run"
        return entry
    sched = {}
    if cm is not None:
        qsl = cm.query_start_loc_cpu.tolist()
        for row, rid in enumerate(rec.req_ids):
            if row + 1 < len(qsl):
                sched[rid] = int(qsl[row + 1] - qsl[row])
    entry["scheduled"] = sched or {rid: 1 for rid in rec.req_ids}
    return entry


def take_snapshot(engine: Engine, bugs: BugConfig, *, records: list[StepRecord], log: AccessLog | None,
                  holders_before: list[dict] | None, status_before: dict[str, str] | None,
                  crash: EngineCrash | None, previous: "StepSnapshot | None", step_seconds: float = 0.0
                  ) -> StepSnapshot:
    """Copy what the drawings need out of ``engine`` right after a step (or before the first)."""
    step = engine.step
    holders_now = pool_holders(engine)
    status = {rid: res.status for rid, res in engine.results.items()}
    finished_now = {rid for rid, s in status.items()
                    if s == "finished" and (status_before or {}).get(rid, "running") == "running"}
    by_rank = {r.rank: r for r in records}
    single_rank = len(engine.ranks) == 1
    views: list[RankView] = []
    for rank in engine.ranks:
        i = rank.index
        runner = rank.runner
        holders = dict(holders_now[i])
        if holders_before is not None:
            for b, hs in holders_before[i].items():
                if b not in holders and any(h in finished_now for h in hs):
                    holders[b] = hs  # held while the step ran, freed when the request finished after it
        table, row_ids = _frozen_table(runner.input_batch)
        # a request that finished in this step still held the blocks of its row while the step ran
        freed_now: set[int] = set()
        for row, rid in enumerate(row_ids):
            if rid in finished_now:
                count = int(table.num_blocks_per_row[row])
                for b in table.block_table.np[row, :count]:
                    b = int(b)
                    if b > NULL_BLOCK_ID and b not in holders:
                        holders[b] = (rid,)
        for b, hs in holders.items():
            if b not in holders_now[i]:
                freed_now.add(b)
        bp = rank.manager.block_pool
        pool = PoolView(int(bp.num_blocks), holders, frozenset(int(b) for b in bp.cached_block_ids()))
        prev = previous.ranks[i] if previous is not None and i < len(previous.ranks) else None
        values = _slot_values(runner.state)
        poisoned_after = sorted(b for b in freed_now if b < len(values) and np.isnan(values[b]))
        if poisoned_after and prev is not None and len(prev.slot_values) == len(values):
            # The engine poisons blocks freed at the end of the step; while the step ran they held state.
            for b in poisoned_after:
                values[b] = 0.0 if np.isnan(prev.slot_values[b]) else prev.slot_values[b]
        rec = by_rank.get(i)
        log_i = log if (single_rank and log is not None and (log.accesses or log.violations)) else None
        cm = md = builder = None
        reads = writes = None
        source = None
        note = ""
        meta_ids: list[str] = []
        meta_n = 0
        if rec is not None:
            kind = rec.kind
            n = int(rec.num_reqs) if kind == "step" else 0
            p = int(rec.num_reqs_padded)
            meta_n = n
            cm, md = rebuild_metadata(runner, rec)
            frozen = _frozen_builder(runner.builder)
            # The graph buffer is what a FULL graph reads; an eager step never reads it.
            builder = frozen if rec.mode == "FULL" else None
            meta_ids = list(rec.req_ids)
            ran_at = step
            if log_i is not None:
                reads, writes, source = log_i.slots("state", "load"), log_i.slots("state", "store"), "sanitizer"
            else:
                reads, writes = derived_accesses(rec, cm, frozen, bugs)
                source = "derived"
        elif crash is not None and crash.rank == i:
            kind = "crash"
            n = runner.input_batch.num_reqs
            rows = {a.row for a in log_i.accesses} | {v.row for v in log_i.violations} if log_i else set()
            p = max([n] + [r + 1 for r in rows])
            meta_n = n
            cm, md = rebuild_metadata(runner, None, num_reqs=n, num_reqs_padded=p, bugs=bugs)
            builder = _frozen_builder(runner.builder)
            meta_ids = list(runner.input_batch.req_ids)
            ran_at = step
            if log_i is not None:
                reads, writes, source = log_i.slots("state", "load"), log_i.slots("state", "store"), "sanitizer"
            note = f"rank {i} crashed in step {step}: no step record, the metadata is rebuilt from the buffers"
        else:
            kind = "start" if step == 0 else "idle"
            n = p = runner.input_batch.num_reqs
            if prev is not None and prev.cm is not None:
                cm, md, builder, meta_ids, ran_at = prev.cm, prev.md, prev.builder, prev.meta_req_ids, prev.ran_at
                meta_n = prev.meta_n
                note = f"rank {i} did not run in step {step}: showing its last step ({ran_at})"
            else:
                ran_at = None
            if crash is not None:
                note = (f"rank {i} has no record of step {step}: the step crashed on rank {crash.rank}"
                        + (f"; showing its last step ({ran_at})" if ran_at else ""))
        timeline = list(prev.timeline_steps) if prev is not None else []
        entry = _timeline_entry(step, rec, cm, kind == "crash")
        if entry is not None:
            timeline.append(entry)
        views.append(RankView(
            rank=i, step=step, kind=kind, record=rec, ran_at=ran_at, n=n, p=p, meta_n=meta_n, row_ids=row_ids,
            table=table,
            pool=pool, cm=cm, md=md, builder=builder, meta_req_ids=meta_ids,
            slot_values=values, reads=reads, writes=writes, access_source=source,
            log=log_i if kind in ("step", "dummy", "crash") else None,
            timeline_steps=timeline, note=note, poisoned_after=poisoned_after))
    got = {rid: list(res.output) for rid, res in engine.results.items()}
    rank_of = {rid: res.rank for rid, res in engine.results.items()}
    return StepSnapshot(step=step, ranks=views, got=got, status=status, rank_of=rank_of, crash=crash,
                        ran=bool(records) or crash is not None, step_seconds=step_seconds)


__all__ = ["PoolView", "RankView", "StepSnapshot", "take_snapshot", "rebuild_metadata", "derived_accesses",
           "pool_holders"]
