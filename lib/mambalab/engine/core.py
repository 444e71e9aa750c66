"""The engine: data-parallel ranks, each a scheduler + KV-cache manager + model runner.

Mirrors the step loop of vLLM's engine core (``vllm/v1/engine/core.py``) and
its data-parallel coordination (``vllm/v1/engine/core.py`` ``DPEngineCoreProc``,
``vllm/v1/worker/dp_utils.py``): every step each rank schedules; the ranks
agree on the largest token count; a rank with work pads to it, a rank with
none runs the dummy batch so that collectives stay in step.

Every kernel an engine launches (its CUDA-graph captures at construction, each
step's forwards and dummy batches) runs without the Triton interpreter's
int32-overflow asserts (``device.without_overflow_asserts``; compiled kernels
check only in debug mode); the lab's memory sanitizer stays on.

Ranks run in-process, one after another, each with its own state pools and
block pool (each DP rank owns a GPU). Freed state blocks are poisoned with
NaN, as upstream users effectively saw: a stale read surfaces as NaN or
garbage tokens, not as silent plausibility.

An engine may also host only some ranks (``dp_ranks``): ``mambalab.engine.dp_launcher``
runs one rank per OS process and all-reduces over ``torch.distributed`` between
``schedule_step`` and ``execute_step``, the two halves of ``step_once``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Iterator, Sequence

import torch

from mambalab.lab.bugs import BugConfig, resolve
from mambalab.device import DEVICE, without_overflow_asserts
from mambalab.model.drafter import OracleDrafter
from mambalab.core.kv_cache_manager import KVCacheManager
from mambalab.model.tiny_hybrid import TinyHybridConfig, TinyHybridModel
from mambalab.worker.cuda_graph import code_fingerprint_once
from mambalab.worker.model_runner import ModelRunner, RunnerConfig, StepRecord
from mambalab.worker.cudagraph_dispatcher import CUDAGraphMode, synchronize_cudagraph_mode
from mambalab.core.request import Request
from mambalab.lab.sanitizer import IllegalMemoryAccess
from mambalab.core.sched.scheduler import Scheduler
from mambalab.core.sched.output import SchedulerOutput


@dataclass(frozen=True)
class EngineConfig:
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    data_parallel_size: int = 1
    model_seed: int = 0
    acceptance: float | tuple[int, ...] = 0.5  # draft acceptance: a rate, or a per-step schedule
    drafter_seed: int = 0


# -- workload events -------------------------------------------------------------------

@dataclass(frozen=True)
class Add:
    req_id: str
    prompt: tuple[int, ...]
    max_tokens: int
    rank: int = 0


@dataclass(frozen=True)
class Abort:
    req_id: str


@dataclass(frozen=True)
class Preempt:
    req_id: str


Event = Add | Abort | Preempt


@dataclass
class Rank:
    index: int
    scheduler: Scheduler
    manager: KVCacheManager
    runner: ModelRunner
    pending_poison: list[int] = field(default_factory=list)


@dataclass
class RequestResult:
    req_id: str
    rank: int
    prompt: list[int]
    max_tokens: int
    output: list[int] = field(default_factory=list)
    token_steps: list[int] = field(default_factory=list)  # the step each output token came from
    status: str = "running"
    final_state: dict[str, torch.Tensor] | None = None


def build_rank(index: int, cfg: EngineConfig, bugs: BugConfig, model: TinyHybridModel,
               device: torch.device | str | None = None) -> Rank:
    """One DP rank's scheduler, KV-cache manager, runner and state pools (one GPU's worth)."""
    rc = cfg.runner
    mgr = KVCacheManager(rc.kv_cache_spec(), rc.num_blocks, rc.max_model_len,
                         rc.num_speculative_tokens, bugs,
                         enable_caching=rc.num_speculative_tokens == 0)
    sched = Scheduler(mgr, rc.max_num_seqs, rc.max_num_batched_tokens, rc.max_model_len,
                      rc.num_speculative_tokens)
    runner = ModelRunner(model, rc, bugs, rank=index, device=DEVICE if device is None else device)
    rank = Rank(index, sched, mgr, runner)
    mgr.on_free = (lambda block, cached, rank=rank: None if cached else rank.pending_poison.append(block))
    mgr.on_evict = (lambda block, rank=rank: rank.runner.state.poison_slot(block))
    return rank


class EngineCrash(RuntimeError):
    """The engine stopped: an illegal access or another error inside a step."""

    def __init__(self, step: int, rank: int, error: BaseException):
        self.step, self.rank, self.error = step, rank, error
        super().__init__(f"step {step}, rank {rank}: {type(error).__name__}: {error}")


@dataclass
class StepOutcome:
    """One step of :meth:`Engine.steps`: its number, the ranks' records, the crash that ended it."""

    step: int
    records: list[StepRecord]
    crash: EngineCrash | None = None


