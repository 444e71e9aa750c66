"""What the sanitizer reports: violations, the access log and the errors it raises.

Split out of :mod:`mambalab.lab.sanitizer` (which re-exports every name here):
these are plain records, read by the engine's verdicts, the drawings and the
notebooks; the interpreter hooks that fill them live in ``sanitizer.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator


# The state pool's parameter names: Mamba's kernels take ``state_ptr``; FLA's gated-delta-rule kernel
# reads ``h0`` and writes ``ht`` (the same pool when it works in place, as vLLM's does).
STATE_ARGS = ("state", "state_ptr", "h0", "ht")


def arg_matches(name: str | None, arg: str | None) -> bool:
    """Whether a kernel parameter ``name`` is the argument ``arg`` asks for: ``None`` asks for any,
    ``"x"`` for ``x`` or ``x_ptr``, and ``"state"`` for every decode kernel's state pool."""
    if arg is None:
        return True
    if arg == "state":
        return name in STATE_ARGS
    return name == arg or name == f"{arg}_ptr"


class IllegalMemoryAccess(RuntimeError):
    """A sanitized launch loaded or stored outside the tensor its pointer came from.

    The CPU counterpart of CUDA's illegal-address error as reported by
    compute-sanitizer memcheck. The attributes describe the first violation;
    ``violations`` lists every one recorded in the launch.
    """

    def __init__(self, violations: list["Violation"], total: int | None = None):
        if not violations:
            raise ValueError("IllegalMemoryAccess needs at least one violation")
        self.violations = list(violations)
        self.total = len(self.violations) if total is None else int(total)
        first = self.violations[0]
        self.kernel = first.kernel
        self.pid = first.pid
        self.row = first.row
        self.op = first.op
        self.arg = first.arg
        self.index = first.index
        self.slot = first.slot
        self.num_slots = first.num_slots
        self.numel = first.numel
        super().__init__(self._message())

    def __reduce__(self):
        """Pickled as its violations (a report made in a helper process, e.g. on the interpreter)."""
        return type(self), (self.violations, self.total)

    def _message(self) -> str:
        first = self.violations[0]
        n = self.total
        lines = [
            f"illegal memory access in kernel '{first.kernel}' "
            f"({n} invalid access{'es' if n != 1 else ''} caught by the mambalab sanitizer): "
            + first.describe()
        ]
        shown = self.violations[1:8]
        for v in shown:
            lines.append("  also: " + v.describe())
        rest = n - 1 - len(shown)
        if rest > 0:
            lines.append(f"  ... and {rest} more")
        return "\n".join(lines)


class SanitizerUnsupported(RuntimeError):
    """The installed Triton's interpreter does not have the shape the hooks rely on."""


@dataclass(frozen=True)
class Violation:
    """One load or store of one program that left its tensor.

    ``index`` is the first offending element relative to the tensor's first
    element (``data_ptr``) in units of its dtype, ``slot`` the dim-0 index of
    that element (``index // stride(0)`` for a slot pool), ``slots`` every
    offending slot of this access and ``lanes`` how many lanes were illegal.
    ``arg`` is None for a pointer not derived from any tensor argument.
    """

    kernel: str
    pid: tuple[int, int, int]
    row: int
    op: str
    arg: str | None
    index: int | None
    slot: int | None
    num_slots: int | None
    numel: int | None
    shape: tuple[int, ...] | None
    address: int
    nbytes: int
    lanes: int
    slots: tuple[int, ...] = ()
    aliases: tuple[str, ...] = ()

    def describe(self) -> str:
        size = f"{self.nbytes} byte{'s' if self.nbytes != 1 else ''}"
        who = f"by program {self.pid}, row {self.row}"
        lanes = f"{self.lanes} lane{'s' if self.lanes != 1 else ''}"
        if self.arg is None:
            return (
                f"invalid {self.op} of {size} at address {self.address:#x} {who}: the pointer is "
                f"not derived from any tensor argument of the launch ({lanes})"
            )
        prep = {"load": "from", "store": "to"}.get(self.op, "on")
        also = f" (also passed as {', '.join(repr(a) for a in self.aliases)})" if self.aliases else ""
        if len(self.slots) > 1:
            more = list(self.slots[:8])
            lanes += f", slots {more}{' ...' if len(self.slots) > 8 else ''}"
        return (
            f"invalid {self.op} of {size} {prep} '{self.arg}'{also} at element {self.index} "
            f"(slot {self.slot}) {who}: outside the tensor ('{self.arg}' has {self.num_slots} "
            f"slot{'s' if self.num_slots != 1 else ''}, {self.numel} elements, shape "
            f"{self.shape}); {lanes}"
        )


@dataclass(frozen=True)
class Access:
    """What one load or store of one program did to one tensor argument."""

    kernel: str
    pid: tuple[int, int, int]
    row: int
    op: str
    arg: str | None
    slots: tuple[int, ...]
    elements: int
    legal: bool


@dataclass
class AccessLog:
    """Accesses and violations of the sanitized launches inside a ``recording()`` block."""

    accesses: list[Access] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.accesses)

    def __iter__(self) -> Iterator[Access]:
        return iter(self.accesses)

    def clear(self) -> None:
        self.accesses.clear()
        self.violations.clear()
        self.kernels.clear()

    def select(
        self,
        arg: str | None = None,
        op: str | None = None,
        *,
        kernel: str | None = None,
        legal: bool | None = None,
    ) -> list[Access]:
        """The accesses matching every filter given (None matches all; ``arg``: :func:`arg_matches`)."""
        return [
            a
            for a in self.accesses
            if arg_matches(a.arg, arg)
            and (op is None or a.op == op)
            and (kernel is None or a.kernel == kernel)
            and (legal is None or a.legal == legal)
        ]

    def slots(
        self,
        arg: str,
        op: str | None = None,
        *,
        kernel: str | None = None,
        legal: bool | None = None,
    ) -> dict[int, set[int]]:
        """``{row: slots of arg touched by that row}`` (op 'load', 'store', 'atomic' or all)."""
        out: dict[int, set[int]] = {}
        for a in self.select(arg, op, kernel=kernel, legal=legal):
            out.setdefault(a.row, set()).update(a.slots)
        return out

    def programs(
        self,
        arg: str,
        op: str | None = None,
        *,
        kernel: str | None = None,
        legal: bool | None = None,
    ) -> dict[tuple[int, int, int], set[int]]:
        """``{program id: slots of arg touched by that program}``."""
        out: dict[tuple[int, int, int], set[int]] = {}
        for a in self.select(arg, op, kernel=kernel, legal=legal):
            out.setdefault(a.pid, set()).update(a.slots)
        return out

    def rows_by_slot(
        self,
        arg: str,
        op: str | None = None,
        *,
        kernel: str | None = None,
        legal: bool | None = None,
    ) -> dict[int, set[int]]:
        """``{slot: rows that touched it}``: a slot with two writer rows is a race."""
        out: dict[int, set[int]] = {}
        for a in self.select(arg, op, kernel=kernel, legal=legal):
            for s in a.slots:
                out.setdefault(s, set()).add(a.row)
        return out
