"""Owned memory before the tensors a pre-fix kernel reaches one element before.

Two pre-fix behaviours touch the bytes just before a tensor: ``pad-minus-one``'s padded rows
address slot ``-1`` of every state pool (a ``PAD_SLOT_ID`` in the indices and no guard in the
kernel: a load and a store), and ``zero-accepted``'s row 0 reads column ``-1`` of the decode
state indices (an accepted count of 0: a load, whose value is then used as a slot).

* **On the CPU** the sanitizer stops both before they happen: it guards a view at its own
  outline, not at its storage's (``lab/sanitizer.py``), so the bands below change nothing there.
  With the sanitizer off (``MAMBALAB_SANITIZER=0``) the stores happened on the CPU too: before
  the bands, ``pad-minus-one``'s replay corrupted the process's heap and died (a segmentation
  fault, or glibc's "corrupted double-linked list").
* **On a GPU nothing stops them.** In vLLM those bytes are whatever PyTorch's caching allocator
  put before the tensor: another tensor's (a store corrupts it; a load returns garbage, and a
  garbage slot sends the next state load anywhere) or unmapped memory. An unmapped address is
  ``cudaErrorIllegalAddress``: the CUDA context is lost and the process dies, a Jupyter kernel
  included. This happened in the workbook's own CUDA test suite: a pre-fix ``zero-accepted``
  engine's capture read a large int before its index buffer and its state load faulted.

The workbook's simplification: each such tensor is allocated behind a band it owns. A state
pool gets one guard slot filled with :data:`GUARD_CANARY`; a step that changed it is reported
after the step as an illegal access (:class:`GuardSlotWritten`), the verdict the CPU's
sanitizer gives. An index tensor gets one guard row of ``PAD_SLOT_ID``, which every guard
variant of the kernels skips, so row 0's stray read skips the row instead of faulting. Neither
is upstream's: vLLM has no bands, and its outcome depends on the allocator's layout.
"""

from __future__ import annotations

import torch

from mambalab.constants import PAD_SLOT_ID

GUARD_SLOTS = 1  # slots (rows) of owned memory before a guarded tensor: enough for index -1
GUARD_CANARY = -4096.0  # what a pool's guard slot holds; exact in fp32, bf16 and fp16


def behind_band(full: torch.Tensor, fill: float | int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(view, band)`` of ``full``, a tensor allocated with :data:`GUARD_SLOTS` extra leading
    rows: the view starts after them (any layout of the other dims is kept); the band is filled
    with ``fill``."""
    if full.dim() < 1 or full.shape[0] < GUARD_SLOTS:
        raise ValueError(f"a banded tensor needs at least {GUARD_SLOTS} leading rows, got {tuple(full.shape)}")
    band = full[:GUARD_SLOTS]
    band.fill_(fill)
    return full[GUARD_SLOTS:], band


def banded_index(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str,
                 fill: int | float = 0, *, pin_memory: bool = False) -> torch.Tensor:
    """A ``torch.full(shape, fill)`` index tensor with a guard row of ``PAD_SLOT_ID`` before it."""
    full = torch.full((shape[0] + GUARD_SLOTS, *shape[1:]), fill, dtype=dtype, device=device, pin_memory=pin_memory)
    return behind_band(full, PAD_SLOT_ID)[0]


def banded_gather(src: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``src.gather(1, index)`` into a banded index tensor (a gathered index tensor a kernel reads)."""
    out = banded_index(tuple(index.shape), src.dtype, src.device)
    return torch.gather(src, 1, index, out=out)


class GuardSlotWritten(RuntimeError):
    """A step stored into a pool's guard slot: an access one slot before the pool.

    Reported after the step that did it (the band is checked, not each access). Its message
    names it an illegal memory access, as a GPU fault's does, so a verdict reads it the same way.
    """

    def __init__(self, pools: list[str], step: int | None = None):
        self.pools = list(pools)
        self.step = step
        at = f" in step {step}" if step is not None else " at start-up"
        super().__init__(
            f"illegal memory access{at}: a kernel stored to slot -1 of {', '.join(repr(p) for p in pools)} "
            f"(the lab's guard slot before the pool: on vLLM's allocator, another tensor's bytes or "
            f"unmapped memory)")


__all__ = ["GUARD_SLOTS", "GUARD_CANARY", "behind_band", "banded_index", "banded_gather", "GuardSlotWritten"]
