"""Tokens the engine produced against the reference, per request, with the first divergence marked.

Corrupted state shows up far from its cause: a request reads the wrong slot
at step 5 and its tokens drift from step 6 on. This drawing takes plain data
(token lists and, optionally, what each step scheduled), so it works with
any engine or with hand-written lists.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

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
    legend,
    legend_patch,
    message,
    never_raises,
    new_figure,
    outline,
    plural,
    root_figure,
    set_title,
    short_int,
    sort_findings,
    title_from,
)

MATCH = "#B7E1D2"  # a light tint of Okabe–Ito bluish green
MAX_STEPS = 40


def first_divergence(expected: Sequence[int], got: Sequence[int]) -> int | None:
    """The first output position where both have a token and they differ (None: they agree so far)."""
    for i, (e, g) in enumerate(zip(expected, got)):
        if int(e) != int(g):
            return i
    return None


def _requests(expected: Mapping[str, Sequence[int]], got: Mapping[str, Sequence[int]]) -> list[str]:
    return list(expected) + [r for r in got if r not in expected]


def analyse_timeline(expected: Mapping[str, Sequence[int]], got: Mapping[str, Sequence[int]]) -> dict:
    """First divergence per request and the findings (headless)."""
    reqs = _requests(expected or {}, got or {})
    div: dict[str, int | None] = {}
    F: list[Finding] = []
    for k, r in enumerate(reqs):
        e, g = list((expected or {}).get(r, [])), list((got or {}).get(r, []))
        if r not in (expected or {}):
            div[r] = None
            F.append(Finding(WARNING, f"{r}: no reference tokens", 5000 + k))
            continue
        if r not in (got or {}):
            div[r] = None
            F.append(Finding(INFO, f"{r}: the engine produced nothing", 6000 + k))
            continue
        d = first_divergence(e, g)
        div[r] = d
        if d is not None:
            t = f"{r} diverges at output position {d}: got {g[d]}, expected {e[d]}"
            rest = g[d:]
            if len(rest) > 1 and len(set(int(x) for x in rest)) == 1:
                t += f" (only token {rest[0]} from there on)"
            F.append(Finding(ERROR, t, d * 1000 + k))
        elif len(g) < len(e):
            F.append(Finding(INFO, f"{r}: {len(g)} of {len(e)} tokens so far, all matching", 7000 + k))
        elif len(g) > len(e):
            F.append(Finding(INFO, f"{r}: {len(g) - len(e)} tokens past the reference's end", 7500 + k))
    n_div = sum(1 for v in div.values() if v is not None)
    if n_div:
        F.append(Finding(INFO, f"{n_div} of {plural(len(reqs), 'request')} diverge", 100))
    total = sum(min(len((expected or {}).get(r, [])), len((got or {}).get(r, []))) for r in reqs)
    if len(reqs) == 1:
        ok = f"{reqs[0]} matches the reference ({plural(total, 'token')} compared)"
    else:
        ok = f"all {len(reqs)} requests match the reference ({plural(total, 'token')} compared)"
    problems = [f for f in sort_findings(F) if f.level < INFO]
    title = title_from(F, ok, with_info=False)
    if n_div > 1:  # one finding: the earliest divergence, with how many requests diverge
        title = problems[0].text + f" ({n_div} of {len(reqs)} requests diverge)"
    return dict(reqs=reqs, div=div, findings=F, title=title, n_div=n_div)


def describe_timeline(expected: Mapping[str, Sequence[int]], got: Mapping[str, Sequence[int]]) -> list[str]:
    """The findings as sentences, earliest divergence first."""
    return [f.text for f in sort_findings(analyse_timeline(expected, got)["findings"])]


def _step_requests(step: Mapping[str, Any]) -> dict[str, int]:
    """``{request: tokens scheduled}`` from one step dict (several spellings accepted)."""
    for key in ("scheduled", "num_scheduled_tokens", "req_ids", "requests"):
        v = step.get(key)
        if v is None:
            continue
        if isinstance(v, Mapping):
            return {str(r): int(n) for r, n in v.items()}
        return {str(r): 1 for r in v}
    return {}


def _step_padding(step: Mapping[str, Any], n_real: int) -> int:
    if "padded" in step:
        return max(0, int(step["padded"]))
    if "num_reqs_padded" in step:
        return max(0, int(step["num_reqs_padded"]) - n_real)
    return 0


def _dummy_rows(step: Mapping[str, Any]) -> int:
    """Rows of an idle DP rank's dummy batch in this step (``dummy_rows``, or legacy ``dummy: True``)."""
    if "dummy_rows" in step:
        return max(0, int(step["dummy_rows"]))
    return _step_padding(step, 0) if step.get("dummy") else 0


