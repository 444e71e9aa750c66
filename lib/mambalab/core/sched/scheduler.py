"""Continuous batching with chunked prefill, preemption and speculative decoding.

Mirrors ``vllm/v1/core/sched/scheduler.py`` (``Scheduler``, FCFS policy,
synchronous scheduling). There is no prefill or decode phase: each request
has ``num_computed_tokens`` and ``num_tokens_with_spec`` and each step the
scheduler gives it tokens to close the gap.

``schedule()``
    1. RUNNING requests in order: ``num_tokens_with_spec - num_computed_tokens``
       tokens (a decode is ``1 + len(spec_token_ids)``; a prefill chunk as many
       prompt tokens as ``long_prefill_token_threshold`` and the token budget
       allow), capped so no position reaches ``max_model_len``. If the pool
       cannot give the blocks, the lowest-priority request (the last of the
       running list) is preempted — possibly the request itself — and the
       allocation retried.
    2. Only when nobody was preempted: WAITING/PREEMPTED requests in FIFO
       order while the budget, ``max_num_seqs`` and the pool allow; each first
       looks up the prefix cache. A preempted request is resumed as a *new*
       request that recomputes prompt + outputs (minus any prefix hit).
    3. Every scheduled request's ``num_computed_tokens`` is advanced by what
       was scheduled (upstream ``_update_after_schedule``), so an unfinished
       prefill can be scheduled again at once.

``update_from_output(output, sampled_token_ids, spec_token_ids)``
    Speculative decoding as upstream. A decode step scheduled ``1 + k`` tokens
    (the last sampled token and ``k`` drafts) and ``num_computed_tokens`` was
    already advanced by ``1 + k``. The runner returns the accepted tokens: the
    ``a`` drafts it accepted (``0 <= a <= k``) followed by one bonus/resampled
    token, so ``1 + a`` tokens. The ``k - a`` rejected drafts are subtracted:
    net advance ``1 + a``, and ``num_computed_tokens == num_tokens - 1`` again
    once the ``1 + a`` tokens are appended. ``1 + a`` is what the worker stores
    as ``num_accepted_tokens`` for the next step. A prefill chunk that does not
    reach the end of the prompt samples nothing. Requests finish at
    ``max_tokens`` or when ``num_tokens`` reaches ``max_model_len``
    (FINISHED_LENGTH, extra accepted tokens trimmed). New drafts are stored
    for the next step, then the blocks that became full are cached.

Reporting: ``finished_req_ids`` of an output lists the requests finished,
aborted *or preempted* since the previous output (upstream sends preempted
ones in ``preempted_req_ids`` only; the worker drops their rows either way),
and ``preempted_req_ids`` lists the preempted ones.

Synchronous only: ``schedule`` -> run -> ``update_from_output`` -> ``schedule``.
Deterministic: no randomness, no clock.
"""

from __future__ import annotations

from collections import deque
from typing import Mapping, Sequence

from mambalab.core.kv_cache_manager import KVCacheManager
from mambalab.core.request import Request, RequestStatus
from mambalab.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput


class SchedulerError(RuntimeError):
    """The scheduler was driven out of order (e.g. two schedule() calls without an update)."""


