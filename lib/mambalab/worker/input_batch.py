"""The worker's persistent batch: one row per running request, stale data and all.

Mirrors ``vllm/v1/worker/gpu_input_batch.py`` (``InputBatch``,
``CachedRequestState``). Rows are reused, not rebuilt: ``remove_request``
leaves a hole and ``condense`` moves the highest live row into the lowest
hole. What is left behind is exactly what vLLM leaves behind, because three
of the catalogue's bugs live there:

* ``remove_request`` does not reset ``num_computed_tokens_cpu`` or
  ``num_prompt_tokens`` of the row (an aborted mid-prefill request leaves
  ``computed < prompt`` behind: #41873). Its block-table row is cleared only
  since #37728 (switch ``stale-rows``).
* ``condense`` copies a row down and leaves the source row's counts in place;
  its block-table row is cleared by ``BlockTable.move_row`` since #49757 (v0.27;
  switch ``move-row-stale-source``: before, a duplicate of a live request's
  blocks stayed there).

``num_accepted_tokens_cpu`` starts at 1 and ``add_request`` resets it to 1, as
upstream's V1 ``InputBatch`` has done in every release the lab mirrors (the
Model Runner V2 reset in all modes is #48132, v0.26). No switch touches it:
the ``zero-accepted`` bug (#48475, open) is the GDN kernels' unbounded column
load, and the zero it needs comes from a padded row (``runner_inputs``).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from mambalab.worker.block_table import MultiGroupBlockTable
from mambalab.lab.bugs import BugConfig, resolve
from mambalab.device import DEVICE
from mambalab.core.kv_cache_interface import KVCacheSpec


@dataclass
class CachedRequestState:
    """What the worker keeps about a scheduled request (mirrors vLLM's dataclass)."""

    req_id: str
    prompt_token_ids: list[int]
    block_ids: tuple[list[int], ...]
    num_computed_tokens: int = 0
    output_token_ids: list[int] = field(default_factory=list)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)


