"""The CUDA-graph contract in ten lines (notebook 00): a static input buffer, one capture, ``copy_``
before each replay, and the replay that reads a stale buffer when one copy is skipped.

Every graph bug of the workbook (#41873, #42430, #41233's ``/padding``) is this last case in a
larger setting: the graph replays the kernels over the addresses it captured, so whatever was not
copied into its buffers this step is what it reads. The graph is the package's
:class:`~mambalab.worker.cuda_graph.CapturedGraph`: a real ``torch.cuda.CUDAGraph`` on a GPU, under
the interpreter a closure over the same buffers (the stand-in keeps the contract, not the speed).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from mambalab.viz.text import Text
from mambalab.worker.cuda_graph import CapturedGraph


@dataclass(frozen=True)
class GraphStep:
    """One replay: the inputs the step meant to use, whether they were copied in, what the graph read."""

    inputs: tuple[int, ...]
    copied: bool
    buffer: tuple[int, ...]  # the static buffer as the replay read it
    output: tuple[int, ...]

    @property
    def stale(self) -> bool:
        return self.buffer != self.inputs


def graph_steps(steps, device=None) -> list[tuple[list[int], list[int]]]:
    """Capture ``out = 10 * x + 1`` over a static buffer ``x``; per step, copy or not, then replay."""
    static_x = torch.zeros(len(steps[0][0]), dtype=torch.int64, device=device)  # the graph's input buffer
    graph = CapturedGraph(lambda: static_x * 10 + 1, size=static_x.numel(),  # capture: addresses fixed
                          use_cuda_graph=static_x.is_cuda)
    seen = []
    for inputs, copy in steps:
        if copy:
            static_x.copy_(torch.tensor(inputs, device=static_x.device))  # the refresh of this step
        out = graph.replay()  # same kernels, same addresses
        seen.append((static_x.tolist(), out.tolist()))
    return seen


@dataclass(frozen=True)
class GraphDemo:
    """What :func:`cuda_graph_demo` did: one :class:`GraphStep` per replay, and whether graphs were real."""

    steps: tuple[GraphStep, ...]
    real_cuda_graph: bool

    @property
    def stale_steps(self) -> list[int]:
        return [i + 1 for i, s in enumerate(self.steps) if s.stale]

    @property
    def code(self) -> Text:
        """The ten lines that ran (:func:`graph_steps`)."""
        return Text(inspect.getsource(graph_steps).rstrip())

    def __str__(self) -> str:
        lines = ["captured once (CapturedGraph, worker/cuda_graph.py): out = 10 * x + 1 over a static buffer x"]
        for i, s in enumerate(self.steps, 1):
            how = "copy_ into x, replay" if s.copied else "copy SKIPPED, replay"
            line = f"step {i}: inputs {list(s.inputs)} -> {how}: graph read x = {list(s.buffer)}, out = {list(s.output)}"
            if s.stale:
                line += "  <- STALE: last step's inputs"
            lines.append(line)
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


def cuda_graph_demo(device=None) -> GraphDemo:
    """Three replays of one captured graph: two with their ``copy_``, the third without it."""
    from mambalab.device import DEVICE

    device = DEVICE if device is None else device
    plan = [([1, 2, 3], True), ([4, 5, 6], True), ([7, 8, 9], False)]
    seen = graph_steps(plan, device=device)
    steps = tuple(GraphStep(tuple(x), c, tuple(b), tuple(o)) for (x, c), (b, o) in zip(plan, seen))
    return GraphDemo(steps, real_cuda_graph=torch.device(device).type == "cuda")


__all__ = ["GraphDemo", "GraphStep", "cuda_graph_demo", "graph_steps"]
