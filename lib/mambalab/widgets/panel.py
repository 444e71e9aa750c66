"""The panel every bug panel and the engine explorer are made of.

Layout (``ipywidgets``, top to bottom): header; fix / knobs; buttons
(◀ Back, Step ▶, Replay ⇥, Reset ⟲, the DP rank shown, "verdict on every
change"); a status line; explanatory messages; the verdict (whole scenario,
and the tokens up to the step shown); one tab per drawing, each with its
findings in words above the figure; a collapsed "details" ``Output`` with the
full report, the workload and anything printed.

What happens on a change:

* a knob or the fix → the session for the new settings (cached, see
  ``session``) is brought to the step shown before, so the learner compares
  the *same step* with and without the fix; with "verdict on every change"
  the whole scenario runs first;
* Step → the next snapshot (``Engine.step_once`` when the engine has not got
  there yet); Back → the previous one (no engine work);
* Replay → the engine runs to the end, the verdict is final;
* Reset → a new engine at step 0.

Then :meth:`Panel.redraw` updates every text and renders only the selected
tab's figure (the others render when their tab is opened, or come from the
PNG cache). ``timings`` keeps engine seconds and redraw seconds apart.

While the learner reads, the panel computes what the next action is likely
to need (``idle``: the references, the other side of the fix toggle at the
step shown), on the kernel's event loop, never the shown engine.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from time import perf_counter, process_time
from typing import Callable, Hashable

import ipywidgets as widgets

from mambalab.lab import reference_pool
from mambalab.lab.scenarios import ReplayResult
from mambalab.widgets.idle import IdleWork, collect_deferred, learner_action
from mambalab.widgets.session import Session, session_for
from mambalab.widgets.snapshot import RankView
from mambalab.widgets.controls import (BAD_COLOUR, NEUTRAL_COLOUR, OK_COLOUR, WARN_COLOUR, box, esc, guarded,
                                       lines_html, write_output)
from mambalab.widgets.views import VIEWS, FigureSlot, ViewInput, findings_html, level_counts, message_figure

_RESULTS: OrderedDict[Hashable, ReplayResult] = OrderedDict()  # final verdicts by settings key
MAX_RESULTS = 64


def remember_result(key: Hashable, result: ReplayResult) -> None:
    _RESULTS[key] = result
    _RESULTS.move_to_end(key)
    while len(_RESULTS) > MAX_RESULTS:
        _RESULTS.popitem(last=False)


def clear_results() -> None:
    _RESULTS.clear()


@dataclass
class Settings:
    """Everything a knob position decides: the cache key, how to build the session, what to say about it."""

    key: Hashable
    make: Callable[[], Session]
    notes: list[str] = field(default_factory=list)
    dp: int = 1
    focus_rank: int = 0
    fixed_word: str = ""


class Panel:
    """Base class: subclasses provide the header, the knob widgets and :meth:`_settings`."""

    def __init__(self, *, header_html: str, control_rows: list[widgets.Widget], watched: list[widgets.Widget],
                 views: tuple[str, ...], first_view: str, auto_verdict: bool) -> None:
        reference_pool.start()  # the references' second process, ahead of the first knob change (not waited for)
        self.view_names = tuple(views)
        self._busy = False
        self._findings_memo: OrderedDict[Hashable, list] = OrderedDict()
        self._action_note: tuple[str, str] | None = None  # (kind, text) said once, after an action
        self.timings: dict[str, list[float]] = {"engine": [], "redraw": [], "redraw_cpu": [], "render": []}
        self.last_engine_s = 0.0
        self.last_redraw_s = 0.0
        self.cursor = 0
        self.session: Session | None = None
        self.settings: Settings | None = None
        self._vi: ViewInput | None = None
        self.idle = IdleWork(self._idle_plan, self._idle_unit)

        self.header = widgets.HTML(header_html)
        self.back_button = widgets.Button(description="◀ Back", tooltip="show the previous step (no engine work)",
                                          layout=widgets.Layout(width="90px"))
        self.step_button = widgets.Button(description="Step ▶", button_style="primary",
                                          tooltip="advance the engine one step (Engine.step_once)",
                                          layout=widgets.Layout(width="100px"))
        self.replay_button = widgets.Button(description="Replay ⇥", tooltip="run the whole scenario: final verdict",
                                            layout=widgets.Layout(width="100px"))
        self.reset_button = widgets.Button(description="Reset ⟲", tooltip="a new engine at step 0",
                                           layout=widgets.Layout(width="90px"))
        self.rank_select = widgets.Dropdown(options=[("rank 0", 0)], value=0, description="DP rank shown",
                                            style={"description_width": "initial"},
                                            layout=widgets.Layout(width="300px"))  # fits "(the one that matters)"
        self.auto_verdict = widgets.Checkbox(value=auto_verdict, indent=False, description="verdict on every change",
                                             tooltip="run the whole scenario after every change, so that the "
                                                     "verdict is always final (a few seconds on a CPU)",
                                             layout=widgets.Layout(width="auto"))
        self.status = widgets.HTML()
        self.message = widgets.HTML()
        self.verdict = widgets.HTML()
        self.slots = {name: FigureSlot(VIEWS[name]) for name in self.view_names}
        self.findings = {name: widgets.HTML() for name in self.view_names}
        self.tabs = widgets.Tab(children=[widgets.VBox([self.findings[n], self.slots[n].image])
                                          for n in self.view_names])
        self.tabs.titles = tuple(VIEWS[n].label for n in self.view_names)
        self.tabs.selected_index = self.view_names.index(first_view) if first_view in self.view_names else 0
        self.log = widgets.Output(layout=widgets.Layout(max_height="320px", overflow="auto"))
        self.details = widgets.Accordion(children=[self.log], selected_index=None)
        self.details.set_title(0, "details: full report, workload, log")
        buttons = widgets.HBox([self.back_button, self.step_button, self.replay_button, self.reset_button,
                                self.rank_select, self.auto_verdict],
                               layout=widgets.Layout(flex_flow="row wrap", align_items="center"))
        self.widget = widgets.VBox([self.header, *control_rows, buttons, self.status, self.message, self.verdict,
                                    self.tabs, self.details],
                                   layout=widgets.Layout(width="100%", max_width="1000px"))

        self._tag({"panel": self.widget, "header": self.header, "back": self.back_button, "step": self.step_button,
                   "replay": self.replay_button, "reset": self.reset_button, "rank": self.rank_select,
                   "auto-verdict": self.auto_verdict, "status": self.status, "message": self.message,
                   "verdict": self.verdict, "views": self.tabs, "details": self.details, "log": self.log})
        for name in self.view_names:
            self._tag({"figure": self.slots[name].image, "findings": self.findings[name]}, suffix=name)
        for w in watched:
            w.observe(self._on_knob, names="value")
        self.auto_verdict.observe(self._on_auto_verdict, names="value")
        self.rank_select.observe(self._on_rank, names="value")
        self.tabs.observe(self._on_tab, names="selected_index")
        self.back_button.on_click(lambda _b: self._click(self.back))
        self.step_button.on_click(lambda _b: self._click(self.step))
        self.replay_button.on_click(lambda _b: self._click(self.replay))
        self.reset_button.on_click(lambda _b: self._click(self.reset))

    @staticmethod
    def _tag(parts: dict[str, widgets.Widget], suffix: str = "") -> None:
        """Give each widget a stable CSS class ``mambalab-ROLE`` (and ``mambalab-ROLE-SUFFIX``).

        The browser test (``tests/test_browser.py``) finds the panel's parts by
        these classes, not by their words or their position in the layout.
        """
        for role, w in parts.items():
            w.add_class(f"mambalab-{role}")
            if suffix:
                w.add_class(f"mambalab-{role}-{suffix}")

    @guarded(action=False)
    def _start(self) -> None:
        """The first build (warnings and prints go to the panel's log, as in every callback), after the
        full garbage collection earlier actions deferred (a cell run, not a click: widgets/idle.py)."""
        collect_deferred()
        self._busy = True
        try:
            with learner_action():
                self._apply_settings()
        finally:
            self._busy = False
        self.idle.restart()

    # -- to provide ----------------------------------------------------------------------------
    def _settings(self) -> Settings:  # pragma: no cover - abstract
        raise NotImplementedError

    def _anticipated_settings(self) -> list[Settings]:
        """Settings the learner is likely to pick next (computed while they read); none by default."""
        return []

    # -- idle time -----------------------------------------------------------------------------
    def _idle_plan(self):
        """Units of work for idle time (each ``yield`` ends one), most useful first; never the shown engine.

        The references of the shown workload; per anticipated setting, its session built and brought to
        the step shown (to the end with "verdict on every change") and the selected view drawn into the
        PNG cache; then the other views of the step shown (opening a tab finds its drawing)."""
        s = self.session
        if s is not None:
            for job in list(s.reference_jobs()):
                job()
                yield
        for st in self._anticipated_settings():
            other = session_for(st.key, st.make)  # built here (once), found by the knob change
            yield
            for job in list(other.reference_jobs()):
                job()
                yield
            while other.last_step < self.cursor and not other.finished:
                other.advance()
                yield
            if self.auto_verdict.value and st.key not in _RESULTS:
                while not other.finished:
                    other.advance()
                    yield
                remember_result(st.key, other.run_to_end())
                yield
            if other.engine is not None and st.dp == (self.settings.dp if self.settings else 1):
                at = min(self.cursor, other.last_step)  # where the knob change will show it
                snap = other.snapshot(at)
                vi = ViewInput(snap, snap.ranks[self.rank], other.expected, st.dp)
                name = self.selected_view
                if self.slots[name].prerender((st.key, at, self.rank, name), vi):
                    yield
        if self._vi is not None:
            for name in self.view_names:
                if self.slots[name].prerender(self._content_key(name), self._vi):
                    yield

    @guarded(action=False)
    def _idle_unit(self, step: Callable[[], bool]) -> bool:
        return False if self._busy else step()

    def run_idle_work(self) -> int:
        """Do now what the panel would do while the learner reads (headless: no event loop runs); the units run."""
        return self.idle.drain()

    # -- display -------------------------------------------------------------------------------
    def _repr_mimebundle_(self, **kwargs):
        data = self.widget._repr_mimebundle_(**kwargs)
        if isinstance(data, dict) and "text/plain" in data:
            data["text/plain"] = f"<{type(self).__name__}: {self._short_name()}>"  # short and stable (nbval)
        return data

    def _short_name(self) -> str:
        return type(self).__name__

    # -- public actions ------------------------------------------------------------------------
    @property
    def engine(self):
        """The live engine of the current settings (None when it could not start)."""
        return self.session.engine if self.session else None

    @property
    def result(self) -> ReplayResult | None:
        """The whole scenario's verdict for the current settings, when known."""
        if self.settings is None:
            return None
        r = _RESULTS.get(self.settings.key)
        if r is None and self.session is not None:
            r = self.session.result
        return r

    @property
    def verdict_text(self) -> str:
        """The verdict line in words (what the panel shows, without markup)."""
        r = self.result
        head = r.report() if r is not None else "whole scenario: not run yet"
        so_far, _ = self.session.verdict_so_far(self.cursor) if self.session else ("", None)
        return f"{head}\nat step {self.cursor}: {so_far}"

    def step(self) -> None:
        s = self.session
        t = perf_counter()
        if s.engine is None:
            self._action_note = ("warn", "The engine did not start, so there is nothing to step: see the verdict.")
        elif self.cursor < s.last_step:
            self.cursor += 1
        elif not s.finished:
            s.advance()
            self.cursor = s.last_step
        else:
            self._action_note = ("info", self._finished_text())
        if s.finished and s.result is None and s.engine is not None and self.cursor == s.last_step:
            remember_result(self.settings.key, s.run_to_end())  # stepped to the end: judge it (no more steps)
            self._write_details()
        self._engine_time(perf_counter() - t)
        self.redraw()

    def back(self) -> None:
        self.cursor = max(0, self.cursor - 1)
        self._engine_time(0.0)
        self.redraw()

    def replay(self) -> None:
        t = perf_counter()
        result = self.session.run_to_end()
        remember_result(self.settings.key, result)
        self.cursor = self.session.last_step
        self._engine_time(perf_counter() - t)
        self._write_details()
        self.redraw()

    def reset(self) -> None:
        self.cursor = 0
        self._apply_settings(fresh=True)

    # -- callbacks -------------------------------------------------------------------------------
    @guarded()
    def _click(self, action: Callable[[], None]) -> None:
        if self._busy:
            return
        self._busy = True
        try:
            action()
        finally:
            self._busy = False
        self.idle.restart()

    @guarded()
    def _on_knob(self, change) -> None:
        if self._busy:
            return
        self._busy = True
        try:
            self._apply_settings()
        finally:
            self._busy = False
        self.idle.restart()

    @guarded()
    def _on_auto_verdict(self, change) -> None:
        if change["new"] and not self._busy and self.settings is not None and self.result is None:
            self._busy = True
            try:
                t = perf_counter()
                self._run_verdict()
                self._engine_time(perf_counter() - t)
                self.redraw()
            finally:
                self._busy = False
            self.idle.restart()

    @guarded()
    def _on_rank(self, change) -> None:
        if not self._busy and self.session is not None:
            self.redraw()

    @guarded()
    def _on_tab(self, change) -> None:
        self._render_selected()

    def _report_internal(self, exc: BaseException, tb: str) -> None:
        self.message.value = box(f"<b>Internal error</b> ({esc(type(exc).__name__)}: {esc(exc)}); the "
                                 f"traceback is in the details below.", BAD_COLOUR, symbol="⚠")
        from mambalab.widgets.controls import append_output

        append_output(self.log, tb)

    # -- settings ---------------------------------------------------------------------------------
    def _apply_settings(self, fresh: bool = False) -> None:
        target = self.cursor
        t = perf_counter()
        self.settings = s = self._settings()
        self._sync_ranks(s)
        self.session = session_for(s.key, s.make, fresh=fresh)
        if self.session.engine is None and s.key not in _RESULTS:
            remember_result(s.key, self.session.run_to_end())  # start-up failed: the verdict is already known
        if self.auto_verdict.value and s.key not in _RESULTS:
            self.status.value = self._status_html(busy="running the whole scenario for the verdict…")
            self._run_verdict()
        self.session.advance_to(target)
        self.cursor = min(target, self.session.last_step)
        self._engine_time(perf_counter() - t)
        self._write_details()
        self.redraw()

    def _run_verdict(self) -> None:
        remember_result(self.settings.key, self.session.run_to_end())
        self._write_details()

    def _sync_ranks(self, s: Settings) -> None:
        """Offer the settings' DP ranks; a new rank count selects the rank that matters."""
        opts = [(f"rank {i}" + (" (the one that matters)" if i == s.focus_rank and s.dp > 1 else ""), i)
                for i in range(s.dp)]
        if list(self.rank_select.options) != opts:
            was = self._busy
            self._busy = True
            try:
                self.rank_select.options = opts
                self.rank_select.value = min(max(s.focus_rank, 0), s.dp - 1)
            finally:
                self._busy = was
        self.rank_select.disabled = s.dp == 1

    def _engine_time(self, seconds: float) -> None:
        self.last_engine_s = seconds
        self.timings["engine"].append(seconds)

    # -- drawing -------------------------------------------------------------------------------------
    @property
    def selected_view(self) -> str:
        return self.view_names[self.tabs.selected_index or 0]

    @property
    def rank(self) -> int:
        dp = self.settings.dp if self.settings else 1
        v = self.rank_select.value or 0
        return max(0, min(int(v), dp - 1))

    def figure_png(self, view: str | None = None) -> bytes:
        """The PNG bytes now shown for ``view`` (the selected one by default), rendering it if needed."""
        name = view or self.selected_view
        if name != self.selected_view:
            self._render(name)
        return self.slots[name].image.value

    def redraw(self) -> None:
        """Update every text and the selected figure from the current snapshot."""
        t = perf_counter()
        c = process_time()
        s = self.session
        if s is None:
            return
        if s.engine is None:
            self._vi = None
            self._redraw_no_engine()
        else:
            snap = s.snapshot(self.cursor)
            rv = snap.ranks[self.rank]
            self._vi = ViewInput(snap, rv, s.expected, self.settings.dp)
            titles = []
            for name in self.view_names:
                f = self._view_findings(name)
                e, w = level_counts(f)
                mark = "✗ " if e else ("! " if w else "")
                titles.append(mark + VIEWS[name].label)
                self.findings[name].value = findings_html(f, VIEWS[name].caption)
            self.tabs.titles = tuple(titles)
            self.message.value = self._message_html(rv)
            self.verdict.value = self._verdict_html()
            self._render_selected()
        self.last_redraw_s = perf_counter() - t
        self.timings["redraw"].append(self.last_redraw_s)
        self.timings["redraw_cpu"].append(process_time() - c)
        self.status.value = self._status_html()

    def _content_key(self, name: str) -> Hashable:
        return (self.settings.key, self.cursor, self.rank, name)

    def _view_findings(self, name: str) -> list:
        key = self._content_key(name)
        f = self._findings_memo.get(key)
        if f is None:
            f = VIEWS[name].findings(self._vi)
            self._findings_memo[key] = f
            while len(self._findings_memo) > 512:
                self._findings_memo.popitem(last=False)
        return f

    def _render_selected(self) -> None:
        self._render(self.selected_view)

    def _render(self, name: str) -> None:
        slot = self.slots[name]
        if self._vi is None:
            key = ("no-engine", self.settings.key, name) if self.session and self.session.engine is None else None
            if key is not None and slot.key != key:  # the message, drawn when its tab shows (as a view's drawing)
                fig = message_figure(f"The engine could not start, so there is no {VIEWS[name].label.lower()} "
                                     f"to draw: {self.session.startup_error or 'unknown'}", VIEWS[name].label)
                from mambalab.viz import figure_to_png

                slot.image.value, slot.key = figure_to_png(fig), key
            return
        if slot.show(self._content_key(name), self._vi):
            self.timings["render"].append(slot.last_seconds)

    def _redraw_no_engine(self) -> None:
        for name in self.view_names:
            self.findings[name].value = findings_html([], VIEWS[name].caption)
        self._render_selected()
        self.tabs.titles = tuple(VIEWS[n].label for n in self.view_names)
        self.message.value = self._message_html(None)
        self.verdict.value = self._verdict_html()

    # -- words ---------------------------------------------------------------------------------------
    def _finished_text(self) -> str:
        s = self.session
        if s.crash is not None:
            return (f"The engine stopped at step {s.crash.step} (it crashed): nothing left to step. Reset ⟲ to "
                    f"start again, or toggle the fix.")
        if s.over_limit:
            return f"The step limit ({s.max_steps}) was reached before the workload finished."
        return f"The workload is finished (step {s.last_step}): nothing left to step. Reset ⟲ to go through it again."

    def _describe_rank(self, rv: RankView) -> str:
        r = rv.record
        if rv.kind == "start":
            return "nothing has run yet"
        if rv.kind == "crash":
            return f"crashed in this step ({rv.n} live rows)"
        if rv.kind == "idle":
            return "did not run in this step"
        if rv.kind == "dummy":
            return (f"dummy batch of {rv.p} row{'s' if rv.p != 1 else ''} "
                    f"({'FULL graph' if r.mode == 'FULL' else 'eager'}; no request in any row, and nothing "
                    f"marks them: num_reqs == num_reqs_padded)")
        mode = "FULL CUDA graph" if r.mode == "FULL" else "eager"
        pad = rv.p - rv.n
        return (f"{mode}: {rv.n} live row{'s' if rv.n != 1 else ''}" + (f" + {pad} padded" if pad else "")
                + f", {r.num_decodes} decode{'s' if r.num_decodes != 1 else ''} / {r.num_prefills} "
                  f"prefill{'s' if r.num_prefills != 1 else ''}")

    def _status_html(self, busy: str | None = None) -> str:
        s = self.session
        parts = []
        if s is not None and s.engine is not None:
            more = "" if s.finished else "+"
            parts.append(f"<b>step {self.cursor}</b> of {s.last_step}{more} computed")
            if self._vi is not None:
                parts.append(f"rank {self.rank}: {esc(self._describe_rank(self._vi.rv))}")
            snap = s.snapshot(self.cursor)
            if snap is not None and snap.step_seconds:
                parts.append(f"engine step {snap.step_seconds:.2f} s")
        elif s is not None:
            parts.append("<b>engine not started</b>")
        parts.append(f"last action {self.last_engine_s:.2f} s engine + {1000 * self.last_redraw_s:.0f} ms redraw")
        if busy:
            parts.append(f"<i>{esc(busy)}</i>")
        return f"<div style='font-size:12.5px;color:#333'>{' · '.join(parts)}</div>"

    def _message_html(self, rv: RankView | None) -> str:
        s = self.session
        notes: list[tuple[str, str]] = []
        if self._action_note is not None:
            notes.append(self._action_note)
            self._action_note = None
        if s.engine is None:
            notes.append(("bad", "The engine could not start: the verdict below says where and why. There is "
                                 "nothing to step until it does (toggle the fix, or change a knob)."))
        else:
            snap = s.snapshot(self.cursor)
            if snap.crash is not None:
                notes.append(("bad", f"The engine crashed in step {snap.crash.step} (rank {snap.crash.rank}): "
                                     f"{type(snap.crash.error).__name__}. The drawings show the state at the crash."))
            elif self.cursor > 0 and not snap.ran:
                nxt = min((st for st in s.workload.events if st > self.cursor), default=None)
                notes.append(("info", f"Nothing was scheduled in step {self.cursor}"
                                      + (f": the next request arrives at step {nxt}." if nxt else ".")))
            if not s.workload.events:
                notes.append(("info", "This workload has no request: there is nothing to step and nothing can go "
                                      "wrong (the verdict is trivially OK)."))
            if rv is not None and rv.kind == "dummy":
                notes.append(("info", f"Rank {rv.rank} had no request of its own: it ran a dummy batch of the "
                                      f"other ranks' size so that the DP collectives stay in step. Its rows hold "
                                      f"no request, yet they are not padding: num_reqs == num_reqs_padded, so "
                                      f"nothing masks them."))
            if rv is not None and rv.note:
                notes.append(("info", rv.note[0].upper() + rv.note[1:] + "."))
        for n in self.settings.notes:
            notes.append(("info", n))
        if not notes:
            return ""
        colour = {"bad": BAD_COLOUR, "warn": WARN_COLOUR, "info": NEUTRAL_COLOUR}
        symbol = {"bad": "⚠", "warn": "!", "info": "ℹ"}
        return "".join(box(esc(t), colour[k], symbol=symbol[k]) for k, t in notes)

    def _verdict_html(self) -> str:
        r = self.result
        s = self.session
        out = []
        if r is not None:
            lines = r.report().splitlines()
            mech = [x.strip().removeprefix("mechanism: ") for x in lines[1:]]
            word = "fixed" if r.fixed else "pre-fix"
            text = (f"<b>{'✓ OK' if r.verdict.ok else '✗ FAILS'} — whole scenario ({esc(word)}, seed {r.seed}):</b> "
                    f"{esc(r.verdict.summary())}")
            if mech:
                text += "<br><span style='font-size:12px'>mechanism: " + lines_html(mech, 3) + "</span>"
            out.append(box(text, OK_COLOUR if r.verdict.ok else BAD_COLOUR))
        else:
            out.append(box("<b>? whole scenario: not run yet</b> — press Replay ⇥ (or tick “verdict on every "
                           "change”).", NEUTRAL_COLOUR))
        so_far, ok = s.verdict_so_far(self.cursor)
        if s.engine is None:
            so_far = "the engine did not start (the crash is above)"  # said twice already: message and verdict
        colour = NEUTRAL_COLOUR if ok is None else (OK_COLOUR if ok else BAD_COLOUR)
        mark = "·" if ok is None else ("✓" if ok else "✗")
        out.append(box(f"{mark} at step {self.cursor}: {esc(so_far)}", colour))
        return "".join(out)

    def _write_details(self) -> None:
        s = self.session
        if s is None:
            return
        lines = []
        r = self.result
        lines.append(r.report() if r is not None else "whole scenario: not run yet (press Replay)")
        lines.append("")
        lines.append(f"bugs: {s.bugs}")
        lines.append(f"engine config: {s.workload.cfg}")
        lines.append("workload:")
        lines += ["  " + x for x in s.workload.describe()] or ["  (no request)"]
        if s.startup_error:
            lines += ["", f"start-up: {s.startup_error}"]
        write_output(self.log, "\n".join(lines))


__all__ = ["Panel", "Settings", "remember_result", "clear_results"]
