"""Helpers for proving kernels correct: poison, slot indices, tolerances.

Used by the test suite and by notebooks that check a kernel live. The rules
come from upstream's kernel tests (see kernels.md): never test on zeros,
poison outputs before a run, untouched slots must stay bit-identical.
"""

from __future__ import annotations

import ctypes
import types

import torch

from mambalab.constants import NULL_BLOCK_ID

# (rtol, atol) per kernel family and dtype, from upstream's kernel tests.
TOLERANCES: dict[tuple[str, torch.dtype], tuple[float, float]] = {
    ("ssu", torch.float32): (3e-4, 1e-3),
    ("ssu", torch.bfloat16): (1e-2, 1e-1),
    ("ssu", torch.float16): (1e-2, 1e-1),
    ("ssu_spec", torch.bfloat16): (5e-2, 1.5e-1),
    ("ssu_spec", torch.float16): (5e-2, 1.5e-1),
    ("conv", torch.float32): (3e-4, 1e-3),
    ("conv", torch.bfloat16): (1e-2, 5e-2),
    ("conv", torch.float16): (1e-2, 5e-2),
    ("gdn", torch.float32): (1e-4, 1e-4),
    ("gdn", torch.bfloat16): (1e-2, 2e-2),
    ("gdn", torch.float16): (1e-2, 2e-2),
}


def tolerance(family: str, dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for comparing a kernel of ``family`` to its reference."""
    if (family, dtype) in TOLERANCES:
        return TOLERANCES[(family, dtype)]
    base = family.split("_")[0]
    return TOLERANCES[(base, dtype)]


def poison_(t: torch.Tensor) -> torch.Tensor:
    """Fill ``t`` with NaN (or the int minimum) so an unwritten element shows."""
    if t.dtype.is_floating_point:
        return t.fill_(float("nan"))
    return t.fill_(torch.iinfo(t.dtype).min)


def random_slot_indices(
    num_rows: int,
    num_slots: int,
    *,
    num_null_rows: int = 0,
    columns: int | None = None,
    generator: torch.Generator | None = None,
    null_block_id: int = NULL_BLOCK_ID,
) -> torch.Tensor:
    """Distinct live slots (never the null block) for ``num_rows`` rows.

    The last ``num_null_rows`` rows hold ``null_block_id`` (CUDA-graph
    padding). ``columns`` gives 2-D indices for speculative decoding, each
    real row owning ``columns`` distinct slots.
    """
    cols = 1 if columns is None else columns
    live = num_rows - num_null_rows
    if live < 0:
        raise ValueError(f"num_null_rows={num_null_rows} exceeds num_rows={num_rows}")
    if live * cols > num_slots - 1:
        raise ValueError(
            f"{live} live rows x {cols} columns need {live * cols} slots; the pool has "
            f"{num_slots - 1} besides the null block"
        )
    perm = torch.randperm(num_slots - 1, generator=generator)[: live * cols] + 1
    idx = torch.full((num_rows, cols), null_block_id, dtype=torch.int32)
    idx[:live] = perm.view(live, cols).to(torch.int32)
    return idx if columns is not None else idx[:, 0].contiguous()


def touched_slots(indices: torch.Tensor, null_block_id: int = NULL_BLOCK_ID) -> set[int]:
    """The set of live slots named by ``indices`` (the null block excluded)."""
    return {int(i) for i in indices.flatten().tolist() if int(i) != null_block_id and int(i) >= 0}


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of ``t``, so NaN == NaN and -0.0 != 0.0."""
    if t.dtype == torch.bool:
        return t
    dense = torch.empty(t.shape, dtype=t.dtype, device=t.device).copy_(t)
    return dense.view(torch.uint8)


def assert_untouched(
    before: torch.Tensor, after: torch.Tensor, touched: set[int], *, what: str = "state"
) -> None:
    """Every slot of ``after`` not in ``touched`` is bit-identical to ``before``."""
    if before.shape != after.shape:
        raise AssertionError(f"{what}: shape changed {tuple(before.shape)} -> {tuple(after.shape)}")
    for slot in range(before.shape[0]):
        if slot in touched:
            continue
        if not torch.equal(_bits(before[slot]), _bits(after[slot])):
            raise AssertionError(f"{what}: untouched slot {slot} changed")


__all__ = [
    "TOLERANCES",
    "tolerance",
    "poison_",
    "random_slot_indices",
    "touched_slots",
    "assert_untouched",
]


def spy_launches(monkeypatch, module) -> list[dict]:
    """Record the keyword arguments (constexprs, launch options) of every launch ``module`` makes through
    ``module.sanitizer.launch`` while ``monkeypatch`` is active, with the kernel under ``"kernel"`` and the grid
    under ``"grid"``; the launches still run. The SSU's CUDA kernel (:mod:`~mambalab.kernels.mamba_ssm_tma`, whose
    launches bypass the sanitizer) is switched off meanwhile, so on a GPU with its rule every step is seen here."""
    from mambalab.kernels import mamba_ssm_tma

    monkeypatch.setattr(mamba_ssm_tma, "RULES", {})
    seen: list[dict] = []
    real = module.sanitizer.launch

    def spy(kernel, grid, *args, **kwargs):
        seen.append(dict(kwargs, kernel=kernel, grid=tuple(grid)))
        return real(kernel, grid, *args, **kwargs)

    monkeypatch.setattr(module.sanitizer, "launch", spy)
    return seen


def recording_driver(monkeypatch, module) -> list:
    """Put in place of a CUDA kernel's driver (``module``: :mod:`~mambalab.kernels.gated_delta_rule_tma` or
    :mod:`~mambalab.kernels.mamba_ssm_tma`) one that records instead of launching, while ``monkeypatch`` is active:
    each entry point asked for (its name), then each launch as ``(grid, block, shared memory, stream, PDL, the
    parameter struct's values)``; the module sees a GPU that has the kernel, PDL, and stream 7."""
    seen: list = []

    class Recording:
        def function(self, device, entry):
            seen.append(entry)
            return ctypes.c_void_p(1)

        def launch(self, fn, grid, block, smem, stream, params, pdl, extra=()):
            seen.append((tuple(grid), block, smem, stream, pdl, tuple(getattr(params, f) for f, _ in params._fields_)))

    monkeypatch.setattr(module, "_get_driver", lambda: Recording())
    monkeypatch.setattr(module, "available", lambda device: (True, ""))
    monkeypatch.setattr(module, "use_pdl", lambda device: True)
    monkeypatch.setattr(module.torch.cuda, "current_stream", lambda device=None: types.SimpleNamespace(cuda_stream=7))
    return seen
