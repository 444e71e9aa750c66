"""Mamba attention metadata: which state slots a decode reads and writes.

Mirrors ``vllm/v1/attention/backends/mamba_attn.py``
(``BaseMambaAttentionMetadataBuilder``; mode "all" as v0.22 - v0.31 had it, v0.32
removed the mode) and, for the state-slot gather, the
decode part of ``vllm/model_executor/layers/mamba/mamba_mixer2.py``.

The builder owns *persistent* CUDA-graph buffers. A FULL decode graph was
captured reading those buffers, so every step that replays it must first
copy this step's values in and fill the padded tail
(``_update_metadata_for_cudagraph_capture``). That refresh runs only when
the split finds no prefills: a batch misclassified as having prefills
replays the graph over last step's slots (#41873). Three more fixes of
#41233 (switch ``spec-slots``) live here: the buffer width includes the
speculative blocks (``/width``), the ``block_idx_*`` buffers are padded by
the request count with a zeroed tail (``/padding``), and the mixer gathers
``1 + num_spec`` slots from the previous step's anchor (``/gather``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from mambalab.lab.bugs import BugConfig, resolve
from mambalab.device import DEVICE
from mambalab.guard_band import banded_gather, banded_index
from mambalab.core.kv_cache_interface import MambaSpec
from mambalab.attention.metadata import CommonAttentionMetadata, split_decodes_and_prefills


def _cdiv_t(a: torch.Tensor, b: int) -> torch.Tensor:
    return -torch.div(-a, b, rounding_mode="floor")


@dataclass
class MambaAttentionMetadata:
    num_prefills: int
    num_prefill_tokens: int
    num_decodes: int
    num_decode_tokens: int
    num_reqs: int
    # prefill
    has_initial_states_p: torch.Tensor | None
    query_start_loc_p: torch.Tensor | None
    num_computed_tokens_p: torch.Tensor | None
    state_indices_tensor_p: torch.Tensor | None
    # decode
    state_indices_tensor_d: torch.Tensor
    query_start_loc_d: torch.Tensor | None
    num_accepted_tokens: torch.Tensor | None
    # mamba_cache_mode == "all"
    block_idx_last_scheduled_token: torch.Tensor | None = None
    block_idx_first_scheduled_token_p: torch.Tensor | None = None
    block_idx_last_computed_token: torch.Tensor | None = None
    block_idx_last_scheduled_token_prev_step: torch.Tensor | None = None
    # True when the decode tensors are slices of the builder's persistent buffers.
    cudagraph_buffers_refreshed: bool = False


class MambaAttentionMetadataBuilder:
    def __init__(
        self,
        kv_cache_spec: MambaSpec,
        max_model_len: int,
        max_num_seqs: int,
        max_capture_size: int,
        num_speculative_tokens: int = 0,
        full_cudagraph: bool = True,
        device: torch.device | str = DEVICE,
        bugs: BugConfig | None = None,
    ) -> None:
        if not isinstance(kv_cache_spec, MambaSpec):
            raise TypeError(f"kv_cache_spec must be a MambaSpec, got {type(kv_cache_spec).__name__}")
        if kv_cache_spec.mamba_cache_mode == "align":
            raise ValueError("mamba_cache_mode='align' is not modelled here; use 'none' or 'all'")
        if num_speculative_tokens < 0:
            raise ValueError(f"num_speculative_tokens must be >= 0, got {num_speculative_tokens}")
        if kv_cache_spec.num_speculative_blocks < num_speculative_tokens:
            # (upstream sets them independently; its v0.31 test uses 2 blocks for 1 token)
            raise ValueError(
                f"kv_cache_spec.num_speculative_blocks={kv_cache_spec.num_speculative_blocks} must "
                f"be at least num_speculative_tokens={num_speculative_tokens}"
            )
        self.spec = kv_cache_spec
        self.bugs = resolve(bugs)
        self.mode = kv_cache_spec.mamba_cache_mode
        self.block_size = kv_cache_spec.block_size
        self.num_spec = num_speculative_tokens
        self.full_cudagraph = full_cudagraph
        self.device = torch.device(device)
        self.reorder_batch_threshold = 1 + num_speculative_tokens
        self.decode_cudagraph_max_bs = min(max_num_seqs, max_capture_size)
        max_bs = self.decode_cudagraph_max_bs

        if self.mode == "all":
            width = -(-max_model_len // self.block_size)
            if not self.bugs.has("spec-slots/width"):
                width += kv_cache_spec.num_speculative_blocks
            shape: tuple[int, ...] = (max_bs, width)
        elif self.num_spec:
            shape = (max_bs, 1 + self.num_spec)
        else:
            shape = (max_bs,)
        # behind a guard row of PAD_SLOT_ID: zero-accepted's row 0 reads column -1 (mambalab/guard_band.py)
        self.state_indices_tensor_d = banded_index(shape, torch.int32, self.device)
        self.num_accepted_tokens = (
            torch.ones(max_bs, dtype=torch.int32, device=self.device) if self.num_spec else None
        )
        self.block_idx_last_scheduled_token = self.block_idx_last_computed_token = None
        self.block_idx_last_scheduled_token_prev_step = None
        if self.mode == "all":
            self.block_idx_last_scheduled_token = torch.zeros(max_bs, dtype=torch.int32, device=self.device)
            self.block_idx_last_computed_token = torch.zeros(max_bs, dtype=torch.int32, device=self.device)
            if self.num_spec:
                self.block_idx_last_scheduled_token_prev_step = torch.zeros(
                    max_bs, dtype=torch.int32, device=self.device
                )
        # The mixer's preallocated gather offsets (#41233).
        self.spec_offsets = torch.arange(1 + self.num_spec, dtype=torch.int64, device=self.device)

    # ------------------------------------------------------------------
    def build(
        self,
        common_attn_metadata: CommonAttentionMetadata,
        num_accepted_tokens: torch.Tensor | None = None,
        block_idx_last_scheduled_token_prev_step: torch.Tensor | None = None,
    ) -> MambaAttentionMetadata:
        """Metadata for one step; refreshes the CUDA-graph buffers when the batch is all decodes.

        ``num_accepted_tokens`` (per padded row) is the runner's buffer;
        ``block_idx_last_scheduled_token_prev_step`` the per-row anchor the
        worker recorded last step (``-1`` where none), for "all" + spec decode.
        """
        cm = common_attn_metadata
        nd, np_, ndt, npt = split_decodes_and_prefills(
            self._reclassify_single_token_extends(cm), decode_threshold=self.reorder_batch_threshold,
            treat_short_extends_as_decodes=False,
        )
        bt = cm.block_table_tensor
        B = self.block_size
        seq_lens = cm.seq_lens_cpu[: cm.num_reqs].to(torch.int64)
        nc = cm.num_computed_tokens_cpu.to(torch.int64)

        if self.mode == "all":
            d = bt[:nd]
            p = bt[nd:]
        elif self.num_spec:
            d = bt[:nd, : 1 + self.num_spec]
            p = bt[nd:, 0]
        else:
            d = bt[:nd, 0]
            p = bt[nd:, 0]

        md = MambaAttentionMetadata(
            num_prefills=np_,
            num_prefill_tokens=npt,
            num_decodes=nd,
            num_decode_tokens=ndt,
            num_reqs=cm.num_reqs,
            has_initial_states_p=(nc[nd:] > 0).to(self.device) if np_ else None,
            query_start_loc_p=(cm.query_start_loc[nd:] - cm.query_start_loc[nd]) if np_ else None,
            num_computed_tokens_p=nc[nd:].to(self.device) if np_ else None,
            state_indices_tensor_p=p if np_ else None,
            state_indices_tensor_d=d,
            query_start_loc_d=cm.query_start_loc[: nd + 1] if nd else None,
            num_accepted_tokens=None,
        )
        if self.num_spec and nd:
            if num_accepted_tokens is None:
                raise ValueError("speculative decoding needs num_accepted_tokens")
            md.num_accepted_tokens = num_accepted_tokens[:nd]

        if self.mode == "all":
            dev = self.device
            last_computed = torch.clamp(_cdiv_t(nc, B) - 1, min=0)
            last_sched = torch.clamp(_cdiv_t(seq_lens, B) - 1, min=0)
            first_sched = _cdiv_t(nc + 1, B) - 1
            md.block_idx_last_computed_token = last_computed[:nd].to(torch.int32).to(dev)
            md.block_idx_last_scheduled_token = last_sched[:nd].to(torch.int32).to(dev)
            if np_:
                md.block_idx_first_scheduled_token_p = first_sched[nd:].to(torch.int32).to(dev)
            if self.num_spec:
                if block_idx_last_scheduled_token_prev_step is None:
                    prev = torch.full((cm.num_reqs,), -1, dtype=torch.int64)
                else:
                    prev = block_idx_last_scheduled_token_prev_step[: cm.num_reqs].to("cpu", torch.int64)
                fallback = torch.clamp(torch.div(nc - 1, B, rounding_mode="floor"), min=0)
                anchor = torch.where(prev >= 0, prev, fallback)
                md.block_idx_last_scheduled_token_prev_step = anchor[:nd].to(torch.int32).to(dev)

        if self.full_cudagraph and np_ == 0 and nd <= self.decode_cudagraph_max_bs:
            self._update_metadata_for_cudagraph_capture(md, padded_bs=cm.num_reqs)
        return md

    def _reclassify_single_token_extends(self, cm: CommonAttentionMetadata) -> CommonAttentionMetadata:
        """#42430 (v0.22): a prompt chunk of one token whose request already has state runs as a
        decode: its ``is_prefilling`` is cleared (on a copy) before the split, as v0.33's
        ``_compute_common_metadata`` does (``has_prior_state = seq_lens_cpu_upper_bound >
        query_lens``; v0.22 - v0.29 tested ``seq_lens > 1``). A first chunk (no prior state)
        stays a prefill. Before the fix (switch ``single-token-extend``) the row counted as a
        prefill although the shape-based dispatch had replayed the uniform decode graph."""
        if cm.is_prefilling is None or self.bugs.has("single-token-extend"):
            return cm
        n = cm.num_reqs
        query_lens = cm.query_lens_cpu[:n]
        has_prior_state = cm.seq_lens_cpu[:n] > query_lens
        to_decode = cm.is_prefilling[:n].cpu() & has_prior_state & (query_lens == 1)
        if not bool(to_decode.any()):
            return cm
        is_prefilling = cm.is_prefilling.clone()
        is_prefilling[:n][to_decode.to(is_prefilling.device)] = False
        return dataclasses.replace(cm, is_prefilling=is_prefilling)

    def _update_metadata_for_cudagraph_capture(self, md: MambaAttentionMetadata, padded_bs: int) -> None:
        """Copy the decode tensors into the persistent buffers and fill their padded tails."""
        nd = md.num_decodes
        pad = self.bugs.block_table_pad_value
        src = md.state_indices_tensor_d
        try:
            self.state_indices_tensor_d[:nd].copy_(src)
        except RuntimeError as e:
            raise RuntimeError(
                f"CUDA-graph capture failed: the persistent state_indices_tensor_d has "
                f"{tuple(self.state_indices_tensor_d.shape)} but this step's decode state indices "
                f"have {tuple(src.shape)} (missing speculative columns, #41233). {e}"
            ) from e
        d = self.state_indices_tensor_d[:padded_bs]
        d[nd:] = pad
        md.state_indices_tensor_d = d

        if self.num_accepted_tokens is not None and md.num_accepted_tokens is not None:
            self.num_accepted_tokens[:nd].copy_(md.num_accepted_tokens)
            na = self.num_accepted_tokens[:padded_bs]
            na[nd:] = 1
            md.num_accepted_tokens = na

        if self.mode == "all":
            for name in (
                "block_idx_last_scheduled_token",
                "block_idx_last_computed_token",
                "block_idx_last_scheduled_token_prev_step",
            ):
                buf = getattr(self, name)
                val = getattr(md, name)
                if buf is None or val is None:
                    continue
                buf[:nd].copy_(val)
                if self.bugs.has("spec-slots/padding"):
                    # Pre-#41233: sliced by the decode *token* count, tail left stale.
                    setattr(md, name, buf[: md.num_decode_tokens])
                else:
                    sliced = buf[:padded_bs]
                    sliced[nd:] = 0
                    setattr(md, name, sliced)
        md.cudagraph_buffers_refreshed = True

    # ------------------------------------------------------------------
    def decode_state_slots(
        self, md: MambaAttentionMetadata
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """``(src, dst, num_accepted_tokens)`` for a decode kernel, as the mixer gathers them.

        ``none`` mode: the block-table columns themselves. ``all`` mode without
        spec: the slot at ``block_idx_last_computed_token`` is read and the one
        at ``block_idx_last_scheduled_token`` written. ``all`` + spec (#41233):
        ``1 + num_spec`` slots from the previous step's anchor are read (the
        kernel picks column ``num_accepted - 1``) and ``1 + num_spec`` slots
        from ``block_idx_last_scheduled_token`` written. Pre-fix (``spec-slots/
        gather``): one slot at ``block_idx_last_computed_token`` is read.
        """
        d = md.state_indices_tensor_d
        if self.mode != "all":
            return d, d, md.num_accepted_tokens
        last_sched = md.block_idx_last_scheduled_token.to(torch.int64)
        last_computed = md.block_idx_last_computed_token.to(torch.int64)
        if not self.num_spec:
            rows = torch.arange(d.shape[0], device=d.device)
            return d[rows, last_computed], d[rows, last_sched], None
        dst = d.gather(1, last_sched[:, None] + self.spec_offsets)
        if self.bugs.has("spec-slots/gather"):
            return d.gather(1, last_computed[:, None]), dst, None
        prev = md.block_idx_last_scheduled_token_prev_step.to(torch.int64)
        src = banded_gather(d, prev[:, None] + self.spec_offsets)  # its column -1: mambalab/guard_band.py
        return src, dst, md.num_accepted_tokens


__all__ = ["MambaAttentionMetadata", "MambaAttentionMetadataBuilder"]
