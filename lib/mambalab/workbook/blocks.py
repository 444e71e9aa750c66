"""Whose a block is, in the words the traces and the hand-driven world print: a request's, free and
kept in the prefix cache, free, the null block, or outside the pool."""

from __future__ import annotations

from typing import Mapping

from mambalab.constants import NULL_BLOCK_ID
from mambalab.core.block_pool import BlockPool


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


def _owners(manager) -> dict[int, str]:
    return {int(b): rid for rid, blocks in manager.req_to_blocks.items() for b in blocks if b != NULL_BLOCK_ID}
