"""Helpers the workbook's notebooks call, so that every cell stays one or two lines.

The notebooks (``notebooks/*.ipynb``) are checked by nbval in strict mode:
every stored output is compared with a fresh run. So everything here prints
short, deterministic text and never anything that changes between runs
(addresses, timings, object ids):

* :func:`setup`: seeds, and a one-line description of where kernels run;
* :func:`show`: displays a drawing as PNG with a ``text/plain`` line naming
  what the drawing found (its title): nbval skips PNGs but compares that line;
* :func:`summary_of`: a :class:`~mambalab.lab.scenarios.ReplayResult` (or a
  :class:`Trace`) in a few lines: exit code, verdict, mechanisms (repeated
  per-step sentences folded into step ranges);
* :func:`trace`: a bug's scenario (or any workload) run step by step with
  snapshots of the steps asked for: block table, metadata, state pool and
  the kernels' accesses, for drawing after the run. Its verdict is the one
  :func:`~mambalab.lab.scenarios.replay` gives (same workload, same judge);
* :class:`MiniWorld`: a block pool, an input batch, the runner buffers and a
  Mamba metadata builder, with no model: the bookkeeping alone, driven by
  hand (add, finish, condense, step, dummy run); :func:`idle_rank` walks one
  into #37728;
* :func:`launch_ssu`: one sanitized Mamba2 decode-kernel launch over a small
  pool (a ``-1``, a ``0``, the ``< 0`` guard), caught and recorded;
* small text helpers: :func:`state_table`, :func:`source_excerpt`,
  :func:`expect_error`, :func:`pr_link`;
* :func:`check` and :func:`reveal`: the exercises' checker (ground truth
  computed with the library, never with the solution) and the solution
  printer.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import html
import inspect
import random
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import torch

from mambalab.lab import sanitizer
from mambalab.core.block_pool import BlockPool
from mambalab.lab.bugs import BUGS, BugConfig
from mambalab.constants import NULL_BLOCK_ID
from mambalab.worker.cudagraph_dispatcher import default_capture_sizes, dispatch
from mambalab.device import DEVICE_TYPE, INTERPRET
from mambalab.engine.core import Engine, EngineConfig, EngineCrash
from mambalab.worker.input_batch import CachedRequestState, InputBatch
from mambalab.core.kv_cache_interface import MambaSpec
from mambalab.attention.mamba_metadata import MambaAttentionMetadataBuilder
from mambalab.attention.metadata import build_attention_metadata
from mambalab.worker.model_runner import StepRecord
from mambalab.lab.planted import Plant
from mambalab.lab.reference import Verdict, judge, reference_output
from mambalab.worker.runner_inputs import RunnerBuffers
from mambalab.lab.scenarios import ReplayResult, scenario_for, signatures
from mambalab.lab.workload import Workload
from mambalab.viz.text import Text

__all__ = [
    "Text",
    "setup",
    "show",
    "figure_title",
    "summary_of",
    "fold_steps",
    "trace",
    "Trace",
    "Snapshot",
    "MiniWorld",
    "KernelRun",
    "launch_ssu",
    "idle_rank",
    "tour_workload",
    "state_table",
    "source_excerpt",
    "expect_error",
    "EXERCISES",
    "check",
    "reveal",
    "Solution",
    "hunt_report",
    "workload_steps",
    "pr_link",
]


# ---------------------------------------------------------------------------
# set-up and display


def setup(seed: int = 0) -> Text:
    """Seed Python, NumPy and torch; say where the kernels run (one line)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if INTERPRET:
        where = "CPU, Triton interpreter"
        if sanitizer.is_active():
            where += ", memory sanitizer on"
    else:
        where = f"{DEVICE_TYPE.upper()} (compiled Triton kernels)"
    return Text(f"mambalab ready: kernels run on {where}; seed {seed}")


def figure_title(fig) -> str:
    """The first axes' title (left, else centre), on one line: the drawing's main finding."""
    for ax in getattr(fig, "axes", []):
        for loc in ("left", "center"):
            t = ax.get_title(loc=loc)
            if t:
                return " ".join(t.split())
    return ""


def show(fig, text: str | None = None) -> None:
    """Display ``fig`` as a PNG, with ``text`` (default: its title) as the plain-text form.

    nbval skips PNGs but compares ``text/plain``: the line checks what the
    drawing says, not its pixels. Returns None, so a cell ending in
    ``show(...)`` prints nothing more.
    """
    from IPython.display import display

    from mambalab.viz import figure_to_png

    label = text if text is not None else figure_title(fig)
    png = base64.b64encode(figure_to_png(fig)).decode("ascii")
    display({"image/png": png, "text/plain": f"[figure] {label}"}, raw=True)


def pr_link(bug_id: str) -> str:
    """The upstream pull request of a catalogue bug, as a URL."""
    return BUGS[bug_id.split("/")[0]].url


# ---------------------------------------------------------------------------
# summaries


_STEP_LINE = re.compile(r"^step (\d+)(, rank \d+)?: (.*)$")


def _ranges(values: Iterable[int]) -> str:
    vs = sorted(set(values))
    out, i = [], 0
    while i < len(vs):
        j = i
        while j + 1 < len(vs) and vs[j + 1] == vs[j] + 1:
            j += 1
        out.append(str(vs[i]) if i == j else f"{vs[i]}-{vs[j]}")
        i = j + 1
    return ", ".join(out)


