"""The block table as a picture: CPU mirror and device copy side by side, every wrong cell marked.

What a kernel reads is the *device* copy; what the scheduler edits is the CPU
mirror; ``commit_block_table(num_reqs)`` copies only the first ``num_reqs``
rows across. Three of the catalogue's bugs are visible right here:

* ``-1`` in a padded row (#35431): PAD_SLOT_ID where a block id belongs;
* a stale row (#37728): a row that no live request owns still points at a
  block that was freed or now belongs to another request, and a dummy run
  (``num_reqs == num_reqs_padded``) reads it;
* a DP dummy batch is not padding: its rows are rows of their own
  (``num_reqs == num_reqs_padded``, nothing for the padded-row null fill to
  mask), so they are labelled "dummy", never "pad" (a step with rows but no
  request, ``num_reqs=0 < num_reqs_padded``, can only be a dummy run);
* a device row that disagrees with the CPU mirror (a missing commit).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
from matplotlib.patches import Rectangle

from mambalab.constants import NULL_BLOCK_ID, PAD_SLOT_ID
from mambalab.viz._common import (
    ERROR,
    FIG_WIDTH,
    INFO,
    MAX_COLS,
    MAX_ROWS,
    PALETTE,
    WARNING,
    Finding,
    axes_width_in,
    cell,
    fontsize_for,
    legend,
    legend_patch,
    message,
    never_raises,
    new_axes,
    outline,
    plural,
    ranges,
    rows_phrase,
    set_title,
    short_int,
    sort_findings,
    title_from,
    to_numpy,
)

LIVE, NULL, MINUS, INVALID, FREED, FOREIGN, LEFTOVER, TAIL = (
    "live", "null", "minus_one", "invalid", "freed", "foreign", "leftover", "tail",
)
STALE_KINDS = (FREED, FOREIGN, LEFTOVER)

# category -> (legend label, face colour, hatch, text colour)
STYLE: dict[str, tuple[str, str, str | None, str]] = {
    LIVE: ("live: this row's request's block", PALETTE["sky"], None, "black"),
    NULL: ("null block 0 (no request's block: skipped)", PALETTE["light"], None, "#666666"),
    MINUS: ("-1 = PAD_SLOT_ID: illegal in a block table", PALETTE["vermillion"], "xx", "black"),
    INVALID: ("block id outside the pool", "#444444", "xx", "black"),
    FREED: ("stale: points at a freed block", PALETTE["orange"], "////", "black"),
    FOREIGN: ("stale: another request's block", PALETTE["purple"], "\\\\\\\\", "black"),
    LEFTOVER: ("stale: left over, no live request here", PALETTE["yellow"], "..", "black"),
    TAIL: ("past the row's block count (unused)", PALETTE["white"], None, "#888888"),
}


@dataclass
class BlockTableView:
    """What :func:`describe_block_table` found: per-cell categories and the sentences."""

    cpu: np.ndarray
    gpu: np.ndarray
    cat_cpu: np.ndarray
    cat_gpu: np.ndarray
    row_kind: list[str]
    row_label: list[str]
    num_reqs: int
    num_reqs_padded: int
    findings: list[Finding] = field(default_factory=list)
    rows_needed: int = 0
    cols_needed: int = 0
    # per row: None (same), "error" (read this step, not a padding fill), "filled" (padding), "dormant"
    diff_kind: list[str | None] = field(default_factory=list)
    dummy: bool = False  # rows num_reqs..num_reqs_padded are a DP dummy batch, not CUDA-graph padding

    @property
    def sentences(self) -> list[str]:
        return [f.text for f in sort_findings(self.findings)]

    @property
    def title(self) -> str:
        return title_from(self.findings, "all rows consistent")


def _resolve(block_table, group: int, req_ids):
    """Accept a BlockTable, a MultiGroupBlockTable (``group``) or an InputBatch."""
    row_ids: dict[int, str] = {}
    if hasattr(block_table, "req_id_to_index"):  # InputBatch
        row_ids = {int(r): str(q) for q, r in block_table.req_id_to_index.items()}
        block_table = block_table.block_table
    if hasattr(block_table, "block_tables"):  # MultiGroupBlockTable
        tables = block_table.block_tables
        block_table = tables[max(0, min(int(group), len(tables) - 1))]
    if req_ids is not None:
        row_ids = {i: str(q) for i, q in enumerate(req_ids) if q is not None}
    return block_table, row_ids


def analyse_block_table(
    block_table,
    *,
    num_reqs: int,
    num_reqs_padded: int | None = None,
    req_ids: Sequence[str | None] | None = None,
    pool=None,
    owners: Mapping[int, str] | None = None,
    group: int = 0,
    dummy: bool | None = None,
) -> BlockTableView:
    """Classify every cell of both copies and phrase the findings (headless).

    ``dummy``: the rows past ``num_reqs`` are an idle DP rank's dummy batch
    (``_dummy_run``: ``num_reqs == num_reqs_padded``, no padding), not
    CUDA-graph padding. ``None``: a dummy batch when ``num_reqs == 0`` and
    ``num_reqs_padded > 0`` (no real step has rows and no request).
    """
    bt, row_ids = _resolve(block_table, group, req_ids)
    cpu = np.asarray(to_numpy(bt.block_table.np if hasattr(bt.block_table, "np") else bt.block_table.cpu),
                     dtype=np.int64)
    gpu = np.asarray(to_numpy(bt.block_table.gpu), dtype=np.int64)
    if cpu.ndim != 2:
        cpu = cpu.reshape(cpu.shape[0] if cpu.ndim else 0, -1)
    gpu = gpu.reshape(cpu.shape) if gpu.size == cpu.size else np.zeros_like(cpu)
    R, C = cpu.shape
    counts = np.asarray(getattr(bt, "num_blocks_per_row", np.full(R, C)), dtype=np.int64)
    findings: list[Finding] = []

    n = int(max(0, num_reqs))
    p = n if num_reqs_padded is None else int(num_reqs_padded)
    if n > R or p > R or p < n:
        findings.append(Finding(WARNING, f"num_reqs={num_reqs}, num_reqs_padded={num_reqs_padded} do not "
                                         f"fit a table of {R} rows: clamped", 9000))
    n = min(n, R)
    p = max(n, min(p, R))
    is_dummy = (n == 0 and p > 0) if dummy is None else bool(dummy) and p > n
    pad_word = "dummy" if is_dummy else "pad"  # the row label of rows n..p

    limit = None
    if pool is not None:
        limit = int(pool.num_blocks)
    elif getattr(bt, "num_blocks", None):
        limit = int(bt.num_blocks)

    def owners_of(b: int) -> list[str] | None:
        if owners is not None and b in owners:
            return [str(owners[b])]
        if pool is not None:
            return ["another holder" if o is None else str(o) for o in pool.owners_of(b)]
        if owners is not None:
            return []
        return None

    def is_free(b: int) -> bool | None:
        if pool is not None:
            return not pool.is_allocated(b)
        if owners is not None:
            return b not in owners
        return None

    def classify(v: int, r: int, c: int) -> str:
        if v == PAD_SLOT_ID:
            return MINUS
        if v < 0 or (limit is not None and v >= limit):
            return INVALID
        if v == NULL_BLOCK_ID:
            return NULL
        if r < n and c >= counts[r]:
            return TAIL
        if is_free(v):
            return FREED
        own = owners_of(v)
        if r < n:
            rid = row_ids.get(r)
            if own and rid is not None and rid not in own:
                return FOREIGN
            return LIVE
        if own:
            return FOREIGN
        return LEFTOVER

    cat_cpu = np.full((R, C), NULL, dtype=object)  # 0 is the null block wherever it sits
    cat_gpu = np.full((R, C), NULL, dtype=object)
    for vals, cats in ((cpu, cat_cpu), (gpu, cat_gpu)):
        for r, c in zip(*np.nonzero(vals != NULL_BLOCK_ID)):
            cats[r, c] = classify(int(vals[r, c]), int(r), int(c))

    def why(cat: str, b: int) -> str:
        if cat == FREED:
            return "freed"
        if cat == FOREIGN:
            own = owners_of(b) or ["another request"]
            return f"owned by {own[0]}"
        return "left over from a request that left this row"

    row_kind: list[str] = []
    row_label: list[str] = []
    minus_read: list[int] = []
    minus_dormant: list[int] = []
    null_filled: list[int] = []
    diff_dormant: list[int] = []
    diff_kind: list[str | None] = []
    holds = (cpu != NULL_BLOCK_ID).any(axis=1) | (gpu != NULL_BLOCK_ID).any(axis=1)
    for r in range(R):
        if r >= p and not holds[r]:  # an all-zero row past the batch: nothing to say, nothing to draw
            row_kind.append("empty")
            row_label.append("empty")
            diff_kind.append(None)
            continue
        live = r < n
        kind = "live" if live else (pad_word if r < p else "empty")
        g, k = cat_gpu[r], cat_cpu[r]
        read = r < p
        if not live and any(x in STALE_KINDS + (MINUS, INVALID) for x in list(g) + list(k)):
            kind = "stale" if r >= p else pad_word
        if kind == pad_word and any(x in STALE_KINDS for x in g):
            kind = "stale"
        row_kind.append(kind)
        rid = row_ids.get(r)
        row_label.append(rid if live and rid is not None else ("live" if live else
                         (pad_word if r < p and kind != "stale" else kind)))
        who = f"row {r}" + (f" ({rid})" if live and rid is not None else "")

        # -1 and out-of-pool ids
        if MINUS in list(g):
            (minus_read if read else minus_dormant).append(r)
        for side, cats, vals in (("device", g, gpu[r]), ("CPU", k, cpu[r])):
            bad = [int(vals[c]) for c in range(C) if cats[c] == INVALID]
            if bad:
                findings.append(Finding(ERROR if read else WARNING,
                                        f"{side} {who} points at block {bad[0]}, outside the pool"
                                        + (f" of {limit} blocks" if limit else ""), 1000 + r))
        # stale entries
        stale_g = [(int(gpu[r, c]), g[c]) for c in range(C) if g[c] in STALE_KINDS]
        stale_k = [(int(cpu[r, c]), k[c]) for c in range(C) if k[c] in STALE_KINDS]
        if live:
            for b, cat in stale_g or stale_k:
                findings.append(Finding(ERROR, f"{who} points at block {b}, {why(cat, b)}", 3000 + r))
                break
        elif stale_g or stale_k:
            b, cat = (stale_g or stale_k)[0]
            more = len(stale_g or stale_k) - 1
            text = f"row {r} is stale: it points at block {b}, {why(cat, b)}"
            if more:
                text += f" (+{plural(more, 'more block')})"
            if stale_g and not stale_k:
                text += " (device copy; the CPU row was cleared)"
            elif stale_k and not stale_g:
                text += " (CPU mirror only; a commit would copy it to the device)"
            if read and stale_g:
                who_reads = "the dummy batch" if is_dummy else "a padded row"
                findings.append(Finding(ERROR, text + f": {who_reads} reads and writes it this step",
                                        2000 + r))
            else:
                findings.append(Finding(WARNING, text + ("" if read else ": not read this step, a dummy run could"),
                                        5000 + r))
        # device vs CPU
        differs = bool((gpu[r] != cpu[r]).any())
        diff_kind.append(None)
        if differs:
            filled = all(x in (NULL, MINUS) for x in g)
            diff_kind[r] = "error" if live or (read and not filled) else ("filled" if read else "dormant")
            if live:
                cols = [c for c in range(C) if gpu[r, c] != cpu[r, c]]
                findings.append(Finding(ERROR, f"device row {r} ≠ CPU row {r} (not committed): the kernel "
                                               f"reads block {int(gpu[r, cols[0]])}, the CPU mirror says "
                                               f"{int(cpu[r, cols[0]])}", 4000 + r))
            elif read and not filled:
                findings.append(Finding(ERROR, f"device row {r} ≠ CPU row {r} (not committed)", 4000 + r))
            elif read:
                null_filled.append(r)
            else:
                diff_dormant.append(r)

    if minus_read:
        findings.append(Finding(ERROR, f"{rows_phrase(minus_read)} hold{'s' if len(minus_read) == 1 else ''} -1 "
                                       f"(PAD_SLOT_ID) on the device: a kernel that trusts it touches memory "
                                       f"before the state pool", min(minus_read)))
    if minus_dormant:
        findings.append(Finding(WARNING, f"device {rows_phrase(minus_dormant)} hold -1 (PAD_SLOT_ID), not read "
                                         f"this step", 6000 + min(minus_dormant)))
    pad_rows = list(range(n, p))
    if pad_rows:
        vals = {int(v) for r in pad_rows for v in gpu[r]}
        how = ("the null block 0" if vals == {NULL_BLOCK_ID} else
               "-1" if vals == {PAD_SLOT_ID} else "stale block ids" if vals - {0, -1} else "0 and -1")
        if is_dummy:
            findings.append(Finding(INFO, f"{rows_phrase(pad_rows)} {'is' if len(pad_rows) == 1 else 'are'} "
                                          f"the DP dummy batch, holding {how} on the device; num_reqs == "
                                          f"num_reqs_padded: no padding to mask", 7000))
        else:
            findings.append(Finding(INFO, f"{rows_phrase(pad_rows)} {'is' if len(pad_rows) == 1 else 'are'} "
                                          f"CUDA-graph padding, holding {how} on the device", 7000))
    if null_filled:
        if is_dummy:
            findings.append(Finding(INFO, f"dummy-batch device {rows_phrase(null_filled)} hold only 0 / -1; the "
                                          f"CPU mirror keeps older ids there (not read)", 7100))
        else:
            findings.append(Finding(INFO, f"padded device {rows_phrase(null_filled)} overwritten with the padding "
                                          f"value; the CPU mirror keeps older ids there (not read)", 7100))
    if diff_dormant:
        findings.append(Finding(INFO, f"device {rows_phrase(diff_dormant)} differ from the CPU mirror (not read "
                                      f"this step)", 7200))
    if n == 0 and p == 0:
        findings.append(Finding(INFO, "no request in this step", 7300))

    nonzero = np.flatnonzero(holds)
    rows_needed = max(p, int(nonzero.max()) + 1 if nonzero.size else 0)
    used = (cpu[:rows_needed] != 0) | (gpu[:rows_needed] != 0)
    used_cols = np.flatnonzero(used.any(axis=0))
    cols_needed = max(int(used_cols.max()) + 1 if used_cols.size else 0,
                      int(counts[:n].max()) if n else 0, 1)
    return BlockTableView(cpu, gpu, cat_cpu, cat_gpu, row_kind, row_label, n, p, findings,
                          rows_needed, min(cols_needed, C), diff_kind, is_dummy)


def describe_block_table(block_table, *, num_reqs: int, num_reqs_padded: int | None = None,
                         req_ids: Sequence[str | None] | None = None, pool=None,
                         owners: Mapping[int, str] | None = None, group: int = 0,
                         dummy: bool | None = None) -> list[str]:
    """The findings as sentences, most severe first (the drawing's title uses the first)."""
    return analyse_block_table(block_table, num_reqs=num_reqs, num_reqs_padded=num_reqs_padded,
                               req_ids=req_ids, pool=pool, owners=owners, group=group, dummy=dummy).sentences


@never_raises("block table")
def draw_block_table(
    block_table,
    *,
    num_reqs: int,
    num_reqs_padded: int | None = None,
    req_ids: Sequence[str | None] | None = None,
    pool=None,
    owners: Mapping[int, str] | None = None,
    group: int = 0,
    dummy: bool | None = None,
    title: str | None = None,
    ax=None,
    fig=None,
):
    """Rows × columns of block ids, CPU mirror | device copy, with what is wrong in the title.

    ``block_table``: a ``BlockTable`` (or a ``MultiGroupBlockTable``, drawn for
    ``group``, or an ``InputBatch``, whose request ids label the rows).
    ``num_reqs`` live rows, then padded rows up to ``num_reqs_padded``; rows
    past those are shown while they still hold block ids. ``pool`` (a
    ``BlockPool``) or ``owners`` (block id → request id) tell freed and
    foreign blocks apart. ``dummy``: the rows past ``num_reqs`` are a DP
    dummy batch, framed and labelled as such, not as padding (default: when
    ``num_reqs == 0 < num_reqs_padded``). Returns the ``Figure``.
    """
    v = analyse_block_table(block_table, num_reqs=num_reqs, num_reqs_padded=num_reqs_padded,
                            req_ids=req_ids, pool=pool, owners=owners, group=group, dummy=dummy)
    rows = _rows_to_show(v)
    R_show = len(rows)
    ncols = min(v.cols_needed, MAX_COLS)
    cpu, gpu = v.cpu[rows, :ncols], v.gpu[rows, :ncols]
    cat_cpu, cat_gpu = v.cat_cpu[rows, :ncols], v.cat_gpu[rows, :ncols]
    present = set(cat_cpu.ravel()) | set(cat_gpu.ravel())
    handles = [legend_patch(STYLE[k][0], STYLE[k][1], STYLE[k][2])
               for k in (LIVE, NULL, MINUS, INVALID, FREED, FOREIGN, LEFTOVER, TAIL)
               if k in present or k in (LIVE, NULL)]
    diff = gpu != cpu
    kinds = {v.diff_kind[r] for i, r in enumerate(rows) if diff[i].any()}
    if "error" in kinds:
        handles.append(legend_patch("device ≠ CPU mirror (not committed)", "none", edge="black", lw=2.4))
    if "dormant" in kinds:
        handles.append(legend_patch("device ≠ CPU, row not read this step", "none", edge="black", lw=1.4,
                                    linestyle=":"))
    padded = [i for i, r in enumerate(rows) if v.num_reqs <= r < v.num_reqs_padded]
    frame = PALETTE["blue"] if v.dummy else PALETTE["green"]
    frame_ls = "-." if v.dummy else "--"
    if padded:
        handles.append(legend_patch("DP dummy batch (no padding: num_reqs == num_reqs_padded)" if v.dummy
                                    else "padded rows (CUDA graph)", "none", edge=frame, lw=2.0,
                                    linestyle=frame_ls))
    below = ncols > 7
    slot = max(float(ncols), 3.4)
    gap = 1.0
    W = 2 * slot + gap
    if below:
        width = FIG_WIDTH
        height = 0.36 * (max(R_show, 1) + 2.3) + 1.2 + 0.27 * -(-len(handles) // 3)
    else:
        width = 9.0
        height = max(0.36 * (max(R_show, 1) + 2.3) + 1.2, 1.5 + 0.3 * len(handles))
    f, a = new_axes(ax, fig, (width, height))
    title = title or v.title
    if R_show == 0:
        message(a, "nothing to draw: no live request, no padded row and no leftover block id in any row",
                title=title)
        return f

    fs = fontsize_for(ncols)
    plot_in = width - 1.6 - (0 if below else 2.9) if ax is None else axes_width_in(a, width)
    unit_pt = plot_in * 72 / W
    for side, x0, vals, cats in (("cpu", 0.0, cpu, cat_cpu), ("gpu", slot + gap, gpu, cat_gpu)):
        for i, r in enumerate(rows):
            for c in range(ncols):
                cat = cats[i, c]
                _, face, hatch, tcol = STYLE[cat]
                cell(a, x0 + c, i, face, text=short_int(vals[i, c]), hatch=hatch, fontsize=fs,
                     textcolor=tcol, weight="bold" if cat in (MINUS, INVALID) else "normal", fit_pt=unit_pt)
                if side == "gpu" and diff[i, c] and v.diff_kind[r] == "error":
                    outline(a, x0 + c, i)
                elif side == "gpu" and diff[i, c] and v.diff_kind[r] == "dormant":
                    outline(a, x0 + c, i, lw=1.4, linestyle=":")
        for c in range(ncols):
            a.text(x0 + c, -0.75, str(c), ha="center", va="center", fontsize=max(fs - 1.5, 6),
                   color="#666666")
        # padded rows: one dashed frame per run of consecutive displayed rows
        for run in _runs(padded):
            top, bottom = run[0] - 0.5, run[-1] + 0.5
            a.add_artist(Rectangle((x0 - 0.56, top - 0.04), ncols + 0.12, bottom - top + 0.08, fill=False,
                                   edgecolor=frame, linewidth=2.0, linestyle=frame_ls, zorder=5))
    for i in range(1, R_show):  # rows left out between two displayed rows
        if rows[i] != rows[i - 1] + 1:
            a.axhline(i - 0.5, color="#777777", lw=1.0, ls=(0, (1, 2)), zorder=6)
    a.text(-0.5, -1.65, "CPU mirror\n(block_table.np)", ha="left", va="center", fontsize=9.5,
           weight="bold", linespacing=1.1)
    a.text(slot + gap - 0.5, -1.65, "device copy: kernels read it\n(block_table.gpu)", ha="left",
           va="center", fontsize=9.5, weight="bold", linespacing=1.1)
    a.set_xlim(-0.6, W - 0.4)
    a.set_ylim(R_show - 0.45, -2.3)
    a.set_yticks(range(R_show))
    colours = {"live": "black", "pad": PALETTE["green"], "dummy": PALETTE["blue"], "stale": PALETTE["vermillion"],
               "empty": "#888888"}
    a.set_yticklabels([f"{r}  {v.row_label[r][:12]}" for r in rows], fontsize=9)
    for tick, r in zip(a.get_yticklabels(), rows):
        tick.set_color(colours.get(v.row_kind[r], "black"))
        if v.row_kind[r] in ("stale", "pad", "dummy"):
            tick.set_fontweight("bold")
    a.set_xticks([])
    a.tick_params(length=0)
    for sp in a.spines.values():
        sp.set_visible(False)
    set_title(a, title, width_in=None if ax is not None else width - 1.2)
    legend(a, handles, below=below, ncol=3)
    notes = []
    if v.rows_needed > R_show:
        hidden = sorted(set(range(v.rows_needed)) - set(rows))
        notes.append(f"{plural(len(hidden), 'row')} not shown ({ranges(hidden)}; dotted line)")
    if v.cols_needed > ncols:
        notes.append(f"columns {ncols}–{v.cols_needed - 1} not shown")
    if notes:
        a.text(-0.5, R_show - 0.45, "; ".join(notes), ha="left", va="top", fontsize=8, color="#555555",
               style="italic")
    return f


def _runs(idx: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for i in idx:
        if out and i == out[-1][-1] + 1:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _rows_to_show(v: BlockTableView) -> list[int]:
    """All rows that matter, or (past MAX_ROWS) the rows with something wrong first, then the first rows."""
    n = v.rows_needed
    if n <= MAX_ROWS:
        return list(range(n))
    bad = {FREED, FOREIGN, LEFTOVER, MINUS, INVALID}
    flagged = [r for r in range(n)
               if v.row_kind[r] in ("stale", "pad", "dummy") or v.diff_kind[r] == "error"
               or bad & (set(v.cat_cpu[r]) | set(v.cat_gpu[r]))]
    keep = flagged[: MAX_ROWS // 2]
    for r in range(n):
        if len(keep) >= MAX_ROWS:
            break
        if r not in keep:
            keep.append(r)
    return sorted(keep)
