"""The pool of state/KV blocks, with block 0 reserved as the null block.

Mirrors ``vllm/v1/core/block_pool.py``: at start-up the pool pops the first
free block and keeps it as ``null_block`` (block id 0, ``NULL_BLOCK_ID``). It
is never handed out, so padded rows can point at it and a guarded kernel can
skip it. Allocation takes from the head of the free queue and freed blocks
go to its tail (FIFO), as in vLLM's ``FreeKVCacheBlockQueue``: a block freed
now is handed out again only after the blocks that were already free.
"""

from __future__ import annotations

from collections import deque
from typing import Iterable

from .constants import NULL_BLOCK_ID


class BlockPoolError(ValueError):
    """A block id or request that the pool cannot honour."""


class BlockPool:
    """``num_blocks`` blocks; block 0 is the null block, the rest are allocatable."""

    def __init__(self, num_blocks: int) -> None:
        if not isinstance(num_blocks, int) or num_blocks < 2:
            raise BlockPoolError(
                f"num_blocks must be an int >= 2 (block 0 is the null block), got {num_blocks!r}"
            )
        self.num_blocks = num_blocks
        self.null_block_id = NULL_BLOCK_ID
        self._free: deque[int] = deque(range(num_blocks))
        null = self._free.popleft()
        assert null == NULL_BLOCK_ID
        self._owner: dict[int, str | None] = {}

    # -- queries ----------------------------------------------------------
    def get_num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_allocatable_blocks(self) -> int:
        return self.num_blocks - 1

    def is_allocated(self, block_id: int) -> bool:
        return block_id in self._owner

    def owner_of(self, block_id: int) -> str | None:
        """The request a block was allocated for, or None when free/null/anonymous."""
        self._check_range(block_id, "block_id")
        return self._owner.get(block_id)

    def free_block_ids(self) -> list[int]:
        """Free blocks in the order they will be handed out."""
        return list(self._free)

    def allocated_block_ids(self) -> list[int]:
        return sorted(self._owner)

    # -- mutation ---------------------------------------------------------
    def allocate(self, num_blocks: int, owner: str | None = None) -> list[int]:
        """Take ``num_blocks`` blocks from the head of the free queue."""
        if not isinstance(num_blocks, int) or num_blocks < 0:
            raise BlockPoolError(f"num_blocks must be a non-negative int, got {num_blocks!r}")
        if num_blocks > len(self._free):
            raise BlockPoolError(
                f"out of blocks: asked for {num_blocks}, {len(self._free)} free of "
                f"{self.num_allocatable_blocks} allocatable (owner={owner!r})"
            )
        ids = [self._free.popleft() for _ in range(num_blocks)]
        for b in ids:
            self._owner[b] = owner
        return ids

    def free(self, block_ids: Iterable[int]) -> None:
        """Return blocks to the tail of the free queue (all-or-nothing)."""
        ids = [int(b) for b in block_ids]
        seen: set[int] = set()
        for b in ids:
            self._check_range(b, "block_ids")
            if b == NULL_BLOCK_ID:
                raise BlockPoolError("block 0 is the null block: it is never allocated, never freed")
            if b in seen:
                raise BlockPoolError(f"block {b} appears twice in one free() call")
            if b not in self._owner:
                raise BlockPoolError(f"double free or foreign block: block {b} is not allocated")
            seen.add(b)
        for b in ids:
            del self._owner[b]
            self._free.append(b)

    def _check_range(self, block_id: int, name: str) -> None:
        if not (0 <= int(block_id) < self.num_blocks):
            raise BlockPoolError(
                f"{name}: block id {block_id} out of range [0, {self.num_blocks})"
            )

    def __repr__(self) -> str:
        return (
            f"BlockPool(num_blocks={self.num_blocks}, free={len(self._free)}, "
            f"allocated={len(self._owner)})"
        )


__all__ = ["BlockPool", "BlockPoolError"]
