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

Under the interpreter a capture of the same body over the same inputs does
the same thing, and an engine captures every graph size at start-up (a
quarter of a hunt's CPU time). So the CPU capture is memoised by content
(:class:`_CaptureMemo`): the key is every tensor, array and plain value
reachable from the body's closure (the runner's buffers, state pools,
metadata, model weights, bug switches), the identity of every function and
constant of mambalab's modules (a planted or monkeypatched function is
another key), and whether the sanitizer is on. A hit writes what the
capture wrote into *this* engine's own tensors and gives it a copy of the
output; nothing is shared between engines. A capture that raised, changed
anything but tensor contents, or drew random numbers is not memoised, nor
one made while the sanitizer records accesses.
"""

from __future__ import annotations

import contextlib
import enum
import gc
import hashlib
import sys
import types
from collections import OrderedDict
from typing import Callable

import numpy as np
import torch

from mambalab.device import DEVICE_TYPE, INTERPRET


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
        elif _MEMO.enabled:
            self.output = _MEMO.capture(body)
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


def _storage_bytes(t: torch.Tensor) -> torch.Tensor:
    """The whole storage under ``t`` as a flat uint8 tensor (a view: writes go to the storage)."""
    st = t.untyped_storage()
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(st, 0, (st.nbytes(),), (1,))


_PINNED: dict[int, object] = {}


def _pinned_id(o) -> int:
    """``id(o)``, with ``o`` kept alive for the life of the process: an id in a memo key must never
    be handed to a new object (a plant made after an old one was collected could take its id and
    be served the old plant's captures)."""
    return id(_PINNED.setdefault(id(o), o))


def _reach(root) -> tuple[list, list[torch.Tensor]]:
    """What ``root`` (a body) can read: plain values with their paths, and the distinct storages of
    the tensors it reaches (one per storage, in a stable order)."""
    leaves: list = []
    storages: dict[int, torch.Tensor] = {}
    seen: set[int] = set()
    stack: list = [("", root)]
    while stack:
        path, o = stack.pop()
        if o is None or isinstance(o, (bool, int, float, str, bytes, torch.dtype, torch.device, enum.Enum)):
            leaves.append((path, repr(o)))
            continue
        if id(o) in seen:
            leaves.append((path, "<seen>"))
            continue
        seen.add(id(o))
        if isinstance(o, torch.Tensor):
            key = o.untyped_storage().data_ptr()
            if key not in storages:
                storages[key] = o
            leaves.append((path, ("tensor", tuple(o.shape), o.stride(), o.storage_offset(), str(o.dtype),
                                  list(storages).index(key))))
        elif isinstance(o, np.ndarray):
            leaves.append((path, (o.dtype.str, o.shape, hashlib.blake2b(np.ascontiguousarray(o).tobytes(),
                                                                        digest_size=16).hexdigest())))
        elif isinstance(o, (list, tuple)):
            leaves.append((path, type(o).__name__, len(o)))
            stack.extend((f"{path}[{i}]", x) for i, x in enumerate(o))
        elif isinstance(o, dict):
            leaves.append((path, "dict", len(o)))
            stack.extend((f"{path}[{k!r}]", v) for k, v in o.items())
        elif isinstance(o, (set, frozenset)):
            leaves.append((path, sorted(map(repr, o))))
        elif isinstance(o, types.FunctionType):
            leaves.append((path, o.__module__, o.__qualname__, _pinned_id(o.__code__)))
            stack.extend((f"{path}.<{i}>", c.cell_contents) for i, c in enumerate(o.__closure__ or ()))
        elif isinstance(o, types.MethodType):
            leaves.append((path, o.__func__.__module__, o.__func__.__qualname__))
            stack.append((f"{path}.__self__", o.__self__))
        elif hasattr(o, "__dict__"):
            leaves.append((path, type(o).__module__, type(o).__qualname__))
            stack.extend((f"{path}.{k}", v) for k, v in vars(o).items())
        else:  # something we cannot look into: its type only, and the memo is not trusted with it
            leaves.append((path, "opaque", type(o).__qualname__))
    return leaves, list(storages.values())


def _code_fingerprint() -> tuple:
    """The identity of every function and class attribute, and the value of every plain constant,
    of mambalab's modules: a plant (``mambalab.lab.planted``) or a monkeypatch changes it."""
    out = []
    for name, mod in sorted((n, m) for n, m in sys.modules.items() if n.startswith("mambalab") and m is not None):
        for attr, v in vars(mod).items():
            if isinstance(v, (bool, int, float, str)):
                out.append((name, attr, v))
            elif callable(v):
                out.append((name, attr, _pinned_id(v)))
                if isinstance(v, type) and v.__module__ == name:
                    out.extend((name, attr, a, _pinned_id(x)) for a, x in vars(v).items() if callable(x))
    return tuple(out)


_CODE_ONCE: dict = {"depth": 0, "digest": None}


@contextlib.contextmanager
def code_fingerprint_once():
    """Inside the block mambalab's code is fingerprinted once (:func:`_code_digest`): an engine's start-up,
    whose captures (about five, ~3-6 ms of fingerprint each) run no plant or monkeypatch between them."""
    _CODE_ONCE["depth"] += 1
    try:
        yield
    finally:
        _CODE_ONCE["depth"] -= 1
        if not _CODE_ONCE["depth"]:
            _CODE_ONCE["digest"] = None


def _code_digest() -> str:
    """A digest of :func:`_code_fingerprint`, computed once inside :func:`code_fingerprint_once`."""
    digest = _CODE_ONCE["digest"]
    if digest is None:
        digest = hashlib.blake2b(repr(_code_fingerprint()).encode(), digest_size=20).hexdigest()
        if _CODE_ONCE["depth"]:
            _CODE_ONCE["digest"] = digest
    return digest


def content_key(leaves: list, storages: list[torch.Tensor], *extra) -> str:
    """A digest of what :func:`_reach` found (plain values, the storages' bytes), the code of
    mambalab's modules (:func:`_code_fingerprint`) and ``extra``: equal keys, equal inputs."""
    h = hashlib.blake2b(digest_size=20)
    h.update(repr((leaves, _code_digest(), *extra)).encode())
    for t in storages:
        h.update(_storage_bytes(t).cpu().numpy().tobytes())
    return h.hexdigest()


class _CaptureMemo:
    """CPU captures by content: what a capture wrote (per storage) and what it returned."""

    def __init__(self, max_entries: int = 512) -> None:
        self.enabled = INTERPRET and DEVICE_TYPE == "cpu"
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[list[tuple[int, torch.Tensor]], torch.Tensor] | None] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def _key(self, leaves: list, storages: list[torch.Tensor]) -> str:
        from mambalab.lab import sanitizer

        return content_key(leaves, storages, sanitizer.is_active())

    def capture(self, body: Callable[[], torch.Tensor]) -> torch.Tensor:
        from mambalab.lab import sanitizer

        if sanitizer._LOGS.get():  # accesses are being recorded: they must really happen
            return body()
        leaves, storages = _reach(body)
        if any(len(x) == 3 and x[1] == "opaque" for x in leaves):
            return body()
        key = self._key(leaves, storages)
        if key in self._entries:
            entry = self._entries[key]
            self._entries.move_to_end(key)
            if entry is not None:
                self.hits += 1
                writes, output = entry
                for i, data in writes:
                    _storage_bytes(storages[i]).copy_(data)
                return output.clone()
        self.misses += 1
        before = [_storage_bytes(t).clone() for t in storages]
        rng = torch.get_rng_state()
        output = body()
        after_leaves, after_storages = _reach(body)
        pure = (torch.equal(rng, torch.get_rng_state()) and isinstance(output, torch.Tensor)
                and after_leaves == leaves and len(after_storages) == len(storages))
        entry = None
        if pure:
            writes = [(i, _storage_bytes(t).clone()) for i, (t, b) in enumerate(zip(storages, before))
                      if not torch.equal(_storage_bytes(t), b)]
            entry = (writes, output.detach().clone())
        self._entries[key] = entry
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return output


_MEMO = _CaptureMemo()


__all__ = ["CapturedGraph", "code_fingerprint_once"]
