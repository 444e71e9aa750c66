"""CUDA-graph capture sizes and the padding of a batch to one of them.

Mirrors the capture-size defaults of ``vllm/config/compilation.py`` and the
dispatch of ``vllm/v1/cudagraph_dispatcher.py`` / ``gpu_model_runner.py``: a
batch of ``num_tokens`` is padded to the next capture size so that a graph
captured for that size can be replayed. For a uniform decode batch (every
request schedules ``uniform_decode_query_len = 1 + num_spec`` tokens) a FULL
graph is used and the *request* count is padded too:
``num_reqs_padded = min(num_tokens_padded // uniform_decode_query_len, max_num_seqs)``.
The padded rows are not requests: what they read is the subject of four of
the five bugs.
"""

from __future__ import annotations

import bisect
import enum
from dataclasses import dataclass
from typing import Sequence


class CUDAGraphMode(enum.Enum):
    NONE = "NONE"  # eager: no padding
    PIECEWISE = "PIECEWISE"  # attention eager, tokens padded, requests not
    FULL = "FULL"  # whole step replayed: tokens and requests padded


def default_capture_sizes(
    max_num_seqs: int, uniform_decode_query_len: int = 1, max_capture_size: int | None = None
) -> list[int]:
    """``[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)``, ``max = min(2 * seqs * qlen, 512)``."""
    if max_num_seqs < 1 or uniform_decode_query_len < 1:
        raise ValueError(
            f"max_num_seqs={max_num_seqs} and uniform_decode_query_len={uniform_decode_query_len} "
            "must be positive"
        )
    if max_capture_size is None:
        max_capture_size = min(2 * max_num_seqs * uniform_decode_query_len, 512)
    if max_capture_size < 1:
        raise ValueError(f"max_capture_size must be positive, got {max_capture_size}")
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, max_capture_size + 1, 16))
    return [s for s in sizes if s <= max_capture_size]


@dataclass(frozen=True)
class BatchDescriptor:
    """How a step runs: the padded sizes and the graph it replays (vLLM's ``BatchDescriptor``)."""

    num_tokens: int
    num_reqs: int
    num_tokens_padded: int
    num_reqs_padded: int
    uniform_decode: bool
    uniform_decode_query_len: int
    cudagraph_mode: CUDAGraphMode

    @property
    def num_padded_reqs(self) -> int:
        return self.num_reqs_padded - self.num_reqs


def pad_for_cudagraph(num_tokens: int, capture_sizes: Sequence[int]) -> int | None:
    """The smallest capture size ``>= num_tokens``, or None when the batch is too big."""
    sizes = sorted(capture_sizes)
    i = bisect.bisect_left(sizes, num_tokens)
    return sizes[i] if i < len(sizes) else None


def dispatch(
    num_tokens: int,
    num_reqs: int,
    *,
    uniform_decode: bool,
    capture_sizes: Sequence[int],
    max_num_seqs: int,
    num_spec_tokens: int = 0,
    num_tokens_across_dp: int | None = None,
) -> BatchDescriptor:
    """Pad a step to a capture size and decide FULL, PIECEWISE or eager.

    ``num_tokens_across_dp`` is the maximum over data-parallel ranks (all
    ranks must replay the same size).
    """
    if num_tokens < 0 or num_reqs < 0:
        raise ValueError(f"num_tokens={num_tokens} and num_reqs={num_reqs} must be >= 0")
    if num_reqs > max_num_seqs:
        raise ValueError(f"num_reqs={num_reqs} exceeds max_num_seqs={max_num_seqs}")
    uqlen = 1 + num_spec_tokens
    target = max(num_tokens, num_tokens_across_dp or 0)
    padded = pad_for_cudagraph(target, capture_sizes) if target > 0 else None
    if padded is None:
        return BatchDescriptor(num_tokens, num_reqs, target, num_reqs, uniform_decode, uqlen,
                               CUDAGraphMode.NONE)
    if uniform_decode:
        num_reqs_padded = max(num_reqs, min(padded // uqlen, max_num_seqs))
        return BatchDescriptor(num_tokens, num_reqs, padded, num_reqs_padded, True, uqlen,
                               CUDAGraphMode.FULL)
    return BatchDescriptor(num_tokens, num_reqs, padded, num_reqs, False, uqlen,
                           CUDAGraphMode.PIECEWISE)


def coordinate_batch_across_dp(num_tokens_per_rank: Sequence[int], capture_sizes: Sequence[int]) -> int:
    """The token count every DP rank pads to: the max rank's, padded to a capture size."""
    if not num_tokens_per_rank:
        raise ValueError("num_tokens_per_rank is empty")
    top = max(num_tokens_per_rank)
    padded = pad_for_cudagraph(top, capture_sizes) if top > 0 else 0
    return top if padded is None else padded


__all__ = [
    "CUDAGraphMode",
    "BatchDescriptor",
    "default_capture_sizes",
    "pad_for_cudagraph",
    "dispatch",
    "coordinate_batch_across_dp",
]
