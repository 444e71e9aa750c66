"""The bug catalogue and the switch that turns pre-fix behaviours on.

Every entry is a real vLLM pull request. A :class:`BugConfig` names the bugs
whose *pre-fix* behaviour is wanted; everything not named runs fixed (vLLM
0.22 behaviour). Components consult the configuration exactly where upstream
changed code, so a learner can flip one switch and watch one mechanism.

A bug may have parts (``spec-slots/width``); naming the bug turns all of its
parts on, naming a part turns on that part alone.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from mambalab.constants import NULL_BLOCK_ID, PAD_SLOT_ID


@dataclass(frozen=True)
class Bug:
    id: str
    pr: int
    title: str
    upstream_files: tuple[str, ...]
    mechanism: str
    symptom: str
    fixed_in: str
    parts: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return f"https://github.com/vllm-project/vllm/pull/{self.pr}"


CATALOGUE: tuple[Bug, ...] = (
    Bug(
        id="pad-minus-one",
        pr=35431,
        title="Use null block (0) for padded block table entries",
        upstream_files=(
            "vllm/v1/worker/gpu_model_runner.py",
            "vllm/v1/attention/backends/utils.py",
            "vllm/v1/attention/backends/mamba_attn.py",
            "vllm/model_executor/layers/mamba/ops/mamba_ssm.py",
        ),
        mechanism=(
            "CUDA-graph padding filled the padded rows of the block table with PAD_SLOT_ID (-1) "
            "although block 0 was already the reserved null block. Every consumer that indexes "
            "state with a block-table entry had to remember to skip -1; one that trusts the "
            "entry computes state_ptr + (-1) * stride and touches memory before the pool."
        ),
        symptom="CUDA illegal memory access under high concurrency (issue #33664), or silent "
        "reads/writes outside the state pool.",
        fixed_in="0.20",
    ),
    Bug(
        id="stale-rows",
        pr=37728,
        title="Fix Mamba state corruption from referencing stale block table entries",
        upstream_files=(
            "vllm/v1/worker/block_table.py",
            "vllm/v1/worker/gpu_input_batch.py",
            "vllm/v1/worker/gpu_model_runner.py",
        ),
        mechanism=(
            "With data parallelism and FULL CUDA graphs an idle rank runs a dummy batch padded to "
            "the other ranks' size with num_reqs == num_reqs_padded, so no null fill masks its "
            "rows: they use block_table[row, 0]. Finished requests' rows were never cleared and "
            "the dummy run did not commit the table to the device, so dummy decode steps read "
            "and wrote state blocks that had been freed and handed to another request."
        ),
        symptom="Zero-token-id (or NaN) responses from a linear-attention model under DP.",
        fixed_in="0.19",
    ),
    Bug(
        id="guard-lt-zero",
        pr=39064,
        title="Fix GDN FLA kernel crashes with NULL_BLOCK_ID=0 CUDA graph padding",
        upstream_files=(
            "vllm/model_executor/layers/fla/ops/fused_recurrent.py",
            "vllm/model_executor/layers/fla/ops/fused_sigmoid_gating.py",
        ),
        mechanism=(
            "After #35431 padded rows carry index 0, but the FLA kernels still treated only "
            "negative indices as invalid. Padded rows loaded the null block as an initial state "
            "and stored their results into it, all racing on block 0, so the null block stopped "
            "being zeros."
        ),
        symptom="Illegal memory accesses and corrupted outputs under CUDA graphs and TP > 1 "
        "(Qwen3.5 GDN).",
        fixed_in="0.20",
    ),
    Bug(
        id="spec-slots",
        pr=41233,
        title="Fix mamba_cache_mode=all + speculative decoding crash",
        upstream_files=(
            "vllm/v1/attention/backends/mamba_attn.py",
            "vllm/model_executor/layers/mamba/mamba_mixer2.py",
            "vllm/v1/worker/gpu_model_runner.py",
        ),
        mechanism=(
            "In mamba_cache_mode='all' the kernel touches 1 + num_speculative_blocks slots per "
            "request but the bookkeeping did not: (width) the persistent state_indices_tensor_d "
            "had cdiv(max_model_len, block_size) columns while the block table had + nsb; "
            "(padding) the block_idx_* buffers were sliced by num_decode_tokens instead of the "
            "padded request count, with no zeroed tail; (gather) the mixer gathered one slot "
            "instead of 1 + num_spec, anchored on the wrong block."
        ),
        symptom="Shape-mismatch crash while capturing CUDA graphs at start-up; after a partial "
        "acceptance the next step starts from the wrong state.",
        fixed_in="0.22",
        parts=("width", "padding", "gather"),
    ),
    Bug(
        id="stale-is-prefilling",
        pr=41873,
        title="Zero stale is_prefilling in padded CUDA graph rows for Mamba",
        upstream_files=(
            "vllm/v1/worker/gpu_model_runner.py",
            "vllm/v1/attention/backends/utils.py",
            "vllm/v1/attention/backends/mamba_attn.py",
        ),
        mechanism=(
            "condense() and remove_request() leave num_computed_tokens < num_prompt_tokens at "
            "rows past num_reqs. is_prefilling is computed over the padded rows, so padding "
            "rows look like prefills; Mamba ORs is_prefilling into the decode/prefill split, "
            "num_prefills becomes > 0 and the CUDA-graph buffer refresh is skipped while the "
            "FULL decode graph is still replayed with the previous step's state slots."
        ),
        symptom="Silent state corruption: a live request reads and writes another request's "
        "state.",
        fixed_in="0.22",
    ),
    Bug(
        id="move-row-stale-source",
        pr=49757,
        title="Stop dummy runs from writing mamba state through stale block-table rows",
        upstream_files=(
            "vllm/v1/worker/block_table.py",
            "vllm/v1/worker/gpu_input_batch.py",
        ),
        mechanism=(
            "condense() moves the highest live row into a hole with BlockTable.move_row, which "
            "copied the row and left the source untouched: a duplicate of a live request's block "
            "ids at an index >= num_reqs. #37728's clear_row covers removed rows, not rows vacated "
            "by condense. Once that request finishes its blocks are freed, but a dummy batch "
            "padded over the vacated row still reads and writes state through them."
        ),
        symptom="A freed (or prefix-cached) state block is overwritten by an idle DP rank's dummy "
        "batch; a later request that reuses it starts from a corrupted state.",
        fixed_in="0.33",
    ),
    Bug(
        id="zero-accepted",
        pr=48475,
        title="num_accepted_tokens == 0 makes decode kernels read state column -1",
        upstream_files=(
            "vllm/v1/worker/gpu_input_batch.py",
            "vllm/v1/worker/gpu_model_runner.py",
            "vllm/model_executor/layers/fla/ops/fused_recurrent.py",
            "vllm/model_executor/layers/mamba/ops/mamba_ssm.py",
        ),
        mechanism=(
            "Speculative decoding reads a request's initial state from column num_accepted - 1 of "
            "its state indices. num_accepted_tokens started at 0 and was only written for rows "
            "that ran a speculative step, and the kernels did not bound the column: a request's "
            "first decode after its prefill read column -1, which in a row-major (N, 1 + "
            "num_spec) index tensor is the previous row's last column: another request's slot "
            "(or, for row 0, memory before the tensor). Fixed by initialising and resetting the "
            "count to 1 and clamping the column (#48475, #50021, #51508)."
        ),
        symptom="A request's first speculative step starts from its neighbour's state: wrong "
        "tokens, or an illegal access for the first row.",
        fixed_in="0.30",
    ),
)

BUGS: dict[str, Bug] = {b.id: b for b in CATALOGUE}


def _all_switch_ids() -> list[str]:
    ids: list[str] = []
    for bug in CATALOGUE:
        ids.append(bug.id)
        ids.extend(f"{bug.id}/{p}" for p in bug.parts)
    return ids


class GuardMode(enum.IntEnum):
    """How a decode kernel treats a state index (a ``tl.constexpr`` of every kernel).

    NULL: fixed. Skip the null block (index ``<= null_block_id``: 0 and any negative).
    NEGATIVE: #39064 pre-fix. Skip only ``< 0``; index 0 loads and stores the null block.
    NONE: the consumer of the ``pad-minus-one`` world that trusts every index.
    """

    NULL = 0
    NEGATIVE = 1
    NONE = 2

    def is_live(self, slot: int, null_block_id: int = NULL_BLOCK_ID) -> bool:
        """Whether a kernel under this guard loads/stores state at ``slot``: the host-side twin
        of :func:`mambalab.kernels.common.is_live_slot`, used by the references and drawings."""
        if self is GuardMode.NULL:
            return slot > null_block_id
        if self is GuardMode.NEGATIVE:
            return slot >= 0
        return True


@dataclass(frozen=True)
class BugConfig:
    """Which catalogue bugs run with their pre-fix behaviour (default: none)."""

    enabled: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        known = set(_all_switch_ids())
        unknown = sorted(set(self.enabled) - known)
        if unknown:
            raise ValueError(
                f"unknown bug id(s) {unknown}; valid ids: {', '.join(_all_switch_ids())}"
            )
        expanded = set(self.enabled)
        for bug_id in self.enabled:
            bug = BUGS.get(bug_id)
            if bug is not None:
                expanded.update(f"{bug.id}/{p}" for p in bug.parts)
        object.__setattr__(self, "enabled", frozenset(expanded))

    @classmethod
    def fixed(cls) -> "BugConfig":
        return cls()

    @classmethod
    def with_bugs(cls, *ids: str | Iterable[str]) -> "BugConfig":
        flat: list[str] = []
        for item in ids:
            if isinstance(item, str):
                flat.extend(x.strip() for x in item.split(",") if x.strip())
            else:
                flat.extend(item)
        return cls(frozenset(flat))

    def has(self, bug_id: str) -> bool:
        """True when ``bug_id`` (or any part of it) runs with its pre-fix behaviour."""
        if bug_id not in BUGS and bug_id not in _all_switch_ids():
            raise ValueError(f"unknown bug id {bug_id!r}; valid ids: {', '.join(_all_switch_ids())}")
        return bug_id in self.enabled or any(e.startswith(bug_id + "/") for e in self.enabled)

    # -- the places where upstream changed --------------------------------
    @property
    def block_table_pad_value(self) -> int:
        """Value for padded block-table rows and state-index tails (#35431)."""
        return PAD_SLOT_ID if self.has("pad-minus-one") else NULL_BLOCK_ID

    @property
    def clamp_accepted(self) -> bool:
        """Whether decode kernels bound the column ``num_accepted - 1`` to ``>= 0`` (#48475)."""
        return not self.has("zero-accepted")

    @property
    def kernel_guard(self) -> GuardMode:
        """How decode kernels treat state indices (#35431 world, #39064)."""
        if self.has("pad-minus-one"):
            return GuardMode.NONE
        if self.has("guard-lt-zero"):
            return GuardMode.NEGATIVE
        return GuardMode.NULL

    def __str__(self) -> str:
        top = sorted(b for b in self.enabled if "/" not in b)
        parts = sorted(
            b for b in self.enabled if "/" in b and b.split("/")[0] not in top
        )
        names = top + parts
        return "BugConfig(all fixed)" if not names else f"BugConfig(pre-fix: {', '.join(names)})"


_ACTIVE: contextvars.ContextVar[BugConfig] = contextvars.ContextVar(
    "mambalab_bug_config", default=BugConfig()
)


def active() -> BugConfig:
    """The configuration in force for code that is not handed one explicitly."""
    return _ACTIVE.get()


def resolve(bugs: BugConfig | None) -> BugConfig:
    """The one rule for a missing configuration: the one given, else the active one
    (``BugConfig()``, every fix on, unless a ``with use(...)`` block says otherwise)."""
    return bugs if bugs is not None else _ACTIVE.get()


@contextlib.contextmanager
def use(config: BugConfig) -> Iterator[BugConfig]:
    """Run a block with ``config`` as the active configuration."""
    if not isinstance(config, BugConfig):
        raise TypeError(f"use() takes a BugConfig, got {type(config).__name__}")
    token = _ACTIVE.set(config)
    try:
        yield config
    finally:
        _ACTIVE.reset(token)


__all__ = ["Bug", "BUGS", "CATALOGUE", "BugConfig", "GuardMode", "active", "resolve", "use"]
