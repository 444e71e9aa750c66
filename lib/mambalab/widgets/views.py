"""The drawings a panel shows, each read from a :class:`~.snapshot.RankView`, and the figure slot that shows one.

A *view* knows three things about a snapshot: its findings (the ``viz``
analysis, headless and cheap), a *shape* (everything that decides the
figure's size) and how to draw it. :class:`FigureSlot` keeps one figure per
view and redraws into it with ``fig=`` while the shape stays the same (a new
figure only when the data changes size), renders it to PNG and puts the bytes
into an ``ipywidgets.Image``: the picture changes in place, with no
clear-and-redisplay and so no flicker. Rendered PNGs are cached by content
key (a snapshot is immutable), so coming back to a step or a setting costs
nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from time import perf_counter
from typing import Callable, Hashable

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from mambalab import viz
from mambalab.viz._common import ERROR, INFO, WARNING, Finding, sort_findings, title_from
from mambalab.viz.access_map import analyse_access_map
from mambalab.viz.block_table import analyse_block_table
from mambalab.viz.metadata import analyse_metadata
from mambalab.viz.state_pool import analyse_state_pool
from mambalab.viz import text_memo
from mambalab.viz.timeline import analyse_timeline
from mambalab.widgets.snapshot import RankView, StepSnapshot

DPI = 100  # 9.5 in → 950 px: notebook width; the image shrinks to fit narrower cells


@dataclass
class ViewInput:
    """What a view needs: the snapshot, the rank shown and the session's references."""

    snap: StepSnapshot
    rv: RankView
    expected: dict[str, list[int]]
    dp: int


# -- findings and shapes -------------------------------------------------------------------------


def _block_table_args(rv: RankView) -> dict:
    return dict(num_reqs=rv.n, num_reqs_padded=rv.p, req_ids=rv.row_ids, pool=rv.pool)


def _pool_notes(rv: RankView) -> list[Finding]:
    """Sentences the state-pool analysis cannot know: writes into blocks no request held."""
    out: list[Finding] = []
    free_written = sorted({s for slots in (rv.writes or {}).values() for s in slots
                           if s > 0 and not rv.pool.is_allocated(s) and s < len(rv.slot_values)})
    if free_written:
        rows = sorted(r for r, slots in (rv.writes or {}).items() if set(slots) & set(free_written))
        who = "dummy-batch" if rv.kind == "dummy" else "padded or stale"
        cached = [s for s in free_written if s in rv.pool.cached]
        t = (f"{who} row{'s' if len(rows) > 1 else ''} {', '.join(map(str, rows))} wrote block"
             f"{'s' if len(free_written) > 1 else ''} {', '.join(map(str, free_written))}, which no request holds")
        if cached:
            t += f" (cached: a later prefix hit starts from block{'s' if len(cached) > 1 else ''} " \
                 f"{', '.join(map(str, cached))})"
        out.append(Finding(ERROR, t, -50))
    if rv.poisoned_after:
        out.append(Finding(INFO, f"block{'s' if len(rv.poisoned_after) > 1 else ''} "
                                 f"{', '.join(map(str, rv.poisoned_after))} freed when a request finished in this "
                                 f"step: poisoned with NaN after it (shown as they were during the step)", 450))
    if rv.access_source == "record":
        out.append(Finding(INFO, "reads/writes from the step record (the runner's gather windows; no sanitizer "
                                 "log: the kernels ran compiled)", 460))
    return out


def findings_block_table(vi: ViewInput) -> list[Finding]:
    return analyse_block_table(vi.rv.table, **_block_table_args(vi.rv)).findings


def _mode(rv) -> str | None:
    """The graph mode of the step whose metadata is shown (None: not this step's, let the drawing infer it)."""
    return rv.record.mode if rv.record is not None and rv.ran_at == rv.step else None


def findings_metadata(vi: ViewInput) -> list[Finding]:
    rv = vi.rv
    if rv.cm is None:
        return [Finding(INFO, "no step has run on this rank yet", 0)]
    return analyse_metadata(rv.cm, rv.md, num_reqs=rv.meta_n, builder=rv.builder, mode=_mode(rv))["findings"]


