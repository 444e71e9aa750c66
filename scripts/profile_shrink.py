"""Where a hunt's shrinking spends its engine runs: per family of candidates, runs, kept, seconds.

    MAMBALAB_DEVICE=cpu .venv/bin/python scripts/profile_shrink.py stale-rows --seed 0

Runs ``hunt --bugs BUG --seed N`` in this process with ``hunt_run.run`` wrapped: every engine run
(memo hits are not runs) is attributed to the shrinking family whose candidate it judges (``cut``,
``chunks``, ``earlier``, ``drops``, ``config``, ``one_earlier``, ``lengths``, ``cosmetic``;
``search`` before the failure is found, ``baseline`` for the fixed engine's runs while shrinking),
with its engine steps and seconds; and the process CPU seconds of the whole hunt.
The evidence for the shrinker plan in docs/speed.md; it changes nothing in the hunter.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("MAMBALAB_DEVICE", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

import importlib  # noqa: E402

from mambalab.lab import hunt as H  # noqa: E402
from mambalab.lab.bugs import BugConfig  # noqa: E402


def _modules():
    """The hunter's modules that bind ``run`` / ``_families`` (hunt_run.py and shrink.py, or hunt.py
    before they were split out)."""
    mods = [H]
    for name in ("mambalab.lab.hunt_run", "mambalab.lab.shrink"):
        try:
            mods.append(importlib.import_module(name))
        except ImportError:
            pass
    return mods


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bug")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=1,
                    help="hunt(jobs=N): with N > 1 the runs happen in worker processes, so the per-family "
                         "table is empty; the totals count the workers' CPU")
    args = ap.parse_args(argv)

    current = {"family": "search"}
    stats: dict[str, dict] = defaultdict(lambda: dict(runs=0, steps=0, seconds=0.0))
    mods = _modules()
    orig_run = next(m.run for m in mods if hasattr(m, "run"))
    orig_families = next(m._families for m in mods if hasattr(m, "_families"))
    saved = [(m, n, getattr(m, n)) for m in mods for n in ("run", "_families") if hasattr(m, n)]

    def families(w, v, r):
        out = []
        for fam in orig_families(w, v, r):
            def wrapped(fam=fam):
                for what, cand in fam():
                    current["family"] = fam.__name__
                    yield what, cand
            wrapped.__name__ = fam.__name__
            out.append(wrapped)
        return out

    def run(workload, bugs, *a, **k):
        fam = current["family"] if bugs.enabled else ("baseline" if current["family"] != "search" else "search")
        t = time.perf_counter()
        v, rec = orig_run(workload, bugs, *a, **k)
        s = stats[fam]
        s["runs"] += 1
        s["steps"] += v.steps
        s["seconds"] += time.perf_counter() - t
        return v, rec

    for m, n, _ in saved:
        setattr(m, n, run if n == "run" else families)
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        r = H.hunt(BugConfig.with_bugs(args.bug), budget=args.budget, seed=args.seed,
                   progress=lambda m: None, jobs=args.jobs)
    finally:
        for m, n, v in saved:
            setattr(m, n, v)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if args.jobs > 1:  # this process only waited: the hunt's own count has the workers' CPU
        wall, cpu = r.total_seconds, r.total_cpu_seconds
    found = r.found
    print(f"hunt --bugs {args.bug} --seed {args.seed} --jobs {args.jobs}: {wall:.1f} s wall, {cpu:.1f} s CPU, "
          f"load {os.getloadavg()[0]:.2f}")
    if found is None:
        print("not found")
        return 1
    sh = found.shrunk
    print(f"found at workload {found.index + 1} ({found.verdict.steps} steps); shrunk to "
          f"{found.minimal_verdict.steps} steps in {sh.runs} runs, {sh.seconds:.1f} s")
    for line in sh.log:
        print(f"  kept: {line}")
    print(f"{'family':12s} {'runs':>5s} {'engine steps':>12s} {'seconds':>8s}")
    for fam, s in sorted(stats.items(), key=lambda kv: -kv[1]["seconds"]):
        print(f"{fam:12s} {s['runs']:5d} {s['steps']:12d} {s['seconds']:8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