PAD_HATCH = "---"  # CUDA-graph padding in the step strip (the token grid's ".." is past the reference's end)
DUMMY_FACE = "#B9DDF3"


def _draw_steps(a, steps: Sequence[Mapping[str, Any]], reqs: list[str], step_label: str = "step",
                row_label=None) -> None:
    S = min(len(steps), MAX_STEPS)
    rows = list(reqs[:MAX_ROWS])
    sched = [_step_requests(s) for s in steps[:S]]
    for sc in sched:
        for r in sc:
            if r not in rows and len(rows) < MAX_ROWS:
                rows.append(r)
    # a DP dummy batch is no padding (num_reqs == num_reqs_padded): a row of its own
    dummies = [_dummy_rows(s) for s in steps[:S]]
    pads = [0 if (s.get("dummy") and "dummy_rows" not in s) else _step_padding(s, len(sc))
            for s, sc in zip(steps[:S], sched)]
    has_pad = any(pads)
    has_dummy = any(dummies)
    y_pad = len(rows)
    y_dummy = len(rows) + (1 if has_pad else 0)
    extra = int(has_pad) + int(has_dummy)
    fs = 7.5 if S <= 24 else 6.0
    for x, sc in enumerate(sched):
        for y, r in enumerate(rows):
            n = sc.get(r)
            if n is None:
                cell(a, x, y, PALETTE["white"], edge="#EEEEEE")
            else:
                cell(a, x, y, PALETTE["sky"] if n <= 1 else PALETTE["blue"], text=str(n) if n > 1 else None,
                     fontsize=fs, textcolor="white")
        if has_pad:
            p = pads[x]
            cell(a, x, y_pad, PALETTE["light"] if p else PALETTE["white"], text=str(p) if p else None,
                 fontsize=fs, hatch=PAD_HATCH if p else None, edge=None if p else "#EEEEEE")
        if has_dummy:
            dmy = dummies[x]
            cell(a, x, y_dummy, DUMMY_FACE if dmy else PALETTE["white"], text=str(dmy) if dmy else None,
                 fontsize=fs, hatch="xx" if dmy else None, edge=None if dmy else "#EEEEEE")
    marked: list[tuple[Any, str]] = []  # (step, label), the same label on consecutive steps said once
    for x, s in enumerate(steps[:S]):
        lab = s.get("label") or s.get("note") or s.get("event")
        if lab:
            a.text(x, -0.75, "★", ha="center", va="center", fontsize=9, color=PALETTE["vermillion"])
            marked.append((s.get("step", x), str(lab)))
    events = []
    i = 0
    while i < len(marked):
        j = i
        while j + 1 < len(marked) and marked[j + 1][1] == marked[i][1] and isinstance(marked[j][0], int) \
                and marked[j + 1][0] == marked[j][0] + 1:
            j += 1
        when = f"step {marked[i][0]}" if i == j else f"steps {marked[i][0]}–{marked[j][0]}"
        events.append(f"★ {when}: {marked[i][1]}")
        i = j + 1
    for x, s in enumerate(steps[:S]):
        if S <= 20 or x % 5 == 0:
            a.text(x, len(rows) + extra - 0.1, str(s.get("step", x)), ha="center", va="top",
                   fontsize=7, color="#555555")
    a.text(-0.5, len(rows) + extra + 0.45, step_label, ha="left", va="top", fontsize=8.5, color="#333333")
    dummy_name = "dummy batch"
    if row_label is not None and has_dummy and row_label("dummy batch") != "dummy batch":
        dummy_name = row_label("dummy batch")
    ylabels = [row_label(r) if row_label else r for r in rows] + (["padding"] if has_pad else []) \
        + ([dummy_name] if has_dummy else [])
    a.set_yticks(range(len(ylabels)))
    a.set_yticklabels([y[:22] for y in ylabels], fontsize=8.5)
    a.set_xticks([])
    a.tick_params(length=0)
    for sp in a.spines.values():
        sp.set_visible(False)
    a.set_xlim(-0.6, max(S, 10) - 0.4)
    a.set_ylim(len(ylabels) + 1.0, -1.2)
    hdr = "batch per step"
    if len(steps) > S:
        hdr += f" (steps {S}–{len(steps) - 1} not shown)"
    if events:
        import textwrap

        shown = events[:4] + ([f"… {len(events) - 4} more"] if len(events) > 4 else [])
        hdr += "\n" + "\n".join(textwrap.wrap("   ".join(shown), 120))
    a.set_title(hdr, loc="left", fontsize=8.5, color="#333333")
    handles = [legend_patch("1 token", PALETTE["sky"]), legend_patch("several tokens (e.g. a prefill)",
                                                                     PALETTE["blue"])]
    if has_pad:
        handles.append(legend_patch("CUDA-graph padded rows (count)", PALETTE["light"], PAD_HATCH))
    if has_dummy:
        handles.append(legend_patch("idle DP rank's dummy batch: rows (no padding)", DUMMY_FACE, "xx"))
    legend(a, handles, below=True, ncol=4, fontsize=8)


