"""How fast the differential bug hunter finds each catalogue bug, and what a clean run costs.

For every bug switched on alone (and each part of ``spec-slots``), hunts with
seeds 0..N-1 (default 5) and reports the median over seeds of: workloads run
until the first failure, seconds until then (wall-clock and this process's
CPU time), and engine steps of the reproduction after shrinking. Then the
clean figure: every fix on, ``--clean-budget`` workloads, nothing may fail.

    python scripts/bench_hunt.py                        # the table, printed and written to docs/hunt.md
    python scripts/bench_hunt.py --clean-json run.json  # take the clean figure from a finished
                                                        # `python -m mambalab hunt --budget 2000 --json`

The clean run of 2,000 workloads takes hours on a CPU (the Triton interpreter
runs every decode kernel); run it in the background with
``python -m mambalab hunt --budget 2000 --json > run.json`` and pass the file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

from mambalab.lab.bugs import CATALOGUE, BugConfig  # noqa: E402
from mambalab.device import DEVICE_TYPE  # noqa: E402
from mambalab.lab.hunt import hunt  # noqa: E402
from mambalab.lab.hunt_report import step_list  # noqa: E402

BUGS = [b.id for b in CATALOGUE] + ["spec-slots/width", "spec-slots/padding", "spec-slots/gather"]
TARGET_WORKLOADS, TARGET_SECONDS, TARGET_STEPS, TARGET_CLEAN = 200, 60.0, 6, 2000


def _median(xs):
    """The median, ``None`` for none; ``inf`` (a seed that found nothing) propagates as itself."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def hunt_one(bug: str, seed: int, budget: int, shrink_runs: int, hunt_jobs: int = 1) -> dict:
    load = os.getloadavg()[0]
    r = hunt(BugConfig.with_bugs(bug), budget=budget, seed=seed, shrink_runs=shrink_runs, jobs=hunt_jobs)
    f = r.found
    row = dict(bug=bug, seed=seed, found=f is not None, workloads=r.workloads, seconds=round(r.seconds, 1),
               cpu_seconds=round(r.cpu_seconds, 1), shared_with_fixed=len(r.shared), jobs=r.jobs,
               total_seconds=round(r.total_seconds, 1), total_cpu_seconds=round(r.total_cpu_seconds, 1),
               load=round(load, 2))
    if f is not None:
        row.update(kind=f.kind, original_steps=f.verdict.steps, steps=f.minimal_verdict.steps,
                   requests=sum(1 for evs in f.minimal.events.values() for e in evs
                                if type(e).__name__ == "Add"),
                   shrink_runs=f.shrunk.runs if f.shrunk else 0,
                   shrink_seconds=round(f.shrunk.seconds, 1) if f.shrunk else 0.0,
                   control_ok=f.control.ok if f.control else None,
                   summary=f.minimal_verdict.summary(), minimal=step_list(f.minimal))
    return row


def _describe(row: dict) -> str:
    if not row["found"]:
        return f"{row['bug']:<22} seed {row['seed']}: NOT found in {row['workloads']} workloads, {row['seconds']} s"
    return (f"{row['bug']:<22} seed {row['seed']}: found after {row['workloads']} workload(s), {row['seconds']} s "
            f"({row['cpu_seconds']} s CPU), {row['kind']}, shrunk to {row['steps']} steps / {row['requests']} "
            f"request(s) in {row['shrink_runs']} runs, {row['shrink_seconds']} s; in all "
            f"{row.get('total_seconds', '-')} s wall, {row.get('total_cpu_seconds', '-')} s CPU "
            f"(jobs {row.get('jobs', 1)}, load {row.get('load', '-')})")


