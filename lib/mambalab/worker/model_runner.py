"""One data-parallel rank's worker: the step of vLLM's GPU model runner, in miniature.

Mirrors ``vllm/v1/worker/gpu_model_runner.py``. Each step:

1. ``_update_states``: remove finished/preempted and unscheduled requests, add
   new or resumed ones, record new blocks and counts, ``condense()``, then the
   decode-first reorder (the persistent batch keeps its stale rows);
2. ``_prepare_inputs``: commit the block table, fill the persistent buffers;
3. pad to a CUDA-graph size (``cudagraph.dispatch``, the DP maximum too);
4. ``_build_attention_metadata`` and the Mamba builder (which refreshes the
   graph buffers only for an all-decode batch);
5. run: replay the FULL decode graph of the padded size, or run eagerly
   (decodes through the kernels, prefills through the references);
6. greedy sampling, draft verification, and the state post-processing
   (``num_accepted_tokens``, the "all"-mode prev-step anchor).

``dummy_run`` is what an idle DP rank executes so that collectives stay in
step: a uniform decode batch of the other ranks' size over whatever its
block-table rows hold (#37728).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from mambalab.lab.bugs import BugConfig, resolve
from mambalab.constants import NULL_BLOCK_ID
from mambalab.worker.cuda_graph import CapturedGraph
from mambalab.worker.cudagraph_dispatcher import (
    BatchDescriptor, CUDAGraphMode, cap_cudagraph_mode, cudagraph_capture_sizes, dispatch, full_decode_capture_sizes)
from mambalab.device import DEVICE
from mambalab.worker.input_batch import CachedRequestState, InputBatch
from mambalab.core.kv_cache_interface import MambaSpec
from mambalab.attention.mamba_metadata import MambaAttentionMetadata, MambaAttentionMetadataBuilder
from mambalab.attention.metadata import (CommonAttentionMetadata, build_attention_metadata,
                                         reorder_batch_to_split_decodes_and_prefills)
from mambalab.model.tiny_hybrid import ModelState, TinyHybridModel
from mambalab.worker.runner_inputs import RunnerBuffers
from mambalab.core.sched.output import SchedulerOutput


@dataclass(frozen=True)
class RunnerConfig:
    max_num_seqs: int = 4
    max_num_batched_tokens: int = 64
    max_model_len: int = 64
    block_size: int = 4
    num_blocks: int = 48
    mamba_cache_mode: str = "none"
    num_speculative_tokens: int = 0
    cudagraph: bool = True  # FULL decode graphs (+ eager for mixed batches), as vLLM's default

    @property
    def uniform_decode_query_len(self) -> int:
        return 1 + self.num_speculative_tokens

    def cudagraph_capture_sizes(self) -> list[int]:
        """v0.33's capture sizes (spec decode: rounded up to multiples of ``1 + num_spec``); mixed
        batches pad to them (PIECEWISE). Empty without CUDA graphs."""
        if not self.cudagraph:
            return []
        return cudagraph_capture_sizes(self.max_num_seqs, self.max_num_batched_tokens, self.num_speculative_tokens)

    def full_decode_capture_sizes(self) -> list[int]:
        """The sizes that get a FULL uniform-decode graph (at most ``max_num_seqs`` requests)."""
        return full_decode_capture_sizes(self.cudagraph_capture_sizes(), self.max_num_seqs,
                                         self.uniform_decode_query_len)

    def kv_cache_spec(self) -> MambaSpec:
        """Without prefix caching one state block holds a whole request (vLLM sets the
        Mamba block size to max_model_len); with it, a block covers ``block_size`` tokens."""
        bs = self.max_model_len if self.mamba_cache_mode == "none" else self.block_size
        return MambaSpec(bs, self.mamba_cache_mode, self.num_speculative_tokens)


@dataclass
class StepRecord:
    """What one rank did in one step (the trace the verdicts and drawings read)."""

    step: int
    rank: int
    kind: str  # "step" | "dummy"
    mode: str  # CUDAGraphMode name
    num_reqs: int
    num_reqs_padded: int
    num_tokens: int
    num_tokens_padded: int
    req_ids: list[str]
    num_decodes: int
    num_prefills: int
    refreshed: bool
    padded_rows_prefilling: list[int] = field(default_factory=list)
    state_slots: list[list[int]] = field(default_factory=list)  # what the kernels read, per padded row
    intended_slots: list[list[int]] = field(default_factory=list)  # this step's decode rows' own slots
    block_table_rows: list[list[int]] = field(default_factory=list)  # device rows [:num_reqs_padded]
    sampled: dict[str, list[int]] = field(default_factory=dict)
    num_accepted: dict[str, int] = field(default_factory=dict)
    null_block_dirty: bool = False  # block 0 no longer all zeros after this step
    num_accepted_in: list[int] = field(default_factory=list)  # what the kernels got, per real row
    scheduled: dict[str, int] = field(default_factory=dict)  # tokens scheduled per request this step
    # Per kernel row: the state slots its gather window reads / writes that the guard lets through
    # (a FULL graph runs every padded row over the persistent buffers, an eager step its decode rows).
    kernel_reads: dict[int, list[int]] = field(default_factory=dict)
    kernel_writes: dict[int, list[int]] = field(default_factory=dict)


def is_uniform_decode(num_scheduled: np.ndarray, num_computed: np.ndarray, num_prompt: np.ndarray,
                      uniform_decode_query_len: int) -> bool:
    """Whether a batch may replay the FULL decode graph.

    Shape: vLLM 0.33's ``_is_uniform_decode`` (every row schedules ``1 + num_spec`` tokens), so a
    one-token chunk with prior state replays the decode graph and the Mamba builder reclassifies
    it (#42430). OURS: a live row still prefilling keeps the batch off the decode graph unless the
    builder runs it as a decode (that one-token chunk with prior state). A first prompt chunk stays
    a prefill; so does, under speculative decoding, a prompt remainder of exactly ``1 + num_spec``
    tokens, which the shape rule alone would replay while the builder classifies it as a prefill
    (stale graph buffers: found by the hunter's clean run; whether upstream meets it was not checked).
    """
    q = np.asarray(num_scheduled)
    nc = np.asarray(num_computed)
    if not len(q):
        return False
    stays_prefill = (nc < np.asarray(num_prompt)) & ~((nc > 0) & (q == 1))
    uq = uniform_decode_query_len
    return bool(q.max() == uq and q.sum() == uq * len(q) and not stays_prefill.any())


class ModelRunner:
    def __init__(self, model: TinyHybridModel, cfg: RunnerConfig, bugs: BugConfig | None = None,
                 rank: int = 0, device: torch.device | str = DEVICE) -> None:
        if model.cfg.num_speculative_tokens != cfg.num_speculative_tokens:
            raise ValueError(
                f"the model's conv state is sized for {model.cfg.num_speculative_tokens} speculative "
                f"tokens, the runner for {cfg.num_speculative_tokens}"
            )
        self.model = model
        self.cfg = cfg
        self.bugs = resolve(bugs)
        self.rank = rank
        self.device = torch.device(device)
        spec = cfg.kv_cache_spec()
        self.spec = spec
        self.input_batch = InputBatch(cfg.max_num_seqs, cfg.max_model_len, cfg.max_num_batched_tokens,
                                      [spec], self.device, self.bugs, cfg.num_blocks)
        self.buffers = RunnerBuffers(cfg.max_num_seqs, cfg.max_num_batched_tokens, self.device)
        uq = cfg.uniform_decode_query_len
        self.cudagraph_capture_sizes = cfg.cudagraph_capture_sizes()
        self.capture_sizes = cfg.full_decode_capture_sizes()
        max_capture_size = max(self.cudagraph_capture_sizes, default=cfg.max_num_seqs * uq)
        self.builder = MambaAttentionMetadataBuilder(
            spec, cfg.max_model_len, cfg.max_num_seqs, max_capture_size, cfg.num_speculative_tokens,
            full_cudagraph=cfg.cudagraph, device=self.device, bugs=self.bugs)
        self.state = ModelState.allocate(model.cfg, cfg.num_blocks, device=self.device)
        # The worker's own record of each request (vLLM's self.requests).
        self.requests: dict[str, CachedRequestState] = {}
        # "all" + spec: last step's last scheduled block per request, and its persistent buffer.
        self.mamba_state_idx: dict[str, int] = {}
        self.prev_step_anchor = torch.full((cfg.max_num_seqs,), -1, dtype=torch.int32, device=self.device)
        self.graphs: dict[int, CapturedGraph] = {}
        self.graph_metadata: dict[int, MambaAttentionMetadata] = {}  # what each graph was captured over
        # Called with (record, common metadata, Mamba metadata, builder) right after a step's metadata is
        # built, before the kernels run: how the workbook's tracer and the panels see what the runner computed.
        self.observer: Callable[[StepRecord, CommonAttentionMetadata | None, MambaAttentionMetadata,
                                 MambaAttentionMetadataBuilder], None] | None = None
        self.last_record: StepRecord | None = None
        self.step_index = 0
        for size in self.capture_sizes:
            self._capture(size)
        self.state.check_guards()  # a capture stored one slot before a pool (mambalab/guard_band.py)

    # -- CUDA graphs ----------------------------------------------------------
    def _decode_body(self, md: MambaAttentionMetadata, num_tokens: int):
        bs = md.state_indices_tensor_d.shape[0]
        spec = self.cfg.num_speculative_tokens > 0
        # The body closes over what it reads, not over the runner: the CPU capture memo keys on
        # everything a body reaches, so two DP ranks' identical captures (they differ only in
        # ``rank``, which the body never reads) are one entry (worker/cuda_graph.py).
        builder, buffers, model, state, bugs = self.builder, self.buffers, self.model, self.state, self.bugs

        def body() -> torch.Tensor:
            src, dst, na = builder.decode_state_slots(md)
            qsl = buffers.query_start_loc.gpu[: bs + 1] if src.dim() == 2 else None
            return model.forward_decode(
                buffers.input_ids.gpu[:num_tokens], state, src, dst,
                na if spec else None, qsl, bugs=bugs)

        return body

    def _capture(self, size: int) -> None:
        """Capture the FULL decode graph of ``size`` tokens over a dummy batch (start-up)."""
        md = self._dummy_metadata(size)
        if not md.cudagraph_buffers_refreshed:
            raise RuntimeError(f"capture of size {size}: the dummy batch was not an all-decode batch")
        self.graphs[size] = CapturedGraph(self._decode_body(md, size), size=size)
        self.graph_metadata[size] = md

    # -- step ---------------------------------------------------------------------
    def _update_states(self, so: SchedulerOutput) -> None:
        ib = self.input_batch
        for rid in so.finished_req_ids:
            self.requests.pop(rid, None)
            self.mamba_state_idx.pop(rid, None)
            ib.remove_request(rid)
        scheduled = set(so.num_scheduled_tokens)
        for rid in list(ib.req_id_to_index):
            if rid not in scheduled:  # unscheduled this step: out of the batch, kept in self.requests
                ib.remove_request(rid)
        to_add: list[CachedRequestState] = []
        for new in so.scheduled_new_reqs:
            self.mamba_state_idx.pop(new.req_id, None)
            # A request resumed after preemption recomputes its outputs as prompt
            # (it is prefilling until they are all computed again).
            state = CachedRequestState(new.req_id, list(new.prompt_token_ids) + list(new.output_token_ids),
                                       tuple(list(b) for b in new.block_ids), new.num_computed_tokens, [])
            self.requests[new.req_id] = state
            to_add.append(state)
        cached = so.scheduled_cached_reqs
        for rid, new_blocks, num_computed in zip(cached.req_ids, cached.new_block_ids,
                                                 cached.num_computed_tokens):
            state = self.requests[rid]
            state.num_computed_tokens = num_computed
            if new_blocks is not None:
                for g, ids in enumerate(new_blocks):
                    state.block_ids[g].extend(ids)
            row = ib.req_id_to_index.get(rid)
            if row is None:
                to_add.append(state)
                continue
            ib.num_computed_tokens_cpu[row] = num_computed
            if new_blocks is not None:
                ib.block_table.append_row(new_blocks, row)
        for state in to_add:
            ib.add_request(state)
        self._zero_new_blocks(so)
        ib.condense()
        # Drafts to verify go into the token ids (positions past num_tokens_no_spec).
        for rid, drafts in so.scheduled_spec_decode_tokens.items():
            row = ib.req_id_to_index[rid]
            n = int(ib.num_tokens_no_spec[row])
            ib.token_ids_cpu[row, n:n + len(drafts)] = drafts

    def _zero_new_blocks(self, so: SchedulerOutput) -> None:
        """Zero state blocks a request receives fresh (vLLM zeroes newly allocated state).

        Prefix-cache hits (the leading ``cdiv(num_computed, B)`` blocks of a new
        request) keep their cached state; the null block is never touched.
        """
        B = self.cfg.block_size
        fresh: list[int] = []
        for new in so.scheduled_new_reqs:
            keep = -(-new.num_computed_tokens // B) if self.cfg.mamba_cache_mode == "all" else 0
            fresh.extend(new.block_ids[0][keep:])
        for new_blocks in so.scheduled_cached_reqs.new_block_ids:
            if new_blocks is not None:
                fresh.extend(new_blocks[0])
        for b in fresh:
            if b != NULL_BLOCK_ID:
                self.state.zero_slot(b)

    def _dispatch(self, num_tokens: int, num_reqs: int, uniform: bool,
                  num_tokens_across_dp: int | None = None) -> BatchDescriptor:
        desc = dispatch(num_tokens, num_reqs, uniform_decode=uniform, capture_sizes=self.cudagraph_capture_sizes,
                        max_num_seqs=self.cfg.max_num_seqs, num_spec_tokens=self.cfg.num_speculative_tokens,
                        num_tokens_across_dp=num_tokens_across_dp)
        if desc.cudagraph_mode is CUDAGraphMode.FULL and desc.num_tokens_padded not in self.graphs:
            desc = BatchDescriptor(num_tokens, num_reqs, num_tokens, num_reqs, uniform,
                                   self.cfg.uniform_decode_query_len, CUDAGraphMode.NONE)
        return desc

    def local_cudagraph_mode(self, so: SchedulerOutput) -> CUDAGraphMode:
        """The mode this rank would run ``so`` in on its own, before the DP ranks agree on one
        (``_determine_batch_execution_and_padding``'s first dispatch). An idle rank's dummy batch is
        a uniform decode batch (``_dummy_run(..., uniform_decode=True)``): FULL when graphs exist."""
        uq = self.cfg.uniform_decode_query_len
        if not so.total_num_scheduled_tokens:
            return CUDAGraphMode.FULL if self.graphs else CUDAGraphMode.NONE
        nc: dict[str, int] = {}
        prompt: dict[str, int] = {}
        for new in so.scheduled_new_reqs:  # a resumed request recomputes its outputs as prompt
            nc[new.req_id] = new.num_computed_tokens
            prompt[new.req_id] = len(new.prompt_token_ids) + len(new.output_token_ids)
        cached = so.scheduled_cached_reqs
        for rid, n in zip(cached.req_ids, cached.num_computed_tokens):  # in self.requests since their first step
            nc[rid] = n
            prompt[rid] = self.requests[rid].num_prompt_tokens
        rids = list(so.num_scheduled_tokens)
        q = np.array([so.num_scheduled_tokens[r] for r in rids])
        uniform = is_uniform_decode(q, np.array([nc[r] for r in rids]), np.array([prompt[r] for r in rids]), uq)
        return self._dispatch(so.total_num_scheduled_tokens, len(rids), uniform).cudagraph_mode

    def execute_model(self, so: SchedulerOutput, num_tokens_across_dp: int | None = None,
                      cudagraph_mode_across_dp: CUDAGraphMode | None = None,
                      ) -> tuple[dict[str, list[int]], StepRecord | None]:
        """Run one scheduled step; returns the sampled tokens per request and the step's record.

        An empty schedule still updates the persistent batch (finished requests
        leave it), as upstream's worker does, and returns no record.
        """
        self.step_index += 1
        self._update_states(so)
        if not so.total_num_scheduled_tokens:
            return {}, None  # nothing to run (finished requests were removed above)
        ib = self.input_batch
        sched = np.array([so.num_scheduled_tokens[r] for r in ib.req_ids], dtype=np.int32)
        reorder_batch_to_split_decodes_and_prefills(
            ib, sched, self.cfg.uniform_decode_query_len, treat_short_extends_as_decodes=False)
        self._fill_prev_step_anchor()
        p = self.buffers.prepare_inputs(ib, sched)
        uq = self.cfg.uniform_decode_query_len
        nr = p.num_reqs
        uniform = is_uniform_decode(p.num_scheduled_tokens[:nr], ib.num_computed_tokens_cpu[:nr],
                                    ib.num_prompt_tokens[:nr], uq)
        desc = cap_cudagraph_mode(self._dispatch(p.num_tokens, nr, uniform, num_tokens_across_dp),
                                  cudagraph_mode_across_dp)
        (cm,) = build_attention_metadata(ib, self.buffers, p.num_reqs, desc.num_reqs_padded,
                                         desc.num_tokens_padded, p.max_query_len, self.bugs)
        md = self.builder.build(cm, self.buffers.num_accepted_tokens.gpu, self.prev_step_anchor)
        record = self._record("step", desc, md, cm, list(ib.req_ids))
        record.scheduled = dict(so.num_scheduled_tokens)
        self.last_record = record  # kept even if the step crashes below
        self._observe(record, cm, md)
        if desc.cudagraph_mode is CUDAGraphMode.FULL:
            logits = self.graphs[desc.num_tokens_padded].replay()
            decode_logits, prefill_logits = logits, {}
            num_decode_rows = p.num_reqs
        else:
            decode_logits, prefill_logits = self._run_eager(p, md)
            num_decode_rows = md.num_decodes
        sampled = self._sample(p, decode_logits, num_decode_rows, prefill_logits, so)
        self._post_process(p, sampled, so, md.num_decodes)
        record.null_block_dirty = not self.state.slot_is_zero(NULL_BLOCK_ID)
        record.sampled = {k: list(v) for k, v in sampled.items()}
        record.num_accepted = {rid: int(ib.num_accepted_tokens_cpu[ib.req_id_to_index[rid]])
                               for rid in sampled}
        return sampled, record

    def dummy_run(self, num_tokens: int, cudagraph_mode_across_dp: CUDAGraphMode | None = None) -> StepRecord:
        """An idle DP rank's step: a dummy uniform decode batch of ``num_tokens`` (``_dummy_run``).

        The buffers are filled and the block table committed either way. Only
        a FULL graph replay builds attention metadata and so touches state
        (through whatever the dummy rows' block-table rows hold, #37728); an
        eager dummy run has no attention metadata, and vLLM's Mamba mixers
        return without reading or writing any state. The DP ranks agree on the
        mode first (the minimum, ``_post_process_cudagraph_mode``): when another
        rank runs a mixed batch, the dummy batch is not replayed as a FULL graph.
        """
        self.step_index += 1
        uq = self.cfg.uniform_decode_query_len
        full_allowed = cudagraph_mode_across_dp in (None, CUDAGraphMode.FULL)
        if num_tokens not in self.graphs or not full_allowed:
            p = self.buffers.prepare_dummy_run(self.input_batch, num_tokens, uq, self.cfg.max_num_seqs, self.bugs)
            record = StepRecord(
                step=self.step_index, rank=self.rank, kind="dummy", mode=CUDAGraphMode.NONE.name,
                num_reqs=p.num_reqs, num_reqs_padded=p.num_reqs, num_tokens=num_tokens,
                num_tokens_padded=num_tokens, req_ids=[], num_decodes=0, num_prefills=0, refreshed=False,
                num_accepted_in=self.buffers.num_accepted_tokens.np[: p.num_reqs].tolist())
            self.last_record = record
            record.null_block_dirty = not self.state.slot_is_zero(NULL_BLOCK_ID)
            return record
        md = self._dummy_metadata(num_tokens)
        num_reqs = md.num_reqs
        desc = BatchDescriptor(num_tokens, num_reqs, num_tokens, num_reqs, True, uq, CUDAGraphMode.FULL)
        record = self._record("dummy", desc, md, None, [])
        self.last_record = record
        self._observe(record, self._last_cm, md)
        self.graphs[num_tokens].replay()
        record.null_block_dirty = not self.state.slot_is_zero(NULL_BLOCK_ID)
        return record

    def _dummy_metadata(self, num_tokens: int) -> MambaAttentionMetadata:
        uq = self.cfg.uniform_decode_query_len
        p = self.buffers.prepare_dummy_run(self.input_batch, num_tokens, uq, self.cfg.max_num_seqs, self.bugs)
        (cm,) = build_attention_metadata(self.input_batch, self.buffers, p.num_reqs, p.num_reqs,
                                         num_tokens, p.max_query_len, self.bugs)
        self.prev_step_anchor.fill_(-1)
        self._last_cm = cm
        return self.builder.build(cm, self.buffers.num_accepted_tokens.gpu, self.prev_step_anchor)

    # -- pieces of the step -----------------------------------------------------------
    def _fill_prev_step_anchor(self) -> None:
        ib = self.input_batch
        anchors = np.full(self.cfg.max_num_seqs, -1, dtype=np.int32)
        for rid, row in ib.req_id_to_index.items():
            anchors[row] = self.mamba_state_idx.get(rid, -1)
        self.prev_step_anchor.copy_(torch.from_numpy(anchors))

    def _run_eager(self, p, md: MambaAttentionMetadata) -> tuple[torch.Tensor | None, dict[int, torch.Tensor]]:
        """Decodes through the kernels, prefills (one chunk per row) through the references."""
        nd = md.num_decodes
        decode_logits = None
        if nd:
            src, dst, na = self.builder.decode_state_slots(md)
            ndt = int(self.buffers.query_start_loc.np[nd])  # real tokens (md counts the padded ones)
            qsl = self.buffers.query_start_loc.gpu[: nd + 1] if src.dim() == 2 else None
            decode_logits = self.model.forward_decode(
                self.buffers.input_ids.gpu[:ndt], self.state, src, dst,
                na if self.cfg.num_speculative_tokens else None, qsl, bugs=self.bugs)
        prefill_logits: dict[int, torch.Tensor] = {}
        ib = self.input_batch
        qsl_np = self.buffers.query_start_loc.np
        B = self.cfg.block_size
        for row in range(nd, p.num_reqs):
            start, end = int(qsl_np[row]), int(qsl_np[row + 1])
            tokens = self.buffers.input_ids.np[start:end].tolist()
            nc = int(ib.num_computed_tokens_cpu[row])
            blocks = ib.block_table[0].block_table.np[row]
            if self.cfg.mamba_cache_mode == "all":
                # Split the chunk at block boundaries: each full block keeps its boundary state.
                pos = nc
                while pos < nc + len(tokens):
                    stop = min((pos // B + 1) * B, nc + len(tokens))
                    src = int(blocks[(pos - 1) // B]) if pos > 0 else NULL_BLOCK_ID
                    dst = int(blocks[(stop - 1) // B])
                    logits = self.model.prefill(tokens[pos - nc:stop - nc], src, dst, self.state, True)
                    pos = stop
            else:
                slot = int(blocks[0])
                # A request with no history starts from the null block: the zero state.
                src = slot if nc > 0 else NULL_BLOCK_ID
                logits = self.model.prefill(tokens, src, slot, self.state, True)
            prefill_logits[row] = logits
        return decode_logits, prefill_logits

    def _sample(self, p, decode_logits, num_decode_rows: int, prefill_logits: dict[int, torch.Tensor],
                so: SchedulerOutput) -> dict[str, list[int]]:
        ib = self.input_batch
        qsl = self.buffers.query_start_loc.np
        out: dict[str, list[int]] = {}
        argmax = decode_logits.argmax(-1).cpu().numpy() if decode_logits is not None else None
        for row, rid in enumerate(ib.req_ids):
            state = self.requests[rid]
            nc = int(ib.num_computed_tokens_cpu[row])
            q = int(p.num_scheduled_tokens[row])
            if nc + q < state.num_tokens:
                continue  # a prefill chunk that does not finish the prompt samples nothing
            if row < num_decode_rows:
                start = int(qsl[row])
                drafts = so.scheduled_spec_decode_tokens.get(rid, [])
                if not drafts:  # a plain decode, or the last chunk of a prompt run as a decode
                    out[rid] = [int(argmax[start + q - 1])]
                    continue
                tokens = []
                for t in range(q):
                    tok = int(argmax[start + t])
                    tokens.append(tok)
                    if t < len(drafts) and drafts[t] != tok:
                        break
                    if t >= len(drafts):
                        break
                out[rid] = tokens
            else:
                out[rid] = [int(prefill_logits[row].argmax())]
        return out

    def _post_process(self, p, sampled: dict[str, list[int]], so: SchedulerOutput, num_decodes: int) -> None:
        """Accepted counts, output tokens, and ("all" + spec) each decode row's anchor: the decode
        kernels wrote its states from ``block_idx_last_scheduled_token`` on, whatever its query
        length (a row with fewer drafts than ``num_speculative_tokens`` included); a prefill
        chunk leaves block-boundary states, which the builder's fallback finds."""
        ib = self.input_batch
        B = self.cfg.block_size
        for row, rid in enumerate(ib.req_ids):
            q = int(p.num_scheduled_tokens[row])
            toks = sampled.get(rid)
            # Every row's count is written, as upstream V1 does (the leading accepted tokens of a
            # speculative row, 1 otherwise); the lab's zero of ``zero-accepted`` is a padded row's.
            ib.num_accepted_tokens_cpu[row] = len(toks) if toks and rid in so.scheduled_spec_decode_tokens else 1
            if self.cfg.mamba_cache_mode == "all" and self.cfg.num_speculative_tokens:
                if row < num_decodes:
                    seq_len = int(ib.num_computed_tokens_cpu[row]) + q
                    self.mamba_state_idx[rid] = max(0, (seq_len - 1) // B)
                else:
                    self.mamba_state_idx.pop(rid, None)
            for t in toks or ():
                ib.append_output_token(rid, t)

    def _observe(self, record: StepRecord, cm, md: MambaAttentionMetadata) -> None:
        if self.observer is not None:
            self.observer(record, cm, md, self.builder)

    def _kernel_accesses(self, desc: BatchDescriptor, md: MambaAttentionMetadata
                         ) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
        """Per kernel row, the slots of its read and write windows that the guard lets through:
        :meth:`MambaAttentionMetadataBuilder.decode_state_slots` over the metadata the kernels
        really see (a FULL graph: the tensors it was captured over, refreshed or not)."""
        full = desc.cudagraph_mode is CUDAGraphMode.FULL
        seen = self.graph_metadata[desc.num_tokens_padded] if full else md
        n_rows = desc.num_reqs_padded if full else md.num_decodes
        if not n_rows:
            return {}, {}
        src, dst, _ = self.builder.decode_state_slots(seen)
        guard = self.bugs.kernel_guard
        live = lambda t: {r: [int(x) for x in row if guard.is_live(int(x))]  # noqa: E731
                          for r, row in enumerate((t[:, None] if t.dim() == 1 else t)[:n_rows].tolist())}
        return ({r: v for r, v in live(src).items() if v}, {r: v for r, v in live(dst).items() if v})

    def _record(self, kind: str, desc: BatchDescriptor, md: MambaAttentionMetadata, cm, req_ids) -> StepRecord:
        cm = cm if cm is not None else self._last_cm
        n_real = desc.num_reqs
        padded_pref = []
        if cm.is_prefilling is not None:
            padded_pref = [int(i) for i in torch.nonzero(cm.is_prefilling[n_real:]).flatten() + n_real]
        # A FULL graph reads the persistent buffer, refreshed or not; eager runs read md's tensors.
        d = (self.builder.state_indices_tensor_d[: desc.num_reqs_padded]
             if desc.cudagraph_mode is CUDAGraphMode.FULL else md.state_indices_tensor_d)
        rows = lambda t: (t[:, None] if t.dim() == 1 else t).cpu().tolist()  # noqa: E731
        reads, writes = self._kernel_accesses(desc, md)
        return StepRecord(
            step=self.step_index, rank=self.rank, kind=kind, mode=desc.cudagraph_mode.name,
            num_reqs=desc.num_reqs, num_reqs_padded=desc.num_reqs_padded, num_tokens=desc.num_tokens,
            num_tokens_padded=desc.num_tokens_padded, req_ids=list(req_ids), num_decodes=md.num_decodes,
            num_prefills=md.num_prefills, refreshed=md.cudagraph_buffers_refreshed,
            padded_rows_prefilling=padded_pref, state_slots=rows(d),
            intended_slots=rows(md.state_indices_tensor_d),
            num_accepted_in=self.buffers.num_accepted_tokens.np[: desc.num_reqs].tolist(),
            block_table_rows=cm.block_table_tensor.cpu().tolist(), kernel_reads=reads, kernel_writes=writes)


__all__ = ["ModelRunner", "RunnerConfig", "StepRecord"]
