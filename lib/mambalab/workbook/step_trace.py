"""A traced run and what it kept: :class:`Snapshot` (one rank right after one step: block table,
metadata, state pools, the kernels' accesses, copied so later steps cannot change them) and
:class:`Trace` (the run's verdict plus its snapshots, as text and drawings). The tracer that takes
them while the engine steps is :mod:`mambalab.workbook.tracer`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from mambalab.attention.mamba_metadata import MambaAttentionMetadataBuilder
from mambalab.core.block_pool import BlockPool
from mambalab.engine.core import Engine
from mambalab.lab import sanitizer
from mambalab.lab.reference import reference_output
from mambalab.lab.scenarios import ReplayResult
from mambalab.lab.verdict import Verdict
from mambalab.viz.text import Text
from mambalab.worker.input_batch import InputBatch
from mambalab.worker.model_runner import StepRecord
from mambalab.workbook.blocks import _block_status
from mambalab.workbook.summary import summary_of


def _row_list(slots, row: int) -> list[int]:
    """A decode row's slots as a list (2-D indices under speculative decoding, else one slot)."""
    return slots[row].tolist() if slots.dim() == 2 else [int(slots[row])]


def _start_slot(row_src: list[int], num_accepted: int | None) -> int:
    """The slot a row starts from: column ``num_accepted_tokens - 1`` of its gather, else its first."""
    return row_src[min(num_accepted, len(row_src)) - 1] if num_accepted is not None else row_src[0]


@dataclass
class Snapshot:
    """One rank right after one step: what the drawings need, copied so later steps cannot change it."""

    step: int
    rank: int
    record: StepRecord | None
    input_batch: InputBatch
    block_pool: BlockPool
    owners: dict[int, str]
    cm: Any = None  # CommonAttentionMetadata of the step (copied at build time)
    md: Any = None  # MambaAttentionMetadata
    builder: MambaAttentionMetadataBuilder | None = None  # persistent graph buffers after the build
    pools: dict[str, torch.Tensor] = field(default_factory=dict)
    log: sanitizer.AccessLog | None = None
    scheduled: dict[str, int] = field(default_factory=dict)
    crashed: bool = False  # the engine stopped in this step (an illegal access or another error)

    @property
    def kind(self) -> str:
        if self.crashed:
            return "crashed"
        return self.record.kind if self.record is not None else "none"

    @property
    def num_reqs(self) -> int:
        """Live rows of the step (0 for a dummy run: its rows are not requests)."""
        if self.record is None:
            return self.input_batch.num_reqs
        return 0 if self.record.kind == "dummy" else self.record.num_reqs

    @property
    def num_reqs_padded(self) -> int:
        if self.record is None:  # the step crashed: its metadata says how far it was padded
            return int(self.cm.num_reqs) if self.cm is not None else self.input_batch.num_reqs
        return self.record.num_reqs_padded


