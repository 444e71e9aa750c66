"""The pool of state/KV blocks, with block 0 reserved as the null block.

Mirrors ``vllm/v1/core/block_pool.py``: at start-up the pool pops the first
free block and keeps it as ``null_block`` (block id 0, ``NULL_BLOCK_ID``). It
is never handed out, so padded rows can point at it and a guarded kernel can
skip it. Allocation takes from the head of the free queue and freed blocks
go to its tail (FIFO), as in vLLM's ``FreeKVCacheBlockQueue``: a block freed
now is handed out again only after the blocks that were already free.

Prefix caching (vLLM's ``cached_block_hash_to_block``):

* ``cache_block(block_id, block_hash)`` registers a *full* block under the
  hash of its contents. The null block is never cached.
* A cached block that is freed (ref count back to 0) goes to the tail of the
  free queue like any other block but **keeps its hash**: it can still be hit.
  Only when the queue hands it out again is the hash dropped (eviction on
  allocation, vLLM's ``_maybe_evict_cached_block``) and ``on_evict`` called.
* ``get_cached_block(block_hash)`` takes a hit back: out of the free queue if
  it was free (ref 0 -> 1), or shared if some request still holds it (ref + 1;
  vLLM's ``touch``). ``free`` decrements, and only a block whose count drops to
  0 returns to the queue (``on_free(block_id, cached)`` is called then).
* Several blocks may carry the same hash (two requests computed the same
  content at once); a lookup returns the one registered first.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Hashable, Iterable

from mambalab.constants import NULL_BLOCK_ID

BlockHash = Hashable


class BlockPoolError(ValueError):
    """A block id or request that the pool cannot honour."""


class BlockPool:
    """``num_blocks`` blocks; block 0 is the null block, the rest are allocatable.

    Hooks (set by the engine, e.g. to poison state pools with NaN):
    ``on_free(block_id, cached)`` when a block's ref count drops to 0, and
    ``on_evict(block_id)`` when a free cached block loses its hash because the
    queue hands it out again.
    """

    def __init__(self, num_blocks: int) -> None:
        if not isinstance(num_blocks, int) or isinstance(num_blocks, bool) or num_blocks < 2:
            raise BlockPoolError(
                f"num_blocks must be an int >= 2 (block 0 is the null block), got {num_blocks!r}"
            )
        self.num_blocks = num_blocks
        self.null_block_id = NULL_BLOCK_ID
        # An insertion-ordered dict is the FIFO queue: popitem(last=False) takes
        # the head, assignment appends at the tail, ``del`` removes a hit from
        # the middle (vLLM uses a doubly linked list for the same O(1) ops).
        self._free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
        null, _ = self._free.popitem(last=False)
        assert null == NULL_BLOCK_ID
        self._ref: dict[int, int] = {}  # allocated block -> ref count (>= 1)
        self._owners: dict[int, list[str | None]] = {}
        self._hash_of: dict[int, BlockHash] = {}  # cached blocks, allocated or free
        self._by_hash: dict[BlockHash, dict[int, None]] = {}
        self.on_free: Callable[[int, bool], None] | None = None
        self.on_evict: Callable[[int], None] | None = None

    # -- queries ----------------------------------------------------------
    def get_num_free_blocks(self) -> int:
        """Free blocks, cached ones included (they are evictable)."""
        return len(self._free)

    @property
    def num_allocatable_blocks(self) -> int:
        return self.num_blocks - 1

    def get_usage(self) -> float:
        """Fraction of allocatable blocks held by requests (vLLM's ``get_usage``)."""
        return 1.0 - len(self._free) / self.num_allocatable_blocks

    def is_allocated(self, block_id: int) -> bool:
        return block_id in self._ref

    def ref_count(self, block_id: int) -> int:
        self._check_range(block_id, "block_id")
        return self._ref.get(block_id, 0)

    def owner_of(self, block_id: int) -> str | None:
        """The request a block was allocated for (first holder), or None when free/null/anonymous."""
        self._check_range(block_id, "block_id")
        owners = self._owners.get(block_id)
        return owners[0] if owners else None

    def owners_of(self, block_id: int) -> list[str | None]:
        """Every holder of a block (more than one for a shared cached block)."""
        self._check_range(block_id, "block_id")
        return list(self._owners.get(block_id, ()))

    def free_block_ids(self) -> list[int]:
        """Free blocks in the order they will be handed out."""
        return list(self._free)

    def allocated_block_ids(self) -> list[int]:
        return sorted(self._ref)

    # -- prefix-cache queries ---------------------------------------------
    def is_cached(self, block_id: int) -> bool:
        return block_id in self._hash_of

    def block_hash(self, block_id: int) -> BlockHash | None:
        self._check_range(block_id, "block_id")
        return self._hash_of.get(block_id)

    @property
    def num_cached_blocks(self) -> int:
        return len(self._hash_of)

    def cached_block_ids(self) -> list[int]:
        return sorted(self._hash_of)

    def lookup_cached_block(self, block_hash: BlockHash) -> int | None:
        """The block cached under ``block_hash`` (no side effect), or None."""
        blocks = self._by_hash.get(block_hash)
        return next(iter(blocks)) if blocks else None

    # -- mutation ---------------------------------------------------------
    def allocate(self, num_blocks: int, owner: str | None = None) -> list[int]:
        """Take ``num_blocks`` blocks from the head of the free queue (evicting their hashes)."""
        if not isinstance(num_blocks, int) or isinstance(num_blocks, bool) or num_blocks < 0:
            raise BlockPoolError(f"num_blocks must be a non-negative int, got {num_blocks!r}")
        if num_blocks > len(self._free):
            raise BlockPoolError(
                f"out of blocks: asked for {num_blocks}, {len(self._free)} free of "
                f"{self.num_allocatable_blocks} allocatable (owner={owner!r})"
            )
        ids = [self._free.popitem(last=False)[0] for _ in range(num_blocks)]
        evicted = [b for b in ids if b in self._hash_of]
        for b in evicted:
            self._uncache(b)
        for b in ids:
            self._ref[b] = 1
            self._owners[b] = [owner]
        if self.on_evict is not None:
            for b in evicted:
                self.on_evict(b)
        return ids

    def free(self, block_ids: Iterable[int], owner: str | None = None) -> None:
        """Drop one reference to each block (all-or-nothing validation).

        A block whose count reaches 0 goes to the tail of the free queue, in
        the order given; a cached block keeps its hash there until evicted.
        ``owner`` names the holder that lets go (default: the latest holder).
        """
        ids = [int(b) for b in block_ids]
        seen: set[int] = set()
        for b in ids:
            self._check_range(b, "block_ids")
            if b == NULL_BLOCK_ID:
                raise BlockPoolError("block 0 is the null block: it is never allocated, never freed")
            if b in seen:
                raise BlockPoolError(f"block {b} appears twice in one free() call")
            if b not in self._ref:
                raise BlockPoolError(f"double free or foreign block: block {b} is not allocated")
            seen.add(b)
        released: list[int] = []
        for b in ids:
            owners = self._owners[b]
            if owner in owners:
                owners.remove(owner)
            else:
                owners.pop()
            self._ref[b] -= 1
            if self._ref[b] == 0:
                del self._ref[b]
                del self._owners[b]
                self._free[b] = None
                released.append(b)
        if self.on_free is not None:
            for b in released:
                self.on_free(b, b in self._hash_of)

    def cache_block(self, block_id: int, block_hash: BlockHash) -> None:
        """Register an allocated, full block under the hash of its contents."""
        self._check_range(block_id, "block_id")
        if block_id == NULL_BLOCK_ID:
            raise BlockPoolError("block 0 is the null block: it is never cached")
        if block_id not in self._ref:
            raise BlockPoolError(f"block {block_id} is not allocated: only held blocks can be cached")
        old = self._hash_of.get(block_id)
        if old is not None:
            if old == block_hash:
                return
            raise BlockPoolError(f"block {block_id} is already cached under another hash")
        self._hash_of[block_id] = block_hash
        self._by_hash.setdefault(block_hash, {})[block_id] = None

    def touch(self, block_ids: Iterable[int], owner: str | None = None) -> None:
        """Take one more reference to cached or held blocks (vLLM's ``touch``).

        A free block leaves the free queue (it must be cached: an uncached free
        block holds nothing worth sharing). The null block is skipped, as its
        ref count is not maintained upstream either.
        """
        ids = [int(b) for b in block_ids if int(b) != NULL_BLOCK_ID]
        for b in ids:
            self._check_range(b, "block_ids")
            if b not in self._ref and b not in self._hash_of:
                raise BlockPoolError(f"block {b} is free and not cached: nothing to touch")
        for b in ids:
            if b in self._ref:
                self._ref[b] += 1
                self._owners[b].append(owner)
            else:
                del self._free[b]
                self._ref[b] = 1
                self._owners[b] = [owner]

    def get_cached_block(self, block_hash: BlockHash, owner: str | None = None) -> int | None:
        """Look up ``block_hash`` and take a reference to the hit (None on a miss)."""
        b = self.lookup_cached_block(block_hash)
        if b is not None:
            self.touch([b], owner)
        return b

    def _uncache(self, block_id: int) -> None:
        h = self._hash_of.pop(block_id)
        blocks = self._by_hash[h]
        del blocks[block_id]
        if not blocks:
            del self._by_hash[h]

    def _check_range(self, block_id: int, name: str) -> None:
        if not (0 <= int(block_id) < self.num_blocks):
            raise BlockPoolError(
                f"{name}: block id {block_id} out of range [0, {self.num_blocks})"
            )

    def __repr__(self) -> str:
        return (
            f"BlockPool(num_blocks={self.num_blocks}, free={len(self._free)}, "
            f"allocated={len(self._ref)}, cached={len(self._hash_of)})"
        )


__all__ = ["BlockHash", "BlockPool", "BlockPoolError"]
