"""How fast the control panels redraw: per panel, the redraw after a knob change and the engine step time.

    .venv/bin/python scripts/bench_widgets.py            # every panel the notebooks show, 6 knob changes each
    .venv/bin/python scripts/bench_widgets.py --reps 10 --panels stale-is-prefilling explorer
    .venv/bin/python scripts/bench_widgets.py --idle     # the learner pauses between actions

For each panel (built headless, "verdict on every change" off) the script
steps to the step where its bug shows, then changes knobs the way a learner
does (fix on/off, seed, one scenario knob), each change keeping that step.
A change has two parts, timed apart:

* engine: building (or reusing) the engine for the new settings and bringing
  it to the step shown: not a redraw, reported as "engine after change";
* redraw: findings of every view, texts, and the selected figure drawn into
  its reused ``Figure`` and rendered to PNG. The PNG cache is emptied
  before every change, so each redraw really draws (a learner returning to
  a setting would get it from the cache, in ~1 ms).

Also reported: whether the references' second process (``lab/reference_pool.py``) was
ready and served them (where it was not, a new seed's references were computed in
the redraw, ~45 ms); the engine step time (``Engine.step_once`` + snapshot), the
redraw after a step, and the two waits a learner meets first (issue 16's
targets: first replay <= 1.5 s, every later action <= 300 ms): **build**, the
panel built from empty caches up to its first drawing, and **first replay**,
Replay pressed on a freshly built panel (the whole scenario run, judged and
drawn), both wall-clock seconds, with their process CPU seconds beside.
Wall-clock and CPU (process) time are both given: on a shared machine the
wall time includes waiting for a core. A second table gives what the learner
waits for per action (engine + redraw, wall): a step, a knob change, and the
knob changes that only toggle the fix (the explorer: only its bug selection).
The mechanism panels (``guard_grid``, ``clear_row_grid``) are timed apart:
built, then toggled to a new combination.

The launch memo (``mambalab.lab.launch_memo``) is emptied wherever the caches
are: before each panel, and again before its steps, so that the steps run
their kernels rather than replay what the first replay launched (a learner who
steps a panel without replaying it first). What a panel's own earlier actions
launched stays, as it does in Jupyter.

``--idle``: the learner pauses before each action, and the panel's idle-time
work (``mambalab.widgets.idle``: the fix toggle's other side at the step
shown, the references; a grid's neighbouring combinations) runs in the pause,
as it does on the kernel's event loop in Jupyter. Without it nothing runs
between actions (a learner clicking without reading).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

from mambalab.widgets import bug_panel, clear_caches, clear_row_grid, engine_explorer, guard_grid  # noqa: E402
from mambalab.widgets.views import clear_png_cache  # noqa: E402
from mambalab.lab import launch_memo  # noqa: E402


def forget() -> None:
    """Empty caches: sessions, verdicts, figures and memoised launches."""
    clear_caches()
    launch_memo.MEMO.clear()

_SEED_ONLY = [dict(fixed=True), dict(fixed=False), dict(seed=1), dict(fixed=True), dict(seed=2),
              dict(seed=0, fixed=False)]

# (panel, how to build it, the step to go to, the knob changes to cycle through)
PANELS = {
    "pad-minus-one": (lambda: bug_panel("pad-minus-one", auto_verdict=False), 2,
                      [dict(fixed=True), dict(fixed=False), dict(seed=1), dict(fixed=True), dict(requests=2),
                       dict(requests=3, fixed=False, seed=0)]),
    "stale-rows": (lambda: bug_panel("stale-rows", auto_verdict=False), 4,
                   [dict(fixed=True), dict(fixed=False), dict(seed=1), dict(fixed=True), dict(max_num_seqs=2),
                    dict(max_num_seqs=4, fixed=False, seed=0)]),
    "guard-lt-zero": (lambda: bug_panel("guard-lt-zero", auto_verdict=False), 2,
                      [dict(fixed=True), dict(fixed=False), dict(seed=1), dict(fixed=True), dict(requests=2),
                       dict(requests=3, fixed=False, seed=0)]),
    "spec-slots/gather": (lambda: bug_panel("spec-slots/gather", auto_verdict=False), 3,
                          [dict(fixed=True), dict(fixed=False), dict(seed=2), dict(fixed=True),
                           dict(acceptance=0.5), dict(acceptance="schedule", fixed=False, seed=0)]),
    "stale-is-prefilling": (lambda: bug_panel("stale-is-prefilling", auto_verdict=False), 4,
                            [dict(fixed=True), dict(fixed=False), dict(seed=1), dict(fixed=True),
                             dict(x_len=30), dict(x_len=36, fixed=False, seed=0)]),
    "explorer": (lambda: engine_explorer(seed=3, num_requests=4), 3,
                 [dict(bugs=["stale-is-prefilling"]), dict(bugs=[]), dict(seed=4), dict(bugs=["guard-lt-zero"]),
                  dict(acceptance=0.75), dict(seed=3, bugs=[], acceptance=0.5)]),
    # the rest of the panels the notebooks show (bug_panel("ID") at its defaults, engine_explorer())
    "spec-slots": (lambda: bug_panel("spec-slots", auto_verdict=False), 2,  # pre-fix: no engine (start-up crash)
                   [dict(fixed=True), dict(fixed=False), dict(part="spec-slots/gather"), dict(fixed=True),
                    dict(requests=1), dict(part="spec-slots", requests=2, fixed=False)]),
    "single-token-extend": (lambda: bug_panel("single-token-extend", auto_verdict=False), 3, _SEED_ONLY),
    "move-row-stale-source": (lambda: bug_panel("move-row-stale-source", auto_verdict=False), 4, _SEED_ONLY),
    "zero-accepted": (lambda: bug_panel("zero-accepted", auto_verdict=False), 2, _SEED_ONLY),
    "explorer-default": (lambda: engine_explorer(), 3,
                         [dict(bugs=["stale-rows"]), dict(bugs=[]), dict(seed=1), dict(bugs=["stale-rows"]),
                          dict(num_requests=4), dict(seed=0, bugs=[], num_requests=6)]),
}
# mechanism panels (guard_grid: notebook 01, clear_row_grid: notebook 02): each toggle replays one combination
GRIDS = {
    "guard-grid": (guard_grid, [dict(col="NULL"), dict(row=0), dict(col="NEGATIVE"), dict(col="EQ_NULL"),
                                dict(row=-1), dict(col="NONE")]),
    "clear-row-grid": (clear_row_grid, [dict(row="cpu"), dict(col=True), dict(row="none"), dict(row="both"),
                                        dict(col=False), dict(row="none")]),
}


def helper_counts() -> dict:
    """What the references' second process (``lab/reference_pool.py``) did so far: ready, asked, served, late."""
    from mambalab.lab import reference_pool

    rp = reference_pool.POOL
    return dict(references_ready=rp.ready, references_sent=rp.sent, references_served=rp.served,
                references_late=rp.late)


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def ms(xs: list[float]) -> str:
    return f"{1000 * statistics.median(xs):6.0f} / {1000 * pct(xs, 0.9):6.0f}" if xs else "     – /      –"


