"""One decode step from scheduler to kernel, one box per stage, each named with its vLLM file.

The tour (notebook 00) draws it once before any bug relies on it: where the block ids come from
(the scheduler's block pool), where they are kept per row (``InputBatch`` and the block table's CPU
mirror), where they cross to the device (``commit_block_table``), how they become metadata and the
CUDA-graph buffers a replay reads, and which kernel finally indexes the state pool with them. Each
box also names the workbook's mirror under ``lib/mambalab/``. Headless: :func:`pipeline_stages`.
"""

from __future__ import annotations

from dataclasses import dataclass

from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from mambalab.viz._common import FIG_WIDTH, PALETTE, never_raises, new_axes, set_title


@dataclass(frozen=True)
class Stage:
    name: str  # what the box holds
    upstream: str  # vLLM file
    ours: str  # the workbook's mirror (under lib/mambalab/)
    what: str  # one line: what it adds to the step
    device: bool  # lives on the GPU (False: host / CPU)


STAGES: tuple[Stage, ...] = (
    Stage("Scheduler + KVCacheManager", "vllm/v1/core/sched/scheduler.py, block_pool.py",
          "core/sched/, core/block_pool.py", "tokens per request; block ids (block 0 = null block)", False),
    Stage("InputBatch (persistent batch)", "vllm/v1/worker/gpu_input_batch.py",
          "worker/input_batch.py", "one row per request: add, remove, condense, reorder", False),
    Stage("BlockTable: CPU mirror", "vllm/v1/worker/block_table.py",
          "worker/block_table.py", "add_row / clear_row / move_row edit the CPU side only", False),
    Stage("BlockTable: device copy", "vllm/v1/worker/block_table.py (commit_block_table)",
          "worker/block_table.py", "only rows [:num_reqs] are copied; the rest keep old values", True),
    Stage("CommonAttentionMetadata", "vllm/v1/attention/backends/utils.py; gpu_model_runner.py",
          "attention/metadata.py, worker/model_runner.py", "padded rows: NULL_BLOCK_ID, seq_len 0; is_prefilling",
          True),
    Stage("Mamba metadata builder", "vllm/v1/attention/backends/mamba_attn.py",
          "attention/mamba_metadata.py", "split decodes/prefills; state_indices_tensor_d", True),
    Stage("CUDA-graph buffers", "mamba_attn.py (_update_metadata_for_cudagraph_capture)",
          "attention/mamba_metadata.py", "persistent; refreshed only when the batch has no prefill", True),
    Stage("Kernel (eager, or replayed in a graph)", "vllm/model_executor/layers/mamba/ops/, layers/fla/ops/",
          "kernels/", "reads and writes state_pool[slot]; skips the null block", True),
)


def pipeline_stages() -> list[Stage]:
    """The stages, scheduler first (headless: what the drawing shows)."""
    return list(STAGES)


@never_raises("pipeline")
def draw_pipeline(*, highlight: str | None = None, title: str | None = None, ax=None, fig=None):
    """The stages as boxes, top to bottom, host ones left of the CPU→GPU line and device ones below it.

    ``highlight``: the name of a stage to frame (e.g. where a chapter's bug lives).
    """
    stages = pipeline_stages()
    if highlight is not None and highlight not in {s.name for s in stages}:
        raise ValueError(f"no stage named {highlight!r}; the stages: {', '.join(s.name for s in stages)}")
    n = len(stages)
    f, a = new_axes(ax, fig, (FIG_WIDTH, 0.62 * n + 1.2))
    first_device = next(i for i, s in enumerate(stages) if s.device)
    for i, s in enumerate(stages):
        y = n - 1 - i
        face = "#DCEEF8" if s.device else "#FBEBC8"
        edge = PALETTE["vermillion"] if highlight and s.name == highlight else "#555555"
        a.add_patch(FancyBboxPatch((0.0, y - 0.36), 3.9, 0.72, boxstyle="round,pad=0.02,rounding_size=0.08",
                                   fc=face, ec=edge, lw=2.6 if edge != "#555555" else 0.9))
        a.text(0.1, y + 0.12, s.name, ha="left", va="center", fontsize=9.5, weight="bold")
        a.text(0.1, y - 0.18, s.what, ha="left", va="center", fontsize=7.8, color="#333333")
        a.text(4.05, y + 0.12, s.upstream, ha="left", va="center", fontsize=8.2, family="monospace")
        a.text(4.05, y - 0.18, "mambalab: " + s.ours, ha="left", va="center", fontsize=7.6, color="#555555",
               style="italic")
        if i:
            a.add_patch(FancyArrowPatch((1.0, y + 1 - 0.37), (1.0, y + 0.37), arrowstyle="-|>", mutation_scale=10,
                                        color="#333333", lw=1.0))
    y_line = n - first_device - 0.5
    a.plot([-0.1, 10.0], [y_line, y_line], color=PALETTE["blue"], lw=1.2, ls="--")
    a.text(9.95, y_line + 0.06, "above: host (CPU) arrays", ha="right", va="bottom", fontsize=8,
           color=PALETTE["blue"])
    a.text(9.95, y_line - 0.06, "below: device (GPU) tensors", ha="right", va="top", fontsize=8,
           color=PALETTE["blue"])
    a.set_xlim(-0.15, 10.0)
    a.set_ylim(-0.6, n - 0.4)
    a.set_axis_off()
    set_title(a, title or f"a block id passes {n - 1} hand-offs from the scheduler to the kernel; "
                          "only rows [:num_reqs] cross to the GPU each step")
    return f


__all__ = ["STAGES", "Stage", "draw_pipeline", "pipeline_stages"]