def summarise(bug: str, rows: list[dict]) -> dict:
    found = [r for r in rows if r["found"]]
    inf = float("inf")  # a seed that found nothing counts as "more than the budget" in the medians
    return dict(
        bug=bug, seeds=rows, found=f"{len(found)}/{len(rows)}",
        workloads=_median([r["workloads"] if r["found"] else inf for r in rows]),
        seconds=_median([r["seconds"] if r["found"] else inf for r in rows]),
        cpu_seconds=_median([r["cpu_seconds"] if r["found"] else inf for r in rows]),
        # found and shrunk: the hunt's own CPU count where the row has it (workers included), else
        # the search's CPU plus the shrinking's wall seconds (older rows; one hunt a core: about equal)
        total_cpu=_median([r.get("total_cpu_seconds", r["cpu_seconds"] + r.get("shrink_seconds", 0.0))
                           if r["found"] else inf for r in rows]),
        total_wall=_median([r.get("total_seconds", r["seconds"] + r.get("shrink_seconds", 0.0))
                            if r["found"] else inf for r in rows]),
        shrink_runs=_median([r.get("shrink_runs", 0) for r in found]),
        steps=_median([r["steps"] for r in found]), max_steps=max((r["steps"] for r in found), default=None),
        kinds=sorted({r["kind"] for r in found}),
        control_ok=all(r["control_ok"] for r in found) if found else None)


def _job(args):
    return hunt_one(*args)


def clean_from(result: dict) -> dict:
    return dict(budget=result["budget"], workloads=result["workloads"], found=result["found"],
                seconds=result["seconds"], cpu_seconds=result.get("cpu_seconds"),
                rate=result["workloads_per_second"],
                summary=result.get("minimal_verdict", {}).get("summary") if result["found"] else None)


def _fmt(x, nd=1):
    if x is None:
        return "-"
    if x == float("inf"):
        return "not found"
    return f"{x:.{nd}f}" if isinstance(x, float) and not float(x).is_integer() else f"{int(x)}"


