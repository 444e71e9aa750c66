"""Bounds-checked kernel launches: compute-sanitizer memcheck for Triton's CPU interpreter.

Every kernel of mambalab is launched through :func:`launch`. On CUDA it is
``kernel[grid](*args, **kwargs)`` and nothing else; a wild state index there is
a CUDA "illegal memory access", and ``compute-sanitizer --tool memcheck`` names
the kernel, the block and the address. Under ``TRITON_INTERPRET=1`` the same
index reads or writes real host memory: it corrupts the process or kills the
Jupyter kernel. While the interpreter runs, :func:`launch` therefore plays
memcheck's role:

* **Provenance by pointer tagging.** Each tensor argument's base pointer gets a
  tag in its high bits (``tag << 52``) as the interpreter converts the
  arguments. Pointer arithmetic, ``tl.where``, broadcasts and reshapes carry the
  tag along, so every address a load or store sees still says which argument
  it was derived from. ``state_ptr + (-1) * stride0`` is therefore checked
  against ``state`` even when it lands inside another argument allocated just
  before it.
* **Checks at the interpreter's only native memory calls.** The builder
  methods ``create_masked_load``, ``create_masked_store``, ``create_atomic_cas``
  and ``create_atomic_rmw`` are the only places that hand addresses to native
  code (unmasked, block-pointer, descriptor and atomic loads and stores all
  funnel into them). Their hooks check each active lane (masked-off lanes are
  not accesses), point illegal and masked lanes at a private scratch word and
  mask them, untag the legal ones and call the original. Nothing outside a
  tensor is ever touched, and an illegal load yields ``other`` (zero).
* **Legal bytes of a tensor argument: its view footprint,** from its lowest to
  its highest reachable element (inclusive of that element's bytes), computed
  from ``data_ptr``, shape and strides. A view with a storage offset into a
  bigger buffer (guard slots, a page-padded pool) is guarded at its own edges,
  not at the buffer's. Gaps inside the footprint (row padding of a padded
  pool) count as legal: the guard is the view's outline, as memcheck's is the
  allocation's.
* **Report after the launch.** All programs run to completion and every
  violation is collected (the first 256 in detail), then
  :class:`IllegalMemoryAccess` is raised: kernel, program id and row, load or
  store, argument name, element index, slot and the tensor's size.
* **Recording.** ``with recording() as log:`` collects, per load or store of
  each program, the slots of each argument touched (legal and illegal), for
  drawing which program touched which slot.
* **Switch.** On by default under the interpreter; ``enabled(False)`` or
  ``MAMBALAB_SANITIZER=0`` launches unguarded, with no hook installed.
* **Version guard.** The hooks depend on interpreter internals that change
  between Triton releases (tested: 3.6 and 3.9). Before installing them the
  interpreter module is inspected; if it does not have the expected shape,
  :class:`SanitizerUnsupported` is raised rather than running unguarded.

Hooks are installed only while a sanitized launch runs and are removed when
it returns or raises. With them, :mod:`mambalab.lab.interpreter_cache` stops
the interpreter from repeating per-call work whose answer cannot change within
a launch (re-patching the language at every device-function call, rebuilding
its dtype table); the report types live in :mod:`mambalab.lab.sanitizer_report`, the tensors'
footprints and slot arithmetic in :mod:`mambalab.lab.sanitizer_tensors`.

Cost: every check is one set of NumPy operations over all lanes of a load or
store (no per-lane Python), and what depends only on the launch (the kernel's
signature, each argument's identity key) is computed once per launch or once
per kernel; the sanitizer's own code is a few percent of a replay
(``docs/speed.md``). The interpreter itself is single-threaded (one global
builder), so sanitized launches are serialised by a lock.

Known limits: a pointer converted to an integer inside a kernel shows its tag;
two arguments passing the same view are reported under the first name (with
the others listed as aliases); ``slot`` assumes dim 0 indexes slots (for a
tensor whose dim 0 is not its outermost stride, the dim-0 coordinate is
recovered by unravelling the element offset over strides in decreasing order).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from typing import Any, Iterator

import numpy as np

from mambalab.device import INTERPRET
from mambalab.lab import interpreter_cache, launch_memo, sanitizer_rows
from mambalab.lab.sanitizer_support import _support_problem
from mambalab.lab.sanitizer_tensors import _Entry, _flatten_params, _key, _layout, _python_fn, _unwrap
from mambalab.lab.sanitizer_report import (
    Access,
    AccessLog,
    IllegalMemoryAccess,
    SanitizerUnsupported,
    Violation,
)

_ENV = "MAMBALAB_SANITIZER"
_OFF_VALUES = ("0", "false", "off", "no")
_ON_VALUES = ("", "1", "true", "on", "yes")

_TAG_SHIFT = 52
_MAX_TAGS = (1 << (63 - _TAG_SHIFT)) - 1
_MAX_ADDRESS = 1 << (_TAG_SHIFT - 1)
_U_SHIFT = np.uint64(_TAG_SHIFT)
_U_HALF = np.uint64(1 << (_TAG_SHIFT - 1))
_MAX_DETAILED_VIOLATIONS = 256
TESTED_TRITON = ("3.6", "3.9")

# Where illegal and masked-off lanes point: a private, aligned scratch area.
_SCRATCH = np.zeros(128, dtype=np.uint8)
_SAFE_ADDRESS = (_SCRATCH.ctypes.data + 63) // 64 * 64


# ---------------------------------------------------------------------------
# switch


_ENABLED: contextvars.ContextVar[bool | None] = contextvars.ContextVar(
    "mambalab_sanitizer_enabled", default=None
)
_LOGS: contextvars.ContextVar[tuple[AccessLog, ...]] = contextvars.ContextVar(
    "mambalab_sanitizer_logs", default=()
)


def _env_setting() -> bool:
    raw = os.environ.get(_ENV, "").strip().lower()
    if raw in _OFF_VALUES:
        return False
    if raw in _ON_VALUES:
        return True
    raise ValueError(f"{_ENV}={raw!r}: expected 1/0 (or on/off, true/false)")


def is_active() -> bool:
    """True when launches are checked: the interpreter runs and the sanitizer is on."""
    if not INTERPRET:
        return False
    setting = _ENABLED.get()
    return _env_setting() if setting is None else setting


@contextlib.contextmanager
def enabled(on: bool = True) -> Iterator[None]:
    """Turn the sanitizer on or off for a block (overrides ``MAMBALAB_SANITIZER``)."""
    token = _ENABLED.set(bool(on))
    try:
        yield
    finally:
        _ENABLED.reset(token)


@contextlib.contextmanager
def recording() -> Iterator[AccessLog]:
    """Collect the accesses of every sanitized launch in the block into an :class:`AccessLog`.

    Recording needs the sanitizer active (nothing is seen of unguarded or CUDA
    launches). Blocks may nest; each log gets the accesses made inside it.
    """
    log = AccessLog()
    token = _LOGS.set(_LOGS.get() + (log,))
    try:
        yield log
    finally:
        _LOGS.reset(token)


# ---------------------------------------------------------------------------
# version guard


_SUPPORT: dict[int, str | None] = {}


def check_supported() -> None:
    """Raise :class:`SanitizerUnsupported` unless the installed Triton can be guarded."""
    import triton
    from triton.runtime import interpreter as interp

    key = id(interp)
    if key not in _SUPPORT:
        _SUPPORT[key] = _support_problem(interp)
    problem = _SUPPORT[key]
    if problem is not None:
        raise SanitizerUnsupported(
            f"the mambalab sanitizer cannot guard Triton {triton.__version__}: {problem}. "
            f"It is tested with Triton {' and '.join(TESTED_TRITON)}. Install one of those, or "
            f"set {_ENV}=0 to launch unguarded (an out-of-bounds access then reads or writes "
            f"host memory and can crash the process)."
        )


# ---------------------------------------------------------------------------
# one sanitized launch


class _Launch:
    def __init__(self, kernel: str, row_axis: int, params: list[tuple[str, Any]],
                 logs: tuple[AccessLog, ...], builder: Any, rows: int = 1):
        self.kernel = kernel
        self.row_axis = row_axis
        self.rows = rows  # requests a program (sanitizer_rows.py); 1: the program's id names its row
        self.lane_rows: dict[tuple, np.ndarray] = {}
        self.params = params
        self.logs = logs
        self.builder = builder
        self.by_key: dict[tuple, _Entry] = {}
        self.by_tag: dict[int, _Entry] = {}
        self.violations: list[Violation] = []
        self.total = 0
        self.param_keys: list[tuple[str, tuple, tuple]] | None = None

    # -- tagging -------------------------------------------------------------
    def entry_for(self, arg: Any) -> _Entry:
        t = _unwrap(arg)
        key = _key(t)
        entry = self.by_key.get(key)
        if entry is not None:
            return entry
        if self.param_keys is None:
            self.param_keys = [(n, _key(p), _layout(p)) for n, p in self.params]
        names = tuple(n for n, k, _ in self.param_keys if k == key)
        if not names:
            layout = _layout(t)
            names = tuple(n for n, _, lay in self.param_keys if lay == layout)
            if len(names) != 1:
                names = ()
        tag = len(self.by_tag) + 1
        if tag > _MAX_TAGS:
            raise SanitizerUnsupported(f"more than {_MAX_TAGS} tensor arguments in one launch")
        entry = _Entry.of(tag, names, t)
        if entry.hi >= _MAX_ADDRESS:
            raise SanitizerUnsupported(
                f"tensor address {entry.hi:#x} is above {_MAX_ADDRESS:#x}, where tags start"
            )
        self.by_key[key] = entry
        self.by_tag[tag] = entry
        return entry

    # -- checking ------------------------------------------------------------
    def _pid(self, builder: Any) -> tuple[int, int, int]:
        idx = getattr(builder, "grid_idx", None)
        if idx is None:
            idx = getattr(self.builder, "grid_idx", None) or (0, 0, 0)
        return tuple(int(i) for i in idx)  # type: ignore[return-value]

    def guard(self, builder: Any, op: str, ptrs: Any, mask: Any) -> tuple[np.ndarray, np.ndarray]:
        """Untagged addresses and mask for the lanes that may touch memory.

        One pass of NumPy over all lanes. The common case (every active lane carries one
        argument's tag and stays inside it; one legal access, recorded where a log is open)
        returns after a single bounds comparison; anything else takes the general path,
        which groups lanes by tag and notes each violation.
        """
        p = ptrs.data
        if not isinstance(p, np.ndarray) or p.dtype != np.uint64:
            p = np.asarray(p, dtype=np.uint64)
        if self.rows > 1:
            sanitizer_rows.require_rows(p.shape, self.rows)
        if mask is None:
            m = None
        else:
            mdata = mask if isinstance(mask, np.ndarray) else mask.data
            m = np.asarray(mdata, dtype=bool)
            if m.shape != p.shape:
                m = np.broadcast_to(m, p.shape)
            if not m.any():
                return np.full(p.shape, _SAFE_ADDRESS, dtype=np.uint64), np.zeros(p.shape, dtype=bool)
        elt = ptrs.get_element_ty()
        nbytes = max(1, int(elt.primitive_bitwidth) // 8)
        tags = (p + _U_HALF) >> _U_SHIFT
        addr = (p - (tags << _U_SHIFT)).view(np.int64)
        active = tags if m is None else tags[m]
        tag = int(active.min())
        entry = self.by_tag.get(tag) if tag == int(active.max()) else None
        if entry is not None:
            ok = (addr >= entry.lo) & (addr <= entry.hi - nbytes)
            if m is None:
                if ok.all():
                    if self.logs:  # what the general path's _note records for these lanes: one legal access
                        self._record_legal(builder, op, entry, addr, None)
                    return addr.view(np.uint64), ok
            else:
                ok &= m
                if np.array_equal(ok, m):
                    if self.logs:
                        self._record_legal(builder, op, entry, addr, ok)
                    return np.where(ok, addr.view(np.uint64), np.uint64(_SAFE_ADDRESS)), ok
        if m is None:
            m = np.ones(p.shape, dtype=bool)
        out_ptr = np.full(p.shape, _SAFE_ADDRESS, dtype=np.uint64)
        out_mask = np.zeros(p.shape, dtype=bool)
        if self.rows == 1:
            self._general(None, builder, op, m, tags, addr, p, nbytes, out_ptr, out_mask)
        else:  # each row's lanes as its own program would have checked them
            pid = self._pid(builder)
            lane_rows = self._rows_of(p.shape, pid)
            for row in np.unique(lane_rows[m]).tolist():
                self._general(sanitizer_rows.virtual_pid(pid, self.row_axis, row), builder, op,
                              m & (lane_rows == row), tags, addr, p, nbytes, out_ptr, out_mask)
        return out_ptr, out_mask

    def _general(self, pid, builder, op, m, tags, addr, p, nbytes, out_ptr, out_mask) -> None:
        """The lanes ``m`` grouped by tag: legal ones into ``out_ptr``/``out_mask``, each violation noted."""
        active_tags = tags[m]
        lo_t, hi_t = int(active_tags.min()), int(active_tags.max())
        groups = [lo_t] if lo_t == hi_t else [int(t) for t in np.unique(active_tags)]
        for tag in groups:
            sel = m if len(groups) == 1 else (m & (tags == np.uint64(tag)))
            entry = self.by_tag.get(tag)
            if entry is None:
                ok = np.zeros(p.shape, dtype=bool)
            else:
                ok = sel & (addr >= entry.lo) & (addr <= entry.hi - nbytes)
            bad = sel & ~ok
            if ok.any():
                out_ptr[ok] = addr[ok].view(np.uint64)
                out_mask |= ok
            any_bad = bool(bad.any())
            if self.logs or any_bad:
                pid = pid or self._pid(builder)
                self._note(pid, op, entry, addr, ok, bad, any_bad, nbytes, p)

    def _rows_of(self, shape: tuple, pid: tuple) -> np.ndarray:
        key = (shape, pid[self.row_axis])
        rows = self.lane_rows.get(key)
        if rows is None:
            rows = self.lane_rows[key] = sanitizer_rows.lane_rows(shape, pid[self.row_axis], self.rows)
        return rows

    def _record_legal(self, builder, op, entry, addr, lanes) -> None:
        """One legal access of the lanes ``lanes`` (None: all), or one per row with lanes in them where a
        program runs several rows (under that row's program id)."""
        pid = self._pid(builder)
        if self.rows == 1:
            self._record(pid, op, entry, addr if lanes is None else addr[lanes],
                         addr.size if lanes is None else int(np.count_nonzero(lanes)), True)
            return
        lane_rows = self._rows_of(addr.shape, pid)
        if lanes is None:
            lanes = np.ones(addr.shape, dtype=bool)
        for row in np.unique(lane_rows[lanes]).tolist():
            sel = lanes & (lane_rows == row)
            self._record(sanitizer_rows.virtual_pid(pid, self.row_axis, row), op, entry, addr[sel],
                         int(np.count_nonzero(sel)), True)

    def _record(self, pid, op, entry, addrs, n: int, legal: bool) -> None:
        """One access for the open logs: ``n`` lanes at ``addrs`` of ``entry`` (None: of no argument)."""
        slots = () if entry is None else tuple(np.unique(entry.slots_of(entry.elements(addrs))).tolist())
        rec = Access(self.kernel, pid, pid[self.row_axis], op, None if entry is None else entry.name, slots, n, legal)
        for log in self.logs:
            log.accesses.append(rec)

    def _note(self, pid, op, entry, addr, ok, bad, any_bad, nbytes, raw) -> None:
        row = pid[self.row_axis]
        if self.logs:
            for lanes, legal in ((ok, True), (bad, False)):
                if n := int(np.count_nonzero(lanes)):
                    self._record(pid, op, entry, addr[lanes], n, legal)
        if not any_bad:
            return
        self.total += 1
        if self.rows == 1 and len(self.violations) >= _MAX_DETAILED_VIOLATIONS:
            return  # several rows a program: capped once in program order (sanitizer_rows.in_program_order)
        first = int(np.flatnonzero(bad.reshape(-1))[0])
        lanes = int(np.count_nonzero(bad))
        if entry is None:
            v = Violation(self.kernel, pid, row, op, None, None, None, None, None, None,
                          int(raw.reshape(-1)[first]), nbytes, lanes)
        else:
            elems = entry.elements(addr[bad])
            all_slots = np.unique(entry.slots_of(elems))
            index = int(entry.elements(addr.reshape(-1)[first : first + 1])[0])
            slot = int(entry.slots_of(np.array([index], dtype=np.int64))[0])
            v = Violation(
                self.kernel, pid, row, op, entry.name, index, slot, entry.num_slots,
                entry.numel, entry.shape, int(addr.reshape(-1)[first]), nbytes, lanes,
                tuple(int(s) for s in all_slots), entry.names[1:],
            )
        self.violations.append(v)
        for log in self.logs:
            log.violations.append(v)


# ---------------------------------------------------------------------------
# hooks


_LOCK = threading.RLock()
_STACK: list[_Launch] = []
_ORIGINALS: dict[str, Any] = {}
_INTERP: Any = None


def _current() -> _Launch | None:
    return _STACK[-1] if _STACK else None


def _hook_masked_load(self, ptrs, mask, other, *args, **kwargs):
    launch = _current()
    orig = _ORIGINALS["create_masked_load"]
    if launch is None:
        return orig(self, ptrs, mask, other, *args, **kwargs)
    handle = type(ptrs)
    new_ptr, new_mask = launch.guard(self, "load", ptrs, mask)
    return orig(self, handle(new_ptr, ptrs.dtype), handle(new_mask, _int1()), other, *args, **kwargs)


def _hook_masked_store(self, ptrs, value, mask, *args, **kwargs):
    launch = _current()
    orig = _ORIGINALS["create_masked_store"]
    if launch is None:
        return orig(self, ptrs, value, mask, *args, **kwargs)
    handle = type(ptrs)
    new_ptr, new_mask = launch.guard(self, "store", ptrs, mask)
    return orig(self, handle(new_ptr, ptrs.dtype), value, handle(new_mask, _int1()), *args, **kwargs)


def _hook_atomic_cas(self, ptr, cmp, val, *args, **kwargs):
    launch = _current()
    orig = _ORIGINALS["create_atomic_cas"]
    if launch is None:
        return orig(self, ptr, cmp, val, *args, **kwargs)
    new_ptr, _ = launch.guard(self, "atomic", ptr, None)
    return orig(self, type(ptr)(new_ptr, ptr.dtype), cmp, val, *args, **kwargs)


def _hook_atomic_rmw(self, rmw_op, ptr, val, mask, *args, **kwargs):
    launch = _current()
    orig = _ORIGINALS["create_atomic_rmw"]
    if launch is None:
        return orig(self, rmw_op, ptr, val, mask, *args, **kwargs)
    handle = type(ptr)
    new_ptr, new_mask = launch.guard(self, "atomic", ptr, mask)
    return orig(self, rmw_op, handle(new_ptr, ptr.dtype), val, handle(new_mask, _int1()), *args, **kwargs)


def _hook_implicit_cvt(arg):
    out = _ORIGINALS["_implicit_cvt"](arg)
    launch = _current()
    if launch is None or not hasattr(arg, "data_ptr"):
        return out
    handle = getattr(out, "handle", None)
    data = getattr(handle, "data", None)
    if not isinstance(data, np.ndarray) or data.dtype != np.uint64:
        return out
    entry = launch.entry_for(arg)
    handle.data = data + np.uint64(entry.tag << _TAG_SHIFT)
    return out


_BUILDER_HOOKS = {
    "create_masked_load": _hook_masked_load,
    "create_masked_store": _hook_masked_store,
    "create_atomic_cas": _hook_atomic_cas,
    "create_atomic_rmw": _hook_atomic_rmw,
}


_INT1: Any = None


def _int1():
    global _INT1
    if _INT1 is None:
        import triton.language as tl

        _INT1 = tl.int1
    return _INT1


def _install() -> None:
    from triton.runtime import interpreter as interp

    global _INTERP
    _INTERP = interp
    builder_cls = interp.InterpreterBuilder
    for name, hook in _BUILDER_HOOKS.items():
        _ORIGINALS[name] = builder_cls.__dict__[name]
        setattr(builder_cls, name, hook)
    _ORIGINALS["_implicit_cvt"] = interp._implicit_cvt
    interp._implicit_cvt = _hook_implicit_cvt
    interpreter_cache.install(interp)


def _uninstall() -> None:
    interp = _INTERP
    if interp is None or not _ORIGINALS:
        return
    for name in _BUILDER_HOOKS:
        setattr(interp.InterpreterBuilder, name, _ORIGINALS[name])
    interp._implicit_cvt = _ORIGINALS["_implicit_cvt"]
    _ORIGINALS.clear()
    interpreter_cache.uninstall()


def hooks_installed() -> bool:
    """True while the interpreter is patched (only during a sanitized launch)."""
    if _INTERP is None:
        return False
    return (
        _INTERP._implicit_cvt is _hook_implicit_cvt
        or any(_INTERP.InterpreterBuilder.__dict__.get(n) is h for n, h in _BUILDER_HOOKS.items())
        or interpreter_cache.installed()
    )


# ---------------------------------------------------------------------------
# the launch


def launch(kernel: Any, grid: Any, *args: Any, name: str | None = None, row_axis: int = 0,
           fresh_outputs: tuple = (), rows_per_program: int = 1, **kwargs: Any) -> Any:
    """Launch ``kernel[grid](*args, **kwargs)``, bounds-checked under the interpreter.

    ``name`` is the kernel's user-facing name (default: the Python function's);
    ``row_axis`` is the program-id axis that indexes the request row. On CUDA,
    or with the sanitizer off, this is the plain launch. Under the interpreter
    every load and store is checked against the tensor its pointer came from;
    after the launch :class:`IllegalMemoryAccess` is raised if any left it. On
    the CPU a launch that repeats an earlier one's inputs exactly, and that
    returned normally then, writes what that one wrote (:mod:`mambalab.lab.launch_memo`);
    ``fresh_outputs`` are output tensors the caller has just allocated with ``torch.empty``, whose
    bytes (uninitialised) are not part of that comparison. ``rows_per_program`` (the interpreter's
    several-requests kernels, :mod:`mambalab.lab.sanitizer_rows`): program ``i`` on ``row_axis`` runs rows
    ``i * rows_per_program ...``, every access leading with those rows; each row's lanes are checked, recorded
    and reported as the one-row program of that row would be, in the order those programs run.
    """
    return launch_memo.MEMO.launch(lambda: _launch(kernel, grid, args, name, row_axis, kwargs, rows_per_program),
                                   kernel, grid, args, kwargs, fresh_outputs, (name, row_axis, rows_per_program))


def _launch(kernel: Any, grid: Any, args: tuple, name: str | None, row_axis: int, kwargs: dict,
            rows: int = 1) -> Any:
    if not is_active():
        return kernel[grid](*args, **kwargs)
    if row_axis not in (0, 1, 2):
        raise ValueError(f"row_axis must be 0, 1 or 2, got {row_axis}")
    if not isinstance(rows, int) or rows < 1:
        raise ValueError(f"rows_per_program must be a positive int, got {rows!r}")
    check_supported()
    fn = _python_fn(kernel)
    kernel_name = name or (fn.__name__ if fn is not None else type(kernel).__name__)
    params = _flatten_params(fn, args, kwargs) if fn is not None else []
    from triton.runtime import interpreter as interp

    with _LOCK:
        ctx = _Launch(kernel_name, row_axis, params, _LOGS.get(), interp.interpreter_builder, rows)
        for log in ctx.logs:
            log.kernels.append(kernel_name)
        marks = sanitizer_rows.marks(ctx.logs) if rows > 1 else None
        outermost = not _STACK
        if outermost:
            _install()
        _STACK.append(ctx)
        error: BaseException | None = None
        result = None
        try:
            result = kernel[grid](*args, **kwargs)
        except BaseException as exc:  # re-raised below, after the hooks are gone
            error = exc
        finally:
            _STACK.pop()
            if outermost:
                _uninstall()
            if marks is not None:
                ctx.violations = sanitizer_rows.in_program_order(ctx.violations, marks, _MAX_DETAILED_VIOLATIONS)
    if ctx.violations:
        raise IllegalMemoryAccess(ctx.violations, ctx.total) from error
    if isinstance(getattr(error, "__cause__", None), SanitizerUnsupported):
        raise error.__cause__  # refused inside a program (the interpreter wraps it): the refusal itself
    if error is not None:
        raise error
    return result


__all__ = [
    "Access",
    "AccessLog",
    "IllegalMemoryAccess",
    "SanitizerUnsupported",
    "TESTED_TRITON",
    "Violation",
    "check_supported",
    "enabled",
    "hooks_installed",
    "is_active",
    "launch",
    "recording",
]
