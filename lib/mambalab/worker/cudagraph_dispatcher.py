"""CUDA-graph capture sizes and the padding of a batch to one of them.

Mirrors the capture-size list of ``VllmConfig._set_cudagraph_sizes``
(``vllm/config/vllm.py``), its spec-decode adjustment
``CompilationConfig.adjust_cudagraph_sizes_for_spec_decode``
(``vllm/config/compilation.py``), both as in vLLM 0.33 (non-Blackwell ceiling
512, default performance mode), and the dispatch of
``vllm/v1/cudagraph_dispatcher.py`` / ``gpu_model_runner.py``: a
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
    """``[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)``, ``max = min(2 * seqs * qlen, 512)``.

    The token grid of ``_set_cudagraph_sizes`` alone (v0.22 - v0.28 without spec decode);
    :func:`cudagraph_capture_sizes` is the whole v0.33 rule."""
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


DEFAULT_MAX_GRAPH_SIZE = 512  # 1024 on data-centre Blackwell (capability family 100), not modelled


def _request_grid(max_reqs: int) -> list[int]:
    return sorted(set([1, 2, 4] + list(range(8, 256, 8)) + list(range(256, max_reqs + 1, 16))
                      + [max_reqs]))


def set_cudagraph_sizes(
    max_num_seqs: int,
    max_num_batched_tokens: int,
    uniform_decode_query_len: int = 1,
    max_capture_size: int | None = None,
) -> tuple[list[int], int]:
    """``(sizes, max_cudagraph_capture_size)`` as ``VllmConfig._set_cudagraph_sizes`` (v0.33).

    Ceiling: ``min(max_num_seqs * q * 2, 512)``, then ``min(max_num_batched_tokens, .)``
    (unless given). Sizes: the token grid ``[1, 2, 4] + range(8, 256, 8) +
    range(256, max + 1, 16)`` up to the ceiling, ``max_num_batched_tokens`` if it fits,
    and the uniform-decode sizes (v0.29+): ``n * q`` for ``n`` in the request grid
    ``[1, 2, 4] + range(8, 256, 8) + range(256, max_reqs + 1, 16) + [max_reqs]`` that fit
    (``q > 1``), or ``max_num_seqs`` if it fits (``q == 1``, v0.31+). Sorted, deduplicated.
    """
    q = uniform_decode_query_len
    if max_num_seqs < 1 or q < 1 or max_num_batched_tokens < 1:
        raise ValueError(f"max_num_seqs={max_num_seqs}, max_num_batched_tokens={max_num_batched_tokens} "
                         f"and uniform_decode_query_len={q} must be positive")
    if max_capture_size is None:
        max_capture_size = min(max_num_seqs * q * 2, DEFAULT_MAX_GRAPH_SIZE)
        max_capture_size = min(max_num_batched_tokens, max_capture_size)
    top = max_capture_size
    sizes = {s for s in [1, 2, 4] if s <= top}
    sizes |= set(range(8, min(top + 1, 256), 8)) | set(range(256, top + 1, 16))
    if max_num_batched_tokens <= top:
        sizes.add(max_num_batched_tokens)
    max_reqs = min(max_num_seqs, DEFAULT_MAX_GRAPH_SIZE)
    if q > 1:
        sizes |= {n * q for n in _request_grid(max_reqs) if n * q <= top}
    elif max_num_seqs <= top:
        sizes.add(max_num_seqs)
    return sorted(sizes), top


def adjust_cudagraph_sizes_for_spec_decode(
    sizes: Sequence[int], max_capture_size: int, uniform_decode_query_len: int
) -> tuple[list[int], int]:
    """``CompilationConfig.adjust_cudagraph_sizes_for_spec_decode`` (v0.33).

    No-op without sizes or with ``q <= 1``. Otherwise every size is rounded *up* to a
    multiple of ``q`` and kept if it stays within ``max_capture_size``; if none is left but
    ``q <= max_capture_size`` the list is ``[q]``, else ``ValueError``. The new ceiling is
    the largest size kept. (Upstream calls it only for the V1 runner with FULL decode
    graphs and ``q > 1``.)
    """
    q = uniform_decode_query_len
    if not sizes or q <= 1:
        return list(sizes), max_capture_size
    rounded = sorted({-(-s // q) * q for s in sizes if -(-s // q) * q <= max_capture_size})
    if not rounded:
        if q > max_capture_size:
            raise ValueError(f"no CUDA-graph size is a multiple of uniform_decode_query_len={q} "
                             f"within max_cudagraph_capture_size={max_capture_size}")
        rounded = [q]
    return rounded, rounded[-1]


def cudagraph_capture_sizes(
    max_num_seqs: int, max_num_batched_tokens: int, num_speculative_tokens: int = 0,
    max_capture_size: int | None = None,
) -> list[int]:
    """``compilation_config.cudagraph_capture_sizes`` as v0.33's V1 runner ends up with it: the
    list of ``vllm/config/vllm.py::_set_cudagraph_sizes``, adjusted for spec decode (round up
    to multiples of ``1 + num_spec``) by ``adjust_cudagraph_sizes_for_spec_decode``. Mixed
    batches pad to these (PIECEWISE); :func:`full_decode_capture_sizes` picks the FULL ones.
    """
    q = 1 + num_speculative_tokens
    sizes, top = set_cudagraph_sizes(max_num_seqs, max_num_batched_tokens, q, max_capture_size)
    return adjust_cudagraph_sizes_for_spec_decode(sizes, top, q)[0]


def full_decode_capture_sizes(
    capture_sizes: Sequence[int], max_num_seqs: int, uniform_decode_query_len: int = 1
) -> list[int]:
    """The sizes that get a FULL uniform-decode graph: the capture sizes in
    ``[q, q * max_num_seqs]`` (``CudagraphDispatcher.initialize_cudagraph_keys``,
    ``vllm/v1/cudagraph_dispatcher.py``, v0.33)."""
    q = uniform_decode_query_len
    return sorted(s for s in capture_sizes if q <= s <= q * max_num_seqs)


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

    ``capture_sizes`` is the whole list (mixed batches pad to it, PIECEWISE); a
    uniform decode batch replays FULL when its padded size is a FULL decode size
    (at most ``(1 + num_spec) * max_num_seqs``), else PIECEWISE, as upstream's key lookup.
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
    if uniform_decode and padded <= uqlen * max_num_seqs:  # a FULL decode key exists for this size
        num_reqs_padded = max(num_reqs, min(padded // uqlen, max_num_seqs))
        return BatchDescriptor(num_tokens, num_reqs, padded, num_reqs_padded, True, uqlen,
                               CUDAGraphMode.FULL)
    return BatchDescriptor(num_tokens, num_reqs, padded, num_reqs, False, uqlen,
                           CUDAGraphMode.PIECEWISE)


# NONE < PIECEWISE < FULL: the order the DP ranks take the minimum in (its index travels in the all-reduce)
CUDAGRAPH_MODE_ORDER = (CUDAGraphMode.NONE, CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL)


def synchronize_cudagraph_mode(modes: Sequence[CUDAGraphMode]) -> CUDAGraphMode:
    """The mode every DP rank runs: the minimum of the ranks' own (NONE < PIECEWISE < FULL),
    as ``_post_process_cudagraph_mode`` in ``vllm/v1/worker/dp_utils.py``: one rank with a
    mixed batch keeps every rank off its FULL graph, the idle ranks' dummy batches included."""
    if not modes:
        raise ValueError("modes is empty")
    return min(modes, key=CUDAGRAPH_MODE_ORDER.index)


