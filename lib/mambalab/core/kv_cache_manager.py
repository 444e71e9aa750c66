"""Which state blocks a request holds, per ``mamba_cache_mode``, and prefix caching.

Mirrors ``vllm/v1/core/kv_cache_manager.py`` (``KVCacheManager``) with the
single-group logic of ``MambaManager`` in
``vllm/v1/core/single_type_kv_cache_manager.py`` and the block hashing of
``vllm/v1/core/kv_cache_utils.py``. One KV-cache group (a Mamba group); the
model's state pools are indexed by its block ids.

``mamba_cache_mode="none"`` (no prefix caching)
    A request gets ``1 + num_speculative_blocks`` blocks when it is first
    scheduled and keeps them until it finishes or is preempted.

``mamba_cache_mode="all"`` (prefix caching)
    The block list follows the tokens: block ``j`` holds the recurrent state
    after token ``(j + 1) * B - 1`` once it is full, and the running state
    while it is the last, partial block. ``allocate_slots`` keeps
    ``cdiv(num_computed + num_scheduled [+ lookahead], B) + num_speculative_blocks``
    blocks (never fewer: blocks allocated for rejected drafts are kept, as
    upstream). After each step the engine calls ``cache_full_blocks`` and the
    blocks that became full are registered under the chained hash of their
    tokens.

    Prefix hit (``get_computed_blocks``): only the *last* hit block's state is
    needed, so the hit is ``[NULL_BLOCK_ID] * (k - 1) + [cached block k-1]``
    with ``num_computed_tokens = k * B``. As upstream the search runs from the
    right and stops at the first cached hash: hashes are chained, so a hit on
    block ``k - 1`` proves that the whole ``k * B``-token prefix matches, even
    if earlier blocks were evicted. At most ``num_tokens - 1`` tokens can hit
    (the last token must be computed to get logits), so a prompt that is
    cached in full backs off one block.

    Differences from upstream, on purpose: vLLM caches the blocks a step *will*
    fill when it allocates them (and then refuses, via
    ``cached_blocks_this_step``, to let another request hit them in the same
    step); here blocks are cached after the step, when their state exists.
    ``free_skipped_blocks=True`` turns on upstream's ``remove_skipped_blocks``
    for Mamba (blocks before the last computed one are released mid-request
    and replaced by the null block; they stay hittable until evicted); it is
    off by default so a running request's list keeps every block. Note that
    the scheduler only ever sends *appended* blocks to a running request, so
    with it on the worker's block-table row keeps the released ids, exactly
    as upstream.

``"align"`` is not modelled.

Hooks for the engine: ``on_free(block_id, cached)`` (a block went back to the
free queue: poison it unless ``cached``) and ``on_evict(block_id)`` (a cached
free block was handed out again and lost its hash).
"""

from __future__ import annotations

import hashlib
import struct
from typing import Callable, Sequence

from mambalab.core.block_pool import BlockPool
from mambalab.lab.bugs import BugConfig, resolve
from mambalab.constants import NULL_BLOCK_ID
from mambalab.core.kv_cache_interface import MambaSpec
from mambalab.core.request import Request

BlockHash = bytes

# The root of every hash chain (upstream seeds it randomly unless
# PYTHONHASHSEED is set; ours is fixed so that runs are reproducible).
NONE_HASH: BlockHash = hashlib.sha256(b"mambalab/none-hash").digest()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def hash_block_tokens(parent_block_hash: BlockHash | None, token_ids: Sequence[int]) -> BlockHash:
    """sha256 over (parent hash, this block's token ids): the hash of a whole prefix.

    Mirrors ``hash_block_tokens`` in ``vllm/v1/core/kv_cache_utils.py`` (no
    extra keys: no LoRA, multimodal or cache salt here).
    """
    h = hashlib.sha256(parent_block_hash if parent_block_hash is not None else NONE_HASH)
    h.update(struct.pack(f"<{len(token_ids)}q", *token_ids))
    return h.digest()