def idle(panel, learner_pauses: bool) -> None:
    """The learner reading between two actions: the panel's idle-time work runs (``--idle``), or none."""
    if learner_pauses and hasattr(panel, "run_idle_work"):
        panel.run_idle_work()


def bench(name: str, reps: int, learner_pauses: bool = False) -> dict:
    make, target, changes = PANELS[name]
    forget()
    clear_png_cache()
    t, c = time.perf_counter(), time.process_time()
    fresh = make()
    build, build_cpu = time.perf_counter() - t, time.process_time() - c
    idle(fresh, learner_pauses)
    t, c = time.perf_counter(), time.process_time()
    fresh.replay_button.click()
    first_replay, first_replay_cpu = time.perf_counter() - t, time.process_time() - c
    forget()
    clear_png_cache()
    p = make()
    steps, step_redraw, step_action = [], [], []
    for _ in range(target):
        clear_png_cache()
        idle(p, learner_pauses)
        t = time.perf_counter()
        p.step_button.click()
        step_action.append(time.perf_counter() - t)
        snap = p.session.snapshot(p.cursor)
        if snap is not None:  # None: the engine did not start (spec-slots pre-fix), nothing to step
            steps.append(snap.step_seconds)
        step_redraw.append(p.last_redraw_s)
    redraw, redraw_cpu, engine, knob_action, fix_action = [], [], [], [], []
    for i in range(reps):
        change = changes[i % len(changes)]
        clear_png_cache()
        p._findings_memo.clear()
        idle(p, learner_pauses)
        n = len(p.timings["redraw"])
        t = time.perf_counter()
        p.set(**change)
        knob_action.append(time.perf_counter() - t)
        if set(change) in ({"fixed"}, {"bugs"}):  # the fix toggled (the explorer: bugs selected or not)
            fix_action.append(knob_action[-1])
        assert len(p.timings["redraw"]) == n + 1, "a knob change must redraw exactly once"
        redraw.append(p.timings["redraw"][-1])
        redraw_cpu.append(p.timings["redraw_cpu"][-1])
        engine.append(p.last_engine_s)
    views = {}
    for v in p.view_names:  # one render of every view at the final state (as when its tab is opened)
        clear_png_cache()
        p.slots[v].key = None
        t = time.perf_counter()
        p._render(v)
        views[v] = time.perf_counter() - t
    return dict(panel=name, helpers=helper_counts(), build=build, build_cpu=build_cpu, first_replay=first_replay,
                first_replay_cpu=first_replay_cpu, step=steps, redraw_after_step=step_redraw, redraw=redraw, redraw_cpu=redraw_cpu,
                engine_after_change=engine, render_per_view=views, shown_step=p.cursor, step_action=step_action,
                knob_action=knob_action, fix_action=fix_action)


