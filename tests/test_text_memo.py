"""Rendered text from a memo (viz/text_memo.py): the same pixels as Matplotlib's own text rendering,
for texts that differ only by position, colour, size, angle, font, antialiasing or string, drawn once
(misses) and again (hits), and for every view of a panel; active only inside ``text_memo.active()``."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.backends.backend_agg import RendererAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from PIL import Image  # noqa: E402

from mambalab.viz import text_memo  # noqa: E402


def _pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGBA"))


VARIANTS = [dict(), dict(dx=0.0013), dict(dx=0.0027), dict(dy=0.0015), dict(color="tab:red"), dict(fontsize=13),
            dict(rotation=33), dict(family="monospace"), dict(antialiased=False), dict(s="slot 71"),
            dict(s="row ▼ ▲ null"), dict(weight="bold")]


def _texts(dx: float = 0.0, dy: float = 0.0, s: str = "slot 17", **kw) -> Figure:
    """One text at one place; the variants differ from the first by one thing each (a fraction of a
    pixel to the right or up, colour, size, angle, font, antialiasing, string, glyphs from a fallback
    font), so a memo keyed on too little serves one variant another's glyphs."""
    fig = Figure(figsize=(3, 2))
    ax = fig.add_axes((0.1, 0.1, 0.8, 0.8))
    ax.text(0.3 + dx, 0.5 + dy, s, ha="left", va="baseline", rotation_mode="anchor", **kw)  # one anchor
    ax.set_title("a title", loc="left")
    return fig


def _png(fig: Figure, memo: bool) -> bytes:
    buf = io.BytesIO()
    if memo:
        with text_memo.active():
            fig.savefig(buf, format="png", dpi=80)
    else:
        fig.savefig(buf, format="png", dpi=80)
    return buf.getvalue()


def test_texts_from_the_memo_have_matplotlib_s_pixels():
    text_memo.clear()
    plain = [_pixels(_png(_texts(**v), memo=False)) for v in VARIANTS]
    assert all(not np.array_equal(plain[0], p) for p in plain[1:]), "each variant draws other pixels"
    hits0 = text_memo.stats["hits"]
    for round_ in ("misses", "hits"):  # the first drawing of each text fills the memo, the second reads it
        for v, p in zip(VARIANTS, plain):
            assert np.array_equal(p, _pixels(_png(_texts(**v), memo=True))), (round_, v)
    assert text_memo.stats["hits"] > hits0, "the second drawing was served from the memo"


def test_the_memo_is_active_only_inside_its_block():
    original = RendererAgg.__dict__["draw_text"]
    with text_memo.active():
        with text_memo.active():
            assert RendererAgg.__dict__["draw_text"] is text_memo._draw_text
        assert RendererAgg.__dict__["draw_text"] is text_memo._draw_text
    assert RendererAgg.__dict__["draw_text"] is original


def test_math_text_is_drawn_by_matplotlib():
    fig = Figure(figsize=(2, 1))
    fig.text(0.1, 0.5, r"$\alpha_{t} + \sum x$")
    assert np.array_equal(_pixels(_png(fig, memo=False)), _pixels(_png(fig, memo=True)))


@pytest.mark.slow
def test_every_view_of_a_panel_has_the_same_pixels_with_the_memo_and_without():
    from mambalab.widgets import bug_panel, views
    from mambalab.widgets.views import VIEWS

    p = bug_panel("guard-lt-zero", auto_verdict=False)
    for _ in range(3):
        p.step_button.click()
        for v in p.view_names:
            text_memo._STATE["usable"] = False  # Matplotlib alone
            views.clear_png_cache()
            plain = _pixels(views.render_png(VIEWS[v].draw(p._vi, None)))
            text_memo._STATE["usable"] = None
            for _ in range(2):  # misses, then hits
                views.clear_png_cache()
                assert np.array_equal(plain, _pixels(views.render_png(VIEWS[v].draw(p._vi, None)))), v