def findings_state_pool(vi: ViewInput) -> list[Finding]:
    rv = vi.rv
    return analyse_state_pool(rv.slot_values, reads=rv.reads, writes=rv.writes,
                              owners=rv.pool.labels())["findings"] + _pool_notes(rv)


def _timeline_data(vi: ViewInput):
    got = vi.snap.got
    expected = {rid: vi.expected.get(rid, []) for rid in got}
    return expected, got


def findings_timeline(vi: ViewInput) -> list[Finding]:
    expected, got = _timeline_data(vi)
    return analyse_timeline(expected, got)["findings"]


def findings_access_map(vi: ViewInput) -> list[Finding]:
    rv = vi.rv
    if rv.log is None:
        return [Finding(INFO, _access_map_missing(vi), 0)]
    return analyse_access_map(rv.log, num_slots=len(rv.slot_values))["findings"]


def _access_map_missing(vi: ViewInput) -> str:
    if vi.dp > 1:
        return ("kernel access map: shown with one DP rank only (the sanitizer records every rank's kernels "
                "into one log)")
    if vi.rv.kind in ("start",):
        return "kernel access map: no kernel has run yet"
    return "kernel access map: no decode kernel ran on this rank in this step (prefills run eagerly)"


def shape_block_table(vi: ViewInput) -> Hashable:
    v = analyse_block_table(vi.rv.table, **_block_table_args(vi.rv))
    cats = frozenset(np.unique(v.cat_cpu).tolist()) | frozenset(np.unique(v.cat_gpu).tolist())
    return ("bt", tuple(v.row_kind), v.rows_needed, v.cols_needed, cats, tuple(v.diff_kind), v.num_reqs,
            v.num_reqs_padded)


def shape_metadata(vi: ViewInput) -> Hashable:
    rv = vi.rv
    if rv.cm is None:
        return ("message",)
    A = analyse_metadata(rv.cm, rv.md, num_reqs=rv.meta_n, builder=rv.builder, mode=_mode(rv))
    return ("md", A["P"], max([A["P"]] + [len(v) for v in A["extra"].values()]))


def shape_state_pool(vi: ViewInput) -> Hashable:
    rv = vi.rv
    A = analyse_state_pool(rv.slot_values, reads=rv.reads, writes=rv.writes)
    return ("pool", A["N"], tuple(A["outside"]))


def shape_timeline(vi: ViewInput) -> Hashable:
    expected, got = _timeline_data(vi)
    return ("tl", len(got), bool(vi.rv.timeline_steps))


def shape_access_map(vi: ViewInput) -> Hashable:
    if vi.rv.log is None:
        return ("message",)
    return ("am", len(analyse_access_map(vi.rv.log)["rows"]))


# -- drawing ---------------------------------------------------------------------------------------


def message_figure(text: str, title: str, fig: Figure | None = None) -> Figure:
    """A short explanatory message in place of a drawing."""
    import textwrap

    if fig is None:
        fig = viz.VizFigure(figsize=(9.5, 1.7), layout="constrained")
    else:
        fig.clear()
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.set_title(title, loc="left", fontsize=11)
    ax.text(0.5, 0.5, "\n".join(textwrap.wrap(text, 95)), ha="center", va="center", transform=ax.transAxes,
            fontsize=10.5, bbox=dict(boxstyle="round,pad=0.7", fc="#F4F4F4", ec="#999999"))
    return fig


def draw_block_table(vi: ViewInput, fig):
    return viz.draw_block_table(vi.rv.table, **_block_table_args(vi.rv), fig=fig)


def draw_metadata(vi: ViewInput, fig):
    rv = vi.rv
    if rv.cm is None:
        return message_figure("No step has run on this rank yet: press Step.", "attention metadata", fig)
    return viz.draw_metadata(rv.cm, rv.md, num_reqs=rv.meta_n, builder=rv.builder, req_ids=rv.meta_req_ids,
                             mode=_mode(rv), fig=fig)


