"""What the pure-torch references share: reading a pool slot the way a GPU would, or refusing it.

A kernel computes ``state_ptr + idx * stride(0)``; ``state[idx]`` in torch would
wrap a negative ``idx`` around to the end of the pool and hide the bug. The
references index through :func:`state_slot`, which refuses any slot outside
the pool with the error a GPU would give.
"""

from __future__ import annotations

import torch


def state_slot(state: torch.Tensor, idx: int, what: str) -> torch.Tensor:
    """``state[idx]``, refusing what a GPU would fault on instead of wrapping negatives."""
    if not 0 <= idx < state.shape[0]:
        raise IndexError(
            f"{what} slot {idx} is outside the state pool [0, {state.shape[0]}): on a GPU this is "
            f"an illegal memory access (or a silent read/write outside the pool)"
        )
    return state[idx]


__all__ = ["state_slot"]