class EngineDidNotFinish(RuntimeError):
    """The workload still had work after ``max_steps`` steps (a hang, as the hunter counts it)."""

    def __init__(self, max_steps: int):
        self.max_steps = max_steps
        super().__init__(f"the workload did not finish within {max_steps} steps")


def build_model(cfg: EngineConfig, device: torch.device | str | None = None) -> TinyHybridModel:
    """The model an engine of ``cfg`` builds for itself (its seed, its speculative tokens)."""
    return TinyHybridModel(TinyHybridConfig(num_speculative_tokens=cfg.runner.num_speculative_tokens,
                                            seed=cfg.model_seed), device=device)


class Engine:
    """All DP ranks in this process (default), or only ``dp_ranks`` (one per process in
    ``mambalab.engine.dp_launcher``; ``device``: where this process's model and pools live)."""

    def __init__(self, cfg: EngineConfig | None = None, bugs: BugConfig | None = None,
                 model: TinyHybridModel | None = None, *, dp_ranks: Sequence[int] | None = None,
                 device: torch.device | str | None = None) -> None:
        self.cfg = cfg or EngineConfig()
        self.bugs = resolve(bugs)
        rc = self.cfg.runner
        if self.cfg.data_parallel_size < 1:
            raise ValueError(f"data_parallel_size must be >= 1, got {self.cfg.data_parallel_size}")
        dp_ranks = list(range(self.cfg.data_parallel_size)) if dp_ranks is None else list(dp_ranks)
        if not dp_ranks or any(not 0 <= i < self.cfg.data_parallel_size for i in dp_ranks):
            raise ValueError(f"dp_ranks {dp_ranks} must be a non-empty subset of "
                             f"[0, {self.cfg.data_parallel_size})")
        self.model = model or build_model(self.cfg, device)
        self.drafter = (OracleDrafter(self.model, rc.num_speculative_tokens, self.cfg.acceptance,
                                      self.cfg.drafter_seed) if rc.num_speculative_tokens else None)
        # the ranks' CUDA-graph captures run the model; their memo keys share one code fingerprint
        with without_overflow_asserts(), code_fingerprint_once():
            self.ranks: list[Rank] = [build_rank(i, self.cfg, self.bugs, self.model, device) for i in dp_ranks]
        self._by_index = {r.index: r for r in self.ranks}
        self.step = 0
        self.records: list[StepRecord] = []
        # A context each rank's part of a step runs inside (e.g. a sanitizer recording per DP rank).
        self.rank_context: Callable[[int], ContextManager] | None = None
        self.results: dict[str, RequestResult] = {}
        self.events: dict[int, list[Event]] = {}

    # -- workload ---------------------------------------------------------------
    def dp_rank(self, index: int) -> Rank:
        """The hosted rank with DP index ``index``."""
        if not 0 <= index < self.cfg.data_parallel_size:
            raise ValueError(f"rank {index} out of range [0, {self.cfg.data_parallel_size})")
        if index not in self._by_index:
            raise ValueError(f"rank {index} is not hosted by this engine (it hosts {sorted(self._by_index)})")
        return self._by_index[index]

    def add_request(self, req_id: str, prompt: Sequence[int], max_tokens: int, rank: int = 0) -> None:
        target = self.dp_rank(rank)
        if req_id in self.results:
            raise ValueError(f"request {req_id!r} was already added")
        target.scheduler.add_request(Request(req_id, list(prompt), max_tokens))
        self.results[req_id] = RequestResult(req_id, rank, list(prompt), max_tokens)

    def abort_request(self, req_id: str) -> None:
        res = self.results[req_id]
        if self.dp_rank(res.rank).scheduler.abort_request(req_id):
            res.status = "aborted"

    def preempt_request(self, req_id: str) -> bool:
        """Force a preemption if the request is running now (a no-op otherwise)."""
        res = self.results[req_id]
        sched = self.dp_rank(res.rank).scheduler
        req = sched.requests.get(req_id)
        if req is None or req not in sched.running:
            return False
        sched.preempt_request(req_id)
        return True

    def schedule_events(self, events: dict[int, Sequence[Event]]) -> None:
        """Events to apply at the start of given steps (1-based)."""
        for step, evs in events.items():
            self.events.setdefault(step, []).extend(evs)

    def _apply(self, ev: Event) -> None:
        if isinstance(ev, Add):
            self.add_request(ev.req_id, ev.prompt, ev.max_tokens, ev.rank)
        elif isinstance(ev, Abort):
            self.abort_request(ev.req_id)
        elif isinstance(ev, Preempt):
            self.preempt_request(ev.req_id)

    # -- the step ---------------------------------------------------------------------
    def has_work(self) -> bool:
        return any(r.scheduler.has_unfinished_requests() for r in self.ranks) or any(
            s > self.step for s in self.events)

    def step_once(self) -> list[StepRecord]:
        outputs = self.schedule_step()
        return self.execute_step(outputs, max((o.total_num_scheduled_tokens for o in outputs), default=0))

    def schedule_step(self) -> list[SchedulerOutput]:
        """First half of a step: apply this step's events, each hosted rank schedules."""
        self.step += 1
        for ev in self.events.pop(self.step, []):
            self._apply(ev)
        return [r.scheduler.schedule() for r in self.ranks]

    def local_cudagraph_modes(self, outputs: list[SchedulerOutput]) -> list[CUDAGraphMode]:
        """Each hosted rank's own mode for its schedule (the dummy batch's for an idle rank)."""
        return [rank.runner.local_cudagraph_mode(so) for rank, so in zip(self.ranks, outputs)]

    def execute_step(self, outputs: list[SchedulerOutput], num_tokens_across_dp: int,
                     cudagraph_mode_across_dp: CUDAGraphMode | None = None) -> list[StepRecord]:
        """Second half: given the ranks' agreed (max) token count and CUDA-graph mode (the
        minimum; computed here from the hosted ranks when not given), every hosted rank
        executes its schedule padded to it, or the dummy batch if it has none (``dp_utils``)."""
        records: list[StepRecord] = []
        if not num_tokens_across_dp:
            return records
        dp_tokens = num_tokens_across_dp if self.cfg.data_parallel_size > 1 else None
        if dp_tokens is None:
            cudagraph_mode_across_dp = None
        elif cudagraph_mode_across_dp is None:
            cudagraph_mode_across_dp = synchronize_cudagraph_mode(self.local_cudagraph_modes(outputs))
        with without_overflow_asserts():
            for rank, so in zip(self.ranks, outputs):
                rec = self.execute_rank(rank, so, dp_tokens, cudagraph_mode_across_dp)
                if rec is not None:
                    records.append(rec)
        self.records.extend(records)
        return records

    def execute_rank(self, rank: Rank, so: SchedulerOutput, dp_tokens: int | None,
                     cudagraph_mode_across_dp: CUDAGraphMode | None = None) -> StepRecord | None:
        """One rank's part of the step: execute (then draft, update, collect), or the dummy run."""
        n = so.total_num_scheduled_tokens
        try:
            blocks_before = {rid: list(rank.manager.get_block_ids(rid)[0])
                             for rid in so.num_scheduled_tokens}
            with self.rank_context(rank.index) if self.rank_context is not None else contextlib.nullcontext():
                sampled, rec = rank.runner.execute_model(so, dp_tokens, cudagraph_mode_across_dp)
                if not n and dp_tokens:
                    # An idle rank pads to the others' size; the runner pads it to a graph size.
                    rec = rank.runner.dummy_run(self._dummy_size(rank, dp_tokens), cudagraph_mode_across_dp)
                rank.runner.state.check_guards(self.step)  # a store one slot before a pool (mambalab/guard_band.py)
            if n:
                drafts = self._propose(rank, sampled)
                finished = rank.scheduler.update_from_output(so, sampled, drafts)
                self._collect(rank, sampled, finished, blocks_before)
            elif not dp_tokens:
                return None
            rec.step = self.step
        except Exception as e:  # noqa: BLE001 - reported as the engine's verdict
            last = rank.runner.last_record
            if last is not None and all(last is not r for r in self.records):
                last.step = self.step
                self.records.append(last)  # the crashing step's record: the verdict reads it
            raise EngineCrash(self.step, rank.index, e) from e
        finally:
            for b in rank.pending_poison:
                rank.runner.state.poison_slot(b)
            rank.pending_poison.clear()
        return rec

    def _dummy_size(self, rank: Rank, dp_tokens: int) -> int:
        """The dummy batch: the others' size padded to a graph size, at most one uniform batch."""
        rc = self.cfg.runner
        uq = rc.uniform_decode_query_len
        cap = rc.max_num_seqs * uq
        for s in rank.runner.capture_sizes:
            if s >= dp_tokens:
                return min(s, cap)
        return max(uq, min(dp_tokens, cap) // uq * uq)

    def _propose(self, rank: Rank, sampled: dict[str, list[int]]) -> dict[str, list[int]] | None:
        if self.drafter is None:
            return None
        rc = self.cfg.runner
        drafts = {}
        for rid, toks in sampled.items():
            req = rank.scheduler.requests[rid]
            all_tokens = req.all_token_ids + toks
            room = min(req.max_tokens - req.num_output_tokens - len(toks) - 1,
                       rc.max_model_len - 2 - len(all_tokens))
            drafts[rid] = self.drafter.propose(rid, all_tokens, self.step, max(0, room))
        return drafts

    def _collect(self, rank: Rank, sampled, finished, blocks_before) -> None:
        for rid, toks in sampled.items():
            res = self.results[rid]
            for t in toks:
                if len(res.output) < res.max_tokens:
                    res.output.append(int(t))
                    res.token_steps.append(self.step)
        for req in finished:
            res = self.results[req.request_id]
            res.status = "finished"
            res.final_state = self._final_state(rank, req, blocks_before.get(req.request_id, []))

    def _final_state(self, rank: Rank, req: Request, blocks: list[int]) -> dict[str, torch.Tensor] | None:
        """The request's running state at its end (kept without speculative decoding).

        "none": the request's one block. "all": the block of its last computed
        token, ``(num_computed_tokens - 1) // block_size``.
        """
        rc = self.cfg.runner
        if rc.num_speculative_tokens or not blocks:
            return None
        col = 0 if rc.mamba_cache_mode == "none" else (req.num_computed_tokens - 1) // rc.block_size
        return rank.runner.state.read_slot(blocks[col]) if col < len(blocks) else None

    def steps(self, max_steps: int = 500,
              around: Callable[[int], ContextManager] | None = None) -> Iterator[StepOutcome]:
        """The engine's one step loop: yields each step's outcome until no work is left.

        A crash inside a step ends the loop with an outcome that carries it;
        work left after ``max_steps`` raises :class:`EngineDidNotFinish`.
        ``around(step)``: a context each step runs inside (e.g. the sanitizer's
        recording of that step's accesses). Scenarios, the workbook's tracer and
        the panels all step through here.
        """
        while self.has_work():
            if self.step >= max_steps:
                raise EngineDidNotFinish(max_steps)
            crash: EngineCrash | None = None
            records: list[StepRecord] = []
            with around(self.step + 1) if around is not None else contextlib.nullcontext():
                try:
                    records = self.step_once()
                except EngineCrash as c:
                    crash = c
            yield StepOutcome(self.step, records, crash)
            if crash is not None:
                return

    def run(self, max_steps: int = 500) -> None:
        """Step until every request is done (or ``max_steps``); a crash is raised."""
        for outcome in self.steps(max_steps):
            if outcome.crash is not None:
                raise outcome.crash


__all__ = ["Engine", "EngineConfig", "EngineCrash", "EngineDidNotFinish", "StepOutcome", "Add", "Abort", "Preempt", "RequestResult",
           "IllegalMemoryAccess", "Rank", "build_rank"]
