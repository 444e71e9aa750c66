"""Mechanism panels: the two halves of a fix as separate toggles, each combination run through the real engine.

* :func:`guard_grid` (notebook 01): the runner's pad value (``-1`` before #35431,
  ``0`` after) × the kernels' guard (``GuardMode``: trusting, ``!= null`` as
  vLLM's Mamba kernels, ``>= 0`` as the FLA kernels before #39064, ``> null``
  as after). The guard is planted in every state kernel
  (:func:`mambalab.workbook.fix_it.guard_plants`), so it needs Triton's
  interpreter; the pad value comes from the bug configuration.
* :func:`clear_row_grid` (notebook 02): what ``clear_row`` clears on removal
  (nothing, the CPU row as merged in #37728, the device row as the review
  asked, both) × whether the dummy run commits the block table
  (:func:`mambalab.workbook.fix_it.stale_rows_plants`).

Each change replays the chapter's scenario under the chosen combination and
says its verdict; a drawing shows the mechanism (one kernel launch's access
map, the idle rank's block table at its first dummy step). "Fill the grid"
runs every combination into a table. Callbacks are plain methods, tested
headless (``tests/test_widgets.py``).

While the learner reads, the combinations one toggle away from the one shown
are run (``widgets/idle.py``: on the kernel's event loop, one engine step per
callback, the plants active inside that step only), so that the next toggle
finds its verdict and drawing ready.
"""

from __future__ import annotations

import html
import io
from typing import Callable

import ipywidgets as widgets

from mambalab.device import DEVICE_TYPE, without_overflow_asserts
from mambalab.lab.bugs import BugConfig
from mambalab.lab.scenarios import guard_lt_zero, stale_rows
from mambalab.lab.verdict import Verdict
from mambalab.widgets.idle import IdleWork, collect_deferred, learner_action

GUARDS: dict[str, tuple[str, Callable]] = {
    "NONE": ("trusting (no check)", lambda idx, null: idx == idx),
    "EQ_NULL": ("!= null (vLLM's Mamba kernels)", lambda idx, null: idx != null),
    "NEGATIVE": (">= 0 (FLA before #39064)", lambda idx, null: idx >= 0),
    "NULL": ("> null (FLA since #39064)", lambda idx, null: idx > null),
}
PADS = {-1: "-1 (PAD_SLOT_ID, before #35431)", 0: "0 (NULL_BLOCK_ID, since #35431)"}


def _clear_cpu(table, row):
    n = int(table.num_blocks_per_row[row])
    table.block_table.np[row, :n] = 0
    table.num_blocks_per_row[row] = 0


def _clear_device(table, row):
    table.block_table.gpu[row] = 0


def _clear_both(table, row):
    _clear_cpu(table, row)
    _clear_device(table, row)


CLEARS: dict[str, tuple[str, Callable]] = {
    "none": ("not cleared (pre-fix)", lambda table, row: None),
    "cpu": ("CPU row (merged #37728)", _clear_cpu),
    "device": ("device row (the review's question)", _clear_device),
    "both": ("CPU and device rows", _clear_both),
}
COMMITS = {False: "dummy run commits nothing (pre-fix)", True: "dummy run commits its rows (#37728)"}


_PLANTS: dict[tuple, list] = {}