def block_hashes_of(token_ids: Sequence[int], block_size: int) -> list[BlockHash]:
    """Chained hashes of every full block of ``token_ids``."""
    hashes: list[BlockHash] = []
    parent = None
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_block_tokens(parent, token_ids[start : start + block_size])
        hashes.append(parent)
    return hashes


class KVCacheManager:
    """Block allocation for one Mamba KV-cache group (``MambaManager`` + ``KVCacheManager``)."""

    def __init__(
        self,
        kv_cache_spec: MambaSpec,
        num_blocks: int,
        max_model_len: int,
        num_speculative_tokens: int = 0,
        bugs: BugConfig | None = None,
        *,
        free_skipped_blocks: bool = False,
        enable_caching: bool | None = None,
    ) -> None:
        if not isinstance(kv_cache_spec, MambaSpec):
            raise TypeError(f"kv_cache_spec must be a MambaSpec, got {type(kv_cache_spec).__name__}")
        if kv_cache_spec.mamba_cache_mode == "align":
            raise NotImplementedError("mamba_cache_mode='align' is not modelled; use 'none' or 'all'")
        for name, value, minimum in (
            ("max_model_len", max_model_len, 1),
            ("num_speculative_tokens", num_speculative_tokens, 0),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
        if kv_cache_spec.num_speculative_blocks != num_speculative_tokens:
            raise ValueError(
                f"MambaSpec.num_speculative_blocks={kv_cache_spec.num_speculative_blocks} but "
                f"num_speculative_tokens={num_speculative_tokens}: upstream sets one from the other"
            )
        self.kv_cache_spec = kv_cache_spec
        self.block_size = kv_cache_spec.block_size
        self.mamba_cache_mode = kv_cache_spec.mamba_cache_mode
        self.num_speculative_blocks = kv_cache_spec.num_speculative_blocks
        self.max_model_len = max_model_len
        self.num_speculative_tokens = num_speculative_tokens
        self.bugs = resolve(bugs)
        # Prefix caching: "all" mode by default; the engine turns it off where its
        # blocks would not hold block-boundary states (speculative decoding).
        self.enable_caching = (self.mamba_cache_mode == "all") if enable_caching is None else (
            bool(enable_caching) and self.mamba_cache_mode == "all")
        self.free_skipped_blocks = bool(free_skipped_blocks) and self.enable_caching

        self.block_pool = BlockPool(num_blocks)
        # Upstream refuses to start when one max_model_len request cannot fit.
        self.max_num_blocks_per_req = kv_cache_spec.max_num_blocks_per_req(max_model_len)
        if self.max_num_blocks_per_req > self.block_pool.num_allocatable_blocks:
            raise ValueError(
                f"one request may need {self.max_num_blocks_per_req} blocks "
                f"({self.mamba_cache_mode!r} mode, max_model_len={max_model_len}, "
                f"block_size={self.block_size}, num_speculative_blocks={self.num_speculative_blocks}) "
                f"but the pool has only {self.block_pool.num_allocatable_blocks} allocatable blocks"
            )
        self.req_to_blocks: dict[str, list[int]] = {}
        # How many leading entries of a request's list are already cached (or null).
        self.num_cached_block: dict[str, int] = {}

    # -- hooks --------------------------------------------------------------
    @property
    def on_free(self) -> Callable[[int, bool], None] | None:
        return self.block_pool.on_free

    @on_free.setter
    def on_free(self, fn: Callable[[int, bool], None] | None) -> None:
        self.block_pool.on_free = fn

    @property
    def on_evict(self) -> Callable[[int], None] | None:
        return self.block_pool.on_evict

    @on_evict.setter
    def on_evict(self, fn: Callable[[int], None] | None) -> None:
        self.block_pool.on_evict = fn

    # -- queries --------------------------------------------------------------
    def usage(self) -> float:
        """Fraction of allocatable blocks held by requests (cached free blocks count as free)."""
        return self.block_pool.get_usage()

    def get_block_ids(self, request: Request | str) -> tuple[list[int], ...]:
        """The request's blocks, one list per group (a copy; empty if it holds none)."""
        req_id = request if isinstance(request, str) else request.request_id
        return (list(self.req_to_blocks.get(req_id, ())),)

    def update_block_hashes(self, request: Request) -> list[BlockHash]:
        """Extend ``request.block_hashes`` to every full block of its known tokens."""
        B = self.block_size
        tokens = request.all_token_ids
        hashes = request.block_hashes
        while len(hashes) < len(tokens) // B:
            j = len(hashes)
            hashes.append(hash_block_tokens(hashes[-1] if hashes else None, tokens[j * B : (j + 1) * B]))
        return hashes

    def get_computed_blocks(self, request: Request) -> tuple[list[int], int]:
        """The prefix hit of a request that holds no blocks: ``(block_ids, num_computed_tokens)``.

        ``([], 0)`` in ``"none"`` mode or on a miss. Does not take the hit: pass
        it to ``allocate_slots`` (``new_computed_blocks=``, ``num_new_computed_tokens=``).
        """
        if not self.enable_caching or request.request_id in self.req_to_blocks:
            return [], 0
        if request.num_computed_tokens != 0:
            return [], 0
        hashes = self.update_block_hashes(request)
        max_num_blocks = (request.num_tokens - 1) // self.block_size
        for i in range(max_num_blocks - 1, -1, -1):
            block = self.block_pool.lookup_cached_block(hashes[i])
            if block is not None:
                return [NULL_BLOCK_ID] * i + [block], (i + 1) * self.block_size
        return [], 0

    # -- allocation -----------------------------------------------------------
    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_lookahead_tokens: int = 0,
        *,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: Sequence[int] | None = None,
    ) -> list[int] | None:
        """Give ``request`` blocks for ``num_new_tokens`` more tokens; None if the pool is short.

        Returns the blocks appended (possibly ``[]``). For a request that holds
        no blocks yet, ``new_computed_blocks``/``num_new_computed_tokens`` is
        the hit from ``get_computed_blocks``: it is taken (ref-counted, out of
        the free queue) only when the whole allocation fits.
        """
        if not isinstance(num_new_tokens, int) or num_new_tokens < 1:
            raise ValueError(f"num_new_tokens must be an int >= 1, got {num_new_tokens!r}")
        if not isinstance(num_lookahead_tokens, int) or num_lookahead_tokens < 0:
            raise ValueError(f"num_lookahead_tokens must be an int >= 0, got {num_lookahead_tokens!r}")
        if request.is_finished:
            raise ValueError(f"request {request.request_id!r} is finished ({request.status.name})")
        req_id = request.request_id
        is_new = req_id not in self.req_to_blocks
        hit = list(new_computed_blocks or ())
        self._check_hit(request, is_new, hit, num_new_computed_tokens)

        pool = self.block_pool
        if self.mamba_cache_mode == "none":
            if not is_new:
                return []
            need = 1 + self.num_speculative_blocks
            if need > pool.get_num_free_blocks():
                return None
            blocks = pool.allocate(need, owner=req_id)
            self.req_to_blocks[req_id] = list(blocks)
            self.num_cached_block[req_id] = 0
            request.block_ids = list(blocks)
            return list(blocks)

        total_computed = request.num_computed_tokens + num_new_computed_tokens
        if not is_new and self.free_skipped_blocks:
            self.remove_skipped_blocks(request, total_computed)
        num_tokens = min(total_computed + num_new_tokens + num_lookahead_tokens, self.max_model_len)
        num_required = cdiv(num_tokens, self.block_size) + self.num_speculative_blocks
        held = len(hit) if is_new else len(self.req_to_blocks[req_id])
        num_new_blocks = max(num_required - held, 0)
        # A hit that sits in the free queue leaves it when taken: it costs a free block.
        num_evictable = sum(1 for b in hit if b != NULL_BLOCK_ID and not pool.is_allocated(b))
        if num_new_blocks + num_evictable > pool.get_num_free_blocks():
            return None
        if is_new:
            pool.touch(hit, owner=req_id)
            self.req_to_blocks[req_id] = list(hit)
            self.num_cached_block[req_id] = len(hit)
        new_blocks = pool.allocate(num_new_blocks, owner=req_id)
        self.req_to_blocks[req_id].extend(new_blocks)
        request.block_ids = list(self.req_to_blocks[req_id])
        return new_blocks

    def _check_hit(self, request: Request, is_new: bool, hit: list[int], num_hit_tokens: int) -> None:
        if not hit and num_hit_tokens == 0:
            return
        if not is_new:
            raise ValueError(f"request {request.request_id!r} already holds blocks: it cannot take a prefix hit")
        if not self.enable_caching:
            raise ValueError("prefix hits need mamba_cache_mode='all'")
        if num_hit_tokens != len(hit) * self.block_size or not hit:
            raise ValueError(
                f"a hit of {len(hit)} blocks covers {len(hit) * self.block_size} tokens, "
                f"not num_new_computed_tokens={num_hit_tokens}"
            )
        if any(b != NULL_BLOCK_ID for b in hit[:-1]) or hit[-1] == NULL_BLOCK_ID:
            raise ValueError(f"a Mamba hit is [null] * (k - 1) + [block], got {hit}")
        hashes = self.update_block_hashes(request)
        if len(hit) > len(hashes) or self.block_pool.block_hash(hit[-1]) != hashes[len(hit) - 1]:
            raise ValueError(f"block {hit[-1]} is not cached under the hash of this request's prefix")

    def remove_skipped_blocks(self, request: Request, num_computed_tokens: int) -> list[int]:
        """Release the blocks before the last computed one (upstream Mamba, ``free_skipped_blocks``).

        Mamba needs only the state after the last computed token. As upstream,
        ``num_speculative_blocks`` is subtracted first so that a block a
        rejected draft might fall back to is kept. Returns the released ids.
        """
        blocks = self.req_to_blocks.get(request.request_id)
        if not blocks or not self.enable_caching:
            return []
        processed = max(0, num_computed_tokens - self.num_speculative_blocks)
        num_skipped_blocks = max(processed - 1, 0) // self.block_size
        released: list[int] = []
        for i in range(min(num_skipped_blocks, len(blocks)) - 1, -1, -1):
            if blocks[i] == NULL_BLOCK_ID:
                break
            released.append(blocks[i])
            blocks[i] = NULL_BLOCK_ID
        if released:
            self.block_pool.free(released, owner=request.request_id)
            request.block_ids = list(blocks)
        return released

    def cache_full_blocks(self, request: Request) -> list[int]:
        """Register the blocks that became full (computed up to their last token). Returns them."""
        if not self.enable_caching:
            return []
        req_id = request.request_id
        blocks = self.req_to_blocks.get(req_id)
        if blocks is None:
            return []
        num_full = min(min(request.num_computed_tokens, request.num_tokens) // self.block_size, len(blocks))
        start = self.num_cached_block.get(req_id, 0)
        if num_full <= start:
            return []
        hashes = self.update_block_hashes(request)
        newly: list[int] = []
        for j in range(start, num_full):
            if blocks[j] != NULL_BLOCK_ID:
                self.block_pool.cache_block(blocks[j], hashes[j])
                newly.append(blocks[j])
        self.num_cached_block[req_id] = num_full
        return newly

    def free(self, request: Request) -> None:
        """Release every non-null block of the request, tail first (tail blocks are evicted first)."""
        req_id = request.request_id
        blocks = self.req_to_blocks.pop(req_id, None)
        self.num_cached_block.pop(req_id, None)
        request.block_ids = []
        if blocks:
            self.block_pool.free([b for b in reversed(blocks) if b != NULL_BLOCK_ID], owner=req_id)

    def __repr__(self) -> str:
        return (
            f"KVCacheManager(mode={self.mamba_cache_mode!r}, block_size={self.block_size}, "
            f"nsb={self.num_speculative_blocks}, {self.block_pool!r})"
        )


__all__ = [
    "BlockHash",
    "KVCacheManager",
    "NONE_HASH",
    "block_hashes_of",
    "cdiv",
    "hash_block_tokens",
]
