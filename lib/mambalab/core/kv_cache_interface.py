"""What each KV-cache group keeps per request, and so how wide its block table is.

Mirrors ``vllm/v1/kv_cache_interface.py`` (``AttentionSpec``, ``MambaSpec``).
A Mamba group's blocks hold recurrent *states*, not tokens; how many a request
needs depends on ``mamba_cache_mode`` (see upstream.md section F):

==========  =================================================  ==========================
mode        blocks per request                                 decode reads / writes
==========  =================================================  ==========================
``none``    ``1 + num_speculative_blocks``                     column ``num_accepted - 1``
``align``   ``cdiv(tokens, B) + nsb`` (earlier blocks null)    last ``1 + nsb`` blocks
``all``     ``cdiv(max_model_len, B) + nsb``                   ``block_idx_*`` columns
==========  =================================================  ==========================
"""

from __future__ import annotations

from dataclasses import dataclass

MAMBA_CACHE_MODES = ("none", "align", "all")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class AttentionSpec:
    block_size: int

    def __post_init__(self) -> None:
        if not isinstance(self.block_size, int) or self.block_size < 1:
            raise ValueError(f"block_size must be a positive int, got {self.block_size!r}")

    def max_num_blocks_per_req(self, max_model_len: int) -> int:
        return _cdiv(max_model_len, self.block_size)


@dataclass(frozen=True)
class MambaSpec:
    block_size: int
    mamba_cache_mode: str = "none"
    num_speculative_blocks: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.block_size, int) or self.block_size < 1:
            raise ValueError(f"block_size must be a positive int, got {self.block_size!r}")
        if self.mamba_cache_mode not in MAMBA_CACHE_MODES:
            raise ValueError(
                f"mamba_cache_mode={self.mamba_cache_mode!r}; expected one of {MAMBA_CACHE_MODES}"
            )
        if not isinstance(self.num_speculative_blocks, int) or self.num_speculative_blocks < 0:
            raise ValueError(
                f"num_speculative_blocks must be a non-negative int, got {self.num_speculative_blocks!r}"
            )

    @property
    def prefix_caching(self) -> bool:
        return self.mamba_cache_mode != "none"

    def max_num_blocks_per_req(self, max_model_len: int) -> int:
        base = _cdiv(max_model_len, self.block_size) if self.prefix_caching else 1
        return base + self.num_speculative_blocks


KVCacheSpec = AttentionSpec | MambaSpec

__all__ = ["AttentionSpec", "MambaSpec", "KVCacheSpec", "MAMBA_CACHE_MODES"]
