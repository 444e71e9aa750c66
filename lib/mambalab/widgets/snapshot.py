"""What the drawings need from one engine step, copied out of the engine so it can be redrawn later.

A panel redraws after every knob change, tab switch or step; the engine
meanwhile moves on (or is rebuilt). So after each engine step one
:class:`StepSnapshot` is taken: per DP rank a :class:`RankView` holding small
copies of the block table, the pool's holders, the step's attention metadata,
the state pool (one number per slot) and which rows read and wrote which
slots. Drawing then reads only the snapshot: fast, deterministic, and the
same picture whenever the learner comes back to that step.

The step's metadata is the runner's own: a :class:`~mambalab.lab.step_observer.StepObserver`
keeps a frozen copy of what the runner built (common and Mamba metadata, the
builder's graph buffers) the moment it built it, and the step's
:class:`StepRecord` holds the rest (the decode split, the refresh flag, the
block table the kernels saw, each kernel row's read/write slots). Nothing
here recomputes what the runner computed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from mambalab.lab.bugs import BugConfig
from mambalab.constants import NULL_BLOCK_ID
from mambalab.engine.core import Engine, EngineCrash
from mambalab.attention.mamba_metadata import MambaAttentionMetadata
from mambalab.attention.metadata import CommonAttentionMetadata
from mambalab.worker.model_runner import StepRecord
from mambalab.lab.sanitizer import AccessLog
from mambalab.lab.step_observer import StepObserver
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
    n: int  # live rows of the block table as drawn (0 for a dummy batch: no row holds a request)
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


def _clone(t):
    return None if t is None else t.detach().to("cpu").clone()


def _slot_values(state) -> np.ndarray:
    vals, nan = slot_summary(state)
    out = np.array(vals, dtype=np.float64, copy=True)
    out[nan] = np.nan
    return out


def _timeline_entry(step: int, rec: StepRecord | None, cm: CommonAttentionMetadata | None,
                    crashed: bool) -> dict | None:
    """This step in the timeline's strip: what the rank scheduled (tokens per request) and its padding."""
    if crashed:
        return {"step": step, "req_ids": [], "label": "crash"}
    if rec is None:
        return None
    entry: dict = {"step": step, "num_reqs_padded": int(rec.num_reqs_padded)}
    if rec.kind == "dummy":  # an idle DP rank's dummy batch: its own rows, not padding
        entry["req_ids"] = []
        entry["label"] = "dummy run"
        entry["dummy"] = True
        return entry
    sched = {}
    if cm is not None:
        qsl = cm.query_start_loc_cpu.tolist()
        for row, rid in enumerate(rec.req_ids):
            if row + 1 < len(qsl):
                sched[rid] = int(qsl[row + 1] - qsl[row])
    entry["scheduled"] = sched or {rid: 1 for rid in rec.req_ids}
    return entry


def take_snapshot(engine: Engine, bugs: BugConfig, *, records: list[StepRecord], logs: dict[int, AccessLog],
                  observed: StepObserver | None, holders_before: list[dict] | None,
                  status_before: dict[str, str] | None, crash: EngineCrash | None, previous: "StepSnapshot | None",
                  step_seconds: float = 0.0) -> StepSnapshot:
    """Copy what the drawings need out of ``engine`` right after a step (or before the first).

    The metadata is the runner's own (``observed``: a frozen copy taken when it was built);
    the kernels' accesses are the sanitizer's log of the rank (``logs``), else the step
    record's per-row read/write slots (on CUDA, where no sanitizer runs).
    """
    step = engine.step
    holders_now = pool_holders(engine)
    status = {rid: res.status for rid, res in engine.results.items()}
    finished_now = {rid for rid, s in status.items()
                    if s == "finished" and (status_before or {}).get(rid, "running") == "running"}
    by_rank = {r.rank: r for r in records}
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
        log_i = logs.get(i)
        log_i = log_i if log_i is not None and (log_i.accesses or log_i.violations) else None
        seen = observed.get(step, i) if observed is not None else None
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
            if seen is not None:
                cm, md = seen.cm, seen.md
                # The graph buffer is what a FULL graph reads; an eager step never reads it.
                builder = seen.builder if rec.mode == "FULL" else None
            else:
                note = f"rank {i}'s step {step} built no attention metadata (an eager dummy run, as vLLM's)"
            meta_ids = list(rec.req_ids)
            ran_at = step
            if log_i is not None:
                reads, writes, source = log_i.slots("state", "load"), log_i.slots("state", "store"), "sanitizer"
            else:
                reads = {r: set(v) for r, v in rec.kernel_reads.items()}
                writes = {r: set(v) for r, v in rec.kernel_writes.items()}
                source = "record"
        elif crash is not None and crash.rank == i:
            kind = "crash"
            n = runner.input_batch.num_reqs
            rows = {a.row for a in log_i.accesses} | {v.row for v in log_i.violations} if log_i else set()
            p = max([n] + [r + 1 for r in rows])
            meta_n = n
            if seen is not None:  # the metadata was built before the kernel that crashed ran
                cm, md, builder = seen.cm, seen.md, seen.builder
                p = max(p, int(cm.num_reqs) if cm is not None else p)
            meta_ids = list(runner.input_batch.req_ids)
            ran_at = step
            if log_i is not None:
                reads, writes, source = log_i.slots("state", "load"), log_i.slots("state", "store"), "sanitizer"
            note = (f"rank {i} crashed in step {step}: no step record" +
                    ("; the metadata is the one its runner built before the crash" if seen is not None else ""))
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


__all__ = ["PoolView", "RankView", "StepSnapshot", "take_snapshot", "pool_holders"]
