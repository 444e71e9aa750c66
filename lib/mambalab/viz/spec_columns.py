"""One request's block-table row under ``mamba_cache_mode="all"`` + speculative decoding (#41233).

The fixed mixer (``vllm/model_executor/layers/mamba/mamba_mixer2.py``, v0.22-v0.31) gathers two
windows of ``1 + num_spec`` columns from the row: the *gather window* from the previous step's anchor
(``block_idx_last_scheduled_token_prev_step``, recorded by ``postprocess_mamba_all`` in
``vllm/v1/worker/mamba_utils.py`` as ``(seq_len - 1) // block_size``), whose column
``num_accepted_tokens - 1`` the kernel starts from, and the *write window* from
``block_idx_last_scheduled_token``, whose column ``t`` gets the state after token ``t``. Pre-fix the
mixer read one column, ``block_idx_last_computed_token`` (``/gather``), and the builder's persistent
``state_indices_tensor_d`` had ``cdiv(max_model_len, block_size)`` columns, not the row's ``+
num_speculative_blocks`` (``/width``, ``vllm/v1/attention/backends/mamba_attn.py``).
Headless: :func:`analyse_spec_columns`.
"""

from __future__ import annotations

from typing import Sequence

from mambalab.viz._common import (
    ERROR,
    FIG_WIDTH,
    INFO,
    PALETTE,
    WARNING,
    Finding,
    cell,
    legend,
    legend_patch,
    never_raises,
    new_axes,
    ranges,
    set_title,
    sort_findings,
)


def analyse_spec_columns(row: Sequence[int], *, anchor: int, num_accepted: int, last_scheduled: int,
                         num_spec: int, num_speculative_blocks: int | None = None,
                         last_computed: int | None = None, null_block_id: int = 0) -> dict:
    """Which columns of ``row`` the step reads, starts from and writes; which the pre-fix buffer lacks."""
    row = [int(b) for b in row]
    W = len(row)
    nsb = num_spec if num_speculative_blocks is None else int(num_speculative_blocks)
    gather = [anchor + k for k in range(1 + num_spec)]
    start = anchor + int(num_accepted) - 1
    writes = [last_scheduled + k for k in range(1 + num_spec)]
    missing = list(range(W - nsb, W))  # the columns /width's buffer does not have
    F: list[Finding] = []

    def block(c: int) -> str:
        return f"block {row[c]}" if 0 <= c < W else "outside the row"

    F.append(Finding(INFO, f"starts from column {start} ({block(start)}) = anchor {anchor} + num_accepted_tokens "
                           f"{num_accepted} - 1; writes columns {ranges(writes)}", 0))
    for c in gather + writes:
        if 0 <= c < W and row[c] == null_block_id:
            F.append(Finding(ERROR, f"column {c} of the window is the null block", 10 + c))
            break
    if not 0 <= start < W:
        F.append(Finding(ERROR, f"the start column {start} is outside the row of {W} columns", 5))
    lacking = [c for c in writes + gather if c in missing]
    if lacking:
        F.append(Finding(WARNING, f"column {ranges(sorted(set(lacking)))} of this step's windows is missing from the "
                                  f"pre-fix buffer (/width)", 20))
    if last_computed is not None and last_computed != start:
        F.append(Finding(INFO, f"pre-fix (/gather) it would start from column {last_computed} "
                               f"({block(last_computed)}), block_idx_last_computed_token", 30))
    return dict(row=row, W=W, gather=gather, start=start, writes=writes, missing=missing,
                last_computed=last_computed, findings=F)


def describe_spec_columns(row: Sequence[int], **kw) -> list[str]:
    """The findings as sentences, most severe first."""
    return [f.text for f in sort_findings(analyse_spec_columns(row, **kw)["findings"])]


