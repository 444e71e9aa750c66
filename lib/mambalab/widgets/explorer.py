"""``engine_explorer()``: step a random workload with any bugs switched on and watch the state.

The workload comes from :func:`mambalab.lab.workload.random_workload` (requests
arriving over steps, aborts, preemptions, shared prefixes); the knobs are
its own: seed, requests, DP ranks, speculative tokens, cache mode,
acceptance, plus which catalogue bugs run pre-fix. Every change builds a new
engine (cached per settings) brought to the step shown before.
"""

from __future__ import annotations

from typing import Any, Iterable

import ipywidgets as widgets

from mambalab.lab.bugs import BugConfig
from mambalab.lab.scenarios import valid_bug_ids
from mambalab.lab.workload import random_workload
from mambalab.widgets.panel import Panel, Settings
from mambalab.widgets.session import Session
from mambalab.widgets.controls import Knob

KNOBS = (
    Knob("seed", "seed", "seed", 0, 0, 9999),
    Knob("num_requests", "requests", "int", 6, 0, 12),
    Knob("data_parallel_size", "DP ranks", "int", 1, 1, 4),
    Knob("num_speculative_tokens", "speculative tokens", "int", 0, 0, 3),
    Knob("mamba_cache_mode", "cache mode", "choice", "none",
         options=(("none (one state block per request)", "none"), ("all (prefix caching)", "all"))),
    Knob("acceptance", "acceptance", "float", 0.5, 0.0, 1.0, 0.05),
)

HEADER = ("<div style='font-size:13px;line-height:1.45;max-width:960px'>"
          "<div style='font-size:16px;font-weight:600'>Engine explorer — a random workload, step by step</div>"
          "<div style='margin-top:3px'>Pick a workload (requests arriving over steps, aborts, preemptions, "
          "shared prefixes) and the bugs that run pre-fix; Step through it and watch the block table, the "
          "metadata and the state pool of a DP rank. With no bug selected every request must match its "
          "reference; the verdict says where it does not.</div></div>")


class EngineExplorer(Panel):
    """A random workload and any bugs (see :func:`engine_explorer`)."""

    def __init__(self, *, bugs: Iterable[str] = (), auto_verdict: bool = False, **knobs: Any) -> None:
        unknown = set(knobs) - {k.name for k in KNOBS}
        if unknown:
            raise TypeError(f"engine_explorer has no knob(s) {sorted(unknown)}; knobs: {[k.name for k in KNOBS]}")
        valid = valid_bug_ids()
        bugs = tuple(bugs)
        bad = [b for b in bugs if b not in valid]
        if bad:
            raise KeyError(f"unknown bug(s) {bad}; valid: {', '.join(valid)}")
        column = Knob.label_column(KNOBS)  # the knobs are stacked: one label column
        self.knob_widgets = {k.name: k.widget(knobs.get(k.name), label_width=column) for k in KNOBS}
        self.bug_select = widgets.SelectMultiple(options=valid, value=bugs, rows=len(valid),
                                                 description="pre-fix bugs", style={"description_width": "initial"},
                                                 layout=widgets.Layout(width="330px"))
        row = widgets.HBox([widgets.VBox(list(self.knob_widgets.values())), self.bug_select],
                           layout=widgets.Layout(flex_flow="row wrap"))
        super().__init__(header_html=HEADER, control_rows=[row],
                         watched=[*self.knob_widgets.values(), self.bug_select],
                         views=("block_table", "metadata", "state_pool", "timeline", "access_map"),
                         first_view="block_table", auto_verdict=auto_verdict)
        self._tag({"explorer": self.widget, "bugs": self.bug_select})
        for name, w in self.knob_widgets.items():
            self._tag({"knob": w}, suffix=name)
        self._start()

    def knob_values(self) -> dict[str, Any]:
        return {name: w.value for name, w in self.knob_widgets.items()}

    def set(self, **values: Any) -> None:
        """Set several knobs (and ``bugs``) with one rebuild."""
        self._busy = True
        try:
            for name, v in values.items():
                if name == "bugs":
                    self.bug_select.value = tuple(v)
                else:
                    self.knob_widgets[name].value = v
        finally:
            self._busy = False
        self._on_knob({"name": "value"})

    def _anticipated_settings(self) -> list[Settings]:
        """With bugs selected: the same workload with none (every fix on), the comparison a learner makes."""
        return [self._settings(bugs=())] if self.bug_select.value else []

    def _settings(self, bugs: tuple[str, ...] | None = None) -> Settings:
        k = self.knob_values()
        k["acceptance"] = round(float(k["acceptance"]), 4)
        bugs = tuple(sorted(self.bug_select.value if bugs is None else bugs))
        key = ("explorer", bugs, tuple(sorted(k.items())))

        def make() -> Session:
            wl = random_workload(int(k["seed"]), num_requests=int(k["num_requests"]),
                                 data_parallel_size=int(k["data_parallel_size"]),
                                 num_speculative_tokens=int(k["num_speculative_tokens"]),
                                 mamba_cache_mode=k["mamba_cache_mode"], acceptance=float(k["acceptance"]))
            cfg = BugConfig.with_bugs(*bugs) if bugs else BugConfig()
            return Session(wl, cfg, label=", ".join(bugs) or "random workload", fixed=not bugs, seed=int(k["seed"]))

        notes = []
        if k["num_requests"] == 0:
            notes.append("No requests: the workload is empty, there is nothing to step.")
        if bugs and not self._bug_applies(bugs, k):
            notes.append("None of the selected bugs can show with these settings (see each bug's conditions: "
                         "spec-slots needs speculative tokens with cache mode 'all', stale-rows needs DP ≥ 2).")
        return Settings(key=key, make=make, notes=notes, dp=int(k["data_parallel_size"]), focus_rank=0,
                        fixed_word="fixed" if not bugs else "pre-fix")

    @staticmethod
    def _bug_applies(bugs: tuple[str, ...], k: dict) -> bool:
        for b in bugs:
            base = b.split("/")[0]
            if base == "spec-slots" and not (k["num_speculative_tokens"] and k["mamba_cache_mode"] == "all"):
                continue
            if base == "stale-rows" and k["data_parallel_size"] < 2:
                continue
            return True
        return False


def engine_explorer(*, bugs: Iterable[str] = (), auto_verdict: bool = False, **knobs: Any) -> EngineExplorer:
    """A general panel: a random workload (``workload.random_workload`` knobs), any bugs, stepped.

    ``bugs``: catalogue ids to run pre-fix. ``knobs``: ``seed``,
    ``num_requests``, ``data_parallel_size``, ``num_speculative_tokens``,
    ``mamba_cache_mode``, ``acceptance``. ``auto_verdict``: run the whole
    workload on every change (off by default: random workloads can be long).
    """
    return EngineExplorer(bugs=bugs, auto_verdict=auto_verdict, **knobs)


__all__ = ["EngineExplorer", "engine_explorer"]