def _plants_for(key: tuple, make: Callable[[], list]) -> list:
    """One list of plants per combination for the process: the same planted functions every time, so the
    capture memo (keyed by their identity) serves a combination's repeated runs and tells combinations apart."""
    if key not in _PLANTS:
        _PLANTS[key] = make()
    return _PLANTS[key]


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt

    from mambalab.viz import text_memo

    buf = io.BytesIO()
    with text_memo.active():  # glyphs drawn again at the same place come from a memo (viz/text_memo.py)
        fig.savefig(buf, format="png", dpi=80, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


_DRAWN: dict[tuple, bytes] = {}  # an access map's PNG by what the drawing reads (see _access_map_png)


def _access_map_png(launch) -> bytes:
    """The launch's access map as PNG, drawn once per content: ``viz.draw_access_map`` reads only the log
    (its accesses, violations and kernel names) and the pool's slot count, so two combinations whose
    launch recorded the same log (a guard that agrees on these indices) share one drawing."""
    import hashlib
    import pickle

    log = launch.log
    key = (launch.num_slots, hashlib.blake2b(pickle.dumps((log.accesses, log.violations, log.kernels)),
                                             digest_size=20).hexdigest())
    if key not in _DRAWN:
        if len(_DRAWN) > 64:
            _DRAWN.clear()
        _DRAWN[key] = _png(launch.draw_access_map())
    return _DRAWN[key]


def _mark(v: Verdict) -> str:
    return "✓ OK" if v.ok else "✗ FAILS"


class _Grid:
    """Two toggle rows, a verdict line, a drawing and a table of every combination run so far."""

    title = ""
    rows: dict = {}
    cols: dict = {}
    row_label = col_label = ""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.idle = IdleWork(self._idle_plan, self._idle_unit)
        self._cache: dict[tuple, tuple[Verdict, bytes | None, str]] = {}
        self._ahead: dict[tuple, tuple[Verdict, bytes | None, str]] = {}  # run in idle time, not shown yet
        self._verdicts: dict[tuple, Verdict] = {}
        style = {"description_width": "initial", "button_width": "auto"}
        self.row_toggle = widgets.ToggleButtons(options=[(v, k) for k, v in self.rows.items()],
                                                description=self.row_label, style=style)
        self.col_toggle = widgets.ToggleButtons(options=[(v, k) for k, v in self.cols.items()],
                                                description=self.col_label, style=style)
        self.fill_button = widgets.Button(description="Fill the grid", tooltip="run every combination")
        self.verdict = widgets.HTML()
        self.note = widgets.HTML()
        self.image = widgets.Image(format="png")
        self.table = widgets.HTML()
        self.widget = widgets.VBox([widgets.HTML(self.title), self.row_toggle, self.col_toggle, self.fill_button,
                                    self.verdict, self.note, self.image, self.table],
                                   layout=widgets.Layout(width="100%", max_width="1000px"))
        for w, role in ((self.widget, "mechanism-panel"), (self.row_toggle, "mechanism-row"),
                        (self.col_toggle, "mechanism-col"), (self.verdict, "verdict"), (self.table, "grid")):
            w.add_class(f"mambalab-{role}")
        self.row_toggle.observe(lambda _c: self.update(), names="value")
        self.col_toggle.observe(lambda _c: self.update(), names="value")
        self.fill_button.on_click(lambda _b: self.fill())
        collect_deferred()  # what earlier actions deferred (widgets/idle.py), before the build's first run
        self.update()

    def _repr_mimebundle_(self, **kwargs):
        data = self.widget._repr_mimebundle_(**kwargs)
        if isinstance(data, dict) and "text/plain" in data:
            data["text/plain"] = f"<{type(self).__name__}>"  # short and stable (nbval), as a bug panel's
        return data

    # -- to provide --------------------------------------------------------------------------------
    def run_units(self, row, col):  # pragma: no cover - abstract
        """The combination's run in units (a generator returning ``(verdict, png, note)``)."""
        raise NotImplementedError

    def run(self, row, col) -> tuple[Verdict, bytes | None, str]:
        from mambalab.workbook.tracer import finish

        return finish(self.run_units(row, col))

    # -- idle time ---------------------------------------------------------------------------------
    def _idle_plan(self):
        """The combinations one toggle away from the one shown, run unit by unit."""
        row, col = self.row_toggle.value, self.col_toggle.value
        for key in [(row, c) for c in self.cols if c != col] + [(r, col) for r in self.rows if r != row]:
            if key not in self._cache and key not in self._ahead:
                self._ahead[key] = yield from self.run_units(*key)

    def _idle_unit(self, step) -> bool:
        try:
            return step()
        except Exception:  # noqa: BLE001 - dropped: the toggle runs the combination again and shows what fails
            self.idle.cancel()
            return False

    def run_idle_work(self) -> int:
        """Do now what the panel would do while the learner reads (headless: no event loop runs)."""
        return self.idle.drain()

    # -- callbacks ---------------------------------------------------------------------------------
    def result(self, row, col) -> tuple[Verdict, bytes | None, str]:
        key = (row, col)
        if key not in self._cache:
            self._cache[key] = self._ahead.pop(key) if key in self._ahead else self.run(row, col)
        return self._cache[key]

    def update(self) -> None:
        with learner_action():  # no full garbage collection inside a toggle (widgets/idle.py)
            self._update()

    def _update(self) -> None:
        row, col = self.row_toggle.value, self.col_toggle.value
        v, png, note = self.result(row, col)
        colour = "#1a7f37" if v.ok else "#b42318"
        self.verdict.value = (f"<div style='font-size:14px'><b style='color:{colour}'>{_mark(v)}</b> "
                              f"{html.escape(v.summary())}</div>")
        self.note.value = f"<div style='font-size:13px'>{html.escape(note)}</div>"
        if png is not None:
            self.image.value = png
        self.table.value = self.table_html()
        self.idle.restart()

    def verdict_of(self, row, col) -> Verdict:
        """The combination's verdict alone (no drawing): what "Fill the grid" runs."""
        got = self._cache.get((row, col))
        if got is not None:
            return got[0]
        if (row, col) not in self._verdicts:
            self._verdicts[(row, col)] = self.run_verdict(row, col)
        return self._verdicts[(row, col)]

    def run_verdict(self, row, col) -> Verdict:
        return self.result(row, col)[0]

    def fill(self) -> None:
        for r in self.rows:
            for c in self.cols:
                self.verdict_of(r, c)
        self.table.value = self.table_html()

    def table_html(self) -> str:
        head = "".join(f"<th style='padding:2px 8px'>{html.escape(self.cols[c])}</th>" for c in self.cols)
        body = []
        for r in self.rows:
            cells = []
            for c in self.cols:
                v = self._known(r, c)
                word = "·" if v is None else _mark(v)
                cells.append(f"<td style='padding:2px 8px;text-align:center'>{word}</td>")
            body.append(f"<tr><th style='padding:2px 8px;text-align:left'>{html.escape(self.rows[r])}</th>"
                        f"{''.join(cells)}</tr>")
        return f"<table style='font-size:13px'><tr><th></th>{head}</tr>{''.join(body)}</table>"

    def _known(self, row, col) -> Verdict | None:
        got = self._cache.get((row, col))
        return got[0] if got is not None else self._verdicts.get((row, col))

    def grid_text(self) -> str:
        """The table as text (filled cells only): for tests and screenshots' captions."""
        lines = []
        for r in self.rows:
            for c in self.cols:
                v = self._known(r, c)
                if v is not None:
                    lines.append(f"{self.rows[r]} × {self.cols[c]}: {_mark(v)}")
        return "\n".join(lines)


class GuardGrid(_Grid):
    """Notebook 01: pad value × kernel guard."""

    title = ("<b>Pad value × guard.</b> Two changes fixed #35431 and #39064: the value the runner pads block tables "
             "with, and the test each kernel applies to a state index. Pick one of each; the scenario of "
             "<code>guard-lt-zero</code> (3 requests decoding in a FULL graph padded to 4 rows, one more arriving "
             "later) runs with that guard planted in every state kernel. The drawing is one SSU launch with "
             "indices [3, 5, 2, pad].")
    rows, cols = PADS, {k: v[0] for k, v in GUARDS.items()}
    row_label, col_label = "pad value", "kernel guard"

    def __init__(self, seed: int = 0) -> None:
        self._maps: dict[tuple, tuple[bytes, str]] = {}
        super().__init__(seed)
        self.references_ahead()
        self.maps_ahead()

    def maps_ahead(self) -> None:
        """Part of the build: every combination's drawing (one SSU launch over indices [3, 5, 2, pad] with the
        guard planted, and its access map: 8 launches, 3 distinct pictures). A drawing depends on the pad
        value and the guard only, never on the engine's run, so a toggle then waits for its run alone."""
        for pad in self.rows:
            for guard in self.cols:
                self._map(pad, guard)

    def _map(self, pad, guard) -> tuple[bytes | None, str]:
        """The combination's drawing (PNG) and its note: what one SSU launch did to the pool."""
        from mambalab.workbook.fix_it import guard_plants, planted
        from mambalab.workbook.kernel_launch import launch_ssu

        if DEVICE_TYPE != "cpu":
            return None, "The guard is planted as Python inside the kernels: run with MAMBALAB_DEVICE=cpu."
        if (pad, guard) not in self._maps:
            bugs = BugConfig.with_bugs("pad-minus-one") if pad == -1 else BugConfig()
            plants = _plants_for(("guard", guard), lambda: guard_plants(GUARDS[guard][1]))
            with planted(plants), without_overflow_asserts():  # as the engine runs its kernels (nothing overflows)
                launch = launch_ssu([3, 5, 2, pad], bugs)
            note = ("one SSU launch: " + ("illegal access before the pool" if launch.error is not None else
                    "null block 0 " + ("written" if not bool((launch.state[0] == 0).all()) else "untouched")))
            self._maps[(pad, guard)] = (_access_map_png(launch), note)
        return self._maps[(pad, guard)]

    def references_ahead(self) -> int:
        """Part of the build: the per-request references of the scenario, which every combination that does
        not fault is judged against (the first such toggle would otherwise compute them, ~65 ms on the
        clock of a click). Every combination runs the same workload on the same model (the plants and the
        pad value change the engine, never the model), and ``judge`` asks the reference memo for them by
        the model's content outside the plants, so the model is built here as the engine builds it and the
        memo answers the toggles. Returns how many requests' references were computed now."""
        from types import SimpleNamespace

        from mambalab.engine.core import build_model
        from mambalab.lab.reference import model_key, reference_jobs

        if DEVICE_TYPE != "cpu":
            return 0
        workload = guard_lt_zero(self.seed)
        model = build_model(workload.cfg)
        done = 0
        for job in reference_jobs(SimpleNamespace(model=model, cfg=workload.cfg), workload, model_key(model)):
            job()
            done += 1
        return done

    def run_verdict(self, pad, guard) -> Verdict:
        from mambalab.workbook.fix_it import guard_plants, run_workload_planted

        if DEVICE_TYPE != "cpu":
            return Verdict(ok=False, notes=["needs Triton's interpreter"])
        bugs = BugConfig.with_bugs("pad-minus-one") if pad == -1 else BugConfig()
        plants = _plants_for(("guard", guard), lambda: guard_plants(GUARDS[guard][1]))
        return run_workload_planted(guard_lt_zero(self.seed), bugs, plants)[0]

    def run_units(self, pad, guard):
        from mambalab.workbook.fix_it import guard_plants, run_workload_planted_units

        if DEVICE_TYPE != "cpu":
            v = Verdict(ok=False, notes=["needs Triton's interpreter"])
            return v, *self._map(pad, guard)
        bugs = BugConfig.with_bugs("pad-minus-one") if pad == -1 else BugConfig()
        plants = _plants_for(("guard", guard), lambda: guard_plants(GUARDS[guard][1]))
        verdict, _ = yield from run_workload_planted_units(guard_lt_zero(self.seed), bugs, plants)
        yield
        return verdict, *self._map(pad, guard)


class ClearRowGrid(_Grid):
    """Notebook 02: what clear_row clears × whether the dummy run commits."""

    title = ("<b>clear_row × commit.</b> #37728 has two halves: clear a finished request's block-table row, and "
             "commit the block table in the dummy run. The review asked whether <code>clear_row</code> should "
             "write the device copy directly; the merged code clears the CPU row and commits. Pick one of each; "
             "the <code>stale-rows</code> scenario (DP 2, rank 1 idles, then D reuses A's cached block) runs with "
             "them. The drawing is rank 1's block table at step 3, its first dummy run.")
    rows, cols = {k: v[0] for k, v in CLEARS.items()}, COMMITS
    row_label, col_label = "clear_row clears", "dummy run"

    @staticmethod
    def _plants(clear, commit):
        from mambalab.workbook.fix_it import stale_rows_plants

        def committing(block_table, num_reqs):
            if commit:
                block_table.commit_block_table(num_reqs)

        return _plants_for(("clear_row", clear, commit), lambda: stale_rows_plants(CLEARS[clear][1], committing))

    def run_verdict(self, clear, commit) -> Verdict:
        from mambalab.workbook.fix_it import run_workload_planted

        return run_workload_planted(stale_rows(self.seed), BugConfig.with_bugs("stale-rows"),
                                    self._plants(clear, commit))[0]

    def run_units(self, clear, commit):
        from mambalab.workbook.fix_it import planted
        from mambalab.workbook.tracer import trace_units

        plants = self._plants(clear, commit)
        t = yield from trace_units(stale_rows(self.seed), bugs=BugConfig.with_bugs("stale-rows"), at=[3],
                                   record_access=False, around=lambda: planted(plants))
        fig = t.draw_block_table(3, rank=1)
        from mambalab.workbook.display import figure_title

        return t.verdict, _png(fig), f"rank 1, step 3: {figure_title(fig)}"


def guard_grid(seed: int = 0) -> GuardGrid:
    """Notebook 01's panel: pad value × kernel guard, each combination replayed."""
    return GuardGrid(seed)


def clear_row_grid(seed: int = 0) -> ClearRowGrid:
    """Notebook 02's panel: what clear_row clears × the dummy run's commit, each combination replayed."""
    return ClearRowGrid(seed)


__all__ = ["GuardGrid", "ClearRowGrid", "guard_grid", "clear_row_grid", "GUARDS", "CLEARS"]
