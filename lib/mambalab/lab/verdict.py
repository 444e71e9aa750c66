"""What a run came to: a verdict, and the typed failures it can hold.

A verdict says whether every request matched its reference and, if not, how
the run failed: the first :class:`Divergence` (step, request, position,
expected vs got), an :class:`IllegalAccess` (the sanitizer's report on the
CPU, CUDA's on a GPU) or a :class:`Crash` (an error at start-up, inside a
step, in a worker process, or a workload that never finished). Code decides
on these fields; the sentences a reader sees are rendered from them
(``describe`` / ``summary``) and never parsed back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from mambalab.lab.sanitizer_report import IllegalMemoryAccess

STATE_ATOL = 1e-4


@dataclass
class Divergence:
    kind: str  # "token" | "state"
    req_id: str
    rank: int
    step: int
    position: int
    expected: object
    got: object

    def describe(self) -> str:
        if self.kind == "token":
            return (f"step {self.step}: request {self.req_id} (rank {self.rank}) output token "
                    f"#{self.position}: expected {self.expected}, got {self.got}")
        return (f"request {self.req_id} (rank {self.rank}) final state: "
                f"{self.got} (expected the reference within {STATE_ATOL})")


@dataclass(frozen=True)
class IllegalAccess:
    """An access outside a tensor: the sanitizer names kernel, row, operation, argument and
    index; a GPU fault (``kernel is None``) carries only CUDA's ``message``."""

    step: int
    rank: int | None
    kernel: str | None = None
    row: int | None = None
    op: str | None = None
    arg: str | None = None
    slot: int | None = None
    index: int | None = None
    num_slots: int | None = None
    message: str | None = None

    @property
    def from_sanitizer(self) -> bool:
        return self.kernel is not None

    @classmethod
    def from_error(cls, error: BaseException, step: int, rank: int | None) -> "IllegalAccess | None":
        """The sanitizer's report carried by ``error`` (itself or its cause), or None."""
        ima = error if isinstance(error, IllegalMemoryAccess) else error.__cause__
        if not isinstance(ima, IllegalMemoryAccess):
            return None
        return cls(step=step, rank=rank, kernel=ima.kernel, row=ima.row, op=ima.op, arg=ima.arg, slot=ima.slot,
                   index=ima.index, num_slots=ima.num_slots)

    def describe(self) -> str:
        if not self.from_sanitizer:
            where = "CUDA" if self.arg is None else "the guard slot"
            return f"ILLEGAL MEMORY ACCESS at step {self.step}, rank {self.rank} ({where}): {self.message}"
        return (f"ILLEGAL MEMORY ACCESS at step {self.step}, rank {self.rank}: kernel {self.kernel}, "
                f"row {self.row}, {self.op} of {self.arg} at slot {self.slot} "
                f"(element {self.index}; the pool has {self.num_slots} slots)")


CRASH_KINDS = ("startup", "step", "unfinished", "worker")


@dataclass(frozen=True)
class Crash:
    """The run stopped without a verdict on its tokens.

    ``kind``: ``startup`` (the engine could not be built, e.g. a CUDA graph that
    cannot be captured), ``step`` (an error inside step ``step`` on ``rank``),
    ``unfinished`` (the workload did not finish within ``step`` steps: a hang),
    ``worker`` (the process running it died). ``message``: the error's type and text;
    ``illegal``: the sanitizer's report when an illegal access caused it (e.g. while
    capturing CUDA graphs at start-up).
    """

    kind: str
    message: str
    step: int | None = None
    rank: int | None = None
    illegal: IllegalAccess | None = None

    def __post_init__(self) -> None:
        if self.kind not in CRASH_KINDS:
            raise ValueError(f"unknown crash kind {self.kind!r}; one of {CRASH_KINDS}")

    @classmethod
    def at_startup(cls, error: BaseException | str) -> "Crash":
        if isinstance(error, str):
            return cls("startup", error)
        return cls("startup", f"{type(error).__name__}: {error}",
                   illegal=IllegalAccess.from_error(error, step=0, rank=None))

    @classmethod
    def in_step(cls, step: int, rank: int, error: BaseException) -> "Crash":
        return cls("step", f"{type(error).__name__}: {error}", step=step, rank=rank)

    @classmethod
    def unfinished(cls, max_steps: int) -> "Crash":
        return cls("unfinished", f"the workload did not finish within {max_steps} steps")

    def describe(self) -> str:
        if self.kind == "startup":
            return f"at CUDA-graph capture (engine start-up): {self.message}"
        if self.kind == "step":
            return f"step {self.step}, rank {self.rank}: {self.message}"
        if self.kind == "unfinished":
            return f"hang: {self.message}"
        return self.message


@dataclass
class Verdict:
    ok: bool
    divergences: list[Divergence] = field(default_factory=list)
    illegal: IllegalAccess | None = None
    crash: Crash | None = None
    steps: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def first(self) -> Divergence | None:
        return min(self.divergences, key=lambda d: (d.step, d.rank, d.req_id)) if self.divergences else None

    @property
    def failure_step(self) -> int:
        """The step where the failure shows (0: at engine start-up or unknown)."""
        if self.illegal is not None:
            return self.illegal.step
        if self.crash is not None:
            return self.crash.step if self.crash.kind == "step" else 0
        d = self.first
        return d.step if d is not None else self.steps

    def summary(self) -> str:
        if self.illegal is not None:
            return self.illegal.describe()
        if self.crash is not None:
            return f"CRASH: {self.crash.describe()}"
        if self.ok:
            return f"OK: every request matches its reference ({self.steps} steps)"
        d = self.first
        if d is None:  # judged by nothing: e.g. a combination that needs Triton's interpreter
            return "NOT RUN: " + ("; ".join(self.notes) or "no verdict")
        n = len({x.req_id for x in self.divergences})
        return f"DIVERGED: {d.describe()} ({n} request(s) differ)"

    def to_dict(self) -> dict:
        out = asdict(self)
        out["summary"] = self.summary()
        return out


__all__ = ["CRASH_KINDS", "Crash", "Divergence", "IllegalAccess", "STATE_ATOL", "Verdict"]
