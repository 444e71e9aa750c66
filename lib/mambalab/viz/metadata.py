"""One step's attention metadata per row: lengths, ``is_prefilling``, the split, the state slots.

The decode/prefill split decides whether the Mamba builder refreshes the
persistent CUDA-graph buffers. Mamba splits with
``treat_short_extends_as_decodes=False``, so a padded row whose stale
``is_prefilling`` is True counts as a prefill, the refresh is skipped, and the
FULL decode graph replays last step's slots (#41873). This drawing puts the
row that causes it next to the consequence.

A graph buffer is *replayed* only on a step that runs a FULL decode graph
(a uniform decode batch: no live row prefills). On a PIECEWISE or eager step
with real prefills the buffer is not read at all, so a buffer that disagrees
with the block table there is no finding. A DP dummy batch (``num_reqs == 0``
here, ``num_reqs == num_reqs_padded`` in vLLM) has rows but no padding: its
rows are labelled "dummy", not "pad".
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from mambalab.constants import NULL_BLOCK_ID, PAD_SLOT_ID
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
    message,
    never_raises,
    new_axes,
    outline,
    plural,
    ranges,
    set_title,
    short_int,
    sort_findings,
    title_from,
    more_problems,
    to_numpy,
)

MAX_IDX_COLS = 8
MAX_META_ROWS = 16


def _idx_style(v: int) -> tuple[str, str | None, str]:
    if v == PAD_SLOT_ID or v < 0:
        return PALETTE["vermillion"], "xx", "black"
    if v == NULL_BLOCK_ID:
        return PALETTE["light"], None, "#666666"
    return PALETTE["sky"], None, "black"


def _as_2d(t) -> np.ndarray:
    a = np.asarray(to_numpy(t), dtype=np.int64)
    if a.ndim == 0:
        a = a.reshape(1, 1)
    if a.ndim == 1:
        a = a[:, None]
    if a.size == 0:
        return np.zeros((a.shape[0], a.shape[1] if a.ndim > 1 else 1), dtype=np.int64)
    return a.reshape(a.shape[0], -1)


def analyse_metadata(common_attn_metadata, mamba_metadata=None, *, num_reqs: int, builder=None,
                     decode_threshold: int | None = None, mode: str | None = None,
                     dummy: bool | None = None) -> dict:
    """Per-row columns and the findings (headless).

    ``mode``: the step's CUDA-graph mode ("FULL", "PIECEWISE", "NONE"), when
    the caller knows it; otherwise a FULL decode graph is assumed to run
    exactly when no live row prefills and the batch fits the captured sizes.
    Only a FULL step replays the graph buffer, so only there is a buffer that
    disagrees with the block table a finding. ``dummy``: rows past
    ``num_reqs`` are a DP dummy batch (default: ``num_reqs == 0`` and rows).
    """
    from mambalab.attention.metadata import split_decodes_and_prefills

    cm, md = common_attn_metadata, mamba_metadata
    P = int(cm.num_reqs)
    n = max(0, min(int(num_reqs), P))
    qsl = np.asarray(to_numpy(cm.query_start_loc_cpu), dtype=np.int64)[: P + 1]
    qlen = np.diff(qsl) if qsl.size >= 2 else np.zeros(0, dtype=np.int64)
    seq = np.asarray(to_numpy(cm.seq_lens_cpu), dtype=np.int64)[:P]
    pref = None if cm.is_prefilling is None else np.asarray(to_numpy(cm.is_prefilling), dtype=bool)[:P]
    F: list[Finding] = []
    if builder is not None and decode_threshold is None:
        decode_threshold = getattr(builder, "reorder_batch_threshold", None)
    thr = int(decode_threshold or 1)
    if md is not None:
        nd, np_ = int(md.num_decodes), int(md.num_prefills)
    else:
        try:
            nd, np_, _, _ = split_decodes_and_prefills(cm, thr, treat_short_extends_as_decodes=False)
        except ValueError:
            nd, np_, _, _ = split_decodes_and_prefills(cm, thr)
            F.append(Finding(INFO, "no is_prefilling in the metadata: split without it", 900))
    split = ["decode" if i < nd else "prefill" for i in range(P)]

    d = _as_2d(md.state_indices_tensor_d) if md is not None else np.zeros((0, 1), dtype=np.int64)
    bt = _as_2d(cm.block_table_tensor)
    buf = None
    refreshed = None if md is None else bool(md.cudagraph_buffers_refreshed)
    if builder is not None:
        buf = _as_2d(builder.state_indices_tensor_d)[:P]
    wcols = d.shape[1] if d.size else (buf.shape[1] if buf is not None else 1)

    # stale is_prefilling in padded rows
    if pref is not None:
        stale = [i for i in range(n, min(P, len(pref))) if pref[i]]
        counted = [i for i in stale if split[i] == "prefill"]
        if counted:
            F.append(Finding(ERROR, f"padded row{'s' if len(counted) > 1 else ''} {ranges(counted)} counted as "
                                    f"{'prefills' if len(counted) > 1 else 'a prefill'} (stale is_prefilling)", 0))
        elif stale:
            F.append(Finding(WARNING, f"padded row{'s' if len(stale) > 1 else ''} {ranges(stale)} "
                                      f"{'have' if len(stale) > 1 else 'has'} is_prefilling=True (stale)", 5))
    real_prefills = [i for i in range(n) if qlen[i] > thr or (pref is not None and i < len(pref) and pref[i])]
    graphs = builder is None or (getattr(builder, "full_cudagraph", True)
                                 and P <= getattr(builder, "decode_cudagraph_max_bs", P))
    # does this step replay a FULL decode graph (and so read the persistent buffer)?
    replays = (str(getattr(mode, "value", mode)).upper() == "FULL") if mode is not None else (
        graphs and not real_prefills and P > 0)
    is_dummy = (n == 0 and P > 0) if dummy is None else bool(dummy) and P > n
    not_refreshed = refreshed is False and not real_prefills and n > 0 and graphs and replays
    if not_refreshed:
        F.append(Finding(ERROR, "graph buffers NOT refreshed: the FULL decode graph replays the previous "
                                "step's slots", 1))
    elif refreshed is False and real_prefills:
        F.append(Finding(INFO, "graph buffers not refreshed (the batch has real prefills: no FULL decode "
                               "graph, the buffers are not read)", 800))
    elif refreshed is False:
        F.append(Finding(INFO, "graph buffers not used (no FULL decode graph for this batch)", 790))
    elif refreshed:
        F.append(Finding(INFO, "graph buffers refreshed", 810))

    minus = [i for i in range(min(P, d.shape[0])) if (d[i] < 0).any()]
    if minus:
        F.append(Finding(ERROR, f"state_indices_tensor_d row{'s' if len(minus) > 1 else ''} {ranges(minus)} "
                                f"hold{'s' if len(minus) == 1 else ''} -1 (PAD_SLOT_ID)", 2))
    mismatch: dict[int, tuple[int, int]] = {}
    if buf is not None and (not refreshed or md is None) and replays:
        w = min(buf.shape[1], bt.shape[1]) if bt.size else buf.shape[1]
        for i in range(min(P, buf.shape[0])):
            want = bt[i, :w] if (i < n and i < bt.shape[0]) else np.full(w, NULL_BLOCK_ID)
            got = buf[i, :w]
            cols = np.flatnonzero(got != want)
            if cols.size:
                c = int(cols[0])
                mismatch[i] = (int(got[c]), int(want[c]))
        for i, (got, want) in sorted(mismatch.items()):
            if i < n:
                what = f"the null block {got}" if got == NULL_BLOCK_ID else f"slot {got}"
                F.append(Finding(ERROR, f"row {i} replays {what} from the graph buffer; this step's block "
                                        f"table says {want}", 10 + i))
            elif got > 0:
                F.append(Finding(ERROR, f"padded row {i} replays slot {got} from the graph buffer (should be "
                                        f"the null block)", 30 + i))

    extra: dict[str, np.ndarray] = {}
    if md is not None:
        for name, short in (("block_idx_last_computed_token", "last\ncomp."),
                            ("block_idx_last_scheduled_token", "last\nsched.")):
            t = getattr(md, name, None)
            if t is None:
                continue
            vals = np.asarray(to_numpy(t), dtype=np.int64).reshape(-1)
            extra[short] = vals
            if refreshed and len(vals) != P:
                tail = vals[nd:]
                t2 = (f"{name} has {len(vals)} entries for {plural(P, 'row')} (sliced by num_decode_tokens: "
                      f"#41233)")
                if (tail != 0).any():
                    t2 += f"; its padded entries hold {int(tail[tail != 0][0])} (stale)"
                F.append(Finding(ERROR, t2, 40 if (tail != 0).any() else 50))
    pads = P - n
    if is_dummy:
        F.append(Finding(INFO, f"split: {plural(nd, 'decode')} + {plural(np_, 'prefill')} over a DP dummy batch "
                               f"of {plural(P, 'row')} (num_reqs == num_reqs_padded: no padding)", 700))
    else:
        F.append(Finding(INFO, f"split: {plural(nd, 'decode')} + {plural(np_, 'prefill')} over "
                               f"{plural(P, 'row')}, {pads} of them padded", 700))
    if P == 0:
        F.append(Finding(INFO, "no rows in this step", 710))
    if is_dummy:
        ok = f"DP dummy batch of {plural(P, 'row')}: {plural(nd, 'decode')}, {plural(np_, 'prefill')}"
    else:
        ok = f"{plural(min(nd, n), 'decode')} + {plural(pads, 'padded row')}, {plural(np_, 'prefill')}"
    if refreshed is not None:
        ok += (": graph buffers refreshed" if refreshed else
               ": graph buffers not refreshed (prefills: no FULL graph reads them)")
    title = title_from(F, ok, with_info=False)
    problems = [f for f in sort_findings(F) if f.level < INFO]
    if problems and not_refreshed and problems[0].order != 1:
        title = problems[0].text + ": graph buffers NOT refreshed"
        title += more_problems(len([f for f in problems[1:] if f.order != 1]))
    return dict(P=P, n=n, qlen=qlen, seq=seq, pref=pref, split=split, nd=nd, np=np_, d=d, buf=buf,
                refreshed=refreshed, mismatch=mismatch, extra=extra, findings=F, title=title, wcols=wcols,
                replays=replays, dummy=is_dummy)


def describe_metadata(common_attn_metadata, mamba_metadata=None, *, num_reqs: int, builder=None,
                      decode_threshold: int | None = None, mode: str | None = None,
                      dummy: bool | None = None) -> list[str]:
    """The findings as sentences, most severe first."""
    a = analyse_metadata(common_attn_metadata, mamba_metadata, num_reqs=num_reqs, builder=builder,
                         decode_threshold=decode_threshold, mode=mode, dummy=dummy)
    return [f.text for f in sort_findings(a["findings"])]


@never_raises("attention metadata")
def draw_metadata(
    common_attn_metadata,
    mamba_metadata=None,
    *,
    num_reqs: int,
    builder=None,
    req_ids: Sequence[str] | None = None,
    decode_threshold: int | None = None,
    mode: str | None = None,
    dummy: bool | None = None,
    title: str | None = None,
    ax=None,
    fig=None,
):
    """Per row: query length, seq length, ``is_prefilling``, decode/prefill, decode state slots.

    ``mamba_metadata`` (from ``MambaAttentionMetadataBuilder.build``) gives
    the split, ``state_indices_tensor_d`` and whether the CUDA-graph buffers
    were refreshed; without it the split is recomputed as Mamba does
    (``treat_short_extends_as_decodes=False``). ``builder`` adds the
    persistent graph buffer: what a replayed graph reads, compared with this
    step's block table, on a step that replays a FULL graph (``mode``, or
    inferred: no live row prefills). ``dummy``: see :func:`analyse_metadata`.
    """
    A = analyse_metadata(common_attn_metadata, mamba_metadata, num_reqs=num_reqs, builder=builder,
                         decode_threshold=decode_threshold, mode=mode, dummy=dummy)
    P, n = A["P"], A["n"]
    R = min(P, MAX_META_ROWS)
    # a block_idx_* buffer sliced longer than the batch (#41233 /padding) gets rows of its own
    RX = min(max([P] + [len(v) for v in A["extra"].values()]), MAX_META_ROWS) if P else 0
    f, a = new_axes(ax, fig, (FIG_WIDTH, 0.36 * (max(RX, 1) + 2.4) + 1.6))
    ttl = title or A["title"]
    if P == 0:
        message(a, "no rows: the step has no request and no padding", title=ttl)
        return f

    cols: list[tuple[str, float, float]] = []  # (header, x centre, width)
    x = 0.0

    def add(header: str, w: float) -> float:
        nonlocal x
        cols.append((header, x + w / 2, w))
        x += w
        return x - w / 2

    groups: list[tuple[str, float, float]] = []
    xq, xs, xp, xc = add("query\nlen", 1.1), add("seq\nlen", 1.1), add("is_prefilling", 1.5), add("split", 1.6)
    x += 0.5
    d, buf = A["d"], A["buf"]
    wd = min(A["wcols"], MAX_IDX_COLS)
    cw = max(1.0, 3.0 / max(wd, 1))
    refreshed = A["refreshed"]
    g0 = x
    xd = [add(f"[{j}]" if wd > 1 else "slot", cw) for j in range(wd)]
    more = f" ({wd} of {A['wcols']} columns)" if A["wcols"] > wd else ""
    groups.append(("state_indices_tensor_d" + more + ("\n= graph buffer, refreshed" if refreshed else ""), g0, x,
                   PALETTE["blue"] if refreshed else "black"))
    xe: dict[str, float] = {}
    if A["extra"]:
        x += 0.5
        g0 = x
        for k in A["extra"]:
            xe[k] = add(k, 1.3)
        groups.append(("block_idx_*", g0, x, "black"))
    xb: list[float] = []
    if buf is not None and refreshed is not True and A["replays"]:
        x += 0.5
        g0 = x
        wb = min(buf.shape[1], MAX_IDX_COLS)
        xb = [add(f"[{j}]" if wb > 1 else "slot", max(1.0, 3.0 / max(wb, 1))) for j in range(wb)]
        groups.append(("graph buffer: replayed,\nNOT refreshed" if refreshed is False else "graph buffer", g0, x,
                       PALETTE["vermillion"] if refreshed is False else "black"))
    total = x

    fs = 8.5
    qlen, seq, pref, split = A["qlen"], A["seq"], A["pref"], A["split"]
    for i in range(RX):
        padded = i >= n
        for k, xx in xe.items():
            vals = A["extra"][k]
            if i < len(vals):
                stale = i >= A["nd"] and vals[i] != 0
                cell(a, xx, i, PALETTE["orange"] if stale else PALETTE["white"], text=str(int(vals[i])), w=1.3,
                     fontsize=fs, hatch="//" if stale else None, edge=None if stale else "#CCCCCC")
            else:
                cell(a, xx, i, PALETTE["white"], text="—", w=1.3, fontsize=fs, edge="#DDDDDD", textcolor="#AAAAAA")
        if i >= R:
            continue
        cell(a, xq, i, PALETTE["white"], text=str(int(qlen[i])), w=1.1, fontsize=fs, edge="#CCCCCC",
             textcolor="#999999" if qlen[i] == 0 else "black")
        cell(a, xs, i, PALETTE["white"], text=str(int(seq[i])) if i < len(seq) else "—", w=1.1, fontsize=fs,
             edge="#CCCCCC", textcolor="#999999" if i < len(seq) and seq[i] == 0 else "black")
        if pref is None or i >= len(pref):
            cell(a, xp, i, PALETTE["white"], text="—", w=1.5, fontsize=fs, edge="#CCCCCC")
        elif pref[i]:
            cell(a, xp, i, PALETTE["orange"], text="True", w=1.5, fontsize=fs, hatch="//" if padded else None,
                 weight="bold" if padded else "normal")
        else:
            cell(a, xp, i, PALETTE["white"], text="False", w=1.5, fontsize=fs, edge="#CCCCCC", textcolor="#777777")
        if split[i] == "decode":
            cell(a, xc, i, PALETTE["sky"] if not padded else "#B9DDF3", text="decode", w=1.6, fontsize=fs)
        else:
            cell(a, xc, i, PALETTE["vermillion"], text="prefill", w=1.6, fontsize=fs, hatch="//" if padded else None,
                 textcolor="black", weight="bold" if padded else "normal")
        for j, xx in enumerate(xd):
            if i < d.shape[0] and j < d.shape[1]:
                v = int(d[i, j])
                face, hatch, tc = _idx_style(v)
                cell(a, xx, i, face, text=short_int(v), hatch=hatch, fontsize=fs, textcolor=tc, w=cw)
            else:
                cell(a, xx, i, PALETTE["white"], text="—", fontsize=fs, edge="#DDDDDD", textcolor="#AAAAAA", w=cw)
        for j, xx in enumerate(xb):
            if i < buf.shape[0]:
                v = int(buf[i, j])
                face, hatch, tc = _idx_style(v)
                wb_ = max(1.0, 3.0 / max(len(xb), 1))
                cell(a, xx, i, face, text=short_int(v), hatch=hatch, fontsize=fs, textcolor=tc, w=wb_)
                if i in A["mismatch"]:
                    outline(a, xx, i, w=wb_)
    for header, xc_, w in cols:
        a.text(xc_, -0.85, header, ha="center", va="center", fontsize=8, color="#333333", linespacing=1.0)
    for name, x0, x1, colour in groups:
        a.text((x0 + x1) / 2, -1.5, name, ha="center", va="bottom", fontsize=9, weight="bold", color=colour,
               linespacing=1.0)
        a.plot([x0 + 0.05, x1 - 0.05], [-1.4, -1.4], color="#888888", lw=0.8)
    frame, frame_ls = (PALETTE["blue"], "-.") if A["dummy"] else (PALETTE["green"], "--")
    if P > n:
        from matplotlib.patches import Rectangle

        top, bottom = n - 0.5, min(P, R) - 0.5
        a.add_patch(Rectangle((-0.05, top - 0.04), total + 0.1, bottom - top + 0.08, fill=False,
                              edgecolor=frame, linewidth=2.0, linestyle=frame_ls, zorder=5))
    a.set_xlim(-0.1, max(total, 12.0) + 0.1)
    a.set_ylim(RX - 0.45, -2.4)
    a.set_yticks(range(RX))
    labels = []
    for i in range(RX):
        if i < n:
            labels.append(f"{i}  {req_ids[i][:10]}" if req_ids and i < len(req_ids) else f"{i}  real")
        elif i < P:
            labels.append(f"{i}  {'dummy' if A['dummy'] else 'pad'}")
        else:
            labels.append(f"{i}  no row")
    a.set_yticklabels(labels, fontsize=9)
    for tick, i in zip(a.get_yticklabels(), range(RX)):
        if n <= i < P:
            tick.set_color(frame)
            tick.set_fontweight("bold")
        elif i >= P:
            tick.set_color(PALETTE["vermillion"])
    a.set_xticks([])
    a.tick_params(length=0)
    for s in a.spines.values():
        s.set_visible(False)
    set_title(a, ttl, width_in=None if ax is not None else FIG_WIDTH - 1.0)
    handles = [
        legend_patch("decode", PALETTE["sky"]),
        legend_patch("prefill", PALETTE["vermillion"]),
        legend_patch("is_prefilling=True", PALETTE["orange"]),
        legend_patch("stale value past the decodes", PALETTE["orange"], "//"),
        legend_patch("null block 0", PALETTE["light"]),
        legend_patch("DP dummy batch (no padding)" if A["dummy"] else "padded rows (CUDA graph)", "none",
                     edge=frame, lw=2.0, linestyle=frame_ls),
    ]
    if A["mismatch"]:
        handles.append(legend_patch("buffer ≠ this step's block table", "none", edge="black", lw=2.4))
    if (d < 0).any() or (buf is not None and (buf < 0).any()):
        handles.append(legend_patch("-1 (PAD_SLOT_ID)", PALETTE["vermillion"], "xx"))
    legend(a, handles, below=True, ncol=4)
    if P > R:
        a.text(0, RX - 0.45, f"rows {R}–{P - 1} not shown", ha="left", va="top", fontsize=8, color="#555555",
               style="italic")
    return f
