"""Interpreted kernel launches by content: the same kernel over the same bytes is run once.

Under Triton's interpreter a kernel launch costs milliseconds of Python (an SSU
or GDN launch of the tiny model ~5-9 ms), and the workbook repeats identical
launches: a mechanism panel replays its scenario once per combination, and the
combinations agree step after step until their plants make the state differ
(``clear_row_grid``: 73% of the launches of six toggles repeat an earlier one,
``docs/speed.md``); a dummy run on an idle rank relaunches what the previous
one did when nothing changed in between. A compiled kernel is a pure function
of its arguments' bytes, its code and its launch parameters, so a repeat needs
no second run.

The key is everything a launch can depend on:

* the kernel (the identity of its jitted function), the grid and every plain
  argument's value;
* every tensor argument's view (shape, strides, storage offset, dtype), which
  storage it lies in (aliasing between arguments) and that storage's size;
* the bytes of every storage the arguments lie in, whole (a conservative key:
  bytes outside a view change the key too);
* the code of the kernel modules (``mambalab.kernels.*``): the identity of every
  function and the value of every constant there, so a planted guard
  (``workbook/fix_it.guard_plants``) or a monkeypatch is another key;
* whether the sanitizer checks launches and whether Triton's int32-overflow
  asserts are on.

A hit writes the bytes the first run wrote into this launch's own storages;
nothing is shared. Only launches that returned normally are memoised: one that
raised (an :class:`~mambalab.lab.sanitizer.IllegalMemoryAccess` included) runs,
checked, every time, so the sanitizer reports every illegal access it reported
before. A launch made while accesses are recorded (``sanitizer.recording``: the
access maps, a panel's steps) keeps what it recorded, and a hit adds the same
kernel name and accesses to the logs open then, in the same order; an entry made
without recording runs again the first time it is asked for under recording. On CUDA, or with ``MAMBALAB_LAUNCH_MEMO=0``, nothing
is memoised. The CPU capture memo (``worker/cuda_graph.py``) does the same one
level up, for a whole graph capture.
"""

from __future__ import annotations

import contextlib
import hashlib
import operator
import os
import sys
import threading
import types
from collections import OrderedDict
from typing import Any, Callable, Iterator

import torch

from mambalab.device import DEVICE_TYPE, INTERPRET

_PLAIN = (bool, int, float, str, type(None), torch.dtype)


_MODULES: dict[str | None, tuple[int, tuple]] = {}  # a kernel's module -> (len(sys.modules), modules)
_CODE: dict[str, tuple] = {}  # module -> (its values when digested, the digest, its whole namespace's names, values)


def _modules(fn: Any) -> tuple:
    """The kernel modules (``mambalab.kernels.*``), the module of ``fn`` (a kernel defined elsewhere: a
    test, a notebook) and the Triton modules they name (``tl``, ``triton``, ``libdevice``): where a
    kernel's code looks its names up."""
    home = getattr(fn, "__module__", None)
    cached = _MODULES.get(home)
    if cached is None or cached[0] != len(sys.modules):
        ours = [(n, m) for n, m in list(sys.modules.items())
                if (n.startswith("mambalab.kernels") or n == home) and m is not None]
        named = {v.__name__: v for _, m in ours for v in list(vars(m).values())
                 if isinstance(v, types.ModuleType) and v.__name__.startswith("triton")}
        cached = _MODULES[home] = (len(sys.modules), tuple(sorted(dict(ours).items()) + sorted(named.items())))
    return cached[1]


