"""A CPU tensor, its numpy view and its device copy, kept as one object.

Mirrors ``CpuGpuBuffer`` in ``vllm/v1/utils.py``. The runner mutates the CPU
side (through ``np``) and copies a prefix to the device. On a CPU-only
machine ``gpu`` is still a separate tensor, so "the device copy disagrees
with the CPU mirror" stays observable, exactly as on a GPU.
"""

from __future__ import annotations

import numpy as np
import torch

from mambalab.device import DEVICE
from mambalab.guard_band import banded_index


class CpuGpuBuffer:
    def __init__(self, *shape: int, dtype: torch.dtype, device: torch.device | str = DEVICE,
                 fill: int | float = 0, banded: bool = False) -> None:
        """``banded``: both sides start after a guard row of ``PAD_SLOT_ID`` (an index buffer a
        pre-fix kernel reads one element before: ``mambalab/guard_band.py``)."""
        for i, s in enumerate(shape):
            if not isinstance(s, (int, np.integer)) or s < 0:
                raise ValueError(f"buffer shape[{i}] must be a non-negative int, got {s!r}")
        device = torch.device(device)
        pin = device.type == "cuda"
        if banded:
            self.cpu = banded_index(shape, dtype, "cpu", fill, pin_memory=pin)
            self.gpu = banded_index(shape, dtype, device, fill)
        else:
            self.cpu = torch.full(shape, fill, dtype=dtype, pin_memory=pin)
            self.gpu = torch.full(shape, fill, dtype=dtype, device=device)
        self.np = self.cpu.numpy()

    def copy_to_gpu(self, n: int | None = None) -> torch.Tensor:
        """Copy the first ``n`` rows (all when None) to the device; return that slice.

        On a GPU the copy is asynchronous (pinned host memory, ``non_blocking``):
        the host rows must not change until the stream has run it. The runner
        changes them only in the next step, after this step's sampled tokens
        came back to the host (a synchronisation), as vLLM's runner does.
        """
        if n is None:
            return self.gpu.copy_(self.cpu, non_blocking=True)
        if not 0 <= n <= self.cpu.shape[0]:
            raise ValueError(f"copy_to_gpu: n={n} out of range [0, {self.cpu.shape[0]}]")
        return self.gpu[:n].copy_(self.cpu[:n], non_blocking=True)

    def copy_to_cpu(self, n: int | None = None) -> torch.Tensor:
        if n is None:
            return self.cpu.copy_(self.gpu)
        return self.cpu[:n].copy_(self.gpu[:n])


__all__ = ["CpuGpuBuffer"]
