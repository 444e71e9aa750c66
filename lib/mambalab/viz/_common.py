"""Shared drawing helpers: palette, figure set-up, cells, titles, messages, PNG export.

Every drawing builds on a ``matplotlib.figure.Figure`` created here (never
``pyplot``), so nothing is registered with a global figure manager: a
notebook shows a figure once, a widget can redraw into the same figure, and
tests need no display. Rendering is deterministic (Agg, no timestamps).
"""

from __future__ import annotations

import functools
import io
import textwrap
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
from matplotlib import patheffects
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

# Okabe–Ito: distinguishable with the common colour-vision deficiencies.
PALETTE: dict[str, str] = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky": "#56B4E9",
    "green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "purple": "#CC79A7",
    "grey": "#999999",
    "light": "#E4E4E4",
    "white": "#FFFFFF",
}

MAX_ROWS = 16  # rows drawn before truncating (with a note)
MAX_COLS = 20  # columns drawn before truncating (with a note)
FIG_WIDTH = 9.5  # inches: notebook width
TITLE_SIZE = 11.0

ERROR, WARNING, INFO = 0, 1, 2


@dataclass(frozen=True)
class Finding:
    """One sentence about a state, with a severity (ERROR < WARNING < INFO) for ordering."""

    level: int
    text: str
    order: int = 0


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (f.level, f.order))


def title_from(findings: Sequence[Finding], ok_text: str, with_info: bool = True) -> str:
    """One finding: the most severe (and how many more problems there are); ``ok_text`` when none is a problem.

    A title carries one finding so that it reads as a sentence; the rest are in ``describe_*``.
    """
    ordered = sort_findings(findings)
    problems = [f for f in ordered if f.level < INFO]
    if not problems:
        infos = [f.text for f in ordered if f.level == INFO]
        return ok_text + (f" ({infos[0]})" if infos and with_info else "")
    return problems[0].text + more_problems(len(problems) - 1)


def more_problems(n: int) -> str:
    """`` (+N more problems)`` after a title's one finding, or nothing."""
    return f" (+{n} more problem{'s' if n != 1 else ''})" if n > 0 else ""


def ranges(values: Iterable[int]) -> str:
    """``[3, 4, 5, 9, 10, 11, 12, 13]`` → ``"3, 4, 5, 9–13"``: runs of four or more are compressed."""
    vs = sorted(set(int(v) for v in values))
    out: list[str] = []
    i = 0
    while i < len(vs):
        j = i
        while j + 1 < len(vs) and vs[j + 1] == vs[j] + 1:
            j += 1
        if j - i >= 3:
            out.append(f"{vs[i]}–{vs[j]}")
        else:
            out.extend(str(v) for v in vs[i:j + 1])
        i = j + 1
    return ", ".join(out)


def plural(n: int, word: str, plural_word: str | None = None) -> str:
    return f"{n} {word if n == 1 else (plural_word or word + 's')}"


def rows_phrase(rows: Iterable[int]) -> str:
    rs = sorted(set(rows))
    return f"row{'s' if len(rs) != 1 else ''} {ranges(rs)}"


def short_int(v: int) -> str:
    """An integer in at most 4-5 characters (block ids can be huge): 12345 → '12k'."""
    v = int(v)
    a = abs(v)
    sign = "-" if v < 0 else ""
    if a < 10_000:
        return str(v)
    for div, suffix in ((1e3, "k"), (1e6, "M"), (1e9, "G"), (1e12, "T")):
        q = a / div
        if q < 1000:
            txt = f"{q:.0f}" if q >= 10 else f"{q:.1f}"
            return f"{sign}{txt}{suffix}"
    return f"{sign}huge"


def to_numpy(x) -> np.ndarray:
    """A host numpy copy of a tensor / array / sequence (device tensors are copied back)."""
    if x is None:
        return np.zeros(0)
    if hasattr(x, "detach"):
        x = x.detach()
        if getattr(x, "device", None) is not None and x.device.type != "cpu":
            x = x.cpu()
        if hasattr(x, "dtype") and str(x.dtype) in ("torch.bfloat16", "torch.float16"):
            x = x.float()
        return x.numpy().copy()
    return np.array(x)


