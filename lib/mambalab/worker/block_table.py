"""Per-request block tables: a CPU mirror the scheduler edits, a device copy kernels read.

Mirrors ``vllm/v1/worker/block_table.py`` as in vLLM 0.33. Only the CPU side
(numpy view) is mutated by ``add_row``/``append_row``/``clear_row``/
``move_row``/``swap_row``; ``commit_block_table(num_reqs)`` copies the first
``num_reqs`` rows to the device, and rows past it keep whatever the device
already held. That last sentence is half of bug #37728.

Two fixes of the family live here, where upstream put them:

* ``clear_row`` (#37728, v0.19): zero a removed request's row, CPU side only
  (the device copy is refreshed by the next commit).
* ``move_row`` clears its source after copying it (#49757, v0.27): before, the
  row that ``condense`` vacated kept a duplicate of a live request's block ids
  (switch ``move-row-stale-source``, v0.19 - v0.26 behaviour).

As upstream (0.33 too), ``move_row`` copies only the source's
``num_blocks_per_row`` entries: the target's tail beyond them keeps the
previous occupant's ids, and only the count says the row is shorter (#39591,
closed unmerged, proposed zeroing it).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from mambalab.worker.buffers import CpuGpuBuffer
from mambalab.lab.bugs import BugConfig, resolve
from mambalab.constants import NULL_BLOCK_ID, PAD_SLOT_ID
from mambalab.device import DEVICE
from mambalab.core.kv_cache_interface import KVCacheSpec


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class BlockTable:
    """One KV-cache group's table of block ids, ``(max_num_reqs, max_num_blocks_per_req)`` int32."""

    def __init__(
        self,
        block_size: int,
        max_num_reqs: int,
        max_num_blocks_per_req: int,
        max_num_batched_tokens: int,
        device: torch.device | str = DEVICE,
        num_blocks: int | None = None,
        bugs: BugConfig | None = None,
    ) -> None:
        for name, value in (
            ("block_size", block_size),
            ("max_num_reqs", max_num_reqs),
            ("max_num_blocks_per_req", max_num_blocks_per_req),
            ("max_num_batched_tokens", max_num_batched_tokens),
        ):
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.block_size = int(block_size)
        self.max_num_reqs = int(max_num_reqs)
        self.max_num_blocks_per_req = int(max_num_blocks_per_req)
        self.max_num_batched_tokens = int(max_num_batched_tokens)
        self.num_blocks = num_blocks  # when given, block ids are range-checked
        self.device = torch.device(device)
        self.bugs = resolve(bugs)

        self.block_table = CpuGpuBuffer(  # banded: a decode reads column -1 of row 0 (mambalab/guard_band.py)
            self.max_num_reqs, self.max_num_blocks_per_req, dtype=torch.int32, device=self.device, banded=True
        )
        self.num_blocks_per_row = np.zeros(self.max_num_reqs, dtype=np.int32)
        self.slot_mapping = CpuGpuBuffer(
            self.max_num_batched_tokens, dtype=torch.int64, device=self.device, fill=PAD_SLOT_ID
        )

    # -- checks -----------------------------------------------------------
    def _check_row(self, row_idx: int, name: str = "row_idx") -> int:
        if not isinstance(row_idx, (int, np.integer)) or not 0 <= row_idx < self.max_num_reqs:
            raise IndexError(f"{name}={row_idx!r} out of range [0, {self.max_num_reqs})")
        return int(row_idx)

    def _check_ids(self, block_ids: Sequence[int]) -> np.ndarray:
        ids = np.asarray(list(block_ids), dtype=np.int64)
        if ids.ndim != 1:
            raise ValueError(f"block_ids must be a flat sequence of ints, got shape {ids.shape}")
        if ids.size and ids.min() < 0:
            raise ValueError(
                f"block_ids: negative block id {int(ids.min())}; block tables hold block ids "
                f"(the null block is {NULL_BLOCK_ID}), never PAD_SLOT_ID"
            )
        if self.num_blocks is not None and ids.size and ids.max() >= self.num_blocks:
            raise ValueError(
                f"block_ids: block id {int(ids.max())} out of range [0, {self.num_blocks})"
            )
        return ids.astype(np.int32)

    # -- CPU-side edits ---------------------------------------------------
    def append_row(self, block_ids: Sequence[int], row_idx: int) -> None:
        row_idx = self._check_row(row_idx)
        ids = self._check_ids(block_ids)
        if ids.size == 0:
            return
        start = int(self.num_blocks_per_row[row_idx])
        end = start + ids.size
        if end > self.max_num_blocks_per_req:
            raise ValueError(
                f"row {row_idx}: {end} blocks exceed max_num_blocks_per_req="
                f"{self.max_num_blocks_per_req}"
            )
        self.block_table.np[row_idx, start:end] = ids
        self.num_blocks_per_row[row_idx] = end

    def add_row(self, block_ids: Sequence[int], row_idx: int) -> None:
        row_idx = self._check_row(row_idx)
        self.num_blocks_per_row[row_idx] = 0
        self.append_row(block_ids, row_idx)

    def clear_row(self, row_idx: int) -> None:
        """Zero the row's used entries (they become the null block) and its count (#37728)."""
        row_idx = self._check_row(row_idx)
        n = int(self.num_blocks_per_row[row_idx])
        self.block_table.np[row_idx, :n] = NULL_BLOCK_ID
        self.num_blocks_per_row[row_idx] = 0

    def move_row(self, src: int, tgt: int) -> None:
        """Copy row ``src``'s ``num_blocks`` entries to ``tgt``, then clear ``src`` (#49757, v0.27).

        Under ``move-row-stale-source`` (v0.19 - v0.26) the source is left as it was: a
        second copy of a live request's block ids at a row that no request owns. The
        target's tail past ``num_blocks`` is never touched (as upstream, #39591 unmerged).
        """
        src = self._check_row(src, "src")
        tgt = self._check_row(tgt, "tgt")
        n = int(self.num_blocks_per_row[src])
        self.block_table.np[tgt, :n] = self.block_table.np[src, :n]
        self.num_blocks_per_row[tgt] = n
        if not self.bugs.has("move-row-stale-source"):
            self.block_table.np[src, :n] = NULL_BLOCK_ID
            self.num_blocks_per_row[src] = 0

    def swap_row(self, src: int, tgt: int) -> None:
        src = self._check_row(src, "src")
        tgt = self._check_row(tgt, "tgt")
        self.num_blocks_per_row[[src, tgt]] = self.num_blocks_per_row[[tgt, src]]
        self.block_table.np[[src, tgt]] = self.block_table.np[[tgt, src]]

    # -- device side ------------------------------------------------------
    def commit_block_table(self, num_reqs: int) -> None:
        """Copy rows ``[:num_reqs]`` to the device; later rows keep their old device contents."""
        if not isinstance(num_reqs, (int, np.integer)) or not 0 <= num_reqs <= self.max_num_reqs:
            raise ValueError(f"num_reqs={num_reqs!r} out of range [0, {self.max_num_reqs}]")
        self.block_table.copy_to_gpu(int(num_reqs))

    def compute_slot_mapping(self, req_indices: np.ndarray, positions: np.ndarray) -> None:
        """``slot = block_table[req, pos // bs] * bs + pos % bs``; the tail is ``PAD_SLOT_ID``."""
        req_indices = np.asarray(req_indices, dtype=np.int64)
        positions = np.asarray(positions, dtype=np.int64)
        if req_indices.shape != positions.shape or req_indices.ndim != 1:
            raise ValueError(
                f"req_indices {req_indices.shape} and positions {positions.shape} must be equal 1-D"
            )
        n = req_indices.shape[0]
        if n > self.max_num_batched_tokens:
            raise ValueError(f"{n} tokens exceed max_num_batched_tokens={self.max_num_batched_tokens}")
        if n and (req_indices.min() < 0 or req_indices.max() >= self.max_num_reqs):
            raise IndexError(f"req_indices out of range [0, {self.max_num_reqs})")
        cols = positions // self.block_size
        if n and (positions.min() < 0 or cols.max() >= self.max_num_blocks_per_req):
            raise ValueError(
                f"positions out of range for {self.max_num_blocks_per_req} blocks of {self.block_size}"
            )
        block_numbers = self.block_table.np[req_indices, cols].astype(np.int64)
        self.slot_mapping.np[:n] = block_numbers * self.block_size + positions % self.block_size
        self.slot_mapping.np[n:] = PAD_SLOT_ID

    def commit_slot_mapping(self, num_tokens: int) -> None:
        """Copy ``[:num_tokens]`` to the device and pad the device tail with ``PAD_SLOT_ID``."""
        self.slot_mapping.copy_to_gpu(num_tokens)
        self.slot_mapping.gpu[num_tokens:].fill_(PAD_SLOT_ID)

    def get_device_tensor(self, num_reqs: int) -> torch.Tensor:
        """The device table's first ``num_reqs`` rows (a view: writes land in the persistent table)."""
        return self.block_table.gpu[:num_reqs]

    def get_cpu_tensor(self) -> torch.Tensor:
        return self.block_table.cpu

    def get_numpy_array(self) -> np.ndarray:
        return self.block_table.np

    def row(self, row_idx: int) -> list[int]:
        """The used entries of one CPU row."""
        row_idx = self._check_row(row_idx)
        return self.block_table.np[row_idx, : self.num_blocks_per_row[row_idx]].tolist()


