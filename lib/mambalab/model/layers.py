"""The small pieces both mixers and the model share: RMSNorm (``vllm/model_executor/layers/layernorm.py``
in miniature, no fused residual) and the seeded weight draws."""

from __future__ import annotations

import torch

RMS_EPS = 1e-6


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS) * weight


def _randn(gen: torch.Generator, *shape: int, std: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float32) * std


def _uniform(gen: torch.Generator, *shape: int, lo: float, hi: float) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(*shape, generator=gen, dtype=torch.float32)