def fold_steps(lines: Sequence[str]) -> list[str]:
    """Fold per-step sentences that differ only in the step number into one line with step ranges.

    ``["step 3, rank 1: x", "step 4, rank 1: x", "step 9: y"]`` →
    ``["steps 3-4, rank 1: x", "step 9: y"]`` (first-appearance order).
    """
    groups: dict[tuple[str, str], list[int]] = {}
    order: list[tuple[str, str] | str] = []
    for line in lines:
        m = _STEP_LINE.match(line)
        if not m:
            order.append(line)
            continue
        key = (m.group(2) or "", m.group(3))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(m.group(1)))
    out = []
    for item in order:
        if isinstance(item, str):
            out.append(item)
            continue
        steps = groups[item]
        word = "step" if len(steps) == 1 else "steps"
        out.append(f"{word} {_ranges(steps)}{item[0]}: {item[1]}")
    return out


def summary_of(result: "ReplayResult | Trace", *, mechanisms: int = 3, width: int = 110) -> Text:
    """A replay (or a trace) in a few deterministic lines: exit code, verdict, mechanisms."""
    if isinstance(result, Trace):
        result = result.result
    mode = "fixed" if result.fixed else "pre-fix"
    lines = [f"{result.bug} ({mode}, seed {result.seed}): exit code {result.exit_code}"]
    lines += textwrap.wrap(result.verdict.summary(), width, initial_indent="  ", subsequent_indent="    ")
    folded = fold_steps(result.signatures)
    for s in folded[:mechanisms]:
        lines += textwrap.wrap(f"mechanism: {s}", width, initial_indent="  ", subsequent_indent="    ")
    if len(folded) > mechanisms:
        lines.append(f"  (+{len(folded) - mechanisms} more mechanism line(s))")
    return Text("\n".join(lines))


