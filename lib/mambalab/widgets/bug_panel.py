"""``bug_panel(bug)``: one control panel per catalogue bug.

The panel replays the bug's scenario (``mambalab.lab.scenarios``) with the
pre-fix behaviour or the fix, lets the learner turn the scenario's knobs,
step the engine and watch the drawings, and says the verdict in words::

    from mambalab.widgets import bug_panel
    bug_panel("stale-is-prefilling")

The bug-specific parts (knobs, the DP rank that matters, what to watch) live
in one module per bug; the panel machinery in ``panel``.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from mambalab.lab import scenarios
from mambalab.lab.bugs import BUGS, BugConfig
from mambalab.lab.scenarios import valid_bug_ids
from mambalab.widgets import (guard_lt_zero, move_row_stale_source, pad_minus_one, single_token_extend, spec_slots,
                              stale_is_prefilling, stale_rows, zero_accepted)
from mambalab.widgets.panel import Panel, Settings
from mambalab.widgets.session import Session
from mambalab.widgets.bug_spec import SEED, BugSpec
from mambalab.widgets.controls import esc

SPECS: dict[str, BugSpec] = {m.SPEC.bug: m.SPEC for m in (pad_minus_one, stale_rows, guard_lt_zero, spec_slots,
                                                          stale_is_prefilling, single_token_extend,
                                                          move_row_stale_source, zero_accepted)}


def spec_for(bug: str) -> BugSpec:
    """The bug's own spec, or a generic one (seed only) for a catalogue bug without a module yet."""
    base = bug.split("/")[0]
    if base in SPECS:
        return SPECS[base]
    make = scenarios.scenario_for(base)
    entry = BUGS[base]
    parts = tuple((f"{p}", f"{base}/{p}") for p in entry.parts)
    if parts:
        parts = ((f"all parts ({base})", base),) + parts

    def build(seed: int = 0):
        return make(seed)

    def focus(k: dict) -> int:
        return make(int(k.get("seed", 0))).cfg.data_parallel_size - 1

    return BugSpec(bug=base, knobs=(SEED,), build=build, focus_rank=focus,
                   views=("block_table", "metadata", "state_pool", "timeline", "access_map"),
                   first_view="block_table",
                   lesson=(f"<b>Symptom.</b> {esc(entry.symptom)} Step through the scenario, find the step where "
                           f"the drawings' findings turn red, then toggle the fix at that step."),
                   explain=lambda k: [], parts=parts)

FIX_OPTIONS = (("bug (pre-fix)", False), ("fixed", True))


def _header(spec: BugSpec) -> str:
    b = BUGS[spec.bug]
    return (f"<div style='font-size:13px;line-height:1.45;max-width:960px'>"
            f"<div style='font-size:16px;font-weight:600'>{esc(b.id)} — "
            f"<a href='{esc(b.url)}' target='_blank'>#{b.pr}</a> {esc(b.title)} ({esc(b.release_note)})</div>"
            f"<div style='margin-top:3px'><b>What goes wrong.</b> {esc(b.mechanism)}</div>"
            f"<div style='margin-top:3px'><b>What to watch.</b> {spec.lesson}</div></div>")


