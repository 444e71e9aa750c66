"""Where kernels run: the one place that decides, imported by everything else.

``MAMBALAB_DEVICE=cpu|cuda`` overrides; otherwise CUDA when a GPU is present,
else the CPU with Triton's interpreter. Triton reads ``TRITON_INTERPRET`` when
a kernel is *decorated*, so this module sets it before any kernel module of
mambalab is imported (``mambalab/__init__.py`` imports this module first).
"""

from __future__ import annotations

import os

_ENV = "MAMBALAB_DEVICE"


def _choose() -> str:
    requested = os.environ.get(_ENV, "").strip().lower()
    if requested not in ("", "cpu", "cuda"):
        raise ValueError(f"{_ENV}={requested!r}: expected 'cpu' or 'cuda' (or unset for automatic)")
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"{_ENV}=cuda but torch sees no CUDA device")
    if requested:
        return requested
    return "cuda" if torch.cuda.is_available() else "cpu"


DEVICE_TYPE: str = _choose()
INTERPRET: bool = DEVICE_TYPE == "cpu"

if INTERPRET:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

DEVICE: torch.device = torch.device(DEVICE_TYPE)


def describe() -> str:
    """One line naming the device and the versions that matter."""
    import triton

    if DEVICE_TYPE == "cuda":
        where = f"cuda ({torch.cuda.get_device_name()})"
    else:
        where = "cpu (Triton interpreter)"
    return f"mambalab device: {where}; torch {torch.__version__}; triton {triton.__version__}"


__all__ = ["DEVICE", "DEVICE_TYPE", "INTERPRET", "describe"]