def _code_key(fn: Any) -> tuple[str, ...]:
    """The identity of every callable and the value of every plain constant of :func:`_modules`.

    A module's digest is recomputed only when one of its values is another object than when it was
    last digested (a plant, a monkeypatch); the ids in it are pinned (``cuda_graph._pinned_id``).
    Submodules are left out: a package gains one as an attribute when it is first imported (the
    interpreter's first launch imports ``triton.experimental``), which changes no code a kernel runs."""
    from mambalab.worker.cuda_graph import _pinned_id

    out = []
    for name, mod in _modules(fn):
        d = vars(mod)
        known = _CODE.get(name)
        # The module's namespace as it was at the last digest, whole (submodules included): where every
        # name and every value is the same object, so is the digest (checked in C, no list built).
        if known is not None and known[2] == tuple(d) and not any(map(operator.is_not, known[3], d.values())):
            out.append(known[1])
            continue
        attrs = [(a, v) for a, v in d.items() if not isinstance(v, types.ModuleType)]
        names, values = tuple(a for a, _ in attrs), tuple(v for _, v in attrs)
        if known is None or known[0][0] != names or any(map(operator.is_not, known[0][1], values)):
            items = [(a, v if isinstance(v, (bool, int, float, str)) else _pinned_id(v) if callable(v) else None)
                     for a, v in zip(names, values)]
            known = ((names, values), hashlib.blake2b(repr(items).encode(), digest_size=12).hexdigest())
        _CODE[name] = (known[0], known[1], tuple(d), tuple(d.values()))
        out.append(known[1])
    return tuple(out)


def _namespace_sizes(fn: Any) -> tuple[int, ...]:
    """How many names each module of :func:`_modules` holds (a launch that adds one changes the code key)."""
    return tuple(len(vars(m)) for _, m in _modules(fn))


def _with_code(stem: bytes, fn: Any) -> str:
    """A launch's key: the digest of its inputs (``stem``) joined with :func:`_code_key` as the code is now."""
    return hashlib.blake2b(stem + repr(_code_key(fn)).encode(), digest_size=20).hexdigest()


def _overflow_asserts() -> Any:
    try:
        from triton.runtime import interpreter

        return getattr(interpreter.interpreter_builder.options, "sanitize_overflow", None)
    except (ImportError, AttributeError):
        return None


def _leaf(value: Any, storages: dict[int, torch.Tensor]) -> Any:
    """What ``value`` contributes to the key (``storages`` collects the tensors' storages); ``None``
    raises nothing but marks a value the memo cannot look into."""
    if isinstance(value, torch.Tensor):
        st = value.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in storages:
            storages[ptr] = value
        return ("tensor", tuple(value.shape), value.stride(), value.storage_offset(), str(value.dtype),
                list(storages).index(ptr), st.nbytes(), value.device.type)
    if isinstance(value, _PLAIN):
        return repr(value)
    if isinstance(value, (tuple, list)) and all(isinstance(x, _PLAIN) for x in value):
        return repr(value)
    raise _Opaque(type(value).__qualname__)


class _Opaque(Exception):
    """An argument the key cannot describe (the launch then runs unmemoised)."""


class _Entry:
    """What one launch did: the bytes it wrote (per storage index) and, where it ran while accesses were
    recorded, what it recorded (the kernel's name and its accesses, in order)."""

    __slots__ = ("writes", "recorded", "nbytes")

    def __init__(self, writes: list[tuple[int, torch.Tensor]], recorded: tuple[list, list] | None):
        self.writes, self.recorded = writes, recorded
        self.nbytes = sum(d.numel() for _, d in writes)


