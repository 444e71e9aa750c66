"""Whether the installed Triton's interpreter can be guarded by :mod:`mambalab.lab.sanitizer`.

The sanitizer hooks the interpreter's four native memory entry points and its argument conversion; this
reads the interpreter's source to check that those are still the only ways a kernel touches memory, in the
shape the hooks expect (tested with Triton 3.6 and 3.9). :func:`mambalab.lab.sanitizer.check_supported`
turns a problem into :class:`~mambalab.lab.sanitizer_report.SanitizerUnsupported`.
"""

from __future__ import annotations

import inspect
import re
from collections import Counter

_MIN_TRITON = (3, 6)

# The interpreter's native memory entry points and the builder method that calls each.
_MEMORY_CALLS = {
    "load": "create_masked_load",
    "store": "create_masked_store",
    "atomic_cas": "create_atomic_cas",
    "atomic_rmw": "create_atomic_rmw",
}
# Native helpers that compute without touching memory.
_PURE_CALLS = frozenset({"fma_fp32", "fma_fp64"})
_LEADING_PARAMS = {
    "create_masked_load": ("self", "ptrs", "mask", "other"),
    "create_masked_store": ("self", "ptrs", "value", "mask"),
    "create_atomic_cas": ("self", "ptr", "cmp", "val"),
    "create_atomic_rmw": ("self", "rmwOp", "ptr", "val", "mask"),
}


def _triton_version() -> tuple[int, int]:
    import triton

    m = re.match(r"(\d+)\.(\d+)", triton.__version__)
    if not m:
        return (0, 0)
    return int(m.group(1)), int(m.group(2))


def _support_problem(interp) -> str | None:
    """Why the hooks cannot guard ``interp`` (the interpreter module), or None."""
    if _triton_version() < _MIN_TRITON:
        return "it is older than 3.6, the oldest Triton the sanitizer is tested with"
    for name in ("InterpreterBuilder", "GridExecutor", "TensorHandle", "_implicit_cvt",
                 "interpreter_builder", "_interpreter"):
        if not hasattr(interp, name):
            return f"triton.runtime.interpreter has no {name}"
    builder_cls = interp.InterpreterBuilder
    try:
        module_src = inspect.getsource(interp)
        executor_src = inspect.getsource(interp.GridExecutor.__call__)
        cvt_src = inspect.getsource(interp._implicit_cvt)
        method_src = {m: inspect.getsource(builder_cls.__dict__[m]) for m in _LEADING_PARAMS}
    except (OSError, TypeError, KeyError) as exc:
        return f"the interpreter's source cannot be inspected ({exc!r})"
    calls = Counter(re.findall(r"\b_interpreter\.([A-Za-z_]\w*)\s*\(", module_src))
    unknown = sorted(set(calls) - set(_MEMORY_CALLS) - _PURE_CALLS)
    if unknown:
        return f"the interpreter calls native function(s) {unknown} the sanitizer does not guard"
    for native, method in _MEMORY_CALLS.items():
        if calls.get(native, 0) != 1 or f"_interpreter.{native}(" not in method_src[method]:
            return f"native {native}() is not called from {method} alone"
    for method, lead in _LEADING_PARAMS.items():
        params = tuple(inspect.signature(builder_cls.__dict__[method]).parameters)
        if params[: len(lead)] != lead:
            return f"{method}{params} does not start with {lead}"
    if "_implicit_cvt(" not in executor_src or "set_grid_idx" not in executor_src:
        return "GridExecutor no longer converts arguments with _implicit_cvt"
    if "data_ptr" not in cvt_src:
        return "_implicit_cvt no longer turns tensors into their data_ptr"
    set_idx = getattr(builder_cls, "set_grid_idx", None)
    if set_idx is None or "self.grid_idx" not in inspect.getsource(set_idx):
        return "the interpreter builder no longer keeps the program id in grid_idx"
    return None