@never_raises("token timeline")
def draw_timeline(
    expected: Mapping[str, Sequence[int]],
    got: Mapping[str, Sequence[int]],
    *,
    steps: Sequence[Mapping[str, Any]] | None = None,
    title: str | None = None,
    step_label: str = "step",
    request_ranks: Mapping[str, int] | None = None,
    ax=None,
    fig=None,
):
    """Per request, the engine's token at each output position against the reference's.

    ``expected``/``got``: request id → output token ids. Matches are green,
    mismatches vermillion (hatched) with the expected token under the one
    produced; each request's first divergence is framed. ``steps``: optional
    list of dicts, one per engine step, with ``scheduled`` ({request: tokens})
    or ``req_ids``/``requests`` (list), optional ``num_reqs_padded`` or
    ``padded``, ``dummy_rows`` (an idle DP rank's dummy batch) and an optional
    ``label`` (e.g. "dummy run"): drawn as a strip below, its x axis named
    ``step_label`` (e.g. "step (rank 1)"). ``request_ranks``: request → DP
    rank, shown beside each request's name. ``ax`` may be one Axes (no strip) or two.
    """
    A = analyse_timeline(expected or {}, got or {})
    reqs, div = A["reqs"], A["div"]
    R = min(len(reqs), MAX_ROWS)
    want_steps = bool(steps)
    if ax is None:
        axes = []
    elif hasattr(ax, "clear") and hasattr(ax, "figure"):
        axes = [ax]
    else:
        axes = list(np.ravel(ax))
    if axes:
        for x in axes:
            x.clear()
        f = root_figure(axes[0].figure)
        a = axes[0]
        a2 = axes[1] if len(axes) > 1 and want_steps else None
    else:
        n_strip = (min(max(len(reqs), 1), MAX_ROWS) + 1 + any(_dummy_rows(s) for s in steps) + 3) if want_steps else 0
        row_in = 0.42 if R <= 8 else 0.34
        top_in = row_in * (max(R, 1) + 1.8) + 0.55  # rows + headers + legend
        strip_in = 0.24 * (n_strip + 1.6) + 0.3 if want_steps else 0.0
        height = 0.9 + top_in + strip_in
        if fig is None:
            f = new_figure((FIG_WIDTH, height))
        else:
            f = fig
            f.clear()
        if want_steps:
            a, a2 = f.subplots(2, 1, height_ratios=[top_in, strip_in])
        else:
            a, a2 = f.add_subplot(), None
    ttl = title or A["title"]
    if not reqs:
        message(a, "no requests: nothing to compare", title="tokens vs reference")
        if a2 is not None:
            a2.set_axis_off()
        return f
    lengths = [max(len((expected or {}).get(r, [])), len((got or {}).get(r, []))) for r in reqs]
    L = max(lengths) if lengths else 0
    if L == 0:
        message(a, f"no output tokens yet ({plural(len(reqs), 'request')})", title="tokens vs reference")
        if a2 is not None:
            a2.set_axis_off()
        return f
    divs = [d for d in div.values() if d is not None]
    start = 0
    if divs and min(divs) >= MAX_COLS:
        start = max(0, min(min(divs) - 4, L - MAX_COLS))
    end = min(L, start + MAX_COLS)
    fs = 8.5 if end - start <= 12 else 7.0
    unit_pt = ((FIG_WIDTH - 1.3) if not axes else axes_width_in(a, FIG_WIDTH)) * 72 / max(end - start, 10)
    for y, r in enumerate(reqs[:R]):
        e = list((expected or {}).get(r, []))
        g = list((got or {}).get(r, []))
        for x, pos in enumerate(range(start, end)):
            has_e, has_g = pos < len(e), pos < len(g)
            if has_g and has_e:
                if int(g[pos]) == int(e[pos]):
                    cell(a, x, y, MATCH, text=_token(g[pos]), fontsize=fs, fit_pt=unit_pt)
                else:
                    cell(a, x, y, PALETTE["vermillion"], hatch="//", fontsize=fs)
                    gt, et = _token(g[pos]), _token(e[pos])
                    f1 = max(4.5, min(fs, 0.9 * unit_pt / (0.62 * len(gt))))
                    f2 = max(4.5, min(fs - 2, 0.9 * unit_pt / (0.62 * len(et))))
                    a.text(x, y - 0.13, gt, ha="center", va="center", fontsize=f1, weight="bold",
                           zorder=5, path_effects=_stroke(), in_layout=False)
                    a.text(x, y + 0.25, et, ha="center", va="center", fontsize=f2,
                           color="#222222", zorder=5, path_effects=_stroke(), in_layout=False)
            elif has_g:
                cell(a, x, y, "#DDDDDD", text=_token(g[pos]), hatch="..", fontsize=fs, fit_pt=unit_pt)
            elif has_e:
                cell(a, x, y, PALETTE["white"], text="·", fontsize=fs, textcolor="#999999", edge="#DDDDDD")
            if div.get(r) == pos:
                outline(a, x, y, lw=2.6)
    for x, pos in enumerate(range(start, end)):
        a.text(x, -0.75, str(pos), ha="center", va="center", fontsize=7.5, color="#555555")
    a.text(-0.5, -1.45, "output position", ha="left", va="center", fontsize=8.5, color="#333333")
    W = max(end - start, 10)
    a.set_xlim(-0.6, W - 0.4)
    a.set_ylim(R - 0.45, -1.8)
    a.set_yticks(range(R))
    a.set_yticklabels([_row_label(r, request_ranks)[:22] for r in reqs[:R]], fontsize=9)
    for tick, r in zip(a.get_yticklabels(), reqs[:R]):
        if div.get(r) is not None:
            tick.set_color(PALETTE["vermillion"])
            tick.set_fontweight("bold")
    a.set_xticks([])
    a.tick_params(length=0)
    for sp in a.spines.values():
        sp.set_visible(False)
    set_title(a, ttl, width_in=None if axes else FIG_WIDTH - 1.0)
    seen = set()
    for r in reqs[:R]:
        e, g = (expected or {}).get(r, []), (got or {}).get(r, [])
        seen.add("past" if len(g) > len(e) else "short" if len(g) < len(e) else "")
    handles = [legend_patch("token matches the reference", MATCH)]
    if A["n_div"]:
        handles += [legend_patch("mismatch (top: got, bottom: expected)", PALETTE["vermillion"], "//"),
                    legend_patch("first divergence", "none", edge="black", lw=2.6)]
    if "short" in seen:
        handles.append(legend_patch("not produced yet", PALETTE["white"], edge="#BBBBBB"))
    if "past" in seen:
        handles.append(legend_patch("past the reference's end", "#DDDDDD", ".."))
    legend(a, handles, below=True, ncol=3)
    notes = []
    if len(reqs) > R:
        hidden_div = sum(1 for r in reqs[R:] if div.get(r) is not None)
        notes.append(f"{plural(len(reqs) - R, 'more request')} not shown"
                     + (f" ({hidden_div} diverging)" if hidden_div else ""))
    if start > 0 or end < L:
        notes.append(f"positions {start}–{end - 1} of {L}")
    if notes:
        a.text(W - 0.4, -1.45, "; ".join(notes), ha="right", va="center", fontsize=8, color="#555555",
               style="italic")
    if a2 is not None:
        _draw_steps(a2, list(steps or []), reqs, step_label=step_label,
                    row_label=(lambda r: _row_label(r, request_ranks)) if request_ranks else None)
    return f


def _row_label(req: str, request_ranks: Mapping[str, int] | None) -> str:
    if request_ranks and req in request_ranks:
        return f"{req[:12]} · rank {request_ranks[req]}"
    return req


def _token(t: int) -> str:
    """A token id in full up to six digits (vocabularies reach ~260k), abbreviated beyond."""
    t = int(t)
    return str(t) if abs(t) < 1_000_000 else short_int(t)


def _stroke():
    from matplotlib import patheffects

    return [patheffects.withStroke(linewidth=2.2, foreground="white")]