class MultiGroupBlockTable:
    """One :class:`BlockTable` per KV-cache group, every call fanned out.

    Widths come from each group's spec: attention ``cdiv(max_model_len, bs)``,
    Mamba ``(cdiv(max_model_len, bs) if prefix caching else 1) + num_speculative_blocks``.
    """

    def __init__(
        self,
        max_num_reqs: int,
        max_model_len: int,
        max_num_batched_tokens: int,
        kv_cache_specs: Sequence[KVCacheSpec],
        device: torch.device | str = DEVICE,
        num_blocks: int | None = None,
        bugs: BugConfig | None = None,
    ) -> None:
        if not kv_cache_specs:
            raise ValueError("kv_cache_specs: at least one KV-cache group is needed")
        self.kv_cache_specs = list(kv_cache_specs)
        self.block_tables = [
            BlockTable(
                spec.block_size,
                max_num_reqs,
                spec.max_num_blocks_per_req(max_model_len),
                max_num_batched_tokens,
                device,
                num_blocks,
                bugs,
            )
            for spec in self.kv_cache_specs
        ]

    def _per_group(self, block_ids: Sequence[Sequence[int]]) -> Sequence[Sequence[int]]:
        if len(block_ids) != len(self.block_tables):
            raise ValueError(
                f"block_ids has {len(block_ids)} groups, the table has {len(self.block_tables)}"
            )
        return block_ids

    def append_row(self, block_ids: Sequence[Sequence[int]], row_idx: int) -> None:
        for bt, ids in zip(self.block_tables, self._per_group(block_ids)):
            bt.append_row(ids, row_idx)

    def add_row(self, block_ids: Sequence[Sequence[int]], row_idx: int) -> None:
        for bt, ids in zip(self.block_tables, self._per_group(block_ids)):
            bt.add_row(ids, row_idx)

    def clear_row(self, row_idx: int) -> None:
        for bt in self.block_tables:
            bt.clear_row(row_idx)

    def move_row(self, src: int, tgt: int) -> None:
        for bt in self.block_tables:
            bt.move_row(src, tgt)

    def swap_row(self, src: int, tgt: int) -> None:
        for bt in self.block_tables:
            bt.swap_row(src, tgt)

    def commit_block_table(self, num_reqs: int) -> None:
        for bt in self.block_tables:
            bt.commit_block_table(num_reqs)

    def compute_slot_mapping(self, req_indices: np.ndarray, positions: np.ndarray) -> None:
        for bt in self.block_tables:
            bt.compute_slot_mapping(req_indices, positions)

    def commit_slot_mapping(self, num_tokens: int) -> None:
        for bt in self.block_tables:
            bt.commit_slot_mapping(num_tokens)

    def __getitem__(self, idx: int) -> BlockTable:
        return self.block_tables[idx]

    def __len__(self) -> int:
        return len(self.block_tables)


__all__ = ["BlockTable", "MultiGroupBlockTable", "cdiv"]
