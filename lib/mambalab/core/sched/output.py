"""What the scheduler hands the worker each step.

Mirrors ``vllm/v1/core/sched/output.py`` (``NewRequestData``,
``CachedRequestData``, ``SchedulerOutput``). Block ids are a tuple with one
list per KV-cache group (here a single Mamba group). Requests resumed after a
preemption come back in ``scheduled_new_reqs`` with their output tokens, as
vLLM's (v2) runner receives them: the worker dropped their rows when they were
preempted and re-adds them like new requests, recomputing prompt + outputs.

Every list here is a copy: mutating the scheduler's requests afterwards does
not change an output already handed out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mambalab.core.request import Request


@dataclass
class NewRequestData:
    """A request the worker has not got in its batch (first scheduled, or resumed)."""

    req_id: str
    prompt_token_ids: list[int]
    block_ids: tuple[list[int], ...]
    num_computed_tokens: int
    output_token_ids: list[int] = field(default_factory=list)

    @classmethod
    def from_request(cls, request: Request, block_ids: tuple[list[int], ...]) -> "NewRequestData":
        return cls(
            req_id=request.request_id,
            prompt_token_ids=list(request.prompt_token_ids),
            block_ids=tuple(list(g) for g in block_ids),
            num_computed_tokens=request.num_computed_tokens,
            output_token_ids=list(request.output_token_ids),
        )


@dataclass
class CachedRequestData:
    """Requests already in the worker's batch: only what changed (column-wise, as upstream)."""

    req_ids: list[str] = field(default_factory=list)
    # Per request: the blocks appended this step (one list per group), or None.
    new_block_ids: list[tuple[list[int], ...] | None] = field(default_factory=list)
    # Per request: num_computed_tokens *before* this step's tokens.
    num_computed_tokens: list[int] = field(default_factory=list)
    num_output_tokens: list[int] = field(default_factory=list)

    @property
    def num_reqs(self) -> int:
        return len(self.req_ids)

    @classmethod
    def make_empty(cls) -> "CachedRequestData":
        return cls()


@dataclass
class SchedulerOutput:
    step: int
    scheduled_new_reqs: list[NewRequestData]
    scheduled_cached_reqs: CachedRequestData
    # req_id -> tokens to compute this step (drafts included).
    num_scheduled_tokens: dict[str, int]
    total_num_scheduled_tokens: int
    # req_id -> the drafts scheduled for verification (absent: no drafts).
    scheduled_spec_decode_tokens: dict[str, list[int]] = field(default_factory=dict)
    # Finished, aborted or preempted since the last step: the worker drops their rows.
    finished_req_ids: set[str] = field(default_factory=set)
    # The preempted ones among them (preempted this step or forced since the last one).
    preempted_req_ids: set[str] = field(default_factory=set)

    @property
    def num_reqs(self) -> int:
        return len(self.num_scheduled_tokens)

    @property
    def scheduled_req_ids(self) -> list[str]:
        """Scheduled request ids in scheduling order (running first, then new/resumed)."""
        return list(self.num_scheduled_tokens)


__all__ = ["NewRequestData", "CachedRequestData", "SchedulerOutput"]
