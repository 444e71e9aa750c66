"""Watching an engine's steps without changing them: what the drawings need from each step.

A :class:`StepObserver` sets every rank's :attr:`ModelRunner.observer`: right
after a step's metadata is built (before any kernel runs, so a step that
crashes is seen too) it keeps a frozen copy of that step's common metadata,
Mamba metadata and builder (its persistent CUDA-graph buffers) — exactly what
the runner computed, never recomputed. The workbook's tracer and the panels
read steps through it; the step's record (:class:`StepRecord`) says the rest.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable

from mambalab.attention.mamba_metadata import MambaAttentionMetadata
from mambalab.attention.metadata import CommonAttentionMetadata
from mambalab.engine.core import Engine
from mambalab.worker.model_runner import StepRecord


@dataclass(frozen=True)
class ObservedStep:
    """One rank's step as its runner built it (copies: later steps do not change them)."""

    record: StepRecord
    cm: CommonAttentionMetadata | None
    md: MambaAttentionMetadata
    builder: Any  # a copy of the MambaAttentionMetadataBuilder, its graph buffers as they were


class StepObserver:
    """Keeps :class:`ObservedStep` of the steps ``want(step)`` asks for (default: every step)."""

    def __init__(self, engine: Engine, want: Callable[[int], bool] | None = None) -> None:
        self.engine = engine
        self.want = want if want is not None else (lambda step: True)
        self.seen: dict[tuple[int, int], ObservedStep] = {}
        for rank in engine.ranks:
            rank.runner.observer = self._for_rank(rank.index)

    def _for_rank(self, rank: int):
        def observe(record, cm, md, builder) -> None:
            step = self.engine.step
            if self.want(step):
                self.seen[(step, rank)] = ObservedStep(record, copy.deepcopy(cm), copy.deepcopy(md),
                                                       copy.deepcopy(builder))
        return observe

    def get(self, step: int, rank: int) -> ObservedStep | None:
        return self.seen.get((step, rank))

    def detach(self) -> None:
        for rank in self.engine.ranks:
            rank.runner.observer = None


__all__ = ["ObservedStep", "StepObserver"]
