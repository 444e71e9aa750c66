"""Short text for a notebook cell: the lines of a function's source that contain a pattern, and
the first line of the error a call raises."""

from __future__ import annotations

import inspect
import textwrap
from typing import Any, Callable

from mambalab.viz.text import Text


def source_excerpt(obj: Any, pattern: str, context: int = 0) -> Text:
    """The lines of ``obj``'s source that contain ``pattern`` (plus ``context`` lines around), dedented."""
    lines = inspect.getsource(obj).splitlines()
    keep: set[int] = set()
    for i, line in enumerate(lines):
        if pattern in line:
            keep |= set(range(max(0, i - context), min(len(lines), i + context + 1)))
    if not keep:
        raise ValueError(f"{pattern!r} does not occur in the source of {getattr(obj, '__qualname__', obj)}")
    out, prev = [], None
    for i in sorted(keep):
        if prev is not None and i != prev + 1:
            out.append("...")
        out.append(lines[i])
        prev = i
    return Text(textwrap.dedent("\n".join(out)))


def expect_error(fn: Callable, *args, **kwargs) -> Text:
    """Call ``fn`` and report the error it raises (first line), or that it raised none."""
    try:
        fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - shown to the reader
        first = str(e).splitlines()[0] if str(e) else ""
        return Text(textwrap.fill(f"{type(e).__name__}: {first}", 110, subsequent_indent="    "))
    return Text("no error")
