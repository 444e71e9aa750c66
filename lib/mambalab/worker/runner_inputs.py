"""The model runner's persistent input buffers and the two ways a step fills them.

Mirrors the input side of ``vllm/v1/worker/gpu_model_runner.py``:
``_prepare_inputs`` for a real step and ``_dummy_run`` for an idle DP rank
(or graph capture). Buffers are persistent because CUDA graphs replay over
fixed addresses: a padded row reads whatever its slice of a buffer holds, so
the padding values written here matter:

* ``query_start_loc`` tail repeats the last value (query length 0),
* ``seq_lens[num_reqs:] = 0``, ``num_accepted_tokens[num_reqs:] = 1``,
* the slot-mapping tail is ``PAD_SLOT_ID``.

The padded rows' accepted count is 1 in every upstream release; with the
``zero-accepted`` switch on it is 0, the lab's stand-in for the zero that
#48475 hardens the GDN kernels against ("a stale row, a padded row or a
device-to-host race"): the live rows' counts come from ``InputBatch``, which
starts them at 1 and resets them in ``add_request``, as upstream's V1 does.

The dummy run commits ``num_reqs_padded`` block-table rows since #37728;
before (switch ``stale-rows``) it committed nothing, so the device table kept
rows of requests that had finished.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mambalab.worker.buffers import CpuGpuBuffer
from mambalab.lab.bugs import BugConfig, resolve
from mambalab.constants import PAD_SLOT_ID
from mambalab.device import DEVICE
from mambalab.worker.input_batch import InputBatch


@dataclass(frozen=True)
class PreparedInputs:
    """Sizes of the step just prepared (the buffers hold the data)."""

    num_reqs: int
    num_tokens: int
    max_query_len: int
    num_scheduled_tokens: np.ndarray
    req_indices: np.ndarray


class RunnerBuffers:
    def __init__(self, max_num_reqs: int, max_num_tokens: int, device: torch.device | str = DEVICE):
        if max_num_reqs < 1 or max_num_tokens < 1:
            raise ValueError(f"max_num_reqs={max_num_reqs}, max_num_tokens={max_num_tokens} must be positive")
        self.max_num_reqs = max_num_reqs
        self.max_num_tokens = max_num_tokens
        self.input_ids = CpuGpuBuffer(max_num_tokens, dtype=torch.int32, device=device)
        self.positions = CpuGpuBuffer(max_num_tokens, dtype=torch.int64, device=device)
        self.query_start_loc = CpuGpuBuffer(max_num_reqs + 1, dtype=torch.int32, device=device)
        self.seq_lens = CpuGpuBuffer(max_num_reqs, dtype=torch.int32, device=device)
        self.num_accepted_tokens = CpuGpuBuffer(max_num_reqs, dtype=torch.int32, device=device, fill=1)

    def _fill_request_buffers(self, num_scheduled: np.ndarray, seq_lens: np.ndarray) -> None:
        n = num_scheduled.shape[0]
        qsl = self.query_start_loc.np
        qsl[0] = 0
        np.cumsum(num_scheduled, out=qsl[1 : n + 1])
        qsl[n + 1 :] = qsl[n]
        self.seq_lens.np[:n] = seq_lens
        self.seq_lens.np[n:] = 0
        self.query_start_loc.copy_to_gpu()
        self.seq_lens.copy_to_gpu()

    def prepare_inputs(self, input_batch: InputBatch, num_scheduled_tokens: np.ndarray) -> PreparedInputs:
        """Fill the buffers for the live rows ``[:num_reqs]`` (``_prepare_inputs``)."""
        num_reqs = input_batch.num_reqs
        sched = np.asarray(num_scheduled_tokens, dtype=np.int32)
        if sched.shape != (num_reqs,):
            raise ValueError(f"num_scheduled_tokens has shape {sched.shape}, expected ({num_reqs},)")
        if num_reqs and sched.min() < 1:
            raise ValueError("num_scheduled_tokens: every live request schedules at least one token")
        total = int(sched.sum())
        if total > self.max_num_tokens:
            raise ValueError(f"{total} tokens exceed max_num_tokens={self.max_num_tokens}")

        input_batch.block_table.commit_block_table(num_reqs)

        req_indices = np.repeat(np.arange(num_reqs), sched)
        starts = np.concatenate([[0], np.cumsum(sched)[:-1]]) if num_reqs else np.zeros(0, np.int64)
        arange = np.arange(total) - np.repeat(starts, sched)
        positions = input_batch.num_computed_tokens_cpu[req_indices].astype(np.int64) + arange
        if total and positions.max() >= input_batch.max_model_len:
            raise ValueError("a scheduled position reaches max_model_len")
        self.positions.np[:total] = positions
        self.positions.np[total:] = 0
        self.input_ids.np[:total] = input_batch.token_ids_cpu[req_indices, positions]
        self.input_ids.np[total:] = 0
        self.positions.copy_to_gpu()
        self.input_ids.copy_to_gpu()

        seq_lens = input_batch.num_computed_tokens_cpu[:num_reqs] + sched
        self._fill_request_buffers(sched, seq_lens)
        self.num_accepted_tokens.np[:num_reqs] = input_batch.num_accepted_tokens_cpu[:num_reqs]
        self.num_accepted_tokens.np[num_reqs:] = input_batch.bugs.padded_accepted_count
        self.num_accepted_tokens.copy_to_gpu()

        input_batch.block_table.compute_slot_mapping(req_indices, positions)
        input_batch.block_table.commit_slot_mapping(total)
        return PreparedInputs(num_reqs, total, int(sched.max()) if num_reqs else 0, sched, req_indices)

    def prepare_dummy_run(
        self,
        input_batch: InputBatch,
        num_tokens: int,
        uniform_decode_query_len: int,
        max_num_seqs: int,
        bugs: BugConfig | None = None,
    ) -> PreparedInputs:
        """Fill the buffers for a dummy uniform-decode batch of ``num_tokens`` (``_dummy_run``).

        ``num_reqs = min(num_tokens // uniform_decode_query_len, max_num_seqs)``
        rows, each with ``seq_len = max_query_len``; the metadata built from
        it has ``num_reqs == num_reqs_padded``, so dummy rows use whatever
        their block-table rows hold on the device.
        """
        bugs = resolve(bugs)
        if num_tokens < 1 or uniform_decode_query_len < 1:
            raise ValueError(f"num_tokens={num_tokens} and uniform_decode_query_len must be positive")
        num_reqs = min(max(num_tokens // uniform_decode_query_len, 1), max_num_seqs)
        sched = np.full(num_reqs, uniform_decode_query_len, dtype=np.int32)
        sched[-1] += num_tokens - int(sched.sum())
        if sched[-1] < 1:
            raise ValueError(f"num_tokens={num_tokens} is too small for {num_reqs} dummy requests")
        max_query_len = int(sched.max())
        self._fill_request_buffers(sched, np.full(num_reqs, max_query_len, dtype=np.int32))
        self.positions.np[:] = 0
        self.input_ids.np[:] = 0
        self.positions.copy_to_gpu()
        self.input_ids.copy_to_gpu()
        self.num_accepted_tokens.np[:] = bugs.padded_accepted_count  # 1; 0 under zero-accepted
        self.num_accepted_tokens.copy_to_gpu()
        for bt in input_batch.block_table.block_tables:
            bt.slot_mapping.np[:] = PAD_SLOT_ID
            bt.slot_mapping.copy_to_gpu()
        if not bugs.has("stale-rows"):
            input_batch.block_table.commit_block_table(num_reqs)
        req_indices = np.repeat(np.arange(num_reqs), sched)
        return PreparedInputs(num_reqs, num_tokens, max_query_len, sched, req_indices)


__all__ = ["RunnerBuffers", "PreparedInputs"]