def draw_state_pool(vi: ViewInput, fig):
    rv = vi.rv
    # the title is the most severe finding, ours (writes into free blocks) included
    title = title_from(findings_state_pool(vi), "state pool consistent")
    return viz.draw_state_pool(rv.slot_values, reads=rv.reads, writes=rv.writes, owners=rv.pool.labels(),
                               title=title, fig=fig)


def draw_timeline(vi: ViewInput, fig):
    expected, got = _timeline_data(vi)
    return viz.draw_timeline(expected, got, steps=vi.rv.timeline_steps or None, fig=fig)


def draw_access_map(vi: ViewInput, fig):
    rv = vi.rv
    if rv.log is None:
        return message_figure(_access_map_missing(vi), "kernel access map", fig)
    return viz.draw_access_map(rv.log, num_slots=len(rv.slot_values), fig=fig)


@dataclass(frozen=True)
class View:
    name: str
    label: str
    findings: Callable[[ViewInput], list[Finding]]
    shape: Callable[[ViewInput], Hashable]
    draw: Callable[[ViewInput, Figure | None], Figure]
    caption: str


VIEWS: dict[str, View] = {
    "block_table": View("block_table", "Block table", findings_block_table, shape_block_table, draw_block_table,
                        "CPU mirror | device copy of the rank's block table: what the kernels index state with."),
    "metadata": View("metadata", "Metadata", findings_metadata, shape_metadata, draw_metadata,
                     "The step's attention metadata per row: lengths, is_prefilling, the decode/prefill split, "
                     "the decode state slots and the CUDA-graph buffer a FULL graph replays."),
    "state_pool": View("state_pool", "State pool", findings_state_pool, shape_state_pool, draw_state_pool,
                       "One cell per state slot (block): size of the state, ▼ rows that read it and ▲ rows that "
                       "wrote it in this step; NaN = freed and poisoned."),
    "timeline": View("timeline", "Timeline", findings_timeline, shape_timeline, draw_timeline,
                     "Every request's output tokens against the reference (the request run alone); the strip "
                     "below shows what the rank ran at each step."),
    "access_map": View("access_map", "Access map", findings_access_map, shape_access_map, draw_access_map,
                       "Which kernel row loaded (▼) and stored (▲) which slot in this step, as recorded by the "
                       "sanitizer; a column outside the pool is an illegal access."),
}


# -- rendering -------------------------------------------------------------------------------------

_LAYOUTS: OrderedDict[Hashable, list] = OrderedDict()
MAX_LAYOUTS = 256


def _layout_signature(fig: Figure) -> Hashable:
    """Everything constrained layout measures: figure size and, per axes, what sits in its margins."""
    parts: list = [tuple(np.round(fig.get_size_inches(), 4))]
    for ax in fig.axes:
        leg = ax.get_legend()
        parts.append((
            ax.axison,
            tuple(ax.get_position(original=True).bounds),
            ax.get_title(loc="left").count("\n"), ax.get_title().count("\n"), ax.get_title(loc="right").count("\n"),
            tuple(t.get_text() for t in ax.get_yticklabels()) if ax.axison else (),
            tuple(t.get_text() for t in ax.get_xticklabels()) if ax.axison else (),
            ax.get_xlabel(), ax.get_ylabel(),
            None if leg is None else (tuple(t.get_text() for t in leg.get_texts()), leg._ncols),
            tuple(t.get_text() for t in ax.texts if t.get_in_layout()),
        ))
    return tuple(parts)


def render_png(fig: Figure) -> bytes:
    """The figure as PNG: the same pixels as ``viz.figure_to_png``, faster for a figure redrawn in place.

    Three savings, none visible: the figure keeps one Agg canvas (its
    renderer and text-metric caches survive between redraws); the
    constrained layout is computed once per *layout signature* (figure size
    and the text in every margin: titles' line counts, tick labels, legend,
    in-layout texts) and reapplied when the signature repeats; and the PNG is
    compressed fast (level 1, lossless).
    """
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    engine = fig.get_layout_engine()
    if engine is not None and fig.axes:
        sig = _layout_signature(fig)
        pos = _LAYOUTS.get(sig)
        if pos is not None and len(pos) == len(fig.axes):
            _LAYOUTS.move_to_end(sig)
            for ax, bounds in zip(fig.axes, pos):
                ax.set_position(bounds)
        else:
            engine.execute(fig)
            _LAYOUTS[sig] = [ax.get_position().bounds for ax in fig.axes]
            while len(_LAYOUTS) > MAX_LAYOUTS:
                _LAYOUTS.popitem(last=False)
        fig.set_layout_engine(None)
    buf = io.BytesIO()
    try:
        with text_memo.active():  # glyphs drawn again at the same place come from a memo (viz/text_memo.py)
            fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None}, pil_kwargs={"compress_level": 1})
    finally:
        if engine is not None and fig.axes:
            fig.set_layout_engine(engine)
    return buf.getvalue()