class Trace:
    """A workload run step by step: the verdict of :func:`~mambalab.lab.scenarios.replay` plus snapshots.

    ``trace.result`` is a ``ReplayResult``; ``trace.engine`` the engine at
    the end (None when it could not start); ``trace.snapshots[(step, rank)]``
    the copies taken after the steps asked for. The ``draw_*`` methods draw
    one of them (or, for the timeline, the whole run).
    """

    def __init__(self, result: ReplayResult, engine: Engine | None, snapshots: dict[tuple[int, int], Snapshot]):
        self.result = result
        self.engine = engine
        self.snapshots = snapshots

    @property
    def scheduled(self) -> dict[tuple[int, int], dict[str, int]]:
        """Tokens scheduled per request, by ``(step, rank)``, as each step's record holds them."""
        return {(r.step, r.rank): r.scheduled for r in self.records}

    @property
    def exit_code(self) -> int:
        return self.result.exit_code

    @property
    def verdict(self) -> Verdict:
        return self.result.verdict

    @property
    def records(self) -> list[StepRecord]:
        return self.engine.records if self.engine is not None else []

    def __repr__(self) -> str:
        return f"Trace({self.result.bug!r}, fixed={self.result.fixed}, seed={self.result.seed}, " \
               f"exit_code={self.exit_code}, snapshots={sorted(self.snapshots)})"

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(summary_of(self))

    def snapshot(self, step: int, rank: int = 0) -> Snapshot:
        try:
            return self.snapshots[(step, rank)]
        except KeyError:
            raise KeyError(f"no snapshot of step {step}, rank {rank}; taken: {sorted(self.snapshots)} "
                           f"(ask for it with trace(..., at=[{step}]))") from None

    # -- text ------------------------------------------------------------------------
    def steps(self, rank: int | None = None) -> Text:
        """One line per step and rank: what ran, padded to what, graph refreshed or not."""
        lines = []
        for r in self.records:
            if rank is not None and r.rank != rank:
                continue
            if r.kind == "dummy":
                what = f"dummy batch of {r.num_reqs_padded} row{'s' if r.num_reqs_padded != 1 else ''}"
            else:
                sched = self.scheduled.get((r.step, r.rank), {})
                what = ", ".join(f"{q}:{sched.get(q, '?')}" for q in r.req_ids) or "-"
                if r.num_reqs_padded > r.num_reqs:
                    what += f" + {r.num_reqs_padded - r.num_reqs} padded"
            graph = r.mode if r.mode != "FULL" else ("FULL, buffers refreshed" if r.refreshed
                                                     else "FULL, buffers NOT refreshed")
            lines.append(f"step {r.step:>2} rank {r.rank}: {what} [{graph}]")
        return Text("\n".join(lines))

    # -- drawings --------------------------------------------------------------------
    def draw_block_table(self, step: int, rank: int = 0, **kw):
        from mambalab import viz

        s = self.snapshot(step, rank)
        return viz.draw_block_table(s.input_batch, num_reqs=s.num_reqs, num_reqs_padded=s.num_reqs_padded,
                                    pool=s.block_pool, **kw)

    def draw_metadata(self, step: int, rank: int = 0, **kw):
        from mambalab import viz

        s = self.snapshot(step, rank)
        if s.cm is None:
            raise ValueError(f"step {step}, rank {rank} built no metadata")
        req_ids = list(s.record.req_ids) if s.record is not None else list(s.input_batch.req_ids)
        if s.record is not None:
            kw.setdefault("mode", s.record.mode)  # the step's graph mode, as the runner dispatched it
        return viz.draw_metadata(s.cm, s.md, num_reqs=s.num_reqs, builder=s.builder, req_ids=req_ids or None,
                                 **kw)

    def accesses(self, step: int, rank: int = 0, kernel: str = "selective_state_update"):
        """``(reads, writes)``: ``{row: slots}`` that ``kernel`` loaded and stored in the step (None: not recorded)."""
        s = self.snapshot(step, rank)
        if s.log is None:
            return None, None
        return s.log.slots("state", "load", kernel=kernel), s.log.slots("state", "store", kernel=kernel)

    def draw_state_pool(self, step: int, rank: int = 0, kernel: str = "selective_state_update", *,
                        before: int | None = None, slots: int | None = None, **kw):
        """The rank's state pools after the step; ▼/▲: rows of ``kernel`` that loaded/stored each slot.

        ``before``: a step whose snapshot is the pool before (cells show before→after, coloured
        by the change). ``slots``: how many leading slots to draw (default: enough for every
        touched, owned, poisoned or changed slot, a multiple of 8). A store by a row into a slot
        its request does not own (a dummy or padded row owns none) is framed.
        """
        from mambalab import viz

        s = self.snapshot(step, rank)
        reads, writes = self.accesses(step, rank, kernel)
        prev = self.snapshot(before, rank).pools if before is not None else None
        n = slots if slots is not None else _slots_needed(s.pools, prev, reads, writes, s.owners)
        pools = {k: v[:n] for k, v in s.pools.items()}
        if prev is not None:
            kw.setdefault("before", {k: v[:n] for k, v in prev.items()})
            kw.setdefault("before_label", f"since step {before}")
        if writes is not None:
            kw.setdefault("row_requests", self.row_requests(step, rank))
            if s.cm is not None:  # what each live row owns: its block-table row of this step
                bt = s.cm.block_table_tensor.to("cpu")
                kw.setdefault("row_blocks", {r: {int(b) for b in bt[r].tolist()} - {0}
                                             for r in kw["row_requests"] if r < bt.shape[0]})
            stored = {int(x) for ss in writes.values() for x in ss}
            kw.setdefault("slot_notes", {b: _block_status(s.block_pool, s.owners, b) for b in stored})
        return viz.draw_state_pool(pools, reads=reads, writes=writes, owners=s.owners, **kw)

    def row_requests(self, step: int, rank: int = 0) -> dict[int, str]:
        """Kernel row → request id of the step (decode rows first, as the batch is ordered; a dummy
        batch's rows and padded rows belong to no request)."""
        s = self.snapshot(step, rank)
        if s.record is None or s.kind == "dummy":
            return {}
        return {i: rid for i, rid in enumerate(s.record.req_ids)}

    def block_status(self, step: int, rank: int, block: int) -> str:
        """Whose block ``block`` is after the step: a request's, free and cached, free, or the null block."""
        s = self.snapshot(step, rank)
        return _block_status(s.block_pool, s.owners, block)

    def writes(self, step: int, rank: int = 0, kernel: str = "selective_state_update") -> Text:
        """One line per slot that ``kernel`` stored in the step: which rows, and whose block it is."""
        s = self.snapshot(step, rank)
        _, writes = self.accesses(step, rank, kernel)
        if writes is None:
            return Text(f"step {step}, rank {rank}: accesses not recorded")
        by_slot: dict[int, set[int]] = {}
        for row, ss in writes.items():
            for x in ss:
                by_slot.setdefault(int(x), set()).add(int(row))
        kind = "dummy " if s.kind == "dummy" else ""
        lines = [f"step {step}, rank {rank} ({kernel}):"]
        for slot in sorted(by_slot):
            rows = ", ".join(str(r) for r in sorted(by_slot[slot]))
            lines.append(f"  {kind}row(s) {rows} stored slot {slot}: {_block_status(s.block_pool, s.owners, slot)}")
        if len(lines) == 1:
            lines.append("  no store")
        return Text("\n".join(lines))

    def draw_access_map(self, step: int, rank: int = 0, kernel: str = "selective_state_update", **kw):
        from mambalab import viz

        s = self.snapshot(step, rank)
        if s.log is None:
            raise ValueError(f"step {step} was traced without access recording (record_access=True)")
        n = next(iter(s.pools.values())).shape[0] if s.pools else None
        return viz.draw_access_map(s.log, kernel=kernel, num_slots=n, **kw)

    def start_slot(self, step: int, row: int, rank: int = 0) -> int:
        """The slot decode row ``row``'s kernels start from at ``step`` (column ``num_accepted_tokens - 1``
        of its gathered slots under speculative decoding, else its one slot)."""
        s = self.snapshot(step, rank)
        if s.md is None or s.builder is None or row >= s.md.num_decodes:
            raise ValueError(f"step {step}, rank {rank}: no decode row {row}")
        src, _, na = s.builder.decode_state_slots(s.md)
        return _start_slot(_row_list(src, row), None if na is None else int(na[row]))

    def decode_slots(self, step: int, rank: int = 0) -> Text:
        """Per decode row: the slots the mixer gathers to read, the one it starts from, the ones it writes."""
        s = self.snapshot(step, rank)
        if s.md is None or s.builder is None:
            return Text(f"step {step}, rank {rank}: no metadata")
        src, dst, na = s.builder.decode_state_slots(s.md)
        ids = list(s.record.req_ids) if s.record is not None else []
        prev = next((r for r in self.records if r.step == step - 1 and r.rank == rank), None)
        lines = []
        for i in range(s.md.num_decodes):
            rid = ids[i] if i < len(ids) else "pad"
            row_src, row_dst = _row_list(src, i), _row_list(dst, i)
            before = f"step {step - 1} accepted {prev.num_accepted[rid]}; " if prev and rid in prev.num_accepted else ""
            if na is not None:
                acc = int(na[i])
                how = f"num_accepted_tokens {acc} -> starts from slot {_start_slot(row_src, acc)}"
            elif s.builder.num_spec:
                how = f"no num_accepted_tokens -> starts from slot {_start_slot(row_src, None)}"
            else:
                how = f"starts from slot {_start_slot(row_src, None)}"
            lines.append(f"row {i} ({rid}): {before}gathers {row_src}, {how}; writes {row_dst}")
        return Text("\n".join(lines) or f"step {step}, rank {rank}: no decode row")

    def draw_spec_columns(self, step: int, row: int = 0, rank: int = 0, **kw):
        """One decode row's speculative columns at ``step`` ("all" mode + spec decode, #41233)."""
        from mambalab.viz.spec_columns import draw_spec_columns

        s = self.snapshot(step, rank)
        md, b = s.md, s.builder
        if md is None or b is None or md.block_idx_last_scheduled_token_prev_step is None:
            raise ValueError(f"step {step}, rank {rank}: no 'all'-mode speculative decode metadata")
        ids = list(s.record.req_ids) if s.record is not None else []
        return draw_spec_columns(
            md.state_indices_tensor_d[row].tolist(), anchor=int(md.block_idx_last_scheduled_token_prev_step[row]),
            num_accepted=int(md.num_accepted_tokens[row]), last_scheduled=int(md.block_idx_last_scheduled_token[row]),
            last_computed=int(md.block_idx_last_computed_token[row]), num_spec=b.num_spec,
            num_speculative_blocks=b.spec.num_speculative_blocks, req_id=ids[row] if row < len(ids) else "", **kw)

    def tokens(self, rank: int | None = None, requests: Sequence[str] | None = None):
        """``(expected, got)``: each request's reference tokens and the engine's."""
        if self.engine is None:
            return {}, {}
        expected, got = {}, {}
        for rid, res in self.engine.results.items():
            if (rank is not None and res.rank != rank) or (requests is not None and rid not in requests):
                continue
            expected[rid] = reference_output(self.engine, res.prompt, res.max_tokens)
            got[rid] = list(res.output)
        return expected, got

    def draw_timeline(self, rank: int | None = None, requests: Sequence[str] | None = None, **kw):
        """Tokens against the reference per request, with the batch of each step below (one column per
        step; ``rank=None`` merges the ranks' batches, each request and dummy batch named with its rank)."""
        from mambalab import viz

        expected, got = self.tokens(rank, requests)
        ranks = sorted({r.rank for r in self.records})
        by_step: dict[int, dict[str, Any]] = {}
        dummy_ranks: set[int] = set()
        req_rank: dict[str, int] = {}
        for r in self.records:
            if rank is not None and r.rank != rank:
                continue
            e = by_step.setdefault(r.step, {"step": r.step, "scheduled": {}, "padded": 0, "dummy_rows": 0})
            if r.kind == "dummy":
                e["dummy_rows"] += r.num_reqs_padded
                e["dummy"] = True
                dummy_ranks.add(r.rank)
                continue
            sched = self.scheduled.get((r.step, r.rank), {})
            e["scheduled"].update({q: sched.get(q, 1) for q in r.req_ids})
            req_rank.update({q: r.rank for q in r.req_ids})
            e["padded"] += max(0, r.num_reqs_padded - r.num_reqs)
            if r.mode == "FULL" and not r.refreshed:
                e["label"] = "graph buffers not refreshed"
        steps = [by_step[k] for k in sorted(by_step)]
        _label_dummy_runs(steps)
        if rank is not None:
            kw.setdefault("step_label", f"step (rank {rank})")
        elif len(ranks) > 1:
            kw.setdefault("step_label", f"step (ranks {', '.join(map(str, ranks))}: one column per step)")
            names = dict(req_rank)
            if len(dummy_ranks) == 1:
                names["dummy batch"] = next(iter(dummy_ranks))
            kw.setdefault("request_ranks", names)
        else:
            kw.setdefault("step_label", f"step (rank {ranks[0] if ranks else 0})")
        return viz.draw_timeline(expected, got, steps=steps, **kw)


