"""Rendered text from a memo: the glyph bitmaps of a text drawn again at the same place with the same font.

A panel's redraw is mostly text (tick labels, cell labels, legends: ~25% of a knob change of
``spec-slots/gather``, docs/speed.md's seventh pass), and Matplotlib's Agg renderer rasterises every
glyph of every text anew at each draw (FreeType: lay the string out, then per glyph set the size and
transform and render it), although a figure redrawn in place draws most of its texts again at the
same pixel positions. ``RendererAgg.draw_text`` is a pure function of what it reads: the string, the
font files the properties resolve to, the size, the renderer's dpi and height, the angle, the exact
position ``(x, y)``, antialiasing, the hinting flag, the hinting and kerning factors, and the text's
font features and language. Keyed by exactly those, the memo keeps the arguments the renderer
passed to ``draw_text_image`` for each glyph (bitmap, left, top) and replays them; the colour comes
from the graphics context at each draw, as it does in Matplotlib. Math text, which goes another
way, and anything the key cannot hold are drawn by Matplotlib itself.

The replacement of ``RendererAgg.draw_text`` is active only inside :func:`active` (mambalab's own
PNG renders) and only where Matplotlib's code has the shape it was written against (tested: the
same pixels with the memo and without for every view of a panel, ``tests/test_text_memo.py``).
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections import OrderedDict
from typing import Any

MAX_TEXTS = 20000

_MEMO: OrderedDict[tuple, list] = OrderedDict()
_STATE: dict[str, Any] = {"depth": 0, "original": None, "usable": None}
stats = {"hits": 0, "misses": 0}


def _usable() -> bool:
    """Matplotlib's ``draw_text`` and glyph loop as this memo reproduces them (else: not installed)."""
    if _STATE["usable"] is None:
        try:
            from matplotlib.backends import backend_agg

            draw = inspect.getsource(backend_agg.RendererAgg.draw_text)
            loop = inspect.getsource(backend_agg.RendererAgg._draw_text_glyphs_and_boxes)
            ok = all(s in draw for s in ("font = self._prepare_font(prop)", "items = font._layout(",
                                         "features=mtext.get_fontfeatures()", "language=mtext.get_language()",
                                         "size = prop.get_size_in_points()", "(item.ft_object, size, item.glyph_index, 0, 1, item.x, item.y)"))
            ok = ok and all(s in loop for s in (
                "font.set_size(size, self.dpi)", "font._set_transform(", "font._render_glyph(",
                "round(0x40 * (x + dx * cos - dy * sin))", "round(0x40 * (self.height - y + dx * sin + dy * cos))",
                "buffer *= 0xff", "bitmap.left, int(self.height) - bitmap.top + buffer.shape[0]"))
        except (ImportError, AttributeError, OSError, TypeError):
            ok = False
        _STATE["usable"] = ok
    return _STATE["usable"]


def _key(renderer, gc, x, y, s, prop, angle, mtext) -> tuple | None:
    import matplotlib as mpl
    from matplotlib.font_manager import fontManager

    try:
        paths = tuple(fontManager._find_fonts_by_props(prop))
        features = mtext.get_fontfeatures() if mtext is not None else None
        language = mtext.get_language() if mtext is not None else None
        key = (s, paths, prop.get_size_in_points(), renderer.dpi, renderer.height, angle, x, y,
               bool(gc.get_antialiased()), mpl.rcParams["text.hinting"], mpl.rcParams["text.hinting_factor"],
               mpl.rcParams["text.kerning_factor"], None if features is None else tuple(features), language)
        hash(key)
    except (TypeError, AttributeError, KeyError):
        return None
    return key


def _glyphs(renderer, gc, x, y, s, prop, angle, mtext) -> list:
    """What ``RendererAgg.draw_text`` passes to ``draw_text_image`` for each glyph (Matplotlib 3.11's
    ``draw_text`` and ``_draw_text_glyphs_and_boxes`` without boxes, the calls collected)."""
    import numpy as np
    from matplotlib.backends.backend_agg import get_hinting_flag
    from matplotlib.ft2font import RenderMode

    font = renderer._prepare_font(prop)
    items = font._layout(s, flags=get_hinting_flag(),
                         features=mtext.get_fontfeatures() if mtext is not None else None,
                         language=mtext.get_language() if mtext is not None else None)
    size = prop.get_size_in_points()
    cos = math.cos(math.radians(angle))
    sin = math.sin(math.radians(angle))
    load_flags = get_hinting_flag()
    out = []
    for item in items:
        ft, glyph_index, extend, slant, dx, dy = item.ft_object, item.glyph_index, 1, 0, item.x, item.y
        ft.set_size(size, renderer.dpi)
        ft._set_transform(
            (0x10000 * np.array([[cos, -sin], [sin, cos]]) @ [[extend, extend * slant], [0, 1]]).round().astype(int),
            [round(0x40 * (x + dx * cos - dy * sin)), round(0x40 * (renderer.height - y + dx * sin + dy * cos))])
        bitmap = ft._render_glyph(glyph_index, load_flags,
                                  RenderMode.NORMAL if gc.get_antialiased() else RenderMode.MONO)
        buffer = bitmap.buffer
        if not gc.get_antialiased():
            buffer *= 0xff
        out.append((np.array(buffer, copy=True), bitmap.left, int(renderer.height) - bitmap.top + buffer.shape[0]))
    return out


def _draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
    if ismath:
        return _STATE["original"](self, gc, x, y, s, prop, angle, ismath=ismath, mtext=mtext)
    key = _key(self, gc, x, y, s, prop, angle, mtext)
    if key is None:
        return _STATE["original"](self, gc, x, y, s, prop, angle, ismath=ismath, mtext=mtext)
    glyphs = _MEMO.get(key)
    if glyphs is None:
        stats["misses"] += 1
        glyphs = _glyphs(self, gc, x, y, s, prop, angle, mtext)
        _MEMO[key] = glyphs
        while len(_MEMO) > MAX_TEXTS:
            _MEMO.popitem(last=False)
    else:
        stats["hits"] += 1
        _MEMO.move_to_end(key)
    for buffer, left, top in glyphs:
        self._renderer.draw_text_image(buffer, left, top, 0, gc)


@contextlib.contextmanager
def active():
    """Inside the block Agg draws text through the memo (where Matplotlib's code is as expected)."""
    if not _usable():
        yield
        return
    from matplotlib.backends.backend_agg import RendererAgg

    if _STATE["depth"] == 0:
        _STATE["original"] = RendererAgg.__dict__["draw_text"]
        RendererAgg.draw_text = _draw_text
    _STATE["depth"] += 1
    try:
        yield
    finally:
        _STATE["depth"] -= 1
        if _STATE["depth"] == 0:
            RendererAgg.draw_text = _STATE["original"]


def clear() -> None:
    _MEMO.clear()