def _check_int(name: str, value: object, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


class Scheduler:
    def __init__(
        self,
        kv_cache_manager: KVCacheManager,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        max_model_len: int,
        num_speculative_tokens: int = 0,
        long_prefill_token_threshold: int = 0,
        *,
        num_lookahead_tokens: int = 0,
    ) -> None:
        self.kv_cache_manager = kv_cache_manager
        self.max_num_seqs = _check_int("max_num_seqs", max_num_seqs, 1)
        self.max_num_batched_tokens = _check_int("max_num_batched_tokens", max_num_batched_tokens, 1)
        self.max_model_len = _check_int("max_model_len", max_model_len, 2)
        self.num_speculative_tokens = _check_int("num_speculative_tokens", num_speculative_tokens, 0)
        self.long_prefill_token_threshold = _check_int(
            "long_prefill_token_threshold", long_prefill_token_threshold, 0
        )
        # Upstream passes num_spec_tokens here for EAGLE/MTP/draft-model
        # proposers (blocks for the drafts' own KV); 0 keeps the Mamba list at
        # cdiv(computed + scheduled, B) + num_speculative_blocks.
        self.num_lookahead_tokens = _check_int("num_lookahead_tokens", num_lookahead_tokens, 0)
        if kv_cache_manager.max_model_len != max_model_len:
            raise ValueError(
                f"max_model_len={max_model_len} but the KV-cache manager was built for "
                f"{kv_cache_manager.max_model_len}"
            )
        if kv_cache_manager.num_speculative_tokens != num_speculative_tokens:
            raise ValueError(
                f"num_speculative_tokens={num_speculative_tokens} but the KV-cache manager was built "
                f"for {kv_cache_manager.num_speculative_tokens}"
            )

        self.requests: dict[str, Request] = {}  # live (not finished) requests
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.finished_req_ids: set[str] = set()  # since the last schedule()
        self._preempted_req_ids: set[str] = set()  # forced preemptions since the last schedule()
        self._seen_req_ids: set[str] = set()
        self.step = 0
        self._pending_step: int | None = None  # a schedule() output awaiting update_from_output

    # -- queries ----------------------------------------------------------
    def get_num_unfinished_requests(self) -> int:
        return len(self.waiting) + len(self.running)

    def has_unfinished_requests(self) -> bool:
        return self.get_num_unfinished_requests() > 0

    # -- requests in and out ----------------------------------------------
    def add_request(self, request: Request) -> None:
        if not isinstance(request, Request):
            raise TypeError(f"add_request takes a Request, got {type(request).__name__}")
        req_id = request.request_id
        if req_id in self._seen_req_ids:
            raise ValueError(f"duplicate request id {req_id!r}: ids must be unique for a scheduler's lifetime")
        if request.status != RequestStatus.WAITING or request.num_computed_tokens or request.block_ids:
            raise ValueError(f"request {req_id!r} is not fresh (status {request.status.name})")
        if request.num_tokens >= self.max_model_len:
            raise ValueError(
                f"request {req_id!r}: {request.num_tokens} prompt tokens leave no room for an output "
                f"token within max_model_len={self.max_model_len}"
            )
        self._seen_req_ids.add(req_id)
        self.requests[req_id] = request
        self.waiting.append(request)

    def abort_request(self, req_id: str) -> bool:
        """Abort a live request at any point (waiting, mid-prefill, decoding, preempted).

        Its blocks are freed now and its id is reported in the next output's
        ``finished_req_ids``. Returns False (a no-op) when the request has
        already finished; raises KeyError for an id this scheduler never saw.
        """
        request = self.requests.get(req_id)
        if request is None:
            if req_id in self._seen_req_ids:
                return False
            raise KeyError(f"abort_request: unknown request id {req_id!r}")
        if request.status == RequestStatus.RUNNING:
            self.running.remove(request)
        else:
            self.waiting.remove(request)
        request.status = RequestStatus.FINISHED_ABORTED
        self._free_request(request)
        return True

    def preempt_request(self, req_id: str) -> None:
        """Force a preemption (for scenarios): as if the pool had run dry for this request."""
        request = self.requests.get(req_id)
        if request is None or request.status != RequestStatus.RUNNING:
            state = "unknown" if request is None else request.status.name
            raise ValueError(f"preempt_request: {req_id!r} is not running ({state})")
        self.running.remove(request)
        self._preempt(request)
        self._preempted_req_ids.add(req_id)

    def _preempt(self, request: Request) -> None:
        """Free the blocks, forget computed tokens and drafts, keep outputs; back to the queue head."""
        self.kv_cache_manager.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.spec_token_ids = []
        request.is_prefill_chunk = False
        request.num_preemptions += 1
        self.waiting.appendleft(request)

    def _free_request(self, request: Request) -> None:
        self.kv_cache_manager.free(request)
        request.spec_token_ids = []
        self.finished_req_ids.add(request.request_id)
        del self.requests[request.request_id]

    # -- one step -----------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        if self._pending_step is not None:
            raise SchedulerError(
                f"update_from_output was not called for step {self._pending_step}: "
                "this scheduler is synchronous"
            )
        mgr = self.kv_cache_manager
        token_budget = self.max_num_batched_tokens
        num_scheduled_tokens: dict[str, int] = {}
        new_block_ids: dict[str, list[int]] = {}
        spec_tokens: dict[str, list[int]] = {}
        scheduled_running: list[Request] = []
        scheduled_new: list[Request] = []
        preempted: list[Request] = []

        # 1. RUNNING requests.
        i = 0
        while i < len(self.running) and token_budget > 0:
            request = self.running[i]
            n = request.num_tokens_with_spec - request.num_computed_tokens
            if 0 < self.long_prefill_token_threshold < n:
                n = self.long_prefill_token_threshold
            n = min(n, token_budget, self.max_model_len - 1 - request.num_computed_tokens)
            if n <= 0:
                i += 1
                continue
            while True:
                blocks = mgr.allocate_slots(request, n, num_lookahead_tokens=self.num_lookahead_tokens)
                if blocks is not None:
                    break
                victim = self.running.pop()  # lowest priority: the last one added
                self._preempt(victim)
                preempted.append(victim)
                if victim is request:
                    break
            if blocks is None:
                break
            scheduled_running.append(request)
            new_block_ids[request.request_id] = blocks
            num_scheduled_tokens[request.request_id] = n
            token_budget -= n
            i += 1
            if request.spec_token_ids:
                num_spec = n + request.num_computed_tokens - request.num_tokens
                if num_spec > 0:
                    spec_tokens[request.request_id] = list(request.spec_token_ids[:num_spec])
                request.spec_token_ids = []

        # 2. WAITING / PREEMPTED requests, FIFO, only if nobody was preempted.
        if not preempted:
            while self.waiting and token_budget > 0 and len(self.running) < self.max_num_seqs:
                request = self.waiting[0]
                hit_blocks, num_hit = mgr.get_computed_blocks(request)
                n = request.num_tokens - num_hit
                if 0 < self.long_prefill_token_threshold < n:
                    n = self.long_prefill_token_threshold
                n = min(n, token_budget)
                blocks = mgr.allocate_slots(
                    request, n, num_new_computed_tokens=num_hit, new_computed_blocks=hit_blocks
                )
                if blocks is None:
                    break  # head-of-line: FCFS does not skip ahead
                self.waiting.popleft()
                self.running.append(request)
                scheduled_new.append(request)
                request.status = RequestStatus.RUNNING
                request.num_computed_tokens = num_hit
                if request.num_cached_tokens < 0:
                    request.num_cached_tokens = num_hit
                num_scheduled_tokens[request.request_id] = n
                token_budget -= n

        # 3. The output (counts as they were before this step), then advance.
        self.step += 1
        cached = CachedRequestData()
        for request in scheduled_running:
            rid = request.request_id
            cached.req_ids.append(rid)
            cached.new_block_ids.append((list(new_block_ids[rid]),) if new_block_ids[rid] else None)
            cached.num_computed_tokens.append(request.num_computed_tokens)
            cached.num_output_tokens.append(request.num_output_tokens)
        preempted_ids = self._preempted_req_ids | {r.request_id for r in preempted}
        output = SchedulerOutput(
            step=self.step,
            scheduled_new_reqs=[
                NewRequestData.from_request(r, mgr.get_block_ids(r)) for r in scheduled_new
            ],
            scheduled_cached_reqs=cached,
            num_scheduled_tokens=num_scheduled_tokens,
            total_num_scheduled_tokens=sum(num_scheduled_tokens.values()),
            scheduled_spec_decode_tokens=spec_tokens,
            finished_req_ids=self.finished_req_ids | preempted_ids,
            preempted_req_ids=preempted_ids,
        )
        assert output.total_num_scheduled_tokens <= self.max_num_batched_tokens
        assert len(self.running) <= self.max_num_seqs
        for rid, n in num_scheduled_tokens.items():
            request = self.requests[rid]
            request.num_computed_tokens += n
            request.is_prefill_chunk = request.num_computed_tokens < request.num_tokens
        self.finished_req_ids = set()
        self._preempted_req_ids = set()
        # An empty step needs no update_from_output.
        self._pending_step = self.step if num_scheduled_tokens else None
        return output

    def update_from_output(
        self,
        scheduler_output: SchedulerOutput,
        sampled_token_ids: Mapping[str, Sequence[int]],
        spec_token_ids: Mapping[str, Sequence[int]] | None = None,
    ) -> list[Request]:
        """Apply one step's results; returns the requests that finished in it."""
        if not scheduler_output.num_scheduled_tokens and scheduler_output.step == self.step:
            if sampled_token_ids:
                raise ValueError("sampled tokens for an empty step")
            return []
        if self._pending_step != scheduler_output.step:
            raise SchedulerError(
                f"update_from_output for step {scheduler_output.step}, but the step awaiting its "
                f"output is {self._pending_step}"
            )
        unknown = set(sampled_token_ids) - set(scheduler_output.num_scheduled_tokens)
        if unknown:
            raise ValueError(f"sampled tokens for requests not scheduled in this step: {sorted(unknown)}")
        spec_token_ids = spec_token_ids or {}
        for rid, drafts in spec_token_ids.items():
            if len(drafts) > self.num_speculative_tokens:
                raise ValueError(
                    f"request {rid!r}: {len(drafts)} drafts, num_speculative_tokens="
                    f"{self.num_speculative_tokens}"
                )
        # Validate everything before changing anything.
        live: list[tuple[Request, list[int], list[int]]] = []
        for rid in scheduler_output.num_scheduled_tokens:
            request = self.requests.get(rid)
            if request is None or request.status != RequestStatus.RUNNING:
                continue  # aborted or preempted after schedule(): its work is dropped
            generated = [int(t) for t in sampled_token_ids.get(rid, ())]
            drafts = scheduler_output.scheduled_spec_decode_tokens.get(rid, [])
            if request.is_prefill_chunk:
                if generated:
                    raise ValueError(
                        f"request {rid!r}: a prefill chunk that does not finish the prompt samples "
                        f"nothing, got {generated}"
                    )
            elif not 1 <= len(generated) <= 1 + len(drafts):
                raise ValueError(
                    f"request {rid!r}: expected 1..{1 + len(drafts)} sampled tokens (accepted drafts "
                    f"+ one bonus token), got {len(generated)}"
                )
            if any(t < 0 for t in generated):
                raise ValueError(f"request {rid!r}: token ids must be >= 0, got {generated}")
            live.append((request, generated, drafts))
        self._pending_step = None

        finished: list[Request] = []
        for request, generated, drafts in live:
            rid = request.request_id
            if drafts and generated:
                # num_computed_tokens was advanced by 1 + len(drafts) at schedule
                # time; take back the rejected drafts (upstream does the same).
                num_accepted = len(generated) - 1
                request.num_computed_tokens -= len(drafts) - num_accepted
            stopped = False
            for t in generated:
                request.append_output_token_ids(t)
                if (
                    request.num_output_tokens >= request.max_tokens
                    or request.num_tokens >= self.max_model_len
                ):
                    stopped = True  # later accepted tokens are dropped
                    break
            # Cache what became full (also for a request finishing now: its
            # blocks stay hittable in the free queue).
            self.kv_cache_manager.cache_full_blocks(request)
            if stopped:
                request.status = RequestStatus.FINISHED_LENGTH
                self.running.remove(request)
                self._free_request(request)
                finished.append(request)
            elif rid in spec_token_ids and not request.is_prefill_chunk:
                request.spec_token_ids = [int(t) for t in spec_token_ids[rid]]
        return finished

    def __repr__(self) -> str:
        return (
            f"Scheduler(step={self.step}, running={[r.request_id for r in self.running]}, "
            f"waiting={[r.request_id for r in self.waiting]})"
        )


__all__ = ["Scheduler", "SchedulerError"]