@never_raises("speculative columns")
def draw_spec_columns(row: Sequence[int], *, anchor: int, num_accepted: int, last_scheduled: int, num_spec: int,
                      num_speculative_blocks: int | None = None, last_computed: int | None = None,
                      req_id: str = "", null_block_id: int = 0, title: str | None = None, ax=None, fig=None):
    """The row as cells (block ids), the gather window above it, the write window below it.

    ``anchor``: the prev-step anchor column; ``num_accepted``: ``num_accepted_tokens`` of the row;
    ``last_scheduled``: ``block_idx_last_scheduled_token``; ``last_computed`` (optional):
    ``block_idx_last_computed_token``, where the pre-fix mixer read. The last
    ``num_speculative_blocks`` columns are hatched: the pre-fix buffer lacks them.
    """
    A = analyse_spec_columns(row, anchor=anchor, num_accepted=num_accepted, last_scheduled=last_scheduled,
                             num_spec=num_spec, num_speculative_blocks=num_speculative_blocks,
                             last_computed=last_computed, null_block_id=null_block_id)
    W, row_ = A["W"], A["row"]
    f, a = new_axes(ax, fig, (FIG_WIDTH, 3.3))
    fs = 9 if W <= 14 else 7.5
    blue, orange = PALETTE["blue"], PALETTE["orange"]
    for c in range(W):
        in_missing = c in A["missing"]
        face = PALETTE["white"] if row_[c] == null_block_id else "#DCEEF8"
        cell(a, c, 0, face, text=str(row_[c]), hatch="//" if in_missing else None, fontsize=fs,
             edge="#555555" if in_missing else "#BBBBBB", textcolor="#888888" if row_[c] == null_block_id else "black")
        a.text(c, -0.75, str(c), ha="center", va="center", fontsize=7.5, color="#555555")
    a.text(-0.6, -0.75, "column", ha="right", va="center", fontsize=8, color="#555555")
    # gather window (read), above
    g0, g1 = A["gather"][0], A["gather"][-1]
    a.plot([g0 - 0.42, g1 + 0.42], [-1.25, -1.25], color=blue, lw=3, solid_capstyle="butt")
    a.text((g0 + g1) / 2, -1.5, f"gather window: anchor {anchor} + arange({1 + num_spec})", ha="center",
           va="bottom", fontsize=8, color=blue)
    s = A["start"]
    a.annotate("", xy=(s, -0.52), xytext=(s, -1.2), arrowprops=dict(arrowstyle="-|>", color=blue, lw=2.2))
    a.text(g1 + 0.6, -1.25, f"start: window column num_accepted_tokens - 1 = {num_accepted - 1}", ha="left",
           va="center", fontsize=8, color=blue, weight="bold")
    # write window, below
    w0, w1 = A["writes"][0], A["writes"][-1]
    for t, c in enumerate(A["writes"]):
        a.annotate("", xy=(c, 0.52), xytext=(c, 1.2), arrowprops=dict(arrowstyle="-|>", color=orange, lw=2.2))
        a.text(c, 1.42, f"t={t}", ha="center", va="center", fontsize=7.5, color=orange, weight="bold")
    a.text((w0 + w1) / 2, 1.78, f"writes: last_scheduled {last_scheduled} + t (state after token t)", ha="center",
           va="center", fontsize=8, color=orange)
    if last_computed is not None:
        a.plot([last_computed], [0.62], marker="D", ms=6, mfc="none", mec=PALETTE["vermillion"], mew=1.6)
    a.set_xlim(-1.6, max(W, 12) - 0.4)
    a.set_ylim(2.1, -1.9)
    a.set_axis_off()
    ordered = sort_findings(A["findings"])
    head = f"{req_id}: " if req_id else ""
    set_title(a, title or head + ordered[0].text)
    from matplotlib.lines import Line2D

    handles = [
        legend_patch("block id in the row (0: null block)", "#DCEEF8", edge="#BBBBBB"),
        legend_patch(f"last {len(A['missing'])} column(s): not in the pre-fix buffer (/width)", PALETTE["white"],
                     "//"),
        Line2D([], [], color=blue, lw=3, label="gather window (read)"),
        Line2D([], [], marker="v", ls="none", color=blue, ms=8, label="the column the kernel starts from"),
        Line2D([], [], marker="^", ls="none", color=orange, ms=8, label="write t: the state after token t"),
    ]
    if last_computed is not None:
        handles.append(Line2D([], [], marker="D", ls="none", mfc="none", mec=PALETTE["vermillion"], mew=1.6,
                              label="pre-fix read (/gather): last_computed, one column"))
    legend(a, handles, below=True, ncol=2)
    return f


__all__ = ["analyse_spec_columns", "describe_spec_columns", "draw_spec_columns"]