class InputBatch:
    def __init__(
        self,
        max_num_reqs: int,
        max_model_len: int,
        max_num_batched_tokens: int,
        kv_cache_specs: Sequence[KVCacheSpec],
        device: torch.device | str = DEVICE,
        bugs: BugConfig | None = None,
        num_blocks: int | None = None,
    ) -> None:
        for name, value in (
            ("max_num_reqs", max_num_reqs),
            ("max_model_len", max_model_len),
            ("max_num_batched_tokens", max_num_batched_tokens),
        ):
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.max_num_reqs = max_num_reqs
        self.max_model_len = max_model_len
        self.max_num_batched_tokens = max_num_batched_tokens
        self.bugs = resolve(bugs)

        self._req_ids: list[str | None] = []
        self.req_id_to_index: dict[str, int] = {}
        self.req_output_token_ids: list[list[int] | None] = []
        self._removed: list[int] = []  # heap of holes (vLLM's batch_update_builder.removed)

        self.token_ids_cpu = np.zeros((max_num_reqs, max_model_len), dtype=np.int32)
        self.num_tokens_no_spec = np.zeros(max_num_reqs, dtype=np.int32)
        self.num_prompt_tokens = np.zeros(max_num_reqs, dtype=np.int32)
        self.num_computed_tokens_cpu = np.zeros(max_num_reqs, dtype=np.int32)
        # Starts at 1 (upstream: torch.ones), whatever the bug configuration.
        self.num_accepted_tokens_cpu = np.ones(max_num_reqs, dtype=np.int32)

        self.block_table = MultiGroupBlockTable(
            max_num_reqs, max_model_len, max_num_batched_tokens, kv_cache_specs, device, num_blocks,
            bugs=self.bugs,
        )

    # -- views ------------------------------------------------------------
    @property
    def num_reqs(self) -> int:
        return len(self.req_id_to_index)

    @property
    def req_ids(self) -> list[str]:
        """Live request ids in row order (valid after ``condense``)."""
        return [r for r in self._req_ids if r is not None]

    def row_of(self, req_id: str) -> int:
        if req_id not in self.req_id_to_index:
            raise KeyError(f"request {req_id!r} is not in the batch")
        return self.req_id_to_index[req_id]

    # -- add / remove -----------------------------------------------------
    def add_request(self, request: CachedRequestState) -> int:
        """Place a request in the lowest hole left by a removal, else append it."""
        req_id = request.req_id
        if req_id in self.req_id_to_index:
            raise ValueError(f"request {req_id!r} is already in the batch")
        if request.num_tokens > self.max_model_len:
            raise ValueError(
                f"request {req_id!r}: {request.num_tokens} tokens exceed max_model_len={self.max_model_len}"
            )
        if not 0 <= request.num_computed_tokens <= request.num_tokens:
            raise ValueError(
                f"request {req_id!r}: num_computed_tokens={request.num_computed_tokens} "
                f"outside [0, {request.num_tokens}]"
            )
        # Validate the block ids before anything is written.
        for bt, ids in zip(self.block_table.block_tables, self.block_table._per_group(request.block_ids)):
            if len(bt._check_ids(ids)) > bt.max_num_blocks_per_req:
                raise ValueError(
                    f"request {req_id!r}: {len(ids)} blocks exceed max_num_blocks_per_req="
                    f"{bt.max_num_blocks_per_req}"
                )
        if self._removed:
            req_index = heapq.heappop(self._removed)
        else:
            req_index = self.num_reqs
            if req_index >= self.max_num_reqs:
                raise ValueError(f"the batch is full (max_num_reqs={self.max_num_reqs})")

        if req_index == len(self._req_ids):
            self._req_ids.append(req_id)
            self.req_output_token_ids.append(request.output_token_ids)
        else:
            self._req_ids[req_index] = req_id
            self.req_output_token_ids[req_index] = request.output_token_ids
        self.req_id_to_index[req_id] = req_index

        n_prompt = request.num_prompt_tokens
        n_total = request.num_tokens
        self.token_ids_cpu[req_index, :n_prompt] = request.prompt_token_ids
        self.token_ids_cpu[req_index, n_prompt:n_total] = request.output_token_ids
        self.num_tokens_no_spec[req_index] = n_total
        self.num_prompt_tokens[req_index] = n_prompt
        self.num_computed_tokens_cpu[req_index] = request.num_computed_tokens
        self.num_accepted_tokens_cpu[req_index] = 1  # not the previous tenant's count (upstream V1)
        self.block_table.add_row(request.block_ids, req_index)
        return req_index

    def remove_request(self, req_id: str) -> int | None:
        """Leave a hole; counts stay stale. Since #37728 the block-table row is cleared."""
        req_index = self.req_id_to_index.pop(req_id, None)
        if req_index is None:
            return None
        heapq.heappush(self._removed, req_index)
        self._req_ids[req_index] = None
        self.req_output_token_ids[req_index] = None
        if not self.bugs.has("stale-rows"):
            self.block_table.clear_row(req_index)
        return req_index

    def swap_states(self, i1: int, i2: int) -> None:
        """Swap two live rows completely (used by the decode-first reorder)."""
        for i in (i1, i2):
            if not 0 <= i < len(self._req_ids) or self._req_ids[i] is None:
                raise IndexError(f"swap_states: row {i} is not a live row")
        id1, id2 = self._req_ids[i1], self._req_ids[i2]
        self._req_ids[i1], self._req_ids[i2] = id2, id1
        self.req_id_to_index[id1], self.req_id_to_index[id2] = i2, i1
        self.req_output_token_ids[i1], self.req_output_token_ids[i2] = (
            self.req_output_token_ids[i2],
            self.req_output_token_ids[i1],
        )
        for arr in (
            self.token_ids_cpu,
            self.num_tokens_no_spec,
            self.num_prompt_tokens,
            self.num_computed_tokens_cpu,
            self.num_accepted_tokens_cpu,
        ):
            arr[[i1, i2]] = arr[[i2, i1]]
        self.block_table.swap_row(i1, i2)

    def condense(self) -> None:
        """Fill holes by moving the highest live rows down; the moved-from rows stay stale."""
        if not self._removed:
            return
        num_reqs = self.num_reqs
        if num_reqs == 0:
            self._req_ids.clear()
            self.req_output_token_ids.clear()
            self._removed.clear()
            return
        empty = sorted(self._removed, reverse=True)  # pop() yields the lowest hole
        last = num_reqs + len(empty) - 1
        while empty:
            while last in empty:
                last -= 1
            hole = empty.pop()
            if hole >= last:
                break
            self._move_row(last, hole)
            last -= 1
        self._removed.clear()
        del self._req_ids[num_reqs:]
        del self.req_output_token_ids[num_reqs:]

    def _move_row(self, src: int, dst: int) -> None:
        req_id = self._req_ids[src]
        assert req_id is not None
        self._req_ids[dst] = req_id
        self._req_ids[src] = None
        self.req_output_token_ids[dst] = self.req_output_token_ids[src]
        self.req_output_token_ids[src] = None
        self.req_id_to_index[req_id] = dst
        n = int(self.num_tokens_no_spec[src])
        self.token_ids_cpu[dst, :n] = self.token_ids_cpu[src, :n]
        for arr in (
            self.num_tokens_no_spec,
            self.num_prompt_tokens,
            self.num_computed_tokens_cpu,
            self.num_accepted_tokens_cpu,
        ):
            arr[dst] = arr[src]  # the source keeps its value: stale
        self.block_table.move_row(src, dst)  # clears src since #49757 (in block_table.py, as upstream)

    # -- per-step updates (the runner's _update_states) --------------------
    def append_output_token(self, req_id: str, token_id: int) -> None:
        row = self.row_of(req_id)
        n = int(self.num_tokens_no_spec[row])
        if n >= self.max_model_len:
            raise ValueError(f"request {req_id!r} reached max_model_len={self.max_model_len}")
        self.token_ids_cpu[row, n] = token_id
        self.num_tokens_no_spec[row] = n + 1
        out = self.req_output_token_ids[row]
        assert out is not None
        out.append(int(token_id))

    def is_prefilling(self, num_rows: int) -> np.ndarray:
        """``num_computed_tokens < num_prompt_tokens`` for rows ``[:num_rows]`` (stale rows too)."""
        return self.num_computed_tokens_cpu[:num_rows] < self.num_prompt_tokens[:num_rows]


__all__ = ["InputBatch", "CachedRequestState"]