def root_figure(fig):
    f = fig
    for _ in range(8):
        parent = getattr(f, "figure", None)
        if parent is None or parent is f:
            break
        f = parent
    return f


class VizFigure(Figure):
    """A plain ``Figure`` that also knows how to show itself as PNG in a notebook.

    Created without pyplot, so nothing keeps it open and nothing displays it a
    second time; ``_repr_png_`` makes it display even where no matplotlib
    backend integration is active (static, deterministic PNG).
    """

    def _repr_png_(self) -> bytes:
        return figure_to_png(self)


def new_figure(size: tuple[float, float]) -> VizFigure:
    return VizFigure(figsize=size, layout="constrained")


def new_axes(ax, fig, size: tuple[float, float]):
    """``(figure, axes)`` to draw into: the given axes (cleared), the given figure (cleared), or new.

    A new figure is a plain ``Figure`` with constrained layout: no pyplot
    state, so a notebook never shows it twice and ``plt.close`` is not needed.
    """
    if ax is not None:
        ax.clear()
        return root_figure(ax.figure), ax
    if fig is None:
        fig = new_figure(size)
    else:
        fig.clear()
    return fig, fig.add_subplot()


def set_title(ax, text: str, fontsize: float = TITLE_SIZE, color: str = "black",
              width_in: float | None = None) -> None:
    """A left-aligned title wrapped to ``width_in`` inches (default: the axes') so it is never cut off."""
    if width_in is None:
        fig = root_figure(ax.figure)
        try:
            width_in = ax.get_position().width * fig.get_figwidth()
        except Exception:  # pragma: no cover - exotic containers
            width_in = FIG_WIDTH
    width_in = max(width_in, 3.0)
    chars = max(30, int(width_in * 72 / (0.56 * fontsize)))
    lines: list[str] = []
    for para in text.split("\n"):
        lines.extend(textwrap.wrap(para, chars) or [""])
    ax.set_title("\n".join(lines), loc="left", fontsize=fontsize, color=color, pad=8)


def axes_width_in(ax, fallback: float) -> float:
    """The axes' width in inches (before layout), or ``fallback``."""
    try:
        return float(ax.get_position().width * root_figure(ax.figure).get_figwidth())
    except Exception:  # pragma: no cover
        return fallback


def message(ax, text: str, title: str | None = None) -> None:
    """An explanatory message instead of a drawing (empty input, nothing to show)."""
    ax.set_axis_off()
    if title:
        set_title(ax, title)
    wrapped = "\n".join(textwrap.fill(p, 70) for p in text.split("\n"))
    ax.text(
        0.5, 0.5, wrapped, ha="center", va="center", transform=ax.transAxes, fontsize=11,
        bbox=dict(boxstyle="round,pad=0.8", fc="#F4F4F4", ec=PALETTE["grey"]),
    )


def _halo(textcolor: str) -> list:
    """A stroke around a label on a hatch, in the opposite shade of the text (white text gets a dark halo)."""
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(textcolor)
    light = 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.5
    return [patheffects.withStroke(linewidth=2.6 if light else 2.2, foreground="#1A1A1A" if light else "white")]


def cell(
    ax,
    x: float,
    y: float,
    face: str,
    *,
    text: str | None = None,
    hatch: str | None = None,
    w: float = 1.0,
    h: float = 1.0,
    edge: str | None = None,
    lw: float = 0.6,
    fontsize: float = 8.0,
    textcolor: str = "black",
    weight: str = "normal",
    linestyle: str = "-",
    alpha: float = 1.0,
    zorder: float = 1.0,
    fit_pt: float | None = None,
) -> None:
    """A rectangle centred at ``(x, y)`` with optional hatch and a readable (stroked) label.

    ``fit_pt``: the cell's width in points; a long label gets a smaller font so
    that it never spills into the next cell.
    """
    inset = 0.04
    if edge is None:
        edge = "#555555" if hatch else "white"
    # add_artist, not add_patch: the limits are set by the caller, and updating
    # them per patch is most of the drawing time for a big grid
    # add_artist, not add_patch: the caller sets the limits, and updating them
    # per patch is most of the drawing time of a big grid. Cells lie inside the
    # axes, so constrained layout need not measure them (in_layout=False).
    ax.add_artist(
        Rectangle(
            (x - w / 2 + inset, y - h / 2 + inset), w - 2 * inset, h - 2 * inset,
            facecolor=face, edgecolor=edge, hatch=hatch, linewidth=lw, linestyle=linestyle,
            alpha=alpha, zorder=zorder, in_layout=False,
        )
    )
    if text:
        if fit_pt:
            fontsize = max(4.5, min(fontsize, 0.9 * fit_pt * w / (0.62 * max(len(text), 1))))
        ax.text(
            x, y, text, ha="center", va="center", fontsize=fontsize, color=textcolor,
            weight=weight, zorder=zorder + 2, path_effects=_halo(textcolor) if hatch else None, in_layout=False,
        )