# -- figure slot ----------------------------------------------------------------------------------

_PNG_CACHE: OrderedDict[Hashable, bytes] = OrderedDict()
MAX_PNGS = 256


def clear_png_cache() -> None:
    _PNG_CACHE.clear()
    _LAYOUTS.clear()


class FigureSlot:
    """One view's figure, redrawn in place, shown as a PNG ``Image`` widget."""

    def __init__(self, view: View):
        self.view = view
        self.fig: Figure | None = None
        self.fig_shape: Hashable = None
        self.key: Hashable = None  # content key of the PNG now shown
        self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", height="auto"))
        self.last_seconds = 0.0
        self.renders = 0
        self.cache_hits = 0

    def show(self, key: Hashable, vi: ViewInput) -> bool:
        """Show the drawing for ``vi`` (content ``key``); returns True when something was redrawn."""
        if key is not None and key == self.key:
            return False
        t = perf_counter()
        png = _PNG_CACHE.get(key) if key is not None else None
        if png is not None:
            _PNG_CACHE.move_to_end(key)
            self.cache_hits += 1
        else:
            png = self._draw(key, vi)
        self.image.value = png
        self.key = key
        self.last_seconds = perf_counter() - t
        return True

    def prerender(self, key: Hashable, vi: ViewInput) -> bool:
        """Render the drawing for ``vi`` into the PNG cache without showing it (idle time, so that opening
        the tab or the next knob change finds it); True when something was drawn. The same pixels as
        :meth:`show` would draw then: the figure is redrawn in place either way (``fig=``)."""
        if key is None or key in _PNG_CACHE:
            return False
        self._draw(key, vi)
        return True

    def _draw(self, key: Hashable, vi: ViewInput) -> bytes:
        shape = self.view.shape(vi)
        reuse = self.fig if (self.fig is not None and shape == self.fig_shape) else None
        fig = self.view.draw(vi, reuse)
        self.fig, self.fig_shape = fig, shape
        png = render_png(fig)
        self.renders += 1
        if key is not None:
            _PNG_CACHE[key] = png
            while len(_PNG_CACHE) > MAX_PNGS:
                _PNG_CACHE.popitem(last=False)
        return png


def level_counts(findings: list[Finding]) -> tuple[int, int]:
    return (sum(1 for f in findings if f.level == ERROR), sum(1 for f in findings if f.level == WARNING))


def findings_html(findings: list[Finding], caption: str, limit: int = 4) -> str:
    import html

    items = []
    for f in sort_findings(findings)[:limit]:
        mark = {ERROR: "✗", WARNING: "!"}.get(f.level, "·")
        colour = {ERROR: "#B34700", WARNING: "#8A6A00"}.get(f.level, "#333333")
        weight = "600" if f.level == ERROR else "normal"
        items.append(f"<li style='color:{colour};font-weight:{weight};list-style:none'>"
                     f"<span style='display:inline-block;width:1.1em'>{mark}</span>{html.escape(f.text)}</li>")
    more = len(findings) - limit
    if more > 0:
        items.append(f"<li style='list-style:none;color:#666'>… {more} more</li>")
    return (f"<div style='font-size:12.5px;line-height:1.35'><div style='color:#555;margin-bottom:2px'>"
            f"{html.escape(caption)}</div><ul style='margin:0;padding-left:0'>{''.join(items)}</ul></div>")


__all__ = ["VIEWS", "View", "ViewInput", "FigureSlot", "message_figure", "clear_png_cache", "findings_html",
           "level_counts"]
