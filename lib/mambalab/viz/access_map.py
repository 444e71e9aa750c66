"""Which program row loaded and stored which slot of a state pool, as recorded by the sanitizer.

Rows are the kernel's request rows, columns the pool's slots. A guarded
kernel touches exactly one slot per live row and never the null block. The
three bad pictures: a row in a column outside the pool (``-1``: #35431, an
illegal memory access on a GPU), several rows in the null block's column
(#39064), and several rows storing to one ordinary slot (a race).
"""

from __future__ import annotations

from mambalab.constants import NULL_BLOCK_ID
from mambalab.lab.sanitizer_report import arg_matches
from mambalab.viz._common import (
    ERROR,
    FIG_WIDTH,
    INFO,
    MAX_ROWS,
    PALETTE,
    WARNING,
    Finding,
    cell,
    legend,
    legend_patch,
    message,
    never_raises,
    new_axes,
    plural,
    ranges,
    rows_phrase,
    set_title,
    short_int,
    sort_findings,
    title_from,
)

MAX_SLOT_COLS = 24
_VERB = {"load": "loaded from", "store": "stored to", "atomic": "updated atomically"}


def analyse_access_map(log, *, arg: str = "state", kernel: str | None = None, num_slots: int | None = None,
                       null_block_id: int = NULL_BLOCK_ID) -> dict:
    """Per (row, slot) the operations and legality, plus the findings (headless)."""
    accesses = [a for a in getattr(log, "accesses", []) if arg_matches(a.arg, arg)
                and (kernel is None or a.kernel == kernel)]
    violations = [v for v in getattr(log, "violations", []) if arg_matches(v.arg, arg)
                  and (kernel is None or v.kernel == kernel)]
    if num_slots is None:
        known = [v.num_slots for v in violations if v.num_slots is not None]
        if known:
            num_slots = int(known[0])
        else:
            legal = [s for a in accesses if a.legal for s in a.slots]
            num_slots = max(legal) + 1 if legal else 0
    N = int(num_slots)
    ops: dict[tuple[int, int], set[str]] = {}
    illegal: dict[tuple[int, int], set[str]] = {}
    for a in accesses:
        op = "atomic" if a.op.startswith("atomic") else a.op
        for s in a.slots:
            key = (int(a.row), int(s))
            ops.setdefault(key, set()).add(op)
            if not a.legal or s < 0 or s >= N:
                illegal.setdefault(key, set()).add(op)
    for v in violations:  # a violation is always an illegal access, even if not recorded as one
        if v.slot is not None:
            key = (int(v.row), int(v.slot))
            ops.setdefault(key, set()).add("atomic" if v.op.startswith("atomic") else v.op)
            illegal.setdefault(key, set()).add("atomic" if v.op.startswith("atomic") else v.op)
    elem: dict[int, int] = {}
    for v in violations:
        if v.slot is not None and v.index is not None:
            elem.setdefault(int(v.slot), int(v.index))
    rows = sorted({r for r, _ in ops})
    kernels = sorted({a.kernel for a in accesses} | {v.kernel for v in violations})

    F: list[Finding] = []
    n_illegal = sum(len(o) for o in illegal.values())
    grouped: dict[tuple[int, frozenset], list[int]] = {}
    for (r, s), o in sorted(illegal.items()):
        grouped.setdefault((s, frozenset(o)), []).append(r)
    for i, ((s, o), rs) in enumerate(sorted(grouped.items(), key=lambda kv: min(kv[1]))):
        verbs = " and ".join(_VERB[x] for x in ("load", "store", "atomic") if x in o)
        where = f"slot {s} (illegal" + (f", element {elem[s]})" if s in elem else ")")
        t = f"{rows_phrase(rs)} {verbs} {where}"
        if i == 0:
            t += f": {plural(n_illegal, 'illegal access', 'illegal accesses')}"
        F.append(Finding(ERROR, t, i))
    nb = int(null_block_id)
    null_rows = {op: sorted(r for (r, s), o in ops.items() if s == nb and op in o) for op in ("load", "store")}
    if null_rows["store"] or null_rows["load"]:
        both = sorted(set(null_rows["store"]) | set(null_rows["load"]))
        verbs = " and ".join(_VERB[op] for op in ("load", "store") if null_rows[op])
        t = f"{rows_phrase(both)} {verbs} null block {nb}"
        if len(null_rows["store"]) > 1:
            t += " (they race on it)"
        F.append(Finding(ERROR, t, 100))
    writers: dict[int, list[int]] = {}
    for (r, s), o in ops.items():
        if "store" in o and s != nb and 0 <= s < N:
            writers.setdefault(s, []).append(r)
    for s, rs in sorted(writers.items()):
        if len(rs) > 1:
            F.append(Finding(WARNING, f"slot {s} stored by {rows_phrase(rs)} (race)", 200 + s))
    if accesses or violations:
        F.append(Finding(INFO, f"{plural(len(rows), 'row')} touched {plural(len({s for _, s in ops}), 'slot')} "
                               f"of '{arg}'" + (f" in {', '.join(kernels)}" if kernels else ""), 300))
    return dict(ops=ops, illegal=illegal, elem=elem, rows=rows, N=N, kernels=kernels, findings=F,
                n_illegal=n_illegal, empty=not (accesses or violations))


