"""Attention metadata common to every backend, its decode/prefill split, and how a step builds it.

Mirrors, as in vLLM 0.33: ``CommonAttentionMetadata`` of
``vllm/v1/attention/backend.py`` (same constructor arguments), and
``split_decodes_and_prefills`` / ``reorder_batch_to_split_decodes_and_prefills``
of ``vllm/v1/attention/backends/utils.py``, and the metadata part of
``vllm/v1/worker/gpu_model_runner.py`` (``_build_attention_metadata``).
Two catalogue fixes live here:

* padded block-table rows are filled with ``NULL_BLOCK_ID`` (#35431; ``-1``
  before, switch ``pad-minus-one``);
* ``is_prefilling[num_reqs:] = False`` (#41873, switch ``stale-is-prefilling``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from mambalab.lab.bugs import BugConfig, resolve

if TYPE_CHECKING:
    from mambalab.worker.input_batch import InputBatch
    from mambalab.worker.runner_inputs import RunnerBuffers


@dataclass
class CommonAttentionMetadata:
    """Per-step metadata shared by all attention groups (padded sizes).

    The constructor takes exactly vLLM 0.33's arguments, in its order: the required
    ones, then ``causal`` and the optional ones. The lab reads ``query_start_loc(_cpu)``,
    ``seq_lens``, the sizes, ``block_table_tensor``, ``slot_mapping``, ``positions``,
    ``is_prefilling`` (#41873) and ``seq_lens_cpu_upper_bound`` (the CPU lengths, exact
    here: the lab has no async spec decode); the other optional fields are accepted and
    unused (logits, encoder, DCP, multimodal, RSWA, ReplaySSM). There is no
    ``seq_lens_cpu`` argument upstream: :attr:`seq_lens_cpu` is derived.
    """

    query_start_loc: torch.Tensor
    query_start_loc_cpu: torch.Tensor
    seq_lens: torch.Tensor
    num_reqs: int
    num_actual_tokens: int
    max_query_len: int
    max_seq_len: int
    block_table_tensor: torch.Tensor
    slot_mapping: torch.Tensor
    causal: bool | torch.Tensor = True
    logits_indices_padded: torch.Tensor | None = None
    num_logits_indices: int | None = None
    max_logits_per_req: int | None = None
    encoder_seq_lens: torch.Tensor | None = None
    encoder_seq_lens_cpu: np.ndarray | None = None
    dcp_local_seq_lens: torch.Tensor | None = None
    dcp_local_seq_lens_cpu_upper_bound: torch.Tensor | None = None
    positions: torch.Tensor | None = None
    is_prefilling: torch.Tensor | None = None
    seq_lens_cpu_upper_bound: torch.Tensor | None = None
    req_idx: np.ndarray | None = None
    mm_req_doc_ranges: dict[int, list[tuple[int, int]]] | None = None
    rswa_prefix_lens: torch.Tensor | None = None
    replayssm_decode_base_cpu: torch.Tensor | None = None
    _num_computed_tokens_cache: torch.Tensor | None = None
    _token_to_req_indices_cache: torch.Tensor | None = None

    def batch_size(self) -> int:
        return self.query_start_loc_cpu.shape[0] - 1

    @property
    def query_lens_cpu(self) -> torch.Tensor:
        return self.query_start_loc_cpu[1:] - self.query_start_loc_cpu[:-1]

    @property
    def seq_lens_cpu(self) -> torch.Tensor:
        """The CPU sequence lengths: ``seq_lens_cpu_upper_bound`` when given (exact in the lab),
        else a host copy of ``seq_lens`` (ours, for convenience; upstream has no such field)."""
        if self.seq_lens_cpu_upper_bound is not None:
            return self.seq_lens_cpu_upper_bound
        return self.seq_lens.cpu()

    @property
    def num_computed_tokens_cpu(self) -> torch.Tensor:
        """Derived, as upstream: ``seq_lens - query_lens``."""
        return self.seq_lens_cpu[: self.num_reqs] - self.query_lens_cpu


def split_decodes_and_prefills(
    common_attn_metadata: CommonAttentionMetadata,
    decode_threshold: int = 1,
    require_uniform: bool = False,
    treat_short_extends_as_decodes: bool = True,
) -> tuple[int, int, int, int]:
    """``(num_decodes, num_prefills, num_decode_tokens, num_prefill_tokens)``.

    As vLLM 0.33 (``backends/utils.py``). Assumes the batch is reordered
    decodes-first. A row is a prefill when its query is longer than
    ``decode_threshold`` (or, with ``require_uniform``, differs from the first
    row's and is not empty); backends passing
    ``treat_short_extends_as_decodes=False`` (Mamba) also count every row
    whose ``is_prefilling`` is set, padded rows included: that OR is where a
    stale ``is_prefilling`` turns into a skipped buffer refresh (#41873).
    """
    cm = common_attn_metadata
    num_reqs = cm.num_reqs
    num_tokens = cm.num_actual_tokens
    if (
        cm.max_query_len <= decode_threshold
        and (not require_uniform or decode_threshold <= 1)
        and treat_short_extends_as_decodes
    ):
        return num_reqs, 0, num_tokens, 0

    query_lens = cm.query_lens_cpu
    if num_reqs == 0:
        return 0, 0, 0, 0
    if int(query_lens[0]) > decode_threshold:
        return 0, num_reqs, 0, num_tokens

    if require_uniform:
        # v0.26+: the padded-uniform shortcut only when short extends count as decodes;
        # v0.31+: a zero-length (padded) row is not a prefill by its length.
        first = query_lens[0]
        if treat_short_extends_as_decodes and bool(torch.all((query_lens == first) | (query_lens == 0))):
            return num_reqs, 0, num_tokens, 0
        is_prefill = (query_lens != first) & (query_lens != 0)
    else:
        is_prefill = query_lens > decode_threshold

    if not treat_short_extends_as_decodes:
        if cm.is_prefilling is None:
            raise ValueError(
                "split_decodes_and_prefills: treat_short_extends_as_decodes=False needs "
                "common_attn_metadata.is_prefilling"
            )
        is_prefill = is_prefill | cm.is_prefilling[:num_reqs].to(is_prefill.device)

    if not bool(torch.any(is_prefill)):
        return num_reqs, 0, num_tokens, 0
    first_prefill = int(torch.argmax(is_prefill.to(torch.int32)))
    num_decodes = first_prefill
    num_prefills = num_reqs - num_decodes
    num_decode_tokens = int(cm.query_start_loc_cpu[first_prefill])
    return num_decodes, num_prefills, num_decode_tokens, num_tokens - num_decode_tokens


# Regions of the decode-first order.
DECODE, SHORT_EXTEND, LONG_EXTEND, PREFILL = 0, 1, 2, 3


def batch_regions(
    num_scheduled_tokens: np.ndarray,
    num_computed_tokens: np.ndarray,
    num_prompt_tokens: np.ndarray,
    decode_threshold: int = 1,
    treat_short_extends_as_decodes: bool = False,
) -> np.ndarray:
    """Region per row, as vLLM 0.33 classifies them (decode → short extend → long extend →
    prefill is the target order): prefill if nothing is computed yet; long extend if more than
    ``decode_threshold`` tokens are scheduled; short extend if few are scheduled but the
    prompt is not done; decode otherwise. ``treat_short_extends_as_decodes=True`` folds short
    extends into decodes (ours: upstream 0.33 always keeps the four regions)."""
    short = num_scheduled_tokens <= decode_threshold
    started = num_computed_tokens > 0
    prefilling = num_computed_tokens < num_prompt_tokens
    region = np.full(num_scheduled_tokens.shape, PREFILL, dtype=np.int32)
    region[started & ~short] = LONG_EXTEND
    region[started & short & prefilling] = DECODE if treat_short_extends_as_decodes else SHORT_EXTEND
    region[started & short & ~prefilling] = DECODE
    return region


def reorder_batch_to_split_decodes_and_prefills(
    input_batch: "InputBatch",
    num_scheduled_tokens: Sequence[int] | np.ndarray,
    decode_threshold: int = 1,
    treat_short_extends_as_decodes: bool = False,
) -> bool:
    """Reorder live rows decode → short extend → long extend → prefill with ``swap_states``.

    As vLLM 0.33 (``backends/utils.py``): not a stable sort. Rows already in a position of
    their region stay; the misplaced rows, stably sorted by region, fill the misplaced
    positions in ascending order. ``num_scheduled_tokens`` is per row (row order,
    ``[:num_reqs]``); it is permuted in place with the rows when it is a numpy array.
    Returns whether anything moved.
    """
    n = input_batch.num_reqs
    sched = np.asarray(num_scheduled_tokens)
    if sched.shape != (n,):
        raise ValueError(f"num_scheduled_tokens has shape {sched.shape}, expected ({n},)")
    region = batch_regions(
        sched,
        input_batch.num_computed_tokens_cpu[:n],
        input_batch.num_prompt_tokens[:n],
        decode_threshold,
        treat_short_extends_as_decodes,
    )
    target = np.sort(region, kind="stable")
    misplaced = [i for i in range(n) if region[i] != target[i]]
    if not misplaced:
        return False
    movers = sorted(misplaced, key=lambda i: int(region[i]))  # stable: ties keep row order
    wanted = list(range(n))  # wanted[pos] = the original row that ends at pos
    for pos, row in zip(misplaced, movers):
        wanted[pos] = row
    where = list(range(n))  # where[original row] = its current position
    at = list(range(n))  # at[position] = the original row there now
    for pos in range(n):
        cur = where[wanted[pos]]
        if cur == pos:
            continue
        input_batch.swap_states(pos, cur)
        if isinstance(num_scheduled_tokens, np.ndarray):
            num_scheduled_tokens[[pos, cur]] = num_scheduled_tokens[[cur, pos]]
        a, b = at[pos], at[cur]
        at[pos], at[cur] = b, a
        where[a], where[b] = cur, pos
    return True


def fill_padded_rows(block_table: torch.Tensor, num_reqs: int, pad_value: int) -> None:
    """Rows ``[num_reqs:]`` of a padded device block table name no request: fill them with the pad
    value (``NULL_BLOCK_ID``, which the kernels skip; ``-1`` before #35431)."""
    block_table[num_reqs:].fill_(pad_value)


def build_attention_metadata(
    input_batch: "InputBatch",
    buffers: "RunnerBuffers",
    num_reqs: int,
    num_reqs_padded: int,
    num_tokens_padded: int,
    max_query_len: int,
    bugs: BugConfig | None = None,
) -> list[CommonAttentionMetadata]:
    """One :class:`CommonAttentionMetadata` per KV-cache group, sliced to the padded sizes.

    Padded rows ``[num_reqs:num_reqs_padded]`` of each persistent device
    block table are filled with ``NULL_BLOCK_ID`` (``-1`` under
    ``pad-minus-one``). ``is_prefilling`` is computed over the padded rows
    from the input batch's (possibly stale) counts, then zeroed past
    ``num_reqs`` unless ``stale-is-prefilling`` is on. The dummy run calls
    this with ``num_reqs == num_reqs_padded``: nothing is null-filled then.
    """
    bugs = resolve(bugs)
    if not 0 <= num_reqs <= num_reqs_padded <= input_batch.max_num_reqs:
        raise ValueError(
            f"need 0 <= num_reqs ({num_reqs}) <= num_reqs_padded ({num_reqs_padded}) <= "
            f"max_num_reqs ({input_batch.max_num_reqs})"
        )
    if not 0 <= num_tokens_padded <= buffers.max_num_tokens:
        raise ValueError(f"num_tokens_padded={num_tokens_padded} out of range [0, {buffers.max_num_tokens}]")

    is_prefilling = torch.from_numpy(input_batch.is_prefilling(num_reqs_padded).copy())
    if not bugs.has("stale-is-prefilling"):
        is_prefilling[num_reqs:] = False

    qsl_cpu = buffers.query_start_loc.cpu[: num_reqs_padded + 1].clone()
    seq_lens_cpu = buffers.seq_lens.cpu[:num_reqs_padded].clone()
    out = []
    for bt in input_batch.block_table.block_tables:
        blk = bt.get_device_tensor(num_reqs_padded)
        fill_padded_rows(blk, num_reqs, bugs.block_table_pad_value)
        out.append(
            CommonAttentionMetadata(
                query_start_loc=buffers.query_start_loc.gpu[: num_reqs_padded + 1],
                query_start_loc_cpu=qsl_cpu,
                seq_lens=buffers.seq_lens.gpu[:num_reqs_padded],
                num_reqs=num_reqs_padded,
                num_actual_tokens=num_tokens_padded,
                max_query_len=max_query_len,
                max_seq_len=int(seq_lens_cpu.max()) if num_reqs_padded else 0,
                block_table_tensor=blk,
                slot_mapping=bt.slot_mapping.gpu[:num_tokens_padded],
                positions=buffers.positions.gpu[:num_tokens_padded],
                is_prefilling=is_prefilling,
                seq_lens_cpu_upper_bound=seq_lens_cpu,
            )
        )
    return out


__all__ = [
    "CommonAttentionMetadata",
    "split_decodes_and_prefills",
    "reorder_batch_to_split_decodes_and_prefills",
    "batch_regions",
    "build_attention_metadata",
]
