"""Shared widget pieces: knobs, HTML boxes, writing into an ``Output``, and callback guards.

Nothing here prints: callbacks run under :func:`guarded`, which sends
anything printed, any warning and any traceback into the panel's own
``Output`` widget (and says so in the panel's message line), so a notebook
cell shows only the panel.
"""

from __future__ import annotations

import contextlib
import functools
import html
import io
import traceback
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import ipywidgets as widgets

from mambalab.widgets.idle import learner_action

# Okabe–Ito, as the drawings: never colour alone (every box also says it in words and a symbol).
OK_COLOUR = "#009E73"
BAD_COLOUR = "#D55E00"
NEUTRAL_COLOUR = "#56B4E9"
WARN_COLOUR = "#E69F00"


@dataclass(frozen=True)
class Knob:
    """One scenario knob: how to build its widget and its default."""

    name: str
    label: str
    kind: str  # "int" | "seed" | "choice" | "bool" | "float"
    default: Any
    min: float = 0
    max: float = 0
    step: float = 1
    options: tuple = ()  # choice: ((label, value), ...)
    help: str = ""

    @property
    def label_px(self) -> int:
        """The room (px) the knob's label takes (13 px font)."""
        return int(7.5 * len(self.label)) + 8

    @staticmethod
    def label_column(knobs) -> int:
        """The label width (px) that fits every label of ``knobs``."""
        return max(k.label_px for k in knobs)

    def widget(self, value: Any = None, label_width: int | None = None) -> widgets.Widget:
        """The knob's widget; ``label_width`` (px): one label column for knobs stacked in a column,
        so their labels and controls line up (else each label takes the room it needs)."""
        v = self.default if value is None else value
        style = {"description_width": f"{label_width}px" if label_width else "initial"}

        def width(control_px: int, alone: str) -> str:  # the label column plus the control, or a knob alone
            return f"{label_width + control_px}px" if label_width else alone

        if self.kind == "seed":
            w = widgets.BoundedIntText(value=int(v), min=int(self.min), max=int(self.max) or 9999,
                                       description=self.label, style=style,
                                       layout=widgets.Layout(width=width(96, "140px")))
        elif self.kind == "int":
            w = widgets.IntSlider(value=int(v), min=int(self.min), max=int(self.max), step=int(self.step),
                                  description=self.label, continuous_update=False, style=style,
                                  layout=widgets.Layout(width=width(190, "290px")))
        elif self.kind == "float":
            w = widgets.FloatSlider(value=float(v), min=float(self.min), max=float(self.max), step=float(self.step),
                                    description=self.label, continuous_update=False, style=style,
                                    readout_format=".2f", layout=widgets.Layout(width=width(190, "290px")))
        elif self.kind == "choice":
            # Browsers size a <select> to its longest option without the room ipywidgets' arrow takes,
            # which hides the option's last characters: give it room for the longest label (13 px font).
            longest = max((len(str(label)) for label, _ in self.options), default=8)
            room = (label_width or self.label_px) + int(7.5 * longest) + 48
            w = widgets.Dropdown(options=list(self.options), value=v, description=self.label, style=style,
                                 layout=widgets.Layout(width=f"{room}px"))
        elif self.kind == "bool":
            w = widgets.Checkbox(value=bool(v), description=self.label, indent=False, style=style,
                                 layout=widgets.Layout(width="auto"))
        else:  # pragma: no cover - a spec error
            raise ValueError(f"unknown knob kind {self.kind!r}")
        if self.help:
            w.tooltip = self.help
        return w


def write_output(out: widgets.Output, text: str) -> None:
    """Replace what ``out`` shows with ``text`` in one update.

    The same as ``with out: clear_output(wait=True); print(text)`` in a kernel
    (one message, so no flicker), but it works the same outside a kernel
    (tests) and never writes to the process's stdout.
    """
    out.outputs = ({"output_type": "stream", "name": "stdout", "text": text if text.endswith("\n") else text + "\n"},)


def append_output(out: widgets.Output, text: str) -> None:
    out.outputs = tuple(out.outputs) + ({"output_type": "stream", "name": "stdout",
                                         "text": text if text.endswith("\n") else text + "\n"},)


def box(text_html: str, colour: str, *, symbol: str = "", bold_first: bool = False) -> str:
    """A framed block (the frame colour is a hint; the words and the symbol carry the meaning)."""
    return (f"<div style='border-left:5px solid {colour};background:#F7F7F7;padding:5px 9px;margin:3px 0;"
            f"font-size:13px;line-height:1.4'>{symbol + ' ' if symbol else ''}{text_html}</div>")


def esc(text: str) -> str:
    return html.escape(str(text))


def lines_html(lines: list[str], limit: int = 4) -> str:
    shown = [esc(x) for x in lines[:limit]]
    if len(lines) > limit:
        shown.append(f"<span style='color:#555'>… and {len(lines) - limit} more (see details)</span>")
    return "<br>".join(shown)


def guarded(panel_attr_log: str = "log", panel_attr_msg: str = "_report_internal", *, action: bool = True):
    """Decorator for a panel method used as a widget callback.

    stdout/stderr and warnings raised inside go into the panel's ``Output``
    widget; an exception becomes a message in the panel instead of a
    traceback printed by ipywidgets. ``action``: the learner's action, run
    without a full garbage collection (:func:`~mambalab.widgets.idle.learner_action`;
    False for idle-time units, where that collection belongs).
    """

    def deco(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(self, *args, **kwargs):
            buf = io.StringIO()
            result = None
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    with (learner_action() if action else contextlib.nullcontext()), \
                            contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                        result = fn(self, *args, **kwargs)
                except Exception as exc:  # noqa: BLE001 - shown in the panel
                    getattr(self, panel_attr_msg)(exc, traceback.format_exc())
            extra = buf.getvalue()
            extra += "".join(dict.fromkeys(f"warning: {w.category.__name__}: {w.message}\n" for w in caught))
            if extra:
                append_output(getattr(self, panel_attr_log), extra)
            return result

        return wrapper

    return deco


__all__ = ["Knob", "write_output", "append_output", "box", "esc", "lines_html", "guarded", "OK_COLOUR",
           "BAD_COLOUR", "NEUTRAL_COLOUR", "WARN_COLOUR"]