def cap_cudagraph_mode(desc: BatchDescriptor, across_dp: CUDAGraphMode | None) -> BatchDescriptor:
    """``desc`` run in at most the DP ranks' agreed mode: a FULL batch becomes PIECEWISE (tokens
    padded, requests not), anything becomes NONE (no padding) when the ranks agreed on NONE."""
    if across_dp is None or CUDAGRAPH_MODE_ORDER.index(desc.cudagraph_mode) <= CUDAGRAPH_MODE_ORDER.index(across_dp):
        return desc
    if across_dp is CUDAGraphMode.PIECEWISE:
        return BatchDescriptor(desc.num_tokens, desc.num_reqs, desc.num_tokens_padded, desc.num_reqs,
                               desc.uniform_decode, desc.uniform_decode_query_len, CUDAGraphMode.PIECEWISE)
    return BatchDescriptor(desc.num_tokens, desc.num_reqs, desc.num_tokens, desc.num_reqs,
                           desc.uniform_decode, desc.uniform_decode_query_len, CUDAGraphMode.NONE)


def coordinate_batch_across_dp(num_tokens_per_rank: Sequence[int], capture_sizes: Sequence[int]) -> int:
    """The token count every DP rank pads to: the max rank's, padded to a capture size."""
    if not num_tokens_per_rank:
        raise ValueError("num_tokens_per_rank is empty")
    top = max(num_tokens_per_rank)
    padded = pad_for_cudagraph(top, capture_sizes) if top > 0 else 0
    return top if padded is None else padded


__all__ = [
    "CUDAGraphMode",
    "set_cudagraph_sizes",
    "adjust_cudagraph_sizes_for_spec_decode",
    "cudagraph_capture_sizes",
    "full_decode_capture_sizes",
    "BatchDescriptor",
    "default_capture_sizes",
    "pad_for_cudagraph",
    "dispatch",
    "coordinate_batch_across_dp",
    "synchronize_cudagraph_mode",
    "CUDAGRAPH_MODE_ORDER",
    "cap_cudagraph_mode",
]
