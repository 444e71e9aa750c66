"""What a bug panel is made of, and small helpers the per-bug modules share.

Each per-bug module (``pad_minus_one``, ``stale_rows``, ...) defines one
:class:`BugSpec`: the knobs, the workload builder that takes them (the bug's
scenario function itself, :mod:`mambalab.lab.scenarios`, whose keyword
arguments are the knobs), the DP rank that matters, the drawings and what to
watch. At the knobs' defaults the panel replays exactly what ``python -m
mambalab replay BUG`` replays (a test checks the defaults agree).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from mambalab.worker.model_runner import RunnerConfig
from mambalab.lab.workload import Workload
from mambalab.widgets.controls import Knob

SEED = Knob("seed", "seed", "seed", 0, 0, 9999, help="varies prompts and lengths (and the model's weights)")


@dataclass(frozen=True)
class BugSpec:
    bug: str
    knobs: tuple[Knob, ...]
    build: Callable[..., Workload]
    focus_rank: Callable[[dict], int]
    views: tuple[str, ...]
    first_view: str
    lesson: str
    explain: Callable[[dict], list[str]]
    parts: tuple[tuple[str, str], ...] = ()  # sub-bug selector: (label, switch id)

    def defaults(self) -> dict[str, Any]:
        return {k.name: k.default for k in self.knobs}


def graph_sizes(rc: RunnerConfig) -> list[int]:
    """The FULL decode graph sizes the runner captures for ``rc`` (as ``ModelRunner.__init__``)."""
    return rc.full_decode_capture_sizes()


def padded_rows(rows: int, rc: RunnerConfig) -> int:
    """How many rows a uniform decode batch of ``rows`` requests is padded to (itself when no graph fits)."""
    uq = rc.uniform_decode_query_len
    for s in graph_sizes(rc):
        if s >= rows * uq:
            return s // uq
    return rows


def padding_note(rows: int, rc: RunnerConfig, what: str) -> str:
    """A sentence on whether a decode batch of ``rows`` requests gets padded rows, and so whether ``what`` can show."""
    sizes = graph_sizes(rc)
    if not rc.cudagraph:
        return (f"FULL CUDA graphs are off: every step runs eagerly on exactly its live rows, nothing is padded, "
                f"so {what} cannot show.")
    if rows == 0:
        return f"No request decodes: no batch is padded, so {what} cannot show."
    uq = rc.uniform_decode_query_len
    row_sizes = [s // uq for s in sizes]
    if rc.max_num_seqs == 1:
        return (f"max_num_seqs = 1: the only graph size is 1 row, a batch is never padded, so {what} cannot show "
                f"(and requests run one at a time).")
    p = padded_rows(rows, rc)
    if p == rows:
        return (f"{rows} decoding request{'s' if rows != 1 else ''} fill a captured graph size exactly "
                f"(graph sizes in rows: {row_sizes}): no padded row, so {what} does not show. Try another count.")
    return (f"{rows} decoding requests are padded to the {p}-row graph (sizes in rows: {row_sizes}): "
            f"row{'s' if p - rows > 1 else ''} {', '.join(str(r) for r in range(rows, p))} "
            f"{'are' if p - rows > 1 else 'is'} padding.")


__all__ = ["BugSpec", "SEED", "graph_sizes", "padded_rows", "padding_note"]
