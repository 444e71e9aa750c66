"""Capture once, replay many: the CUDA-graph contract every graph bug depends on.

A captured graph replays the *same kernels over the same addresses*; a step
changes what it computes only by writing new values into persistent
buffers before ``replay()``. Anything not copied into those buffers is
replayed as it was (bug #41873: a skipped buffer refresh replays last step's
slots).

On a GPU this is a real ``torch.cuda.CUDAGraph`` (warm-up on a side stream,
then capture). On the CPU, where there are no graphs, :class:`CapturedGraph`
keeps the same contract: the body is run once at capture (so a crash at
capture happens at capture, as upstream's #41233 did) and ``replay()`` runs
the same closure, which reads only the persistent buffers it closed over.
Mirrors the role of ``vllm/compilation/cuda_graph.py`` (``CUDAGraphWrapper``).
"""

from __future__ import annotations

import gc
from typing import Callable

import torch

from mambalab.device import DEVICE_TYPE


class CapturedGraph:
    """One captured step body for one padded size."""

    def __init__(self, body: Callable[[], torch.Tensor], *, size: int, use_cuda_graph: bool | None = None):
        self.size = size
        self.body = body
        self.use_cuda_graph = (DEVICE_TYPE == "cuda") if use_cuda_graph is None else use_cuda_graph
        self.num_replays = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        if self.use_cuda_graph:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                body()  # warm-up: Triton compiles outside the capture
            torch.cuda.current_stream().wait_stream(stream)
            self.graph = torch.cuda.CUDAGraph()
            # No garbage collection during the capture: collecting an old engine's graph there
            # destroys it mid-capture, which CUDA forbids and which invalidates this capture (seen on
            # an H200 in the test suite); vLLM's runner freezes the collector while it captures too.
            was_enabled = gc.isenabled()
            gc.disable()
            try:
                with torch.cuda.graph(self.graph):
                    self.output = body()
            finally:
                if was_enabled:
                    gc.enable()
        else:
            self.output = body()

    def replay(self) -> torch.Tensor:
        """Run the captured work again; the result lands in (or is) ``self.output``."""
        self.num_replays += 1
        if self.graph is not None:
            self.graph.replay()
            return self.output
        self.output = self.body()
        return self.output


__all__ = ["CapturedGraph"]