def _label_dummy_runs(steps: list[dict]) -> None:
    """Label the first step of each run of consecutive dummy runs: ``dummy runs (steps 3-9)``."""
    i = 0
    while i < len(steps):
        if not steps[i].get("dummy"):
            i += 1
            continue
        j = i
        while j + 1 < len(steps) and steps[j + 1].get("dummy") and steps[j + 1]["step"] == steps[j]["step"] + 1:
            j += 1
        a, b = steps[i]["step"], steps[j]["step"]
        steps[i]["label"] = "dummy run" if i == j else f"dummy runs (steps {a}-{b})"
        i = j + 1


def _slots_needed(pools, ref, reads, writes, owners) -> int:
    n_all = min(p.shape[0] for p in pools.values())
    interesting = {0} | set(owners)
    for m in (reads or {}), (writes or {}):
        for ss in m.values():
            interesting |= {int(x) for x in ss}
    for k, p in pools.items():
        flat = p.reshape(p.shape[0], -1)
        interesting |= {int(i) for i in torch.nonzero(~torch.isfinite(flat).all(1)).flatten()}
        interesting |= {int(i) for i in torch.nonzero((flat != 0).any(1)).flatten()}
        if ref is not None:
            r = ref[k].reshape(p.shape[0], -1)
            interesting |= {int(i) for i in torch.nonzero(~((flat == r) | (flat.isnan() & r.isnan())).all(1)).flatten()}
    top = max(x for x in interesting if x < n_all) + 1
    return min(n_all, max(8, -(-top // 8) * 8))
