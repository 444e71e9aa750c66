"""Profile where the CPU interpreter's time goes: a replay, clean hunt workloads, a hunt with shrinking.

    MAMBALAB_DEVICE=cpu .venv/bin/python scripts/profile_speed.py replay stale-rows
    MAMBALAB_DEVICE=cpu .venv/bin/python scripts/profile_speed.py clean --budget 10
    MAMBALAB_DEVICE=cpu .venv/bin/python scripts/profile_speed.py hunt stale-rows --seed 0

Each run is profiled with cProfile (saved to ``--out``, default /tmp/mambalab-<what>.prof) and
summarised as fractions of the total by bucket: the sanitizer's own code, Triton's interpreter
(split into its per-call language patching, its int32-overflow asserts and the rest of the
kernel execution), the model and engine outside kernels, and imports. The fractions are what
docs/speed.md quotes: on a shared machine they move far less with load than wall time does.
A hunt also reports engine runs (the unit a shrinker spends), counted by wrapping
``hunt_run.run`` (memo hits are not runs).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

os.environ.setdefault("MAMBALAB_DEVICE", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

def cumulative(stats: pstats.Stats, match) -> float:
    """Cumulative seconds of the outermost calls matching ``match`` (not double counting recursion)."""
    total = 0.0
    for (f, _line, n), (_cc, _nc, _tt, ct, callers) in stats.stats.items():
        if not match(f, n):
            continue
        # count only calls whose caller is not itself matched (outermost)
        outer_ct = 0.0
        for (cf, _cl, cn), val in callers.items():
            if not match(cf, cn):
                outer_ct += val[3]
        total += outer_ct
    return total


def own(stats: pstats.Stats, match) -> float:
    """Own (exclusive) seconds of the functions matching ``match``."""
    return sum(tt for (f, _l, n), (_cc, _nc, tt, _ct, _c) in stats.stats.items() if match(f, n))


def summary(path: Path, wall: float, extra: dict) -> None:
    st = pstats.Stats(str(path))
    total = st.total_tt
    rows = [
        ("all (cProfile total)", total),
        ("sanitized launches (sanitizer.launch, incl. the kernels)",
         cumulative(st, lambda f, n: "mambalab/lab/sanitizer" in f and n == "launch")),
        ("  interpreter: language patching (_patch_lang)",
         cumulative(st, lambda f, n: f.endswith("runtime/interpreter.py") and n == "_patch_lang")),
        ("  interpreter: int32-overflow asserts",
         cumulative(st, lambda f, n: f.endswith("language/semantic.py") and n == "binary_op_sanitize_overflow_impl")),
        ("  sanitizer: address checks (_Launch.guard, incl. its NumPy)",
         cumulative(st, lambda f, n: "mambalab/lab/sanitizer" in f and n in ("guard", "_note"))),
        ("  sanitizer: argument tagging (entry_for) and the hooks' own lines",
         cumulative(st, lambda f, n: "mambalab/lab/sanitizer" in f and n == "entry_for")
         + own(st, lambda f, n: "mambalab/lab/sanitizer" in f and n.startswith("_hook_"))),
        ("  sanitizer: per-launch setup (_flatten_params, check_supported)",
         cumulative(st, lambda f, n: "mambalab/lab/sanitizer" in f and n in ("_flatten_params", "check_supported"))),
        ("  interpreter cache hooks' own lines (mambalab.lab.interpreter_cache)",
         own(st, lambda f, n: "mambalab/lab/interpreter_cache" in f)),
    ]
    launches = rows[1][1]
    rest = launches - sum(s for _, s in rows[2:])
    rows.append(("  the rest: the interpreter running the kernels' Python", rest))
    rows.append(("outside kernel launches (engine, model's torch ops, reference)", total - launches))
    calls = sum(nc for (_cc, nc, _tt, _ct, _c) in st.stats.values())
    print(f"\nwall {wall:.2f} s; cProfile total {total:.2f} s (profiling inflates it); "
          f"{calls:,} Python function calls (independent of load)")
    for k, v in extra.items():
        print(f"{k}: {v}")
    print(f"{'bucket':64s} {'s':>7s} {'%':>6s}")
    for name, s in rows:
        print(f"{name:64s} {s:7.2f} {100 * s / total:5.1f}%")
    print("\ntop 12 by own time:")
    st.sort_stats("tottime").print_stats(12)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["replay", "clean", "hunt"])
    ap.add_argument("bug", nargs="?", default="stale-rows")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=int, default=10)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--no-profile", action="store_true",
                    help="no cProfile: report wall and process CPU seconds only (for before/after timings)")
    ap.add_argument("--plain-interpreter", action="store_true",
                    help="without mambalab.lab.interpreter_cache (the interpreter as shipped: the 'before')")
    ap.add_argument("--jobs", type=int, default=1,
                    help="hunts: worker processes (hunt(jobs=N)); with N > 1 use --no-profile (the runs happen "
                         "in the workers, so 'engine runs' counts only this process's and cProfile sees none)")
    ap.add_argument("--torch-threads", type=int, help="torch.set_num_threads(N) first (plan evidence)")
    ap.add_argument("--no-overflow-asserts", action="store_true",
                    help="Triton's int32-overflow asserts off, as a hunt runs (plan evidence for replays)")
    args = ap.parse_args(argv)
    out = args.out or Path(f"/tmp/mambalab-{args.what}.prof")
    extra: dict = {}
    t_imp = time.perf_counter()
    import mambalab.lab.hunt  # noqa: F401  (imports are timed apart, not profiled)
    import mambalab.lab.scenarios  # noqa: F401

    extra["import seconds (not profiled)"] = round(time.perf_counter() - t_imp, 2)
    # the options after mambalab's import: it decides TRITON_INTERPRET before Triton is imported
    if args.plain_interpreter:
        from mambalab.lab import interpreter_cache

        interpreter_cache.install = lambda interp: None
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    if args.no_overflow_asserts:
        from dataclasses import replace

        import triton.runtime.interpreter as interpreter

        b = interpreter.interpreter_builder
        b.options = replace(b.options, sanitize_overflow=False)
    prof = cProfile.Profile()
    t0, c0 = time.perf_counter(), time.process_time()
    if not args.no_profile:
        prof.enable()
    if args.what == "replay":
        from mambalab.lab.scenarios import replay

        v = replay(args.bug)
        extra["verdict"] = v.summary() if hasattr(v, "summary") else v
    else:
        from mambalab.lab import hunt as H
        from mambalab.lab.bugs import BugConfig

        import importlib

        runs = {"n": 0}
        mods = [H]
        for name in ("mambalab.lab.hunt_run", "mambalab.lab.shrink"):  # where run() lives, once split out
            try:
                mods.append(importlib.import_module(name))
            except ImportError:
                pass
        saved = [(m, m.run) for m in mods if hasattr(m, "run")]
        orig = saved[0][1]

        def counted(*a, **k):
            runs["n"] += 1
            return orig(*a, **k)

        for m, _ in saved:
            m.run = counted
        try:
            bugs = BugConfig() if args.what == "clean" else BugConfig.with_bugs(args.bug)
            r = H.hunt(bugs, budget=args.budget, seed=args.seed, jobs=args.jobs)
        finally:
            for m, f in saved:
                m.run = f
        extra["engine runs"] = runs["n"] if args.jobs == 1 else "(in the workers)"
        extra["workloads"] = r.workloads
        if args.jobs > 1:
            extra["jobs"] = args.jobs
            extra["CPU seconds, this process and the workers"] = round(r.total_cpu_seconds, 2)
            extra["workloads per CPU second"] = round(r.workloads / r.total_cpu_seconds, 2)
            extra["workloads per wall second"] = round(r.workloads / r.total_seconds, 2)
        if r.found is not None:
            extra["found at workload"] = r.found.index + 1
            if r.found.shrunk is not None:
                extra["shrink runs"] = r.found.shrunk.runs
                extra["shrink seconds"] = round(r.found.shrunk.seconds, 1)
                extra["minimal steps"] = r.found.minimal_verdict.steps
    prof.disable()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if args.no_profile:
        for k, v in extra.items():
            print(f"{k}: {v}")
        print(f"wall {wall:.2f} s, process CPU {cpu:.2f} s (load average {os.getloadavg()[0]:.2f})")
        return 0
    prof.dump_stats(str(out))
    print(f"profile saved to {out}")
    summary(out, wall, extra)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
