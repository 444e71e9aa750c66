"""The slot bookkeeping of one batched decode step, shared by both mixers: which pool slots each row
reads and writes (1-D, or 2-D with speculative columns), and the guarded state copy when those
differ. The miniature of what ``mamba_mixer2.py`` and ``qwen3_next.py`` take from the Mamba
attention metadata (``state_indices_tensor``, ``num_accepted_tokens``, ``query_start_loc``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mambalab.constants import NULL_BLOCK_ID
from mambalab.lab.bugs import BugConfig


def _carry_state(pool: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> None:
    """``pool[dst[r]] = pool[src[r]]`` for rows where both are live blocks (``> 0``).

    Used when a decode reads one slot and writes another (``mamba_cache_mode=
    "all"``) but the kernel takes a single index (conv, GDN): the state is
    moved first and the kernel then works in place on ``dst``. Rows with a
    null (or negative) index copy block 0 onto itself, a no-op, so the
    kernel's own guard still decides what padding does. Tensor ops only:
    nothing here reads an index value on the host.
    """
    src = src.to(torch.int64)
    dst = dst.to(torch.int64)
    live = (src > NULL_BLOCK_ID) & (dst > NULL_BLOCK_ID)
    src = torch.where(live, src, torch.zeros_like(src))
    dst = torch.where(live, dst, torch.zeros_like(dst))
    pool.index_copy_(0, dst, pool.index_select(0, src))


def _read_column(indices: torch.Tensor, num_accepted: torch.Tensor | None) -> torch.Tensor:
    """Column ``num_accepted - 1`` (clamped) of 2-D indices, or column 0: the slot a row starts from."""
    if num_accepted is None:
        return indices[:, 0]
    col = (num_accepted.to(torch.int64) - 1).clamp(0, indices.shape[1] - 1)
    return indices.gather(1, col[:, None])[:, 0]


@dataclass
class _DecodeArgs:
    """The slot bookkeeping of one decode step, shared by both mixers."""

    src: torch.Tensor  # (N,) or (N, C)
    dst: torch.Tensor  # (N,) or (N, C)
    num_accepted_tokens: torch.Tensor | None
    query_start_loc: torch.Tensor | None
    max_query_len: int
    bugs: BugConfig | None

    @property
    def spec(self) -> bool:
        return self.src.dim() == 2

    @property
    def carry(self) -> bool:
        """Whether the read slots differ from the written ones (decided by identity, not values)."""
        return self.src is not self.dst

    def single_index(self, pool: torch.Tensor) -> torch.Tensor:
        """Index for a kernel that reads and writes one array (conv, GDN); carries the state first.

        1-D: ``dst``. 2-D: ``dst`` itself (GDN reads column ``num_accepted - 1``,
        conv uses column 0), after moving the state the kernel will read from
        ``src``'s starting column to the same column of ``dst``.
        """
        if not self.carry:
            return self.dst
        if not self.spec:
            _carry_state(pool, self.src, self.dst)
        return self.dst

    def gdn_index(self, pool: torch.Tensor) -> torch.Tensor:
        if self.carry and self.spec:
            _carry_state(pool, _read_column(self.src, self.num_accepted_tokens),
                         _read_column(self.dst, self.num_accepted_tokens))
        return self.single_index(pool)

    def conv_index(self, pool: torch.Tensor) -> torch.Tensor:
        if self.carry and self.spec:
            # Conv history lives in column 0's block only (the offset is inside the slot).
            _carry_state(pool, self.src[:, 0], self.dst[:, 0])
        return self.single_index(pool)