def outline(ax, x: float, y: float, *, color: str = "black", lw: float = 2.4, w: float = 1.0,
            h: float = 1.0, linestyle: str = "-", zorder: float = 4.0) -> None:
    """A thick frame around a cell (differences, first divergences)."""
    ax.add_artist(
        Rectangle((x - w / 2 + 0.02, y - h / 2 + 0.02), w - 0.04, h - 0.04, fill=False,
                  edgecolor=color, linewidth=lw, linestyle=linestyle, zorder=zorder, in_layout=False)
    )


def legend_patch(label: str, face: str, hatch: str | None = None, edge: str | None = None,
                 lw: float = 0.6, linestyle: str = "-") -> Patch:
    if edge is None:
        edge = "#555555" if hatch else "#AAAAAA"
    return Patch(facecolor=face, edgecolor=edge, hatch=hatch, linewidth=lw, linestyle=linestyle,
                 label=label)


def legend(ax, handles: list, *, below: bool, ncol: int = 3, fontsize: float = 8.5) -> None:
    """A legend outside the data: to the right, or under the axes (no tick labels live there)."""
    if not handles:
        return
    if below:
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.01), ncol=ncol,
                  frameon=False, fontsize=fontsize, handlelength=1.6, handleheight=1.1,
                  columnspacing=1.4)
    else:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), ncol=1,
                  frameon=False, fontsize=fontsize, handlelength=1.6, handleheight=1.1)


def never_raises(what: str):
    """Decorator for ``draw_*``: an unexpected input becomes a message in the axes, not a traceback.

    A notebook cell that draws must not die on an odd state (the learner is
    exploring odd states on purpose); the message says what could not be read.
    """

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - shown to the reader instead
                ax, fig = kwargs.get("ax"), kwargs.get("fig")
                if ax is not None and not hasattr(ax, "clear"):
                    ax = np.ravel(ax)[0]
                f, a = new_axes(ax, fig, (FIG_WIDTH, 2.4))
                message(a, f"cannot draw this {what}: {type(exc).__name__}: {exc}", title=what)
                return f

        return wrapper

    return deco


def figure_to_png(fig, dpi: int | None = None) -> bytes:
    """The figure as PNG bytes (Agg; deterministic: no timestamp in the metadata).

    The layout is computed once and frozen while saving: with a layout engine
    set, ``savefig`` would otherwise draw every text twice (a measuring pass,
    then the real one), and a big grid is mostly text.
    """
    buf = io.BytesIO()
    engine = fig.get_layout_engine()
    frozen = engine is not None and getattr(fig, "axes", None)
    if frozen:
        engine.execute(fig)
        fig.set_layout_engine(None)
    try:
        from mambalab.viz import text_memo

        with text_memo.active():  # glyphs drawn again at the same place come from a memo
            fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    finally:
        if frozen:
            fig.set_layout_engine(engine)
    return buf.getvalue()


def figure_to_array(fig, dpi: int | None = None) -> np.ndarray:
    """The rendered figure as an ``(H, W, 4)`` float array (for comparing two states)."""
    from matplotlib.image import imread

    return imread(io.BytesIO(figure_to_png(fig, dpi)), format="png")


def fontsize_for(ncols: int) -> float:
    if ncols <= 6:
        return 9.5
    if ncols <= 10:
        return 8.5
    if ncols <= 14:
        return 7.5
    return 6.5
