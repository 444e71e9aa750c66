"""The bug catalogue and the switch that turns pre-fix behaviours on.

Every entry is a real vLLM pull request, with its status upstream and the first
vLLM release that contains the fix (checked against the release sources:
docs/upstream-family.md). A :class:`BugConfig` names the bugs whose *pre-fix*
behaviour is wanted; everything not named runs with the fixed behaviour.
Components consult the configuration exactly where upstream changed code, so a
learner can flip one switch and watch one mechanism.

Which release the default (every fix on) mirrors: **vLLM 0.33**, the current
release, for everything the lab models (the fixes of #35431 and #39064 from
0.20, #37728 from 0.19, #41873 and #42430 from 0.22, #49757 from 0.27; the kernels' own
state-index guards as 0.33 has them), with these exceptions, on purpose:

* ``mamba_cache_mode="all"`` (and with it ``spec-slots``, #41233, fixed in
  0.22) exists upstream only up to v0.31; v0.32 removed the mode. The lab keeps
  it as v0.22 - v0.31 had it, because two bugs of the family live there.
* ``zero-accepted`` has no merged fix (#48475 and #50021 are open; no release up
  to 0.33 bounds the GDN kernels' column). The fixed behaviour here is the
  masked-load bound of #50021, i.e. ahead of every release.

One rule of the model runner is the lab's own, not upstream's, and says so
where it lives (``worker/model_runner.py``): its uniform-decode test is v0.33's
shape rule (so a one-token chunk with prior state replays the decode graph and
the Mamba builder reclassifies it, #42430) plus "no live row is a *first* prompt
chunk" (ours: such a row stays a prefill and runs eagerly). Its capture sizes are
v0.33's (``worker.cudagraph_dispatcher.cudagraph_capture_sizes``, rounded up to
multiples of ``1 + num_spec`` under speculative decoding; FULL decode graphs for
the sizes up to ``(1 + num_spec) * max_num_seqs``).

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
class Related:
    """Another upstream PR that belongs to an entry's story (a later fix, an alternative, a follow-up)."""

    pr: int
    status: str  # "merged" | "open" | "closed" (closed unmerged)
    fixed_in: str | None  # first vLLM release containing it; None: in no release
    note: str

    @property
    def url(self) -> str:
        return f"https://github.com/vllm-project/vllm/pull/{self.pr}"


STATUSES = ("merged", "open", "closed")


@dataclass(frozen=True)
class Bug:
    """One catalogue entry: the upstream PR that fixes (or proposes to fix) the bug.

    ``status``: the PR's state upstream ("merged", "open", "closed" unmerged).
    ``fixed_in``: the first vLLM release whose sources contain the fix, or None
    where no release does (an open PR). ``upstream_files``: the files the PR
    changed (tests included), as listed in docs/upstream-family.md.
    """

    id: str
    pr: int
    title: str  # the PR's title upstream, without its [Bugfix] tags
    status: str
    fixed_in: str | None
    upstream_files: tuple[str, ...]
    mechanism: str
    symptom: str
    parts: tuple[str, ...] = ()
    related: tuple[Related, ...] = ()

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"{self.id}: status must be one of {STATUSES}, got {self.status!r}")
        if (self.status == "merged") != (self.fixed_in is not None):
            raise ValueError(f"{self.id}: a merged fix names its first release, an unmerged one none")

    @property
    def url(self) -> str:
        return f"https://github.com/vllm-project/vllm/pull/{self.pr}"

    @property
    def release_note(self) -> str:
        """``"fixed in vLLM 0.20"``, or why no release has the fix."""
        if self.fixed_in is not None:
            return f"fixed in vLLM {self.fixed_in}"
        return f"{self.status} upstream: no vLLM release has the fix"


