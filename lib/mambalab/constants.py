"""The two sentinels of vLLM's hybrid-model state management.

Mirrors ``vllm/v1/attention/backends/utils.py``:

* ``NULL_BLOCK_ID`` (0) fills block-table-derived indices of rows that are
  not a real request (CUDA-graph padding). Block 0 is reserved by the block
  pool at start-up and never handed out, so a guarded kernel can skip it.
* ``PAD_SLOT_ID`` (-1) pads slot mappings and program dispatch tables, never
  block tables. Using it in a block table is bug #35431.
"""

NULL_BLOCK_ID: int = 0
PAD_SLOT_ID: int = -1

__all__ = ["NULL_BLOCK_ID", "PAD_SLOT_ID"]
