"""Set-up and display for the notebooks: seeds and where the kernels run, a drawing shown as a PNG
with its title as the plain-text line nbval compares, a bug's upstream pull request."""

from __future__ import annotations

import base64
import random

import numpy as np
import torch

from mambalab.device import DEVICE_TYPE, INTERPRET
from mambalab.lab import sanitizer
from mambalab.lab.bugs import BUGS
from mambalab.viz.text import Text


def setup(seed: int = 0) -> Text:
    """Seed Python, NumPy and torch; say where the kernels run (one line)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if INTERPRET:
        where = "CPU, Triton interpreter"
        if sanitizer.is_active():
            where += ", memory sanitizer on"
    else:
        where = f"{DEVICE_TYPE.upper()} (compiled Triton kernels)"
    return Text(f"mambalab ready: kernels run on {where}; seed {seed}")


def figure_title(fig) -> str:
    """The first axes' title (left, else centre), on one line: the drawing's main finding."""
    for ax in getattr(fig, "axes", []):
        for loc in ("left", "center"):
            t = ax.get_title(loc=loc)
            if t:
                return " ".join(t.split())
    return ""


def show(fig, text: str | None = None) -> None:
    """Display ``fig`` as a PNG, with ``text`` (default: its title) as the plain-text form.

    nbval skips PNGs but compares ``text/plain``: the line checks what the
    drawing says, not its pixels. Returns None, so a cell ending in
    ``show(...)`` prints nothing more.
    """
    from IPython.display import display

    from mambalab.viz import figure_to_png

    label = text if text is not None else figure_title(fig)
    png = base64.b64encode(figure_to_png(fig)).decode("ascii")
    display({"image/png": png, "text/plain": f"[figure] {label}"}, raw=True)


def pr_link(bug_id: str) -> str:
    """The upstream pull request of a catalogue bug, as a URL."""
    return BUGS[bug_id.split("/")[0]].url
