"""Where kernels run: the one place that decides, imported by everything else.

``MAMBALAB_DEVICE=cpu|cuda`` overrides; otherwise CUDA when a GPU is present,
else the CPU with Triton's interpreter. Triton reads ``TRITON_INTERPRET`` when
a kernel is *decorated*, so this module sets it before any kernel module of
mambalab is imported (``mambalab/__init__.py`` imports this module first).

Under the interpreter torch gets one intra-op thread (unless ``OMP_NUM_THREADS``
says otherwise): every tensor of the tiny model is a few kilobytes, and a
second thread costs more waking up than it saves (docs/speed.md: a 4x16 @
16x300 matmul, 12 us on one thread, ~300 us on two of a busy two-core machine).
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import replace
from typing import Iterator

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

if INTERPRET and "OMP_NUM_THREADS" not in os.environ:
    torch.set_num_threads(1)

_overflow_lock = threading.Lock()
_overflow_depth = 0
_overflow_saved = None


@contextlib.contextmanager
def without_overflow_asserts() -> Iterator[None]:
    """Triton's interpreter off its int32-overflow asserts while the block runs (nesting and
    threads share one switch: the first to enter turns them off, the last to leave restores them).

    The interpreter checks every 32-bit integer add and multiply for overflow, which compiled
    kernels do only in debug mode: a third of a replay's CPU time (docs/speed.md). Every engine
    run takes this (``Engine`` around its graph captures and each step's kernels); mambalab's
    memory sanitizer is separate and stays on. On CUDA, or with a Triton whose interpreter has
    no such option, nothing changes.
    """
    global _overflow_depth, _overflow_saved
    builder = None
    if INTERPRET:
        try:
            import triton.runtime.interpreter as interpreter

            builder = interpreter.interpreter_builder
            off = replace(builder.options, sanitize_overflow=False)
        except (ImportError, AttributeError, TypeError):  # another Triton: leave it as it is
            builder = None
    if builder is None:
        yield
        return
    with _overflow_lock:
        if _overflow_depth == 0:
            _overflow_saved = builder.options
            builder.options = off
        _overflow_depth += 1
    try:
        yield
    finally:
        with _overflow_lock:
            _overflow_depth -= 1
            if _overflow_depth == 0:
                builder.options = _overflow_saved
                _overflow_saved = None


def describe() -> str:
    """One line naming the device and the versions that matter."""
    import triton

    if DEVICE_TYPE == "cuda":
        where = f"cuda ({torch.cuda.get_device_name()})"
    else:
        where = "cpu (Triton interpreter)"
    return f"mambalab device: {where}; torch {torch.__version__}; triton {triton.__version__}"


__all__ = ["DEVICE", "DEVICE_TYPE", "INTERPRET", "describe", "without_overflow_asserts"]