def describe_access_map(log, *, arg: str = "state", kernel: str | None = None, num_slots: int | None = None,
                        null_block_id: int = NULL_BLOCK_ID) -> list[str]:
    """The findings as sentences, most severe first."""
    A = analyse_access_map(log, arg=arg, kernel=kernel, num_slots=num_slots, null_block_id=null_block_id)
    return [f.text for f in sort_findings(A["findings"])]


@never_raises("access log")
def draw_access_map(
    log,
    *,
    arg: str = "state",
    kernel: str | None = None,
    num_slots: int | None = None,
    null_block_id: int = NULL_BLOCK_ID,
    title: str | None = None,
    ax=None,
    fig=None,
):
    """Rows × slots: ▼ loaded, ▲ stored; illegal slots in red columns outside the pool.

    ``log``: a ``sanitizer.AccessLog`` from ``with sanitizer.recording() as
    log:`` around one or more launches (an illegal one included: the log keeps
    what happened before the ``IllegalMemoryAccess`` was raised). ``arg``:
    the kernel parameter (``"state"`` matches every decode kernel's state pool: ``state_ptr``, FLA's ``h0``/``ht``).
    """
    A = analyse_access_map(log, arg=arg, kernel=kernel, num_slots=num_slots, null_block_id=null_block_id)
    rows, N, ops = A["rows"], A["N"], A["ops"]
    R = min(len(rows), MAX_ROWS)
    f, a = new_axes(ax, fig, (FIG_WIDTH, 0.36 * (max(R, 1) + 2.6) + 1.5))
    ttl = title or title_from(A["findings"], f"every row touched only its own slots of '{arg}'",
                              with_info=True)
    if A["empty"]:
        message(a, f"no recorded access to '{arg}'"
                   + (f" by kernel '{kernel}'" if kernel else "")
                   + ". Accesses are recorded by sanitizer.recording() around launches under the Triton "
                     "interpreter (on CUDA nothing is recorded).", title=f"kernel accesses to '{arg}'")
        return f
    nb = int(null_block_id)
    touched = sorted({s for _, s in ops})
    inside = [s for s in touched if 0 <= s < N]
    below = [s for s in touched if s < 0]
    above = [s for s in touched if s >= N]
    if N <= MAX_SLOT_COLS:
        cols = list(range(N))
    else:
        cols = sorted(set(inside) | ({nb} if 0 <= nb < N else set()))[:MAX_SLOT_COLS]
    hidden = len([s for s in inside if s not in cols])
    # x positions: outside-low | gap | pool slots | gap | outside-high
    xs: dict[int, float] = {}
    x = 0.0
    for s in below[:4]:
        xs[s] = x
        x += 1
    if below:
        x += 0.6
    x0_pool = x
    for s in cols:
        xs[s] = x
        x += 1
    x1_pool = x
    if above:
        x += 0.6
    for s in above[:4]:
        xs[s] = x
        x += 1
    total = x
    for s in list(below[:4]) + list(above[:4]):
        a.axvspan(xs[s] - 0.5, xs[s] + 0.5, ymin=0, ymax=1, color="#FBE3D6", zorder=0)
    fs = 8.0 if len(xs) <= 16 else 6.5
    for yi, r in enumerate(rows[:R]):
        for s, xx in xs.items():
            o = ops.get((r, s))
            outside = s < 0 or s >= N
            if o and (r, s) in A["illegal"]:
                cell(a, xx, yi, PALETTE["vermillion"], hatch="xx")
            elif outside:
                continue
            else:
                cell(a, xx, yi, PALETTE["light"] if s == nb else PALETTE["white"], edge="#DDDDDD")
            if o:
                if "load" in o:
                    a.scatter([xx - 0.2], [yi], marker="v", s=70 if fs > 7 else 40, color=PALETTE["blue"],
                              edgecolors="white", linewidths=0.8, zorder=6)
                if "store" in o:
                    a.scatter([xx + 0.2], [yi], marker="^", s=70 if fs > 7 else 40, color=PALETTE["orange"],
                              edgecolors="black", linewidths=0.6, zorder=6)
                if "atomic" in o:
                    a.scatter([xx], [yi], marker="D", s=30, color=PALETTE["purple"], edgecolors="black",
                              linewidths=0.5, zorder=6)
    for s, xx in xs.items():
        outside = s < 0 or s >= N
        label = short_int(s)
        if outside and s in A["elem"]:
            label += f"\nelem\n{short_int(A['elem'][s])}"
        elif s == nb:
            label += "\nnull"
        a.text(xx, -0.6, label, ha="center", va="bottom", fontsize=fs if not outside else 8.5,
               color=PALETTE["vermillion"] if outside else ("#333333" if s == nb else "#555555"),
               weight="bold" if outside or s == nb else "normal", linespacing=0.95)
    y_hdr = -2.25 if (below or above) else -1.75
    a.text((x0_pool + x1_pool - 1) / 2, y_hdr, f"'{arg}': {plural(N, 'slot')}" +
           (f" (showing {len(cols)})" if len(cols) < N else ""), ha="center", va="center", fontsize=9,
           weight="bold")
    if below or above:
        xo = [xs[s] for s in below[:4] + above[:4]]
        a.text(min(xo) if below else max(xo), y_hdr, "outside", ha="center", va="center", fontsize=9,
               weight="bold", color=PALETTE["vermillion"])
    a.set_xlim(-0.6, max(total, 10) - 0.4)
    a.set_ylim(R - 0.45, y_hdr - 0.35)
    a.set_yticks(range(R))
    a.set_yticklabels([f"row {r}" for r in rows[:R]], fontsize=9)
    a.set_xticks([])
    a.tick_params(length=0)
    for sp in a.spines.values():
        sp.set_visible(False)
    set_title(a, ttl, width_in=None if ax is not None else FIG_WIDTH - 1.0)
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], marker="v", ls="", color=PALETTE["blue"], markersize=8, label="load (row read the slot)"),
        Line2D([], [], marker="^", ls="", color=PALETTE["orange"], markeredgecolor="black", markersize=8,
               label="store (row wrote the slot)"),
        legend_patch("illegal: outside the pool", PALETTE["vermillion"], "xx"),
        legend_patch("null block", PALETTE["light"]),
    ]
    legend(a, handles, below=True, ncol=4)
    notes = []
    if len(rows) > R:
        notes.append(f"rows {ranges(rows[R:])} not shown")
    if hidden:
        notes.append(f"{plural(hidden, 'touched slot')} not shown")
    if len(below) > 4 or len(above) > 4:
        notes.append("some illegal slots not shown")
    if notes:
        a.text(-0.5, R - 0.45, "; ".join(notes), ha="left", va="top", fontsize=8, color="#555555",
               style="italic")
    return f