class BugPanel(Panel):
    """The control panel of one catalogue bug (see :func:`bug_panel`)."""

    def __init__(self, bug: str, *, fixed: bool = False, auto_verdict: bool = True, **knobs: Any) -> None:
        if bug not in valid_bug_ids():
            raise KeyError(f"unknown bug {bug!r}; valid: {', '.join(valid_bug_ids())}")
        base = bug.split("/")[0]
        self.spec = spec = spec_for(base)
        unknown = set(knobs) - {k.name for k in spec.knobs}
        if unknown:
            raise TypeError(f"{base} has no knob(s) {sorted(unknown)}; knobs: {[k.name for k in spec.knobs]}")
        self.bug = base
        self.fix_toggle = widgets.ToggleButtons(options=list(FIX_OPTIONS), value=bool(fixed), description="",
                                                tooltips=["the pre-fix behaviour of this bug switched on",
                                                          "vLLM's fixed behaviour"],
                                                style={"button_width": "120px"})
        self.part_select = None
        controls: list[widgets.Widget] = [self.fix_toggle]
        if spec.parts:
            self.part_select = widgets.Dropdown(options=list(spec.parts), value=bug if "/" in bug else base,
                                                description="part", style={"description_width": "initial"},
                                                layout=widgets.Layout(width="330px"))
            controls.append(self.part_select)
        self.knob_widgets = {k.name: k.widget(knobs.get(k.name)) for k in spec.knobs}
        row1 = widgets.HBox(controls, layout=widgets.Layout(flex_flow="row wrap", align_items="center"))
        row2 = widgets.HBox(list(self.knob_widgets.values()),
                            layout=widgets.Layout(flex_flow="row wrap", align_items="center"))
        watched = [self.fix_toggle, *self.knob_widgets.values()] + ([self.part_select] if self.part_select else [])
        super().__init__(header_html=_header(spec), control_rows=[row1, row2], watched=watched,
                         views=spec.views, first_view=spec.first_view, auto_verdict=auto_verdict)
        self._tag({"bug-panel": self.widget, "fix": self.fix_toggle})
        self.widget.add_class(f"mambalab-bug-{base}")
        if self.part_select is not None:
            self._tag({"part": self.part_select})
        for name, w in self.knob_widgets.items():
            self._tag({"knob": w}, suffix=name)
        self._start()

    def _short_name(self) -> str:
        return self.switch

    # -- state ---------------------------------------------------------------------------------------
    @property
    def switch(self) -> str:
        """The bug switch in force when not fixed (``spec-slots/gather``, ``stale-rows``, ...)."""
        return self.part_select.value if self.part_select is not None else self.bug

    @property
    def fixed(self) -> bool:
        return bool(self.fix_toggle.value)

    def knob_values(self) -> dict[str, Any]:
        return {name: w.value for name, w in self.knob_widgets.items()}

    def set(self, **values: Any) -> None:
        """Set several knobs (and ``fixed`` / ``part``) with one rebuild, as a learner would one by one."""
        self._busy = True
        try:
            for name, v in values.items():
                if name == "fixed":
                    self.fix_toggle.value = bool(v)
                elif name == "part":
                    self.part_select.value = v
                else:
                    self.knob_widgets[name].value = v
        finally:
            self._busy = False
        self._on_knob({"name": "value"})

    def _anticipated_settings(self) -> list[Settings]:
        """The other side of the fix toggle, at the same knobs: the toggle the lesson asks for."""
        return [self._settings(fixed=not self.fixed)]

    def _settings(self, fixed: bool | None = None) -> Settings:
        k = self.knob_values()
        fixed = self.fixed if fixed is None else fixed
        switch = self.switch
        key = ("bug", switch, fixed, tuple(sorted(k.items(), key=lambda kv: kv[0])))
        spec = self.spec

        def make() -> Session:
            wl = spec.build(**k)
            bugs = BugConfig() if fixed else BugConfig.with_bugs(switch)
            return Session(wl, bugs, label=switch, fixed=fixed, seed=int(k.get("seed", 0)))

        dp = int(k["dp"]) if "dp" in k else None
        if dp is None:
            dp = spec.build(**k).cfg.data_parallel_size if spec.bug not in SPECS else 1
        return Settings(key=key, make=make, notes=spec.explain(k), dp=dp, focus_rank=spec.focus_rank(k),
                        fixed_word="fixed" if fixed else "pre-fix")


def bug_panel(bug: str, *, fixed: bool = False, auto_verdict: bool = True, **knobs: Any) -> BugPanel:
    """The control panel of ``bug`` (any id of ``python -m mambalab bugs``, parts included).

    ``fixed``: start with the fix on. ``auto_verdict``: run the whole
    scenario on every change so that the verdict line is always final (a few
    seconds on a CPU); off, the verdict comes with Replay. ``knobs``: start
    values of the scenario's knobs (``seed``, ``requests``, ``dp``, ...).
    """
    return BugPanel(bug, fixed=fixed, auto_verdict=auto_verdict, **knobs)


__all__ = ["BugPanel", "bug_panel", "SPECS", "spec_for"]