class LaunchMemo:
    """What a launch wrote (per storage), by :func:`key <LaunchMemo.key>`; at most ``max_bytes`` kept."""

    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self.enabled = INTERPRET and DEVICE_TYPE == "cpu" and os.environ.get("MAMBALAB_LAUNCH_MEMO", "1") != "0"
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def key(self, kernel: Any, grid: Any, args: tuple, kwargs: dict, fresh: tuple = (),
            label: tuple = ()) -> tuple[str, list[torch.Tensor]] | None:
        """The launch's key and the storages it covers, or ``None`` where it cannot be keyed. The bytes
        of ``fresh`` tensors' storages (outputs just allocated uninitialised) are left out of it;
        ``label`` (the sanitizer's name and row axis of the launch) is part of it."""
        from mambalab.lab import sanitizer
        from mambalab.worker.cuda_graph import _pinned_id, _storage_bytes

        if callable(grid):
            return None
        storages: dict[int, torch.Tensor] = {}
        try:
            leaves = [_leaf(a, storages) for a in args]
            leaves += [(k, _leaf(kwargs[k], storages)) for k in sorted(kwargs)]
        except _Opaque:
            return None
        if any(t.device.type != "cpu" for t in storages.values()):
            return None
        h = hashlib.blake2b(digest_size=20)
        h.update(repr((_pinned_id(kernel), repr(grid), leaves, label, sanitizer.is_active(),
                       _overflow_asserts())).encode())
        views = list(storages.values())
        skip = {t.untyped_storage().data_ptr() for t in fresh}
        for t in views:
            h.update(b"fresh" if t.untyped_storage().data_ptr() in skip else _storage_bytes(t).numpy().tobytes())
        stem, fn = h.digest(), sanitizer._python_fn(kernel)
        return _with_code(stem, fn), views, (stem, fn)

    def launch(self, run: Callable[[], Any], kernel: Any, grid: Any, args: tuple, kwargs: dict,
               fresh: tuple = (), label: tuple = ()) -> Any:
        """``run()`` (the launch), or what it wrote (and recorded) the first time these inputs were launched."""
        from mambalab.lab import sanitizer
        from mambalab.worker.cuda_graph import _storage_bytes

        keyed = self.key(kernel, grid, args, kwargs, fresh, label) if self.enabled else None
        if keyed is None:
            return run()
        key, views, (stem, fn) = keyed
        logs = sanitizer._LOGS.get()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and logs and entry.recorded is None:
                entry = None  # run without recording the first time: run again, recording
            if entry is not None:
                self._entries.move_to_end(key)
                self.hits += 1
        if entry is not None:
            for i, data in entry.writes:
                _storage_bytes(views[i]).copy_(data)
            if logs:
                kernels, accesses = entry.recorded
                for log in logs:
                    log.kernels.extend(kernels)
                    log.accesses.extend(accesses)
            return None
        before = [_storage_bytes(t).clone() for t in views]
        sizes = _namespace_sizes(fn)
        recorded = None
        if logs:
            with sanitizer.recording() as mine:  # this launch's share of what the outer logs get
                result = run()  # raises: nothing memoised
            recorded = (list(mine.kernels), list(mine.accesses))
        else:
            result = run()
        if result is not None:
            return result
        # A fresh output is always kept as written: its bytes before were garbage, which may already have
        # held what the launch wrote (``torch.empty`` handing out an identical launch's freed buffer).
        fresh_ptrs = {t.untyped_storage().data_ptr() for t in fresh}
        entry = _Entry([(i, _storage_bytes(t).clone()) for i, (t, b) in enumerate(zip(views, before))
                        if t.untyped_storage().data_ptr() in fresh_ptrs or not torch.equal(_storage_bytes(t), b)],
                       recorded)
        # Stored under the code as the run left it: a kernel's first interpreted launch adds Triton's helpers
        # (GridExecutor, InterpretedFunction, ...) to the kernel's module, which every later launch then sees. A run
        # that added no name anywhere left the code as the key describes it (Triton's patches of the language
        # during a launch are undone by its end), and the key stands: one code digest per launch, not two.
        if _namespace_sizes(fn) != sizes:
            key = _with_code(stem, fn)
        with self._lock:
            self.misses += 1
            old = self._entries.pop(key, None)
            self._bytes += entry.nbytes - (old.nbytes if old is not None else 0)
            self._entries[key] = entry
            while self._bytes > self.max_bytes and self._entries:
                _, gone = self._entries.popitem(last=False)
                self._bytes -= gone.nbytes
        return result

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
            self.hits = self.misses = 0


MEMO = LaunchMemo()


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Every launch in the block really runs (tests of the sanitizer's and the interpreter's own work)."""
    was = MEMO.enabled
    MEMO.enabled = False
    try:
        yield
    finally:
        MEMO.enabled = was


__all__ = ["LaunchMemo", "MEMO", "disabled"]