CATALOGUE: tuple[Bug, ...] = (
    Bug(
        id="pad-minus-one",
        pr=35431,
        title="Use null block (0) for padded block table entries",
        status="merged",
        fixed_in="0.20",
        upstream_files=(
            "csrc/mamba/mamba_ssm/selective_scan.h",
            "csrc/mamba/mamba_ssm/selective_scan_fwd.cu",
            "csrc/ops.h",
            "csrc/torch_bindings.cpp",
            "tests/kernels/mamba/test_causal_conv1d.py",
            "tests/kernels/mamba/test_mamba_ssm.py",
            "vllm/_custom_ops.py",
            "vllm/model_executor/layers/lightning_attn.py",
            "vllm/model_executor/layers/mamba/ops/causal_conv1d.py",
            "vllm/model_executor/layers/mamba/ops/mamba_ssm.py",
            "vllm/v1/attention/backends/gdn_attn.py",
            "vllm/v1/attention/backends/mamba_attn.py",
            "vllm/v1/attention/backends/mla/indexer.py",
            "vllm/v1/attention/backends/utils.py",
            "vllm/v1/worker/gpu_model_runner.py",
        ),
        mechanism=(
            "CUDA-graph padding filled the padded rows of the block table with PAD_SLOT_ID (-1) "
            "although block 0 was already the reserved null block. Every consumer that indexes "
            "with a block-table entry had to remember to skip -1; one that trusts the entry "
            "computes base + (-1) * stride and touches memory before its buffer. Upstream the "
            "consumer that crashed (issue #33664) was the FlashMLA FP8 decode kernel, and the "
            "DeepGEMM indexer carried a clamp for the same reason; the Mamba SSU and conv already "
            "skipped -1. The lab has no MLA kernel: its state kernels stand in for the trusting "
            "consumer (GuardMode.NONE) so the -1 is seen reaching address arithmetic."
        ),
        symptom="CUDA illegal memory access under high concurrency (issue #33664, in an MLA "
        "kernel), or silent reads/writes outside the buffer.",
    ),
    Bug(
        id="stale-rows",
        pr=37728,
        title="Fix Mamba state corruption from referencing stale block table entries",
        status="merged",
        fixed_in="0.19",
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
            "and wrote state blocks that had been freed and handed to another request. The fix "
            "clears the row on the CPU (clear_row) and commits num_reqs_padded rows in the dummy run."
        ),
        symptom="Zero-token-id (or NaN) responses from a linear-attention model under DP.",
    ),
    Bug(
        id="guard-lt-zero",
        pr=39064,
        title="Fix GDN FLA kernel crashes with NULL_BLOCK_ID=0 CUDA graph padding",
        status="merged",
        fixed_in="0.20",
        upstream_files=(
            "vllm/model_executor/layers/fla/ops/fused_recurrent.py",
            "vllm/model_executor/layers/fla/ops/fused_sigmoid_gating.py",
        ),
        mechanism=(
            "After #35431 padded rows carry index 0, but the FLA (gated-delta-net) kernels still "
            "treated only negative indices as invalid (the < 0 guards of #33326). Padded rows "
            "loaded the null block as an initial state and stored their results into it, all "
            "racing on block 0, so the null block stopped being zeros. Only the FLA kernels: the "
            "Mamba SSU and conv compare against null_block_id since #35431 itself. (#35431 and "
            "#39064 both first ship in 0.20: no release had the pre-fix pair.)"
        ),
        symptom="Illegal memory accesses and corrupted outputs under CUDA graphs and TP > 1 "
        "(Qwen3.5 GDN, issue #39025).",
    ),
    Bug(
        id="spec-slots",
        pr=41233,
        title="Fix mamba_cache_mode=all + speculative decoding crash",
        status="merged",
        fixed_in="0.22",
        upstream_files=(
            "tests/v1/attention/test_mamba_update_block_table.py",
            "tests/v1/e2e/general/test_mamba_prefix_cache.py",
            "vllm/model_executor/layers/mamba/mamba_mixer2.py",
            "vllm/model_executor/models/config.py",
            "vllm/v1/attention/backends/mamba2_attn.py",
            "vllm/v1/attention/backends/mamba_attn.py",
            "vllm/v1/attention/backends/utils.py",
            "vllm/v1/kv_cache_interface.py",
            "vllm/v1/worker/gpu_model_runner.py",
            "vllm/v1/worker/mamba_utils.py",
        ),
        mechanism=(
            "In mamba_cache_mode='all' the kernel touches 1 + num_speculative_blocks slots per "
            "request but the bookkeeping did not: (width) the persistent state_indices_tensor_d "
            "had cdiv(max_model_len, block_size) columns while the block table had + nsb; "
            "(padding) the block_idx_* buffers were sliced by num_decode_tokens instead of the "
            "padded request count, with no zeroed tail; (gather) the mixer gathered one slot "
            "instead of 1 + num_spec, anchored on the wrong block. Mode 'all' exists upstream "
            "only up to v0.31 (v0.32 removed it); the lab keeps it as v0.22-v0.31 had it."
        ),
        symptom="Shape-mismatch crash while capturing CUDA graphs at start-up; after a partial "
        "acceptance the next step starts from the wrong state.",
        parts=("width", "padding", "gather"),
        related=(
            Related(40454, "merged", "0.20", "the workaround it reverted: default to 'align' when "
                    "speculative decoding is on (in 0.20 and 0.21)"),
        ),
    ),
    Bug(
        id="stale-is-prefilling",
        pr=41873,
        title="Zero stale is_prefilling in padded CUDA graph rows for Mamba",
        status="merged",
        fixed_in="0.22",
        upstream_files=(
            "tests/v1/attention/test_attention_splitting.py",
            "vllm/v1/worker/gpu_model_runner.py",
        ),
        mechanism=(
            "condense() and remove_request() leave num_computed_tokens < num_prompt_tokens at "
            "rows past num_reqs. is_prefilling is computed over the padded rows, so padding "
            "rows look like prefills; Mamba ORs is_prefilling into the decode/prefill split, "
            "num_prefills becomes > 0 and the CUDA-graph buffer refresh is skipped while the "
            "FULL decode graph is still replayed with the previous step's state slots. The fix "
            "is one line in _build_attention_metadata: is_prefilling[num_reqs:] = False."
        ),
        symptom="Silent state corruption: a live request reads and writes another request's "
        "state.",
        related=(
            Related(42947, "closed", None, "alternative: also let is_prefilling mark only rows with "
                    "query_len > 0 in the split (not merged)"),
        ),
    ),
    Bug(
        id="single-token-extend",
        pr=42430,
        title="mamba: run single-token extends as decodes",
        status="merged",
        fixed_in="0.22",
        upstream_files=(
            "tests/v1/attention/test_mamba_update_block_table.py",
            "tests/v1/attention/utils.py",
            "tests/v1/kv_connector/unit/test_nixl_connector_hma.py",
            "vllm/v1/attention/backends/mamba_attn.py",
        ),
        mechanism=(
            "The runner's FULL-graph dispatch is shape-based: a batch whose rows all schedule "
            "1 + num_spec tokens replays the uniform decode graph, even when one row is the last, "
            "one-token chunk of a prompt whose earlier chunks already ran (is_prefilling still "
            "True). The Mamba builder ORs is_prefilling into the split, so that row counted as a "
            "prefill: num_prefills > 0, the CUDA-graph buffer refresh was skipped and the graph "
            "replayed the previous step's state slots. The fix (mamba_attn.py) clears "
            "is_prefilling for one-token rows with prior state before the split: they run as "
            "decodes; a first chunk (no prior state) stays a prefill."
        ),
        symptom="Silent state corruption under chunked prefill and FULL CUDA graphs: live rows "
        "read and write last step's slots.",
    ),
    Bug(
        id="move-row-stale-source",
        pr=49757,
        title="Stop dummy runs from writing mamba state through stale block-table rows",
        status="merged",
        fixed_in="0.27",
        upstream_files=(
            "tests/v1/worker/test_gpu_block_table.py",
            "vllm/v1/worker/block_table.py",
            "vllm/v1/worker/gpu/block_table.py",
        ),
        mechanism=(
            "condense() moves the highest live row into a hole with BlockTable.move_row, which "
            "copied the row and left the source untouched: a duplicate of a live request's block "
            "ids at an index >= num_reqs. #37728's clear_row covers removed rows, not rows vacated "
            "by condense. Once that request finishes its blocks are freed, but a dummy batch "
            "padded over the vacated row still reads and writes state through them. The fix: "
            "move_row clears its source (block_table.py; the V2 runner's dummy tables are zeroed)."
        ),
        symptom="A freed (or prefix-cached) state block is overwritten by an idle DP rank's dummy "
        "batch; a later request that reuses it starts from a corrupted state.",
    ),
    Bug(
        id="zero-accepted",
        pr=48475,
        title="Clamp spec-decode state index load for zero num_accepted_tokens in GDN kernels",
        status="open",
        fixed_in=None,
        upstream_files=(
            "vllm/model_executor/layers/fla/ops/fused_recurrent.py",
            "vllm/model_executor/layers/fla/ops/fused_sigmoid_gating.py",
        ),
        mechanism=(
            "With speculative decoding the GDN (FLA) kernels fused_recurrent and "
            "fused_sigmoid_gating read a request's initial state from column "
            "num_accepted_tokens - 1 of its state indices with no bound (still so in 0.33). A "
            "count of 0 reads column -1, which in a row-major (N, 1 + num_spec) index tensor is "
            "the previous row's last column: another request's slot, or for row 0 the memory "
            "before the tensor. The Mamba2 SSU has always clamped max(num_accepted - 1, 0), and "
            "V1's InputBatch starts the count at 1 and resets it in add_request; #48475 names a "
            "stale row, a padded row or a device-to-host race as where a 0 can still come from. "
            "The lab's stand-in source is a padded row: with the switch on, the runner's padded "
            "rows carry a count of 0 (upstream fills 1). Fixed here as #50021 proposes: the "
            "column load is masked to (col >= 0) & (col < row width) and an out-of-row column "
            "skips the row; #48475 itself would clamp to column 0."
        ),
        symptom="A GDN row starts from its neighbour's state, or reads before the index tensor "
        "(illegal address, issue #41190: TP=2 spec decode on Qwen3.6).",
        related=(
            Related(50021, "open", None, "Bound accepted-token state lookups in GDN/KDA spec decode: "
                    "the masked load (i_t >= 0) & (i_t < stride_indices_seq); its first SSU bound "
                    "compared against the wrong stride and failed closed for every num_accepted > 1"),
            Related(48132, "merged", "0.26", "Model Runner V2: reset num_accepted_tokens on "
                    "add_request in all modes (a reused slot kept the previous tenant's count)"),
        ),
    ),
)