def bench_grid(name: str, reps: int, learner_pauses: bool = False) -> dict:
    """A mechanism panel: built (its first combination replayed and drawn), then toggled combination by combination."""
    make, changes = GRIDS[name]
    forget()
    t, c = time.perf_counter(), time.process_time()
    g = make()
    build, build_cpu = time.perf_counter() - t, time.process_time() - c
    toggle, toggle_cpu = [], []
    for i in range(reps):
        change = changes[i % len(changes)]
        idle(g, learner_pauses)
        t, c = time.perf_counter(), time.process_time()
        for axis, value in change.items():
            (g.row_toggle if axis == "row" else g.col_toggle).value = value
        toggle.append(time.perf_counter() - t)
        toggle_cpu.append(time.process_time() - c)
    return dict(panel=name, build=build, build_cpu=build_cpu, toggle=toggle, toggle_cpu=toggle_cpu)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=6, help="knob changes per panel (default 6)")
    ap.add_argument("--panels", nargs="*", default=list(PANELS) + list(GRIDS), choices=list(PANELS) + list(GRIDS))
    ap.add_argument("--idle", action="store_true",
                    help="the learner pauses between actions: the panel's idle-time work runs before each one")
    ap.add_argument("--json", type=Path, help="also write the raw timings here")
    args = ap.parse_args(argv)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{os.cpu_count()} CPUs, load average {load:.2f} at start; times in ms, median / p90"
          + ("; the learner pauses between actions (--idle)" if args.idle else "") + "\n")
    head = (f"{'panel':22s} {'redraw after knob':>17s} {'(CPU)':>15s} {'redraw after step':>17s} "
            f"{'engine step':>15s} {'engine after change':>19s} {'build s (CPU)':>14s} {'1st replay s (CPU)':>19s}")
    print(head)
    print("-" * len(head))
    results = []
    for name in [n for n in args.panels if n in PANELS]:
        r = bench(name, args.reps, args.idle)
        results.append(r)
        print(f"{name:22s} {ms(r['redraw']):>17s} {ms(r['redraw_cpu']):>15s} {ms(r['redraw_after_step']):>17s} "
              f"{ms(r['step']):>15s} {ms(r['engine_after_change']):>19s} "
              f"{r['build']:6.2f} ({r['build_cpu']:4.2f}) {r['first_replay']:10.2f} ({r['first_replay_cpu']:4.2f})",
              flush=True)
    all_redraw = [x for r in results for x in r["redraw"]]
    all_cpu = [x for r in results for x in r["redraw_cpu"]]
    print("-" * len(head))
    print(f"{'all panels':22s} {ms(all_redraw):>17s} {ms(all_cpu):>15s}")
    print("\nwhat the learner waits for (wall, engine + redraw), ms, median / p90 (issue 16: <= 300):")
    print(f"  {'panel':22s} {'step':>15s} {'knob change':>15s} {'of which fix / bug toggles':>27s}")
    for r in results:
        print(f"  {r['panel']:22s} {ms(r['step_action']):>15s} {ms(r['knob_action']):>15s} {ms(r['fix_action']):>27s}")
    print("\nrender of one view (draw into the reused figure + PNG), ms, at each panel's last state:")
    for r in results:
        print(f"  {r['panel']:22s} " + "  ".join(f"{v} {1000 * t:.0f}" for v, t in r["render_per_view"].items()))
    grids = [n for n in args.panels if n in GRIDS]
    if grids:
        print("\nmechanism panels: build (first combination replayed and drawn) s (CPU); toggle to a new "
              "combination, ms median / p90 (CPU)")
    for name in grids:
        r = bench_grid(name, args.reps, args.idle)
        results.append(r)
        print(f"  {name:22s} {r['build']:6.2f} ({r['build_cpu']:4.2f})  {ms(r['toggle'])} ({ms(r['toggle_cpu'])})",
              flush=True)
    h = helper_counts()
    print(f"\nreferences' second process (lab/reference_pool.py): ready {h['references_ready']}, "
          f"{h['references_served']} of {h['references_sent']} asked served, {h['references_late']} late (a panel "
          "whose references it did not serve computed them in its redraw)")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nload average {load:.2f} at the end")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
