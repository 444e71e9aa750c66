"""What the scheduler knows about one request.

Mirrors ``vllm/v1/request.py`` (``Request``, ``RequestStatus``), reduced to
what state management needs: token ids, how many of them have been computed,
the drafts proposed for the next step, and the request's blocks.

``num_computed_tokens`` counts tokens whose state/KV is in the cache. As in
vLLM the scheduler advances it when it *schedules* tokens (so a chunked
prefill can be scheduled again at once) and corrects it back by the rejected
drafts when the step's output comes in; the last sampled token is never
computed yet, so a decoding request has ``num_computed_tokens ==
num_tokens - 1`` between steps.
"""

from __future__ import annotations

import enum
from typing import Sequence


class RequestStatus(enum.IntEnum):
    """Ordered as upstream: every status after ``PREEMPTED`` is a finished one."""

    WAITING = enum.auto()
    RUNNING = enum.auto()
    PREEMPTED = enum.auto()
    FINISHED_LENGTH = enum.auto()  # upstream FINISHED_LENGTH_CAPPED: max_tokens or max_model_len
    FINISHED_ABORTED = enum.auto()

    @staticmethod
    def is_finished(status: "RequestStatus") -> bool:
        return status > RequestStatus.PREEMPTED


def _check_int(name: str, value: object, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


class Request:
    """One generation request.

    Fields: ``output_token_ids``, ``num_computed_tokens``, ``status``,
    ``spec_token_ids`` (drafts to verify in the next step), ``num_cached_tokens``
    (prefix-cache hit at first scheduling; -1 until then, as upstream),
    ``block_ids`` (the request's blocks of its single KV-cache group, kept in
    sync by the KV-cache manager), ``block_hashes`` (chained hashes of its full
    blocks, filled in by the manager), ``num_preemptions``, ``is_prefill_chunk``
    (the last scheduled chunk did not reach the end of the known tokens).
    """

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: Sequence[int],
        max_tokens: int,
        *,
        arrival: int = 0,
    ) -> None:
        if not isinstance(request_id, str) or not request_id:
            raise ValueError(f"request_id must be a non-empty str, got {request_id!r}")
        prompt = list(prompt_token_ids)
        if not prompt:
            raise ValueError(f"request {request_id!r}: the prompt is empty")
        for t in prompt:
            if not isinstance(t, int) or isinstance(t, bool) or t < 0:
                raise ValueError(f"request {request_id!r}: token ids must be ints >= 0, got {t!r}")
        self.request_id = request_id
        self.prompt_token_ids: list[int] = prompt
        self.max_tokens = _check_int(f"request {request_id!r}: max_tokens", max_tokens, 1)
        self.arrival = arrival

        self.output_token_ids: list[int] = []
        self.num_computed_tokens = 0
        self.status = RequestStatus.WAITING
        self.spec_token_ids: list[int] = []
        self.num_cached_tokens = -1
        self.block_ids: list[int] = []
        self.block_hashes: list = []
        self.num_preemptions = 0
        self.is_prefill_chunk = False

    # -- derived counts ---------------------------------------------------
    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        """Prompt plus output tokens (drafts not included)."""
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_tokens_with_spec(self) -> int:
        return self.num_tokens + len(self.spec_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        """A fresh list: prompt then outputs."""
        return self.prompt_token_ids + self.output_token_ids

    @property
    def is_finished(self) -> bool:
        return RequestStatus.is_finished(self.status)

    def append_output_token_ids(self, token_ids: int | Sequence[int]) -> None:
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        for t in token_ids:
            if not isinstance(t, int) or isinstance(t, bool) or t < 0:
                raise ValueError(f"request {self.request_id!r}: token ids must be ints >= 0, got {t!r}")
            self.output_token_ids.append(t)

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, status={self.status.name}, prompt={self.num_prompt_tokens}, "
            f"output={self.num_output_tokens}, computed={self.num_computed_tokens}, "
            f"spec={len(self.spec_token_ids)}, blocks={self.block_ids})"
        )


__all__ = ["Request", "RequestStatus"]
