"""Interactive control panels (ipywidgets) for the workbook: one per catalogue bug, plus an engine explorer.

Notebook cells are one-liners::

    from mambalab.widgets import bug_panel
    bug_panel("stale-rows")

    from mambalab.widgets import engine_explorer
    engine_explorer(data_parallel_size=2, bugs=["stale-rows"])

Each panel holds a fix on/off toggle, the scenario's knobs, Step / Replay /
Reset (and Back), the drawings of :mod:`mambalab.viz` updating in place, and
the verdict in words. All logic is in the library and runs headless: set a
widget's ``.value`` or call a button's ``.click()`` from Python (see
``tests/test_widgets.py``).

Modules: ``bug_panel`` and ``explorer`` (the two panel kinds), one module per
bug (``pad_minus_one``, ``stale_rows``, ``guard_lt_zero``, ``spec_slots``,
``stale_is_prefilling``: knobs, workload, what to watch), and the shared
pieces ``_panel`` (layout, actions, redraw), ``_session`` (stepped engine with
snapshots), ``_snapshot`` (what a drawing needs from one step), ``_views``
(findings, figures, PNG cache) and ``_ui`` (knobs, boxes, callback guard).
"""

from mambalab.widgets._panel import Panel, Settings, clear_results
from mambalab.widgets._session import Session, clear_sessions
from mambalab.widgets._views import VIEWS, clear_png_cache
from mambalab.widgets.bug_panel import SPECS, BugPanel, bug_panel
from mambalab.widgets.explorer import EngineExplorer, engine_explorer


def panel_ids() -> list[str]:
    """Every id :func:`bug_panel` accepts (the catalogue's bugs and their parts)."""
    from mambalab.lab.scenarios import valid_bug_ids

    return valid_bug_ids()


def clear_caches() -> None:
    """Forget cached sessions, verdicts and rendered figures (benchmarks, tests)."""
    clear_sessions()
    clear_results()
    clear_png_cache()


__all__ = ["bug_panel", "BugPanel", "engine_explorer", "EngineExplorer", "Panel", "Session", "Settings", "SPECS",
           "VIEWS", "panel_ids", "clear_caches"]