BUGS: dict[str, Bug] = {b.id: b for b in CATALOGUE}


def _all_switch_ids() -> list[str]:
    ids: list[str] = []
    for bug in CATALOGUE:
        ids.append(bug.id)
        ids.extend(f"{bug.id}/{p}" for p in bug.parts)
    return ids


class KernelFamily(enum.Enum):
    """Which upstream kernel family a decode kernel belongs to: each has its own guard.

    MAMBA: ``vllm/model_executor/layers/mamba/ops/`` (``mamba_ssm.py``'s
    selective_state_update, ``causal_conv1d.py``). Since #35431 they compare
    the state index with ``null_block_id`` for *equality* (the SSU masks
    ``!= null_block_id``, the conv returns on ``== null_block_id``): a negative
    index is not skipped, it reaches address arithmetic.
    FLA: the gated-delta-net kernels of ``vllm/third_party/flash_linear_attention/ops/``
    (``fused_recurrent.py``, ``fused_sigmoid_gating.py``; ``layers/fla/ops/`` before
    v0.26). They skip ``<= 0`` on load and store only ``> 0`` since #39064 (``< 0`` /
    ``>= 0`` before, from #33326).
    """

    MAMBA = "mamba"
    FLA = "fla"


class GuardMode(enum.IntEnum):
    """Which state indices a decode kernel skips (a ``tl.constexpr`` of every kernel).

    The rule, not the bug: :meth:`BugConfig.kernel_guard_for` is the one place
    that picks a kernel family's rule from the bug configuration.

    NULL: the FLA kernels' fixed guard (#39064): skip ``<= null_block_id`` (0 and any negative).
    NEGATIVE: the FLA kernels before #39064: skip only ``< 0``; index 0 loads and stores the null block.
    NONE: the ``pad-minus-one`` world's consumer that trusts every index.
    EQ_NULL: the Mamba kernels' guard (SSU and conv, since #35431, as in v0.33): skip only
    ``== null_block_id``; a negative index is used, i.e. an illegal access.
    """

    NULL = 0
    NEGATIVE = 1
    NONE = 2
    EQ_NULL = 3

    def is_live(self, slot: int, null_block_id: int = NULL_BLOCK_ID) -> bool:
        """Whether a kernel under this guard loads/stores state at ``slot``: the host-side twin
        of :func:`mambalab.kernels.common.is_live_slot`, used by the references and drawings."""
        if self is GuardMode.NULL:
            return slot > null_block_id
        if self is GuardMode.NEGATIVE:
            return slot >= 0
        if self is GuardMode.EQ_NULL:
            return slot != null_block_id
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
    def bound_accepted(self) -> bool:
        """Whether the GDN (FLA) kernels bound the state column ``num_accepted - 1`` (#48475/#50021).

        Fixed: the column load is masked to ``0 <= col < row width`` and an out-of-row column
        reads as the null block, so the row is skipped (#50021's bound; open upstream). Pre-fix
        (``zero-accepted``, every release up to 0.33): unbounded. The Mamba SSU is not
        concerned: it has always clamped ``max(num_accepted - 1, 0)``.
        """
        return not self.has("zero-accepted")

    @property
    def padded_accepted_count(self) -> int:
        """The accepted count the runner gives padded rows: 1 upstream (every release);
        0 under ``zero-accepted``, the lab's stand-in for the zero #48475 hardens against."""
        return 0 if self.has("zero-accepted") else 1

    def kernel_guard_for(self, family: KernelFamily) -> GuardMode:
        """The one place that decides which state indices a kernel family skips.

        ``pad-minus-one``: every kernel trusts its indices (NONE: the lab's stand-in for the
        consumer that crashed upstream). Otherwise the Mamba kernels (SSU, conv) have their own
        equality guard (EQ_NULL, since #35431, untouched by #39064) and the FLA kernels skip
        ``<= 0`` (NULL), or only ``< 0`` under ``guard-lt-zero`` (NEGATIVE).
        """
        family = KernelFamily(family)
        if self.has("pad-minus-one"):
            return GuardMode.NONE
        if family is KernelFamily.MAMBA:
            return GuardMode.EQ_NULL
        if self.has("guard-lt-zero"):
            return GuardMode.NEGATIVE
        return GuardMode.NULL

    @property
    def kernel_guard(self) -> GuardMode:
        """The FLA (GDN) kernels' guard: the one the bugs #35431 / #39064 change
        (``kernel_guard_for(KernelFamily.MAMBA)`` for the SSU and the conv)."""
        return self.kernel_guard_for(KernelFamily.FLA)

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


__all__ = ["Bug", "BUGS", "CATALOGUE", "BugConfig", "GuardMode", "KernelFamily", "Related", "active", "resolve",
           "use"]