def table(results: list[dict], clean: dict | None, meta: dict) -> str:
    lines = [
        "| bug (switched on alone) | found (seeds) | workloads to find (median) | seconds to find (median, wall) "
        "| CPU seconds to find (median) | shrinking runs (median) | CPU seconds, found and shrunk (median) "
        "| wall seconds, found and shrunk (median) | failure "
        "| engine steps after shrinking (median / max) | fixed engine on the repro |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| `{r['bug']}` | {r['found']} | {_fmt(r['workloads'])} | {_fmt(r['seconds'])} | {_fmt(r['cpu_seconds'])} "
            f"| {_fmt(r.get('shrink_runs'))} | {_fmt(r.get('total_cpu'))} | {_fmt(r.get('total_wall'))} "
            f"| {', '.join(r['kinds']) or '-'} | {_fmt(r['steps'])} / {_fmt(r['max_steps'])} "
            f"| {'OK' if r['control_ok'] else ('FAILS' if r['control_ok'] is False else '-')} |")
    out = "\n".join(lines)
    if clean is not None:
        verdict = "nothing found" if not clean["found"] else f"FOUND: {clean['summary']}"
        out += (f"\n\nClean run (every fix on): {clean['workloads']} of {clean['budget']} workloads, "
                f"{verdict}; {clean['seconds']:.0f} s wall"
                + (f", {clean['cpu_seconds']:.0f} s CPU" if clean.get("cpu_seconds") else "")
                + f" ({clean['rate']:.3f} workloads/s).")
    out += (f"\n\nMachine: {meta['machine']}; device {meta['device']}; load average at the start "
            f"{meta['load']}; {meta['date']}.")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--budget", type=int, default=TARGET_WORKLOADS)
    p.add_argument("--shrink-runs", type=int, default=150)
    p.add_argument("--bugs", default=",".join(BUGS))
    p.add_argument("--clean-budget", type=int, default=0,
                   help="run the clean hunt here with this budget (0: skip, or take it from --clean-json)")
    p.add_argument("--clean-json", help="the --json output of `python -m mambalab hunt --budget 2000 --json`")
    p.add_argument("--json-out", help="also write the raw results here")
    p.add_argument("--jobs", type=int, default=1, help="hunts run in parallel processes (default 1: timings "
                   "are then one core's)")
    p.add_argument("--hunt-jobs", type=int, default=1,
                   help="each hunt's own worker processes (hunt(jobs=N), as `hunt --jobs N`); only with --jobs 1")
    p.add_argument("--out", default=str(ROOT / "docs" / "hunt.md"), help="markdown file to write ('' to skip)")
    p.add_argument("--rows", help="print the table of a finished run's rows (the --json-out FILE.rows), run nothing")
    args = p.parse_args(argv)
    if args.rows:
        rows = [json.loads(line) for line in Path(args.rows).read_text().splitlines() if line.strip()]
        bugs = list(dict.fromkeys(r["bug"] for r in rows))
        results = [summarise(b, sorted((r for r in rows if r["bug"] == b), key=lambda r: r["seed"])) for b in bugs]
        print(table(results, None, dict(machine="(from rows)", device="cpu", load="-", date="-")))
        return 0

    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    meta = dict(machine=f"{os.cpu_count()} CPU core(s)", device=DEVICE_TYPE,
                load=" ".join(f"{x:.1f}" for x in os.getloadavg()), date=time.strftime("%Y-%m-%d"))
    bugs = [b for b in args.bugs.split(",") if b]
    if args.hunt_jobs > 1 and args.jobs > 1:
        p.error("--hunt-jobs N > 1 needs --jobs 1 (a pool's processes cannot start their own)")
    jobs = [(b, seed, args.budget, args.shrink_runs, args.hunt_jobs) for b in bugs for seed in range(args.seeds)]
    rows: list[dict] = []
    rows_file = open(args.json_out + ".rows", "w") if args.json_out else None  # noqa: SIM115 - kept open

    def keep(row: dict) -> None:  # each hunt as it ends, so a run cut short still leaves its rows
        rows.append(row)
        log(_describe(row))
        if rows_file:
            rows_file.write(json.dumps(row) + "\n")
            rows_file.flush()

    if args.jobs > 1:
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(args.jobs) as pool:
            for row in pool.imap_unordered(_job, jobs):
                keep(row)
    else:
        for j in jobs:
            keep(_job(j))
    results = [summarise(b, sorted((r for r in rows if r["bug"] == b), key=lambda r: r["seed"])) for b in bugs]
    clean = None
    if args.clean_json:
        clean = clean_from(json.loads(Path(args.clean_json).read_text()))
    elif args.clean_budget:
        r = hunt(BugConfig(), budget=args.clean_budget, seed=0, progress=log if args.clean_budget > 20 else None)
        clean = clean_from(r.to_dict())
    text = table(results, clean, meta)
    print(text)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(dict(meta=meta, bugs=results, clean=clean), indent=1))
    if args.out:
        cmd = "python scripts/bench_hunt.py" + (f" --clean-json {args.clean_json}" if args.clean_json else "") \
            + (f" --clean-budget {args.clean_budget}" if args.clean_budget else "")
        Path(args.out).write_text(_doc(text, cmd, args))
    return 0


def _doc(text: str, cmd: str, args) -> str:
    return f"""# The bug hunter: each catalogue bug found by a differential test

`python -m mambalab hunt` generates small random workloads (requests with random
prompt and output lengths, aborts mid-prefill, preemptions, DP ranks going idle,
shared prompt prefixes, speculative decoding with random acceptance, both cache
modes, several `max_num_seqs` and so capture sizes), runs each through the
engine and compares every request with the same request run alone. The first
failing verdict (divergence, illegal memory access or crash) stops the hunt;
the workload is shrunk while it fails the same way and printed as a step list
and a runnable snippet. The hunter knows only the switches (`--bugs`); the
generator is the same distribution for every bug.

Targets (issue 8): each bug found within {TARGET_WORKLOADS} workloads and {TARGET_SECONDS:.0f} s (median over
{args.seeds} seeds), shrunk to at most {TARGET_STEPS} engine steps; with every fix on, {TARGET_CLEAN}
workloads find nothing.

Reproduce:

```sh
{cmd}
python -m mambalab hunt --budget 2000 --json > clean.json   # the clean figure (hours on a CPU)
```

{text}
"""


if __name__ == "__main__":
    sys.exit(main())
