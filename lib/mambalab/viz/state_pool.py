"""The state pool as a strip of slots: who read and wrote each one this step, and what is wrong.

One cell per slot, coloured by the size of its state (L2 norm, with a colour
bar), with the rows that loaded it above (▼) and the rows that stored it below
(▲). The null block must stay zero and untouched: when padded rows write it
(#39064, guards that skip only ``< 0``) it turns non-zero and the title says
which rows did. NaN-poisoned slots (freed blocks) are hatched, so a stale read
is visible. Given the pool ``before`` the step, the cells show what changed
(before → after, coloured by the size of the change); given each kernel row's
request, a store by a row into a slot it does not own (another request's
block, a free one; any store by a padded or dummy row) gets a frame of its own.
Each mark has one meaning: the black frame is "differs from the reference"
(the requests run alone), never "changed this step".
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import ListedColormap, Normalize, to_hex

from mambalab.constants import NULL_BLOCK_ID
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
    ranges,
    rows_phrase,
    set_title,
    sort_findings,
    title_from,
    to_numpy,
)

PER_LINE = 16  # slots per line when the pool does not fit one line
MAX_SLOTS = 64  # slots drawn (a note says how many more)
_CMAP = colormaps["cividis"]
_STATE = ListedColormap(_CMAP(np.linspace(0.25, 1.0, 256)), name="state")  # zero is drawn white, apart
_CHANGE = ListedColormap(colormaps["YlOrBr"](np.linspace(0.2, 0.95, 256)), name="change")
_WRITE = "#B35900"  # the ▲ marks: a dark orange, readable on white


def _pools(x: Any) -> list[np.ndarray]:
    """The pool(s) behind ``x``: a tensor/array, a mapping of them, or a ModelState (``.pools``)."""
    if x is None:
        return []
    if hasattr(x, "pools") and isinstance(x.pools, Mapping):
        x = x.pools
    if isinstance(x, Mapping):
        return [np.asarray(to_numpy(v), dtype=np.float64) for v in x.values()]
    return [np.asarray(to_numpy(x), dtype=np.float64)]


def slot_summary(x: Any, summary: str = "norm") -> tuple[np.ndarray, np.ndarray]:
    """``(value per slot, NaN flag per slot)``: L2 norm (or first element) over everything in the slot."""
    pools = _pools(x)
    if not pools:
        return np.zeros(0), np.zeros(0, dtype=bool)
    n = min(p.shape[0] if p.ndim else 1 for p in pools)
    vals = np.zeros(n)
    nan = np.zeros(n, dtype=bool)
    for p in pools:
        flat = p.reshape(p.shape[0], int(np.prod(p.shape[1:])))[:n] if p.ndim >= 1 else p.reshape(1, 1)
        if flat.shape[1] == 0:
            continue
        bad = ~np.isfinite(flat).all(axis=1)
        nan |= bad
        if summary == "first" and flat.shape[1]:
            vals = vals + np.nan_to_num(flat[:, 0])
        elif p.ndim == 1:
            vals = vals + np.abs(np.nan_to_num(flat[:, 0]))
        else:
            vals = np.sqrt(vals ** 2 + (np.nan_to_num(flat) ** 2).sum(axis=1))
    return vals, nan


RTOL, ATOL = 1e-4, 1e-5  # kernel vs pure-torch reference in float32


def _differs(x: Any, reference: Any) -> np.ndarray | None:
    """Per slot: do the contents differ from ``reference`` beyond float32 tolerance (NaN equals NaN)?"""
    a, b = _pools(x), _pools(reference)
    if not a or not b or len(a) != len(b):
        return None
    n = min(p.shape[0] for p in a + b)
    out = np.zeros(n, dtype=bool)
    for p, q in zip(a, b):
        if p.shape[1:] != q.shape[1:]:
            return None
        k = int(np.prod(p.shape[1:]))
        p2, q2 = p[:n].reshape(n, k), q[:n].reshape(n, k)
        same = np.isclose(p2, q2, rtol=RTOL, atol=ATOL) | (np.isnan(p2) & np.isnan(q2))
        out |= ~same.all(axis=1)
    return out


def _by_slot(access: Mapping[int, Any] | None) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for row, slots in (access or {}).items():
        if isinstance(slots, (int, np.integer)):
            slots = [slots]
        for s in slots:
            out.setdefault(int(s), set()).add(int(row))
    return out


def _change(pool: Any, before: Any, n: int) -> np.ndarray | None:
    """Per slot: the L2 norm of ``pool - before`` (inf where a slot turned NaN or stopped being NaN)."""
    a, b = _pools(pool), _pools(before)
    if not a or not b or len(a) != len(b):
        return None
    out = np.zeros(n)
    for p, q in zip(a, b):
        if p.shape[1:] != q.shape[1:] or min(p.shape[0], q.shape[0]) < n:
            return None
        k = int(np.prod(p.shape[1:]))
        p2, q2 = p[:n].reshape(n, k), q[:n].reshape(n, k)
        both_nan = np.isnan(p2) & np.isnan(q2)
        d = np.where(both_nan, 0.0, p2 - q2)
        out = np.sqrt(out ** 2 + (np.nan_to_num(d, nan=0.0) ** 2).sum(axis=1))
        out[(np.isnan(d) & ~both_nan).any(axis=1)] = np.inf
    return out


def _row_request(row_requests, row: int) -> str | None:
    if row_requests is None:
        return None
    if isinstance(row_requests, Mapping):
        return row_requests.get(row)
    return row_requests[row] if 0 <= row < len(row_requests) else None


def analyse_state_pool(pool: Any, *, reads=None, writes=None, reference=None, owners=None,
                       null_block_id: int = NULL_BLOCK_ID, summary: str = "norm", before: Any = None,
                       before_label: str = "before the step", row_requests=None,
                       slot_notes: Mapping[int, str] | None = None,
                       row_blocks: Mapping[int, Any] | None = None) -> dict:
    """Per-slot values and flags plus the findings (headless).

    ``before``: the pool before the step (the change per slot is measured against it);
    ``row_requests``: each kernel row's request id (``{row: id}`` or a list; a row not in it is a
    padded or dummy row, which owns no slot): a store into a slot the row does not own is named;
    ``slot_notes``: what an unowned slot is (e.g. "free, kept in the prefix cache");
    ``row_blocks``: each row's own blocks this step (its block-table row), which decide what a
    row owns; without it, ``owners`` after the step decides.
    """
    vals, nan = slot_summary(pool, summary)
    N = len(vals)
    change = _change(pool, before, N) if before is not None else None
    diff = _differs(pool, reference) if reference is not None else None
    if diff is None and reference is not None:
        rv, rn = slot_summary(reference, summary)
        if len(rv) == N:
            diff = ~(np.isclose(rv, vals, rtol=RTOL, atol=ATOL) | (rn & nan))
    r_by, w_by = _by_slot(reads), _by_slot(writes)
    F: list[Finding] = []
    nb = int(null_block_id)
    null_in = 0 <= nb < N
    null_dirty = null_in and (nan[nb] or vals[nb] != 0)
    if nb in w_by:
        t = f"null block {nb} was written by {rows_phrase(w_by[nb])}"
        if len(w_by[nb]) > 1:
            t += " (they race on it)"
        if null_dirty:
            t += ": it is no longer zero"
        F.append(Finding(ERROR, t, 0))
    elif null_dirty:
        F.append(Finding(ERROR, f"null block {nb} is not zero (|state| = {vals[nb]:.3g}): something wrote it", 0))
    if nb in r_by:
        F.append(Finding(ERROR, f"{rows_phrase(r_by[nb])} read null block {nb} as initial state", 10))
    outside = sorted(s for s in set(r_by) | set(w_by) if not 0 <= s < N)
    for s in outside:
        who = sorted(r_by.get(s, set()) | w_by.get(s, set()))
        verb = "read and wrote" if s in r_by and s in w_by else ("read" if s in r_by else "wrote")
        F.append(Finding(ERROR, f"{rows_phrase(who)} {verb} slot {s}, outside the pool of {N} slots", -100 + s))

    def whose(s: int) -> str:
        return f" ({owners[s]}'s)" if owners and s in owners else ""

    for s in sorted(r_by):
        if 0 <= s < N and s != nb and nan[s]:
            # a row that read its own block read it before the block was freed (and poisoned) after the step
            rows = {r for r in r_by[s] if row_blocks is None or s not in row_blocks.get(r, ())}
            if rows:
                F.append(Finding(ERROR, f"{rows_phrase(rows)} read slot {s}{whose(s)}, which is NaN (a freed, "
                                        f"poisoned block)", 100 + s))
    for s in sorted(w_by):
        if 0 <= s < N and s != nb and len(w_by[s]) > 1:
            F.append(Finding(WARNING, f"slot {s}{whose(s)} was written by {rows_phrase(w_by[s])} (race)", 200 + s))
    foreign: dict[int, set[int]] = {}  # slot -> rows that stored it without owning it
    if row_requests is not None:
        for sl in sorted(w_by):
            if not 0 <= sl < N or sl == nb:
                continue
            for r in sorted(w_by[sl]):
                req = _row_request(row_requests, r)
                if row_blocks is not None:  # the blocks the step gave the row (its block-table row)
                    own = req is not None and sl in row_blocks.get(r, ())
                else:  # who owns the slot now (a request that finished in this step owns nothing)
                    own = req is not None and (owners or {}).get(sl) == req
                if not own:
                    foreign.setdefault(sl, set()).add(r)
                    who = f"row {r} ({req})" if req is not None else f"row {r} (no request)"
                    whose_ = f"{owners[sl]}'s block" if owners and sl in owners else \
                        (slot_notes or {}).get(sl, "free")
                    F.append(Finding(ERROR, f"{who} stored slot {sl} ({whose_}): not its own", 50 + sl))
    if row_requests is not None and w_by and not foreign:
        F.append(Finding(INFO, "every row stored only its own request's slots", 345))
    if change is not None:
        changed = [int(x) for x in np.flatnonzero(change > 0)]
        if changed:
            F.append(Finding(INFO, f"slot{'s' if len(changed) > 1 else ''} {ranges(changed)} changed "
                                   f"{before_label}", 350))
        else:
            F.append(Finding(INFO, f"no slot changed {before_label}", 350))
    if diff is not None and diff.any():
        ds = [int(s) for s in np.flatnonzero(diff)]
        unwritten = [s for s in ds if s not in w_by] if (reads is not None or writes is not None) else []
        t = f"slot{'s' if len(ds) > 1 else ''} {ranges(ds)} differ{'s' if len(ds) == 1 else ''} from the reference"
        if unwritten:
            t += f" (no recorded write to {ranges(unwritten)})"
        F.append(Finding(WARNING, t, 300))
    nans = [int(s) for s in np.flatnonzero(nan) if s != nb]
    if nans:
        F.append(Finding(INFO, f"slot{'s' if len(nans) > 1 else ''} {ranges(nans)} "
                               f"{'are' if len(nans) > 1 else 'is'} NaN-poisoned: freed", 400))
    if null_in and not null_dirty and nb not in w_by:
        F.append(Finding(INFO, f"null block {nb} is zero", 410))
    before_vals = slot_summary(before, summary)[0] if before is not None else None
    return dict(vals=vals, nan=nan, diff=diff, reads=r_by, writes=w_by, findings=F, N=N, outside=outside,
                change=change, foreign=foreign, before_vals=before_vals)


def describe_state_pool(pool: Any, *, reads=None, writes=None, reference=None, owners=None,
                        null_block_id: int = NULL_BLOCK_ID, summary: str = "norm", **kw) -> list[str]:
    """The findings as sentences, most severe first (the drawing's title uses the first)."""
    a = analyse_state_pool(pool, reads=reads, writes=writes, reference=reference, owners=owners,
                           null_block_id=null_block_id, summary=summary, **kw)
    return [f.text for f in sort_findings(a["findings"])]


def _who(rows: set[int]) -> str:
    txt = ranges(rows).replace(" ", "")
    return txt if len(txt) <= 6 else f"×{len(rows)}"


@never_raises("state pool")
def draw_state_pool(
    pool_tensor_or_slot_values: Any,
    *,
    reads: Mapping[int, Any] | None = None,
    writes: Mapping[int, Any] | None = None,
    reference: Any = None,
    owners: Mapping[int, str] | None = None,
    null_block_id: int = NULL_BLOCK_ID,
    summary: str = "norm",
    name: str = "state",
    title: str | None = None,
    before: Any = None,
    before_label: str = "before the step",
    row_requests=None,
    slot_notes: Mapping[int, str] | None = None,
    row_blocks: Mapping[int, Any] | None = None,
    ax=None,
    fig=None,
):
    """One cell per slot: its size, its readers (▼ rows) and writers (▲ rows), NaN and null-block flags.

    ``pool_tensor_or_slot_values``: a ``(slots, ...)`` tensor/array, a 1-D
    array of per-slot values, a mapping of pools or a ``ModelState`` (all
    pools summed per slot). ``reads``/``writes``: ``{row: slots}`` (e.g.
    ``AccessLog.slots("state", "load")``). ``reference``: the same kind of
    object, the requests run alone; differing slots get a black frame.
    ``owners``: slot → request id. ``before``: the pool before the step;
    each cell then shows ``before→after`` and is coloured by the size of the
    change (``before_label`` names it, e.g. "since step 2"). ``row_requests``:
    kernel row → request id; a store into a slot the row does not own gets a
    dashed purple frame (``row_blocks``: each row's blocks this step, what it
    owns; ``slot_notes``: what an unowned slot is).
    """
    A = analyse_state_pool(pool_tensor_or_slot_values, reads=reads, writes=writes, reference=reference,
                           owners=owners, null_block_id=null_block_id, summary=summary, before=before,
                           before_label=before_label, row_requests=row_requests, slot_notes=slot_notes,
                           row_blocks=row_blocks)
    N, vals, nan, diff, change = A["N"], A["vals"], A["nan"], A["diff"], A["change"]
    slots = _slots_to_show(A, int(null_block_id))
    left = [s for s in A["outside"] if s < 0]
    right = [s for s in A["outside"] if s >= N]
    # positions: optional "outside" column, the slots, optional "outside" column
    items: list[tuple[str, int]] = ([("below", min(left))] if left else []) + [("slot", s) for s in slots] \
        + ([("above", max(right))] if right else [])
    per_line = max(1, len(items)) if len(items) <= 24 else PER_LINE
    lines = max(1, -(-len(items) // per_line))
    LH = 2.75
    width = FIG_WIDTH
    height = 1.5 + 0.95 * lines + 0.7
    f, a = new_axes(ax, fig, (width, height))
    ttl = title or title_from(A["findings"], f"{name} pool consistent")
    if N == 0:
        message(a, "empty pool: no slot to draw", title=ttl)
        return f
    finite = vals[np.isfinite(vals)]
    if change is not None:
        shown = change[np.isfinite(change)]
        cmap, top = _CHANGE, float(shown.max()) if shown.size and shown.max() > 0 else 1.0
    else:
        cmap, top = _STATE, float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    norm = Normalize(0.0, top)
    fs = 8.5 if per_line <= 16 else 7.0
    unit_pt = (width - 1.4) * 72 / max(per_line, 12)
    nb = int(null_block_id)
    for i, (kind, s) in enumerate(items):
        x, y0 = i % per_line, (i // per_line) * LH
        yc = y0 + 1.15
        if kind != "slot":
            cell(a, x, yc, PALETTE["yellow"], text=str(s), hatch="++", fontsize=fs, weight="bold")
            a.text(x, y0 + 0.42, "outside", ha="center", va="center", fontsize=7, color=PALETTE["vermillion"])
        else:
            _slot_cell(a, x, yc, s, A, nb, cmap, norm, before is not None, fs, unit_pt)
            if diff is not None and s < len(diff) and diff[s]:
                outline(a, x, yc)
            if s in A["foreign"]:
                outline(a, x, yc, color=PALETTE["purple"], lw=2.2, linestyle="--", w=1.16, h=1.16, zorder=5)
            label = f"{s}" + ("\nnull" if s == nb else "")
            a.text(x, y0 + 0.42, label, ha="center", va="center", fontsize=7.5,
                   color=PALETTE["vermillion"] if s == nb and (vals[s] != 0 or nan[s]) else "#555555",
                   weight="bold" if s == nb else "normal", linespacing=0.9)
            if owners and s in owners:
                a.text(x, y0 + 2.2, str(owners[s])[:6], ha="center", va="center", fontsize=7, color="#555555",
                       style="italic")
        rr, ww = A["reads"].get(s, set()), A["writes"].get(s, set())
        if rr:
            a.text(x, y0 - 0.1, "▼" + _who(rr), ha="center", va="center", fontsize=7.5, color=PALETTE["blue"],
                   weight="bold")
        if ww:
            a.text(x, y0 + 1.85, "▲" + _who(ww), ha="center", va="center", fontsize=7.5, color=_WRITE,
                   weight="bold")
    a.set_xlim(-0.6, max(per_line, 12) - 0.4)
    a.set_ylim(lines * LH - 0.3, -0.45)
    a.set_axis_off()
    set_title(a, ttl, width_in=None if ax is not None else width - 1.0)
    _colour_bar(a, cmap, norm, f"|change {before_label}|" if change is not None else "|state| (L2 norm)")
    legend(a, _legend_handles(A, nb, before is not None, reference is not None, owners, row_requests, before_label),
           below=True, ncol=3)
    if N > len(slots):
        hidden = sorted(set(range(N)) - set(slots))
        a.text(-0.5, lines * LH - 0.5, f"{len(hidden)} slots not shown ({ranges(hidden)})", ha="left", va="top",
               fontsize=8, color="#555555", style="italic")
    return f


def _slot_cell(a, x, yc, s, A, nb, cmap, norm, with_before: bool, fs, unit_pt) -> None:
    """One slot: NaN, a written null block, zero, or a value (or before→after) on the colour scale."""
    v, isnan, change = A["vals"][s], A["nan"][s], A["change"]
    if isnan:
        cell(a, x, yc, "#BDBDBD", text="NaN", hatch="xx", fontsize=fs)
        return
    if s == nb and v != 0:
        cell(a, x, yc, PALETTE["vermillion"], text=f"{v:.2g}", hatch="xx", fontsize=fs, weight="bold")
        return
    if with_before and change is not None:
        d = change[s]
        if d == 0:
            cell(a, x, yc, PALETTE["white"], text=f"{v:.2g}" if v else "0", fontsize=fs, textcolor="#777777",
                 edge="#BBBBBB")
            return
        face = cmap(norm(d)) if np.isfinite(d) else cmap(1.0)
        bv = A["before_vals"]
        b = bv[s] if bv is not None and s < len(bv) else None
        txt = f"{b:.2g}→{v:.2g}" if b is not None and np.isfinite(b) else f"→{v:.2g}"
        delta = f"Δ {d:.2g}" if np.isfinite(d) else "Δ NaN"
        cell(a, x, yc, to_hex(face))
        size = max(4.5, min(fs, 0.9 * unit_pt / (0.62 * max(len(txt), len(delta)))))
        a.text(x, yc - 0.17, txt, ha="center", va="center", fontsize=size, color=_ink(face), zorder=3)
        a.text(x, yc + 0.2, delta, ha="center", va="center", fontsize=size - 0.5, color=_ink(face), zorder=3)
        return
    if v == 0:
        cell(a, x, yc, PALETTE["light"] if s == nb else PALETTE["white"], text="0", fontsize=fs,
             textcolor="#777777", edge="#BBBBBB")
        return
    face = cmap(norm(v))
    cell(a, x, yc, to_hex(face), text=f"{v:.2g}", fontsize=fs, textcolor=_ink(face))


def _ink(face) -> str:
    return "white" if (0.299 * face[0] + 0.587 * face[1] + 0.114 * face[2]) < 0.5 else "black"


def _colour_bar(a, cmap, norm, label: str) -> None:
    """A small vertical colour bar right of the slots, inside the axes' own box (redraws replace it)."""
    from matplotlib.cm import ScalarMappable

    cax = a.inset_axes([1.01, 0.25, 0.014, 0.6])
    cb = a.figure.colorbar(ScalarMappable(norm=norm, cmap=cmap), cax=cax)
    cb.set_label(label, fontsize=7.5)
    cb.ax.tick_params(labelsize=7)


def _legend_handles(A, nb, with_before, with_reference, owners, row_requests, before_label) -> list:
    """One handle per meaning, and only the meanings this drawing uses."""
    handles = []
    if with_before:
        handles.append(legend_patch(f"colour: |change| {before_label}; text: |state| before→after, Δ |change|",
                                    to_hex(_CHANGE(0.6))))
        handles.append(legend_patch("unchanged", PALETTE["white"], edge="#BBBBBB"))
    else:
        handles.append(legend_patch("colour: |state| (text: L2 norm)", to_hex(_STATE(0.6))))
    if A["nan"].any():
        handles.append(legend_patch("NaN (poisoned: freed block)", "#BDBDBD", "xx"))
    if 0 <= nb < A["N"] and (A["vals"][nb] != 0 or nb in A["writes"]):
        handles.append(legend_patch("null block no longer zero", PALETTE["vermillion"], "xx"))
    if A["outside"]:
        handles.append(legend_patch("index outside the pool (illegal)", PALETTE["yellow"], "++"))
    if with_reference:
        handles.append(legend_patch("differs from the reference (requests run alone)", "none", edge="black", lw=2.4))
    if row_requests is not None:
        handles.append(legend_patch("stored by a row that does not own it", "none", edge=PALETTE["purple"], lw=2.2,
                                    linestyle="--"))
    if A["reads"]:
        handles.append(legend_patch("▼ rows that loaded it", "none", edge="none"))
    if A["writes"]:
        handles.append(legend_patch("▲ rows that stored it", "none", edge="none"))
    if owners:
        handles.append(legend_patch("italic: the slot's request", "none", edge="none"))
    return handles


def _slots_to_show(A: dict, nb: int) -> list[int]:
    """Every slot, or (past MAX_SLOTS) the null block and the touched, NaN and differing slots first."""
    N = A["N"]
    if N <= MAX_SLOTS:
        return list(range(N))
    important = {nb} | set(A["reads"]) | set(A["writes"]) | {int(s) for s in np.flatnonzero(A["nan"])}
    if A["diff"] is not None:
        important |= {int(s) for s in np.flatnonzero(A["diff"])}
    keep = sorted(s for s in important if 0 <= s < N)[: MAX_SLOTS // 2]
    for s in range(N):
        if len(keep) >= MAX_SLOTS:
            break
        if s not in keep:
            keep.append(s)
    return sorted(keep)