# ---------------------------------------------------------------------------
# traced replays


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

    def __init__(self, result: ReplayResult, engine: Engine | None, snapshots: dict[tuple[int, int], Snapshot],
                 scheduled: dict[tuple[int, int], dict[str, int]]):
        self.result = result
        self.engine = engine
        self.snapshots = snapshots
        self.scheduled = scheduled

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

        ``before``: a step whose snapshot is the reference (slots that changed
        since are framed). ``slots``: how many leading slots to draw (default:
        enough for every touched, owned, poisoned or changed slot, a multiple of 8).
        """
        from mambalab import viz

        s = self.snapshot(step, rank)
        reads, writes = self.accesses(step, rank, kernel)
        ref = self.snapshot(before, rank).pools if before is not None else None
        n = slots if slots is not None else _slots_needed(s.pools, ref, reads, writes, s.owners)
        pools = {k: v[:n] for k, v in s.pools.items()}
        ref = {k: v[:n] for k, v in ref.items()} if ref is not None else None
        if ref is not None and "title" not in kw:
            from mambalab.viz._common import title_from

            found = viz.analyse_state_pool(pools, reads=reads, writes=writes, reference=ref, owners=s.owners)
            kw["title"] = title_from(found["findings"], "state pool consistent").replace(
                "from the reference", f"from the pool after step {before}")
        return viz.draw_state_pool(pools, reads=reads, writes=writes, owners=s.owners, reference=ref, **kw)

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
            row_src = src[i].tolist() if src.dim() == 2 else [int(src[i])]
            row_dst = dst[i].tolist() if dst.dim() == 2 else [int(dst[i])]
            before = f"step {step - 1} accepted {prev.num_accepted[rid]}; " if prev and rid in prev.num_accepted else ""
            if na is not None:
                acc = int(na[i])
                how = f"num_accepted_tokens {acc} -> starts from slot {row_src[min(acc, len(row_src)) - 1]}"
            elif s.builder.num_spec:
                how = f"no num_accepted_tokens -> starts from slot {row_src[0]}"
            else:
                how = f"starts from slot {row_src[0]}"
            lines.append(f"row {i} ({rid}): {before}gathers {row_src}, {how}; writes {row_dst}")
        return Text("\n".join(lines) or f"step {step}, rank {rank}: no decode row")

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
        """Tokens against the reference per request, with the batch of each step of ``rank`` below."""
        from mambalab import viz

        expected, got = self.tokens(rank, requests)
        steps = []
        for r in self.records:
            if rank is not None and r.rank != rank:
                continue
            if rank is None and len({x.rank for x in self.records}) > 1 and r.kind == "dummy":
                continue
            sched = self.scheduled.get((r.step, r.rank), {})
            entry: dict[str, Any] = {"step": r.step, "scheduled": {q: sched.get(q, 1) for q in r.req_ids},
                                     "num_reqs_padded": r.num_reqs_padded}
            if r.kind == "dummy":
                entry["scheduled"] = {}
                entry["dummy"] = True
            elif r.mode == "FULL" and not r.refreshed:
                entry["label"] = "graph buffers not refreshed"
            steps.append(entry)
        _label_dummy_runs(steps)
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


def _block_status(pool: BlockPool, owners: Mapping[int, str], block: int) -> str:
    if block == NULL_BLOCK_ID:
        return "the null block"
    if not 0 <= block < pool.num_blocks:
        return "outside the pool"
    if block in owners:
        return f"{owners[block]}'s block"
    if pool.is_allocated(block):
        return "allocated"
    if pool.is_cached(block):
        return "free, kept in the prefix cache"
    return "free"


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


def _owners(manager) -> dict[int, str]:
    return {int(b): rid for rid, blocks in manager.req_to_blocks.items() for b in blocks if b != NULL_BLOCK_ID}


class _Tracer:
    """Wraps the engine's runners (per instance) to keep each step's metadata and scheduled tokens."""

    def __init__(self, engine: Engine, at: set[int]):
        self.engine = engine
        self.at = at
        self.meta: dict[tuple[int, int], tuple[Any, Any, Any]] = {}
        self.scheduled: dict[tuple[int, int], dict[str, int]] = {}
        for rank in engine.ranks:
            self._wrap(rank)

    def _wrap(self, rank) -> None:
        runner = rank.runner
        build = runner.builder.build
        execute = runner.execute_model

        def traced_build(cm, *args, **kwargs):
            md = build(cm, *args, **kwargs)
            if self.engine.step in self.at:
                self.meta[(self.engine.step, rank.index)] = (
                    copy.deepcopy(cm), copy.deepcopy(md), copy.deepcopy(runner.builder))
            return md

        def traced_execute(so, *args, **kwargs):
            self.scheduled[(self.engine.step, rank.index)] = dict(so.num_scheduled_tokens)
            return execute(so, *args, **kwargs)

        runner.builder.build = traced_build
        runner.execute_model = traced_execute

    def snapshot(self, step: int, log: sanitizer.AccessLog | None, crashed: bool = False
                 ) -> dict[tuple[int, int], Snapshot]:
        out = {}
        records = {r.rank: r for r in self.engine.records if r.step == step}
        for rank in self.engine.ranks:
            key = (step, rank.index)
            if rank.index not in records and key not in self.meta:
                continue  # the rank did nothing this step
            cm, md, builder = self.meta.get(key, (None, None, None))
            out[key] = Snapshot(
                step=step, rank=rank.index, record=records.get(rank.index),
                input_batch=copy.deepcopy(rank.runner.input_batch),
                block_pool=copy.deepcopy(rank.manager.block_pool),
                owners=_owners(rank.manager), cm=cm, md=md, builder=builder,
                pools={k: v.detach().clone() for k, v in rank.runner.state.pools.items()},
                log=log if len(self.engine.ranks) == 1 else None,
                scheduled=dict(self.scheduled.get(key, {})),
                crashed=crashed,
            )
        return out


def trace(
    what: str | Workload,
    *,
    fixed: bool = False,
    bugs: BugConfig | None = None,
    seed: int = 0,
    at: Iterable[int] = (),
    record_access: bool = True,
    max_steps: int = 200,
) -> Trace:
    """Run a bug's scenario (``what`` = bug id) or a workload step by step and keep snapshots.

    ``fixed`` / ``bugs``: the bug's pre-fix behaviour (default), the fix
    (``fixed=True``), or any configuration (``bugs``). ``at``: the steps to
    snapshot (after the step; the kernels' accesses of those steps are
    recorded when ``record_access`` and the kernels run under the
    interpreter; with several DP ranks each rank gets its own log). The
    verdict is the one ``replay`` gives: same workload, same judge.
    """
    if isinstance(what, Workload):
        workload, name = what, "workload"
        cfg = bugs if bugs is not None else BugConfig()
    else:
        workload, name = scenario_for(what)(seed), what
        cfg = bugs if bugs is not None else (BugConfig() if fixed else BugConfig.with_bugs(what))
    fixed = fixed or not cfg.enabled
    at = {int(s) for s in at}
    try:
        engine = Engine(workload.cfg, cfg)
    except Exception as e:  # noqa: BLE001 - e.g. a graph that cannot be captured (as run_workload)
        verdict = Verdict(ok=False, crash=f"at CUDA-graph capture (engine start-up): {type(e).__name__}: {e}")
        result = ReplayResult(name, fixed, seed, verdict, signatures([], verdict), workload.describe())
        return Trace(result, None, {}, {})
    tracer = _Tracer(engine, at)
    engine.schedule_events(workload.events)
    snapshots: dict[tuple[int, int], Snapshot] = {}
    crash: EngineCrash | None = None
    multi = len(engine.ranks) > 1
    try:
        while engine.has_work():
            if engine.step >= max_steps:
                raise RuntimeError(f"the workload did not finish within {max_steps} steps")
            step = engine.step + 1
            want = step in at
            logs: list[sanitizer.AccessLog] = []
            crashed = False
            with contextlib.ExitStack() as stack:
                if want and record_access and not multi:
                    logs.append(stack.enter_context(sanitizer.recording()))
                try:
                    if want and record_access and multi:
                        _step_with_rank_logs(engine, logs)
                    else:
                        engine.step_once()
                except EngineCrash:
                    crashed = True
                    raise
                finally:
                    if want:
                        snaps = tracer.snapshot(step, logs[0] if logs and not multi else None, crashed)
                        if multi and logs:
                            for (s, r), snap in snaps.items():
                                snap.log = logs[r] if r < len(logs) else None
                        snapshots.update(snaps)
    except EngineCrash as c:
        crash = c
    verdict = judge(engine, crash)
    result = ReplayResult(name, fixed, seed, verdict, signatures(engine.records, verdict), workload.describe())
    return Trace(result, engine, snapshots, tracer.scheduled)


def _step_with_rank_logs(engine: Engine, logs: list) -> None:
    """``engine.step_once()`` with one access log per DP rank (each rank's runner calls go to its own)."""
    per_rank = [sanitizer.AccessLog() for _ in engine.ranks]
    logs.extend(per_rank)
    originals = []
    for rank, log in zip(engine.ranks, per_rank):
        runner = rank.runner
        ex, dummy = runner.execute_model, runner.dummy_run

        def wrap(fn, log=log):
            def inner(*a, **k):
                with sanitizer.recording() as inner_log:
                    try:
                        return fn(*a, **k)
                    finally:
                        log.accesses.extend(inner_log.accesses)
                        log.violations.extend(inner_log.violations)
                        log.kernels.extend(inner_log.kernels)
            return inner

        originals.append((runner, ex, dummy))
        runner.execute_model, runner.dummy_run = wrap(ex), wrap(dummy)
    try:
        engine.step_once()
    finally:
        for runner, ex, dummy in originals:
            runner.execute_model, runner.dummy_run = ex, dummy


# ---------------------------------------------------------------------------
# one kernel launch


@dataclass
class KernelRun:
    """One sanitized ``selective_state_update`` launch over a small pool (what :func:`launch_ssu` returns)."""

    indices: list[int]
    bugs: BugConfig
    before: torch.Tensor  # the pool before the launch
    state: torch.Tensor  # the pool after it
    reference: torch.Tensor  # the fixed pure-torch reference on a copy of ``before``
    log: sanitizer.AccessLog
    error: sanitizer.IllegalMemoryAccess | None
    owners: dict[int, str]

    @property
    def num_slots(self) -> int:
        return int(self.state.shape[0])

    def report(self) -> Text:
        """The launch in a few lines: indices, guard, and the sanitizer's verdict."""
        lines = [f"state_batch_indices = {self.indices}   ({self.bugs}, kernel guard {self.bugs.kernel_guard.name})"]
        if self.error is not None:
            e = self.error
            lines.append(f"IllegalMemoryAccess in '{e.kernel}': {e.total} invalid accesses; the first: "
                         + e.violations[0].describe())
        else:
            lines.append("no illegal access")
        null = "zero" if bool((self.state[NULL_BLOCK_ID] == 0).all()) else "NOT zero"
        lines.append(f"null block {NULL_BLOCK_ID} after the launch: {null}")
        return Text("\n".join(textwrap.fill(x, 110, subsequent_indent="    ") for x in lines))

    def draw_access_map(self, **kw):
        from mambalab import viz

        return viz.draw_access_map(self.log, num_slots=self.num_slots, **kw)

    def draw_state_pool(self, **kw):
        from mambalab import viz

        kw.setdefault("reference", self.reference)
        return viz.draw_state_pool(self.state, reads=self.log.slots("state", "load"),
                                   writes=self.log.slots("state", "store"), owners=self.owners, **kw)


def launch_ssu(indices: Sequence[int], bugs: BugConfig | None = None, *, slots: int = 8, seed: int = 0) -> KernelRun:
    """Mamba2's decode kernel on ``len(indices)`` rows of a ``slots``-slot pool, recorded by the sanitizer.

    Rows with a positive index are live requests (named r0, r1, ... in row
    order); the pool's other slots hold random state, the null block holds
    zeros. An illegal access is caught (``KernelRun.error``), not raised.
    On a GPU nothing is recorded and a wild index is a real fault: there a
    negative index is refused.
    """
    from mambalab.kernels.mamba_ssm import selective_state_update
    from mambalab.kernels.mamba_ssm_ref import selective_state_update_ref

    bugs = bugs if bugs is not None else BugConfig()
    if not INTERPRET and any(int(i) < 0 for i in indices):
        raise RuntimeError("launch_ssu: a negative index on a GPU is a real illegal access; "
                           "run this cell on the CPU interpreter (MAMBALAB_DEVICE=cpu)")
    g = torch.Generator().manual_seed(seed)
    n, H, P, N = len(indices), 2, 4, 4

    def r(*shape):
        return torch.randn(*shape, generator=g)

    state = r(slots, H, P, N)
    state[NULL_BLOCK_ID] = 0
    kw = dict(x=r(n, H, P), dt=r(n, H, P) * 0.5, A=-(r(H, P, N).abs() + 0.5), B=r(n, 1, N), C=r(n, 1, N),
              D=r(H, P), dt_bias=r(H, P) * 0.3, z=r(n, H, P), dt_softplus=True)
    dev = torch.device("cpu") if INTERPRET else torch.device(DEVICE_TYPE)
    state = state.to(dev)
    kw = {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    before = state.clone()
    reference = state.clone()
    idx = torch.tensor(list(indices), dtype=torch.int32, device=dev)
    error = None
    with sanitizer.recording() as log:
        try:
            selective_state_update(state, state_batch_indices=idx, bugs=bugs, **kw)
        except sanitizer.IllegalMemoryAccess as e:
            error = e
    selective_state_update_ref(reference, state_batch_indices=idx.clamp(min=0), **kw)
    owners = {int(v): f"r{i}" for i, v in enumerate(indices) if int(v) > NULL_BLOCK_ID}
    return KernelRun(list(int(i) for i in indices), bugs, before.cpu(), state.cpu(), reference.cpu(), log, error,
                     owners)


# ---------------------------------------------------------------------------
# the bookkeeping alone


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
        self.capture_sizes = sorted({self.uq * b for b in default_capture_sizes(max_num_seqs)
                                     if b <= max_num_seqs and self.uq * b <= 64})
        self.builder = MambaAttentionMetadataBuilder(self.spec, max_model_len, max_num_seqs,
                                                     max(default_capture_sizes(max_num_seqs, self.uq)), num_spec,
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


def tour_workload(seed: int = 0) -> Workload:
    """The tour's engine: three requests, FULL decode graphs of up to 4 rows, one state block each."""
    from mambalab.engine.core import Add
    from mambalab.worker.model_runner import RunnerConfig

    rng = random.Random(seed)
    cfg = EngineConfig(RunnerConfig(max_num_seqs=4, num_blocks=8), model_seed=seed)
    adds = [Add(f"r{i}", tuple(rng.randrange(32) for _ in range(rng.randint(3, 8))), 4) for i in range(3)]
    return Workload(cfg, {1: adds})


def state_table(cfg=None) -> Text:
    """What one request's state is made of in the tiny model, per state tensor (one pool slot)."""
    from mambalab.model.tiny_hybrid import TinyHybridConfig

    cfg = cfg if cfg is not None else TinyHybridConfig()
    shapes = cfg.state_shapes()
    what = {
        "mamba_conv": f"Mamba2 conv window: last {cfg.conv_state_len} inputs of {shapes['mamba_conv'][0]} channels",
        "mamba_ssm": "Mamba2 SSM state: heads x head dim x state dim",
        "gdn_conv": f"GDN conv window: last {cfg.conv_state_len} inputs of {shapes['gdn_conv'][0]} channels (q, k, v)",
        "gdn_recurrent": "GDN delta-rule matrix: value heads x V x K",
    }
    lines = []
    total = 0
    for k, shp in shapes.items():
        n = int(np.prod(shp))
        total += n
        lines.append(f"{k:<14} {str(tuple(shp)):<13} {n:>4} floats  {what[k]}")
    lines.append(f"{'one slot':<14} {'':<13} {total:>4} floats  (whatever the request's length)")
    return Text("\n".join(lines))


def source_excerpt(obj: Any, pattern: str, context: int = 0) -> Text:
    """The lines of ``obj``'s source that contain ``pattern`` (plus ``context`` lines around), dedented."""
    lines = inspect.getsource(obj).splitlines()
    keep: set[int] = set()
    for i, line in enumerate(lines):
        if pattern in line:
            keep |= set(range(max(0, i - context), min(len(lines), i + context + 1)))
    if not keep:
        raise ValueError(f"{pattern!r} does not occur in the source of {getattr(obj, '__qualname__', obj)}")
    out, prev = [], None
    for i in sorted(keep):
        if prev is not None and i != prev + 1:
            out.append("...")
        out.append(lines[i])
        prev = i
    return Text(textwrap.dedent("\n".join(out)))


def expect_error(fn: Callable, *args, **kwargs) -> Text:
    """Call ``fn`` and report the error it raises (first line), or that it raised none."""
    try:
        fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - shown to the reader
        first = str(e).splitlines()[0] if str(e) else ""
        return Text(textwrap.fill(f"{type(e).__name__}: {first}", 110, subsequent_indent="    "))
    return Text("no error")


# ---------------------------------------------------------------------------
# exercises


@dataclass
class Exercise:
    id: str
    name: str  # the function the learner writes
    task: str
    cases: Callable[[], list[tuple[tuple, Any]]]  # [(args, expected)], expected from the library

    def describe_args(self, args: tuple) -> str:
        def one(a):
            if isinstance(a, torch.Tensor):
                return f"tensor{tuple(a.shape)}"
            return repr(a)
        return ", ".join(one(a) for a in args)


def _ex_00_1():
    cases = []
    for n, m in [(1, 4), (3, 4), (4, 4), (5, 8), (9, 16), (17, 32), (30, 64)]:
        d = dispatch(n, n, uniform_decode=True, capture_sizes=default_capture_sizes(m), max_num_seqs=m)
        cases.append(((n, m), d.num_reqs_padded))
    return cases


def _ex_00_2():
    from mambalab.worker.block_table import BlockTable

    cases = []
    for row, pos, bs in [([3], 0, 4), ([3], 2, 4), ([3, 7], 5, 4), ([5, 1, 9], 11, 4), ([2, 6], 17, 16)]:
        bt = BlockTable(bs, 1, len(row), 8, device="cpu")
        bt.add_row(row, 0)
        bt.compute_slot_mapping(np.array([0]), np.array([pos]))
        cases.append(((list(row), pos, bs), int(bt.slot_mapping.np[0])))
    return cases


def _ex_00_3():
    from mambalab.model.tiny_hybrid import ModelState, TinyHybridConfig

    cases = []
    for kw in [{}, {"mamba_dstate": 8}, {"conv_width": 3, "gdn_head_k_dim": 8}, {"num_speculative_tokens": 2}]:
        cfg = TinyHybridConfig(**kw)
        st = ModelState.allocate(cfg, 2, device="cpu")
        cases.append(((cfg,), sum(p[0].numel() for p in st.pools.values())))
    return cases


def _ex_01_1():
    cases = []
    base = torch.zeros(8, 2, 4, 4)
    pools = [base, torch.zeros(5, 3, 16), base[:, 1], torch.zeros(10, 4, 6).transpose(1, 2)]
    for t in pools:
        for idx in (-1, 0, 3):
            cases.append(((t, idx), idx * t.stride(0)))
    return cases


def _guard_cases(mode):
    from mambalab.lab.bugs import GuardMode
    from mambalab.kernels.mamba_ssm_ref import is_live

    rows = [[3, 5, 2, 0], [4, 0, 0, 0, 0], [-1, 2, -1], [1, 0, 7, -1]]
    out = []
    for r in rows:
        g = GuardMode.NULL if mode == "skipped" else GuardMode.NEGATIVE
        if mode == "skipped":
            out.append(((list(r),), [i for i, v in enumerate(r) if not is_live(v, g)]))
        else:
            out.append(((list(r),), [i for i, v in enumerate(r) if is_live(v, g) and v == NULL_BLOCK_ID]))
    return out


def _ex_02_1():
    from mambalab.worker.block_table import BlockTable

    cases = []
    for cpu, dev, n in [([[3], [5], [0], [0]], [[3], [5], [6], [2]], 2),
                        ([[0], [0], [0], [0]], [[4], [7], [0], [0]], 0),
                        ([[1], [0], [9], [0]], [[2], [8], [8], [3]], 3)]:
        bt = BlockTable(64, len(cpu), 1, 8, device="cpu")
        bt.block_table.gpu.copy_(torch.tensor(dev, dtype=torch.int32))
        bt.block_table.np[:] = np.array(cpu, dtype=np.int32)
        bt.commit_block_table(n)
        cases.append((([list(r) for r in cpu], [list(r) for r in dev], n), bt.block_table.gpu.tolist()))
    return cases


def _ex_02_2():
    cases = []
    for dev, n in [([[3], [5], [0], [0]], 4), ([[3], [5], [0], [0]], 1), ([[0], [0], [0], [0]], 4),
                   ([[6], [0], [2], [6]], 4)]:
        cases.append((([list(r) for r in dev], n), sorted({r[0] for r in dev[:n]} - {NULL_BLOCK_ID})))
    return cases


def _ex_02_3():
    """After each operation sequence on a stale-rows-fixed batch: which CPU rows still hold a block."""
    cases = []
    for seq in [("add r0", "add r1", "finish r0"), ("add r0", "add r1", "add r2", "finish r1", "finish r2"),
                ("add r0", "finish r0", "add r1")]:
        w = MiniWorld(BugConfig(), num_blocks=8)
        for op in seq:
            verb, rid = op.split()
            (w.add if verb == "add" else w.finish)(rid)
        cases.append(((tuple(seq), False), [int(b) for b in w.block_table.block_table.np[:, 0]]))
        w = MiniWorld(BugConfig.with_bugs("stale-rows"), num_blocks=8)
        for op in seq:
            verb, rid = op.split()
            (w.add if verb == "add" else w.finish)(rid)
        cases.append(((tuple(seq), True), [int(b) for b in w.block_table.block_table.np[:, 0]]))
    return cases


def _ex_03_1():
    cases = []
    for L, B, ns in [(64, 4, 1), (256, 16, 2), (48, 4, 0), (100, 16, 3)]:
        b = MambaAttentionMetadataBuilder(MambaSpec(B, "all", ns), L, 4, 8, ns, device="cpu")
        cases.append(((L, B, ns), int(b.state_indices_tensor_d.shape[1])))
    return cases


def _ex_03_2():
    from mambalab.attention.mamba_metadata import _cdiv_t

    cases = []
    for nc, seq, B in [(8, 10, 4), (9, 11, 4), (0, 5, 4), (15, 17, 16), (16, 18, 16), (3, 4, 4)]:
        t_nc, t_seq = torch.tensor([nc]), torch.tensor([seq])
        last_computed = int(torch.clamp(_cdiv_t(t_nc, B) - 1, min=0))
        first_sched = int(_cdiv_t(t_nc + 1, B) - 1)
        last_sched = int(torch.clamp(_cdiv_t(t_seq, B) - 1, min=0))
        cases.append(((nc, seq, B), (last_computed, first_sched, last_sched)))
    return cases


def _ex_03_3():
    cases = []
    for row, anchor, acc, ns in [([0, 4, 9, 11, 12], 1, 1, 1), ([0, 4, 9, 11, 12], 1, 2, 1),
                                 ([7, 3, 8, 2, 5, 6], 2, 3, 2), ([7, 3, 8, 2, 5, 6], 0, 1, 2)]:
        d = torch.tensor([row], dtype=torch.int64)
        src = d.gather(1, torch.tensor([[anchor]]) + torch.arange(1 + ns))  # the fixed gather
        cases.append(((list(row), anchor, acc), int(src[0, acc - 1])))
    return cases


def _ex_04_1():
    cases = []
    for nc, npr, n, padded in [([5, 9, 3, 2], [5, 9, 3, 40], 3, 4),
                               ([50, 100, 200, 10, 20], [50, 200, 200, 100, 200], 3, 5),  # upstream's vector
                               ([1, 1], [4, 1], 2, 2), ([7, 0, 0, 0], [7, 3, 9, 0], 1, 4)]:
        ib = InputBatch(len(nc), 256, 64, [MambaSpec(256, "none", 0)], device="cpu")
        ib.num_computed_tokens_cpu[:] = nc
        ib.num_prompt_tokens[:] = npr
        buf = RunnerBuffers(len(nc), 64, device="cpu")
        (cm,) = build_attention_metadata(ib, buf, n, padded, padded, 1, BugConfig())
        cases.append(((list(nc), list(npr), n, padded), [bool(x) for x in cm.is_prefilling.tolist()]))
    return cases


def _ex_04_2():
    from mambalab.attention.metadata import CommonAttentionMetadata, split_decodes_and_prefills

    cases = []
    for qlens, pref, thr in [([1, 1], [False, True], 1), ([1, 1, 1, 0], [False, False, False, True], 1),
                             ([1, 1, 1, 0], [False, False, False, False], 1), ([2, 2, 5], [False, False, False], 2),
                             ([1, 3, 0], [False, False, True], 1)]:
        qsl = torch.tensor([0] + list(np.cumsum(qlens)), dtype=torch.int32)
        cm = CommonAttentionMetadata(
            query_start_loc=qsl, query_start_loc_cpu=qsl, seq_lens=qsl[1:], seq_lens_cpu=qsl[1:] + 10,
            num_reqs=len(qlens), num_actual_tokens=int(qsl[-1]), max_query_len=max(qlens), max_seq_len=20,
            block_table_tensor=torch.zeros(len(qlens), 1, dtype=torch.int32),
            slot_mapping=torch.zeros(int(qsl[-1]), dtype=torch.int64), is_prefilling=torch.tensor(pref))
        nd, np_, _, _ = split_decodes_and_prefills(cm, decode_threshold=thr, treat_short_extends_as_decodes=False)
        cases.append(((list(qlens), list(pref), thr), (nd, np_)))
    return cases


def _ex_04_3():
    cases = []
    for graph, own in [([1, 2, 3, 0], [1, 2, 4]), ([5, 6, 0, 0], [5, 6]), ([3, 1, 2, 0], [1, 2, 3])]:
        cases.append(((list(graph), list(own)), [i for i in range(len(own)) if graph[i] != own[i]]))
    return cases


def _ex_05_1():
    from mambalab.lab.planted import repeat_last_live

    cases = []
    for slots, nd in [([3, 5, 0, 0], 2), ([7, 2, 9, 4, 0, 0, 0, 0], 1), ([0, 0], 0), ([4, 9, 2, 1], 3),
                      ([6, 8], 2)]:
        cases.append(((list(slots), nd), repeat_last_live(slots, nd)))
    return cases


class Needs:
    """A failure predicate with a readable repr: the list still holds all of ``items`` (in any order)."""

    def __init__(self, *items) -> None:
        self.items = items

    def __call__(self, xs: list) -> bool:
        return all(x in xs for x in self.items)

    def __repr__(self) -> str:
        return f"Needs{self.items!r}"


class SumAtLeast:
    """A failure predicate: the list's sum reaches ``total``."""

    def __init__(self, total: int) -> None:
        self.total = total

    def __call__(self, xs: list) -> bool:
        return sum(xs) >= self.total

    def __repr__(self) -> str:
        return f"SumAtLeast({self.total})"


def _ex_05_2():
    from mambalab.lab.hunt import drop_one_at_a_time

    cases = []
    for items, fails in [([1, 3, 5, 7, 9], Needs(3, 7)), ([4, 1, 4, 2], SumAtLeast(8)),
                         (["add r0", "add r1", "abort r1", "add r2"], Needs("add r1", "abort r1")),
                         ([2, 2, 2], SumAtLeast(2)), ([5], Needs(5))]:
        cases.append(((list(items), fails), drop_one_at_a_time(items, fails)))
    return cases


EXERCISES: dict[str, Exercise] = {e.id: e for e in [
    Exercise("00.1", "num_reqs_padded", "rows a FULL decode graph runs for num_reqs one-token requests",
             _ex_00_1),
    Exercise("00.2", "slot_of", "the slot of token position pos of a request whose block-table row is row",
             _ex_00_2),
    Exercise("00.3", "state_floats", "floats of state one request keeps in the tiny model, whatever its length",
             _ex_00_3),
    Exercise("01.1", "first_element", "the element offset that state_ptr + idx * stride(0) points at", _ex_01_1),
    Exercise("01.2", "skipped_rows", "rows the fixed kernel skips (index <= 0)", lambda: _guard_cases("skipped")),
    Exercise("01.3", "null_block_writers", "rows that write the null block under the '< 0' guard",
             lambda: _guard_cases("writers")),
    Exercise("02.1", "device_after_commit", "the device table after commit_block_table(n)", _ex_02_1),
    Exercise("02.2", "dummy_blocks", "the live state blocks a dummy batch of n rows reads and writes", _ex_02_2),
    Exercise("02.3", "cpu_column0", "the CPU block table's column 0 after adds and finishes (fixed or buggy)",
             _ex_02_3),
    Exercise("03.1", "state_indices_width", "columns of the persistent state_indices_tensor_d in 'all' mode",
             _ex_03_1),
    Exercise("03.2", "block_indices", "(last_computed, first_scheduled, last_scheduled) block indices", _ex_03_2),
    Exercise("03.3", "initial_state_slot", "the slot a spec-decode row starts from after the fixed gather",
             _ex_03_3),
    Exercise("04.1", "is_prefilling_fixed", "is_prefilling over the padded rows, as after #41873", _ex_04_1),
    Exercise("04.2", "mamba_split", "(num_decodes, num_prefills) as Mamba splits a batch", _ex_04_2),
    Exercise("04.3", "rows_on_wrong_state", "live rows whose graph slot is not their own", _ex_04_3),
    Exercise("05.1", "pad_tail", "a graph buffer column with its padded entries filled by the planted bug",
             _ex_05_1),
    Exercise("05.2", "shrink_list", "a 1-minimal failing list, dropping one item at a time", _ex_05_2),
    Exercise("06.1", "state_bytes_moved", "bytes of state one SSU decode call moves (read + write)",
             lambda: _gpu_report_cases("06.1")),
    Exercise("06.2", "null_programs", "programs of a padded SSU launch that only write zeros",
             lambda: _gpu_report_cases("06.2")),
]}


def _gpu_report_cases(exercise_id: str):
    """The GPU chapter's cases live with its report module (imported on demand)."""
    from mambalab.gpu.gpu_report import exercise_cases

    return exercise_cases(exercise_id)


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray):
        a = a.tolist()
    if isinstance(a, torch.Tensor):
        a = a.tolist()
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001
        return False


def check(exercise_id: str, fn: Callable) -> Text:
    """Run the learner's ``fn`` on the exercise's cases; one line: correct, not answered yet, or the first miss."""
    ex = EXERCISES[exercise_id]
    cases = ex.cases()
    for args, expected in cases:
        call = f"{ex.name}({ex.describe_args(args)})"
        try:
            got = fn(*args)
        except NotImplementedError:
            return Text(f"exercise {ex.id}: not answered yet ({ex.name} raises NotImplementedError)")
        except Exception as e:  # noqa: BLE001 - reported to the learner
            return Text(f"exercise {ex.id}: {call} raised {type(e).__name__}: {e}")
        if got is None:
            return Text(f"exercise {ex.id}: not answered yet ({ex.name} returned None)")
        if not _same(got, expected):
            return Text(f"exercise {ex.id}: not yet: {call} returned {got!r}, expected {expected!r}")
    return Text(f"exercise {ex.id}: correct ({len(cases)} cases)")


class Solution(Text):
    """A revealed solution: its source, then its check, as plain text; in a notebook, folded.

    JupyterLab clears a cell's ``outputs_hidden`` flag when the cell runs, so
    after Run All a plain-text solution would be on show: the HTML form is a
    closed ``<details>`` whose summary gives only the check's verdict.
    """

    def __new__(cls, exercise_id: str, source: str, verdict: str) -> "Solution":
        self = super().__new__(cls, f"{source}\n\n{verdict}")
        self.exercise_id, self.source, self.verdict = exercise_id, source, verdict
        return self

    def __getnewargs__(self) -> tuple[str, str, str]:  # copy and pickle
        return self.exercise_id, self.source, self.verdict

    def _repr_html_(self) -> str:
        return (f"<details class='mambalab-solution'><summary style='cursor:pointer'>"
                f"<b>Solution {html.escape(self.exercise_id)} — click to show</b> · {html.escape(self.verdict)}"
                f"</summary><pre>{html.escape(self.source)}</pre></details>")


def reveal(exercise_id: str, fn: Callable) -> Solution:
    """A solution's source, then its check (:class:`Solution`: folded in a notebook)."""
    src = textwrap.dedent(inspect.getsource(fn)).rstrip()
    return Solution(exercise_id, src, str(check(exercise_id, fn)))


def plant_pad_tail(pad_tail: Callable) -> tuple[Plant, Text]:
    """Notebook 05's plant: the learner's ``pad_tail`` when it passes exercise 05.1, else the library's
    :func:`mambalab.lab.planted.repeat_last_live` (so the chapter runs before the exercise is done)."""
    from mambalab.lab.planted import plant_padded_tail, repeat_last_live

    verdict = check("05.1", pad_tail)
    if str(verdict).startswith("exercise 05.1: correct"):
        return plant_padded_tail(pad_tail), Text("planting your pad_tail (it passes exercise 05.1)")
    return plant_padded_tail(repeat_last_live), Text(
        f"planting the library's repeat_last_live ({verdict.removeprefix('exercise 05.1: ')})")


_SNIPPET_HEAD = "As Python (runs and asserts the failure):"


def _wrap(text: str, width: int) -> str:
    """Lines longer than ``width`` wrapped at spaces (same indentation, 4 more for continuations)."""
    lines = []
    for line in text.split("\n"):
        if len(line) <= width:
            lines.append(line)
            continue
        indent = line[:len(line) - len(line.lstrip())]
        lines += textwrap.wrap(line.strip(), width, initial_indent=indent, subsequent_indent=indent + "    ",
                               break_long_words=False, break_on_hyphens=False) or [line]
    return "\n".join(lines)


def hunt_report(result, width: int = 100) -> Text:
    """A hunt's report without timings: the same text on every run (what the notebook shows).

    Lines longer than ``width`` are wrapped at spaces (same indentation, 4 more
    for continuations), since JupyterLab wraps them mid-word; the Python
    snippet after ``As Python (...):`` stays verbatim, to be copied and run.
    """
    head, sep, snippet = result.report(timings=False).partition(_SNIPPET_HEAD)
    return Text(_wrap(head, width) + sep + snippet)


def workload_steps(workload, width: int = 100) -> Text:
    """A workload as the hunter prints it (:func:`mambalab.lab.hunt.step_list`), long lines wrapped."""
    from mambalab.lab.hunt import step_list

    return Text(_wrap("\n".join(step_list(workload)), width))
