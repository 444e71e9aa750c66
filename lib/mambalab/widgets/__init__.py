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

Files, the per-bug ones first (where a reader looks first):

* ``pad_minus_one.py``, ``stale_rows.py``, ``guard_lt_zero.py``,
  ``spec_slots.py``, ``stale_is_prefilling.py``, ``single_token_extend.py``,
  ``move_row_stale_source.py``, ``zero_accepted.py``: one per catalogue bug,
  its panel's :class:`~mambalab.widgets.bug_spec.BugSpec` (knobs, the
  workload they build, the rank that matters, the drawings, what to watch);
* ``mechanism.py``: :func:`guard_grid` (pad value × kernel guard, notebook
  01) and :func:`clear_row_grid` (``clear_row`` × the dummy run's commit,
  notebook 02): the halves of a fix as toggles, each combination replayed;
* ``bug_panel.py``: :func:`bug_panel`, the panel of one catalogue bug
  (``SPECS``: every bug's spec);
* ``explorer.py``: :func:`engine_explorer`, a panel over any engine
  configuration;
* ``bug_spec.py``: what a bug panel's spec holds, and helpers the per-bug
  files share (the seed knob, token lists, padding notes);
* ``panel.py``: :class:`Panel`, the panel both kinds are made of (layout,
  actions, redraw, cached verdicts);
* ``session.py``: :class:`Session`, the engine a panel drives, stepped on
  demand with a snapshot after every step (cached by settings; references
  memoised across sessions);
* ``idle.py``: what a panel computes while the learner reads (the other side
  of the fix toggle at the step shown), on the kernel's event loop;
* ``snapshot.py``: a step's snapshot, what a drawing needs from one step per
  DP rank, copied out of the engine;
* ``views.py``: the views of a panel, each drawing's findings and figure, and
  the figure slot that shows it in place (PNG cache);
* ``controls.py``: knobs, HTML boxes, writing into an ``Output``, and the
  callback guard.
"""

from mambalab.widgets.panel import Panel, Settings, clear_results
from mambalab.widgets.session import Session, clear_sessions
from mambalab.widgets.views import VIEWS, clear_png_cache
from mambalab.widgets.bug_panel import SPECS, BugPanel, bug_panel
from mambalab.widgets.explorer import EngineExplorer, engine_explorer
from mambalab.widgets.mechanism import clear_row_grid, guard_grid


def panel_ids() -> list[str]:
    """Every id :func:`bug_panel` accepts (the catalogue's bugs and their parts)."""
    from mambalab.lab.scenarios import valid_bug_ids

    return valid_bug_ids()


def clear_caches() -> None:
    """Forget cached sessions, verdicts and rendered figures (benchmarks, tests)."""
    clear_sessions()
    clear_results()
    clear_png_cache()


__all__ = ["bug_panel", "BugPanel", "engine_explorer", "guard_grid", "clear_row_grid", "EngineExplorer",
           "Panel", "Session", "Settings", "SPECS", "VIEWS", "panel_ids", "clear_caches"]
