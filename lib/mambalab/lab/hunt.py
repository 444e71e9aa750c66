"""The bug hunter: random workloads against the per-request reference, then shrinking.

Every catalogue bug was found late, in production, by a user whose requests
came back as garbage or whose GPU faulted. This module shows that a
*differential* test finds each of them early: generate small random
workloads (requests with random prompt and output lengths, aborts mid-prefill,
preemptions, data-parallel ranks going idle, speculative decoding with random
acceptance, both cache modes, several ``max_num_seqs`` and capture sizes), run
each through the engine and compare every request with the same request run
alone (:func:`mambalab.lab.scenarios.run_workload`). The first failing verdict (a
divergence, an illegal memory access or a crash) stops the hunt; the workload
is then shrunk while it keeps failing the same way, and printed as a step
list and as a runnable Python snippet.

The hunter knows nothing about the bugs beyond the switches it is handed: the
generator is one distribution for every bug, biased only so that the
ingredients serving engines meet (padded decode graphs, chunked prompts cut
short, idle DP ranks, shared prompt prefixes, partial draft acceptance) are
common in a workload of a few steps.

On CUDA every run goes to a worker process (:mod:`mambalab.lab.hunt_worker`): a
real GPU fault breaks the CUDA context of the process that made it, so it
ends the worker, which is replaced, and is reported as an ``illegal`` verdict.

``python -m mambalab hunt [--bugs id,...] [--budget N] [--seed N] [--device cpu|cuda] [--jobs N] [--json]``
exits 1 when it found a failure, 0 when the budget ran out clean, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from mambalab.device import without_overflow_asserts
from mambalab.lab.bugs import BugConfig
from mambalab.lab.planted import Plant
from mambalab.lab.verdict import Verdict
from mambalab.lab.workload import Workload
from mambalab.lab.hunt_generator import random_hunt_workload, workload_seed
from mambalab.lab.hunt_report import config_line, snippet, step_list
from mambalab.lab.hunt_run import RunMemo, failure_kind
from mambalab.lab.shrink import ShrinkResult, requests_in, shrink

# ---------------------------------------------------------------------------
# The hunt
# ---------------------------------------------------------------------------


@dataclass
class Found:
    index: int  # which workload of the hunt (0-based)
    workload_seed: int
    kind: str
    verdict: Verdict
    workload: Workload
    shrunk: ShrinkResult | None = None
    control: Verdict | None = None  # the minimal workload with every fix

    @property
    def minimal(self) -> Workload:
        return self.shrunk.workload if self.shrunk else self.workload

    @property
    def minimal_verdict(self) -> Verdict:
        return self.shrunk.verdict if self.shrunk else self.verdict


@dataclass
class Shared:
    """A failing workload that the fixed engine fails too (not attributable to the switched-on bugs)."""

    index: int
    workload_seed: int
    kind: str
    summary: str
    fixed_summary: str


@dataclass
class HuntResult:
    bugs: BugConfig
    seed: int
    budget: int
    workloads: int  # how many were run
    seconds: float  # wall-clock, until found (or until the budget ran out)
    cpu_seconds: float = 0.0  # this process's CPU time over the same span (robust to a busy machine)
    found: Found | None = None
    shared: list[Shared] = field(default_factory=list)  # skipped: the fixed engine fails them too
    failures: list[dict] = field(default_factory=list)  # --keep-going: every failing workload
    plant: Plant | None = None  # a planted bug the hunt ran under
    worker_starts: int = 0  # worker processes started (CUDA: the first, then one after each fault; a pool's)
    total_seconds: float = 0.0  # wall-clock of the whole hunt, shrinking included
    total_cpu_seconds: float = 0.0  # CPU of the whole hunt, the pool's workers included
    jobs: int = 1  # processes that judged runs (1: this one, or the CUDA isolation worker)

    @property
    def label(self) -> str:
        return f"{self.bugs} + {self.plant}" if self.plant is not None else str(self.bugs)

    @property
    def exit_code(self) -> int:
        return 1 if (self.found or self.failures) else 0

    @property
    def rate(self) -> float:
        return self.workloads / self.seconds if self.seconds else 0.0

    def to_dict(self) -> dict:
        out: dict = dict(bugs=sorted(self.bugs.enabled), planted=str(self.plant) if self.plant else None,
                         seed=self.seed, budget=self.budget,
                         workloads=self.workloads, seconds=round(self.seconds, 2),
                         cpu_seconds=round(self.cpu_seconds, 2), jobs=self.jobs,
                         total_seconds=round(self.total_seconds, 2),
                         total_cpu_seconds=round(self.total_cpu_seconds, 2),
                         workloads_per_second=round(self.rate, 3), found=self.found is not None,
                         worker_starts=self.worker_starts,
                         shared_with_fixed=[asdict(s) for s in self.shared], failures=self.failures)
        f = self.found
        if f is not None:
            out.update(
                workload_index=f.index, workload_seed=f.workload_seed, kind=f.kind,
                verdict=f.verdict.to_dict(), original_steps=f.verdict.steps,
                original=step_list(f.workload),
                minimal=step_list(f.minimal), minimal_verdict=f.minimal_verdict.to_dict(),
                minimal_steps=f.minimal_verdict.steps,
                shrink_runs=f.shrunk.runs if f.shrunk else 0,
                shrink_seconds=round(f.shrunk.seconds, 2) if f.shrunk else 0.0,
                shrink_log=f.shrunk.log if f.shrunk else [],
                control=f.control.to_dict() if f.control else None,
                snippet=snippet(f.minimal, self.bugs, f.kind, self.plant))
        return out

    def report(self, timings: bool = True) -> str:
        """The hunt's outcome; ``timings=False`` leaves out seconds and rates (a stable text)."""
        head, snippet_block = self.report_parts(timings)
        return head + snippet_block

    def report_parts(self, timings: bool = True) -> tuple[str, str]:
        """:meth:`report` in two parts: the prose, and the runnable snippet block ("" when nothing
        was found) that a reader copies verbatim."""
        lines: list[str] = []
        for sh in self.shared:
            lines.append(f"(workload {sh.index + 1}, seed {sh.workload_seed}: {sh.kind}, but the fixed engine "
                         f"fails it too ({sh.fixed_summary}); not counted)")
        for fl in self.failures:
            lines.append(f"workload {fl['index'] + 1} (seed {fl['workload_seed']}): {fl['summary']}  "
                         f"[{fl['config']}]")
        if self.found is None:
            what = f"{len(self.failures)} failing" if self.failures else "nothing found"
            spent = (f" in {self.seconds:.1f} s ({self.cpu_seconds:.1f} s CPU, {self.rate:.2f} workloads/s)"
                     if timings else "")
            lines.append(f"{self.label}: {self.workloads} random workloads{spent}, seed {self.seed}: {what}")
            return "\n".join(lines), ""
        f = self.found
        spent = f", {self.seconds:.1f} s ({self.cpu_seconds:.1f} s CPU)" if timings else ""
        lines += [
            f"{self.label}: FOUND after {f.index + 1} workload(s){spent} "
            f"(seed {self.seed}, workload seed {f.workload_seed}): {f.kind}",
            f"  {f.verdict.summary()}",
            f"  original workload: {len(requests_in(f.workload))} request(s), {f.verdict.steps} engine steps",
        ]
        if f.shrunk:
            took = f", {f.shrunk.seconds:.1f} s" if timings else ""
            lines.append(f"  shrunk in {f.shrunk.runs} runs{took}, to "
                         f"{len(requests_in(f.minimal))} request(s), {f.minimal_verdict.steps} engine steps:")
        else:
            lines.append("  (not shrunk)")
        lines.append("")
        lines.append("Minimal reproduction:")
        lines += [f"  {s}" for s in step_list(f.minimal)]
        lines.append(f"  => {f.minimal_verdict.summary()}")
        if f.control is not None:
            lines.append(f"  with every fix: {f.control.summary()}"
                         + ("" if f.control.ok else "  (fails without the switched-on bugs too)"))
        lines.append("")
        code = ["As Python (runs and asserts the failure):", ""]
        code += ["    " + s if s else "" for s in snippet(f.minimal, self.bugs, f.kind, self.plant).splitlines()]
        return "\n".join(lines) + "\n", "\n".join(code)


def _cpu_seconds() -> float:
    """CPU seconds of this process plus those of the hunt pools' live workers (read from /proc where
    it exists; a worker replaced during a hunt takes its seconds with it)."""
    import os

    t = time.process_time()
    try:
        from mambalab.lab.hunt_pool import _POOLS

        tick = os.sysconf("SC_CLK_TCK")
        for pool in _POOLS.values():
            for w in pool.workers:
                pid = w.pid
                if pid is not None:
                    with open(f"/proc/{pid}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    t += (int(fields[11]) + int(fields[12])) / tick
    except (OSError, ValueError, ImportError):
        pass
    return t


# Kept for scripts that wrap a bare run in it; every engine run takes it itself now (engine/core.py).
_without_overflow_asserts = without_overflow_asserts


def hunt(bugs: BugConfig, *, budget: int = 200, seed: int = 0, time_limit: float | None = None,
         do_shrink: bool = True, shrink_runs: int = 150, shrink_time: float | None = None,
         attribute: bool = True, keep_going: bool = False,
         progress: Callable[[str], None] | None = None, plant: Plant | None = None,
         jobs: int = 1) -> HuntResult:
    """Run up to ``budget`` random workloads; stop at the first failure and shrink it.

    With bugs switched on and ``attribute`` (the default), a failure counts
    only where the fixed engine passes the same workload (the differential
    between bug and fix); one the fixed engine shares is listed in
    ``shared`` and the hunt goes on. ``keep_going``: record every failing
    workload (no shrinking) and run the whole budget, to measure a rate.
    ``plant``: a planted bug (:mod:`mambalab.lab.planted`), active in the bug runs
    and absent from the control runs.

    ``jobs`` > 1: judge runs in that many worker processes
    (:mod:`mambalab.lab.hunt_pool`), the next workloads and shrinking
    candidates started ahead while the hunt waits for the one it decides on;
    the same seed finds the same workload and shrinks it to the same result
    as ``jobs=1`` (in this process). A plant runs in this process: ``jobs`` is
    then ignored. ``cpu_seconds`` counts the workers' CPU time too.
    """
    t0, c0 = time.perf_counter(), _cpu_seconds()
    from mambalab.lab.hunt_worker import shared_worker

    pool = None
    if jobs > 1 and plant is None:
        from mambalab.lab.hunt_pool import shared_pool

        pool = shared_pool(jobs)
        pool.forget()
    starts0 = shared_worker().starts + (pool.starts if pool else 0)
    fixed = BugConfig()
    suspect = bool(bugs.enabled) or plant is not None
    differential = attribute and suspect
    result = HuntResult(bugs, seed, budget, 0, 0.0, plant=plant)
    # the search, its control runs and the shrinker share the runs
    memo = RunMemo(remember_passing=False, pool=pool)
    run = memo.run
    ahead: dict[int, Workload] = {}

    def workload(j: int) -> Workload:
        if j not in ahead:
            ahead[j] = random_hunt_workload(random.Random(workload_seed(seed, j)))
        return ahead[j]

    def spent() -> tuple[float, float]:
        return time.perf_counter() - t0, _cpu_seconds() - c0

    def done() -> HuntResult:
        memo.cancel()
        result.seconds, result.cpu_seconds = spent()
        result.total_seconds, result.total_cpu_seconds = result.seconds, result.cpu_seconds
        result.jobs = pool.jobs if pool else 1
        result.worker_starts = shared_worker().starts + (pool.starts if pool else 0) - starts0
        return result

    for i in range(budget):
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            break
        for j in range(i, min(budget, i + memo.lookahead)):  # the next workloads, started ahead
            memo.prefetch(workload(j), bugs, plant=plant)
        ws = workload_seed(seed, i)
        w = workload(i)
        ahead.pop(i)
        verdict, records = run(w, bugs, plant=plant)
        result.workloads = i + 1
        kind = failure_kind(verdict)
        if progress:
            progress(f"workload {i + 1}/{budget} (seed {ws}): {verdict.steps} steps, "
                     f"{time.perf_counter() - t0:.1f} s: {kind or 'ok'}")
        if kind is None:
            continue
        control = None
        if suspect:
            control, _ = run(w, fixed)
            if differential and not control.ok:
                result.shared.append(Shared(i, ws, kind, verdict.summary(), control.summary()))
                if progress:
                    progress(f"  the fixed engine fails it too ({control.summary()}): not counted")
                continue
        if keep_going:
            result.failures.append(dict(index=i, workload_seed=ws, kind=kind, summary=verdict.summary(),
                                        config=config_line(w), steps=verdict.steps))
            continue
        memo.cancel()  # the search is over: the workloads started ahead are not needed
        result.seconds, result.cpu_seconds = spent()
        found = Found(i, ws, kind, verdict, w, control=control)
        if do_shrink:
            memo.remember_passing = True
            found.shrunk = shrink(w, bugs, verdict, records, baseline=fixed if differential else None,
                                  baseline_verdict=control, max_runs=shrink_runs, time_limit=shrink_time,
                                  progress=progress, plant=plant, memo=memo)
            if differential:
                found.control = found.shrunk.baseline
            elif suspect:
                found.control, _ = run(found.minimal, fixed)
        result.found = found
        seconds = result.seconds, result.cpu_seconds
        done()
        result.total_seconds, result.total_cpu_seconds = result.seconds, result.cpu_seconds
        result.seconds, result.cpu_seconds = seconds  # until found (the shrinking has its own)
        return result
    return done()


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mambalab hunt",
        description="Random workloads against the per-request reference until one fails; then shrink "
                    "it to a minimal reproduction. Exit 1: found one; 0: the budget ran out clean; "
                    "2: bad usage.")
    p.add_argument("--bugs", default="", help="comma-separated bug ids to run with their pre-fix behaviour "
                   "(python -m mambalab bugs); none: hunt the fixed engine")
    p.add_argument("--budget", type=int, default=200, help="how many random workloads at most (default 200)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-limit", type=float, default=None, help="stop hunting after this many seconds")
    p.add_argument("--shrink-runs", type=int, default=150, help="most engine runs spent shrinking (default 150)")
    p.add_argument("--no-shrink", action="store_true", help="report the failing workload as found")
    p.add_argument("--any-failure", action="store_true",
                   help="with --bugs: stop at any failure, also one the fixed engine shares "
                        "(default: only a workload the fixed engine passes counts)")
    p.add_argument("--keep-going", action="store_true",
                   help="run the whole budget, listing every failing workload (no shrinking)")
    p.add_argument("--device", choices=["cpu", "cuda"], help="where kernels run (sets MAMBALAB_DEVICE)")
    p.add_argument("--jobs", type=int, default=None,
                   help="worker processes judging runs ahead of the hunt, which decides as a sequential "
                        "one would (same result); default: the available CPU cores, at most 4, on the "
                        "CPU (1: sequential), 1 on CUDA")
    p.add_argument("--json", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per workload on stderr")
    return p


def main(argv: list[str] | None = None) -> int:
    from mambalab.lab.scenarios import valid_bug_ids

    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: usage errors exit 2, --help exits 0
        return int(e.code or 0)
    ids = [x.strip() for x in args.bugs.split(",") if x.strip()]
    unknown = [x for x in ids if x not in valid_bug_ids()]
    if unknown:
        print(f"unknown bug id(s) {', '.join(map(repr, unknown))}; valid ids: {', '.join(valid_bug_ids())}",
              file=sys.stderr)
        return 2
    if args.budget < 1 or args.shrink_runs < 0 or (args.time_limit is not None and args.time_limit <= 0) or (
            args.jobs is not None and args.jobs < 1):
        print("--budget must be >= 1, --shrink-runs >= 0, --time-limit > 0 and --jobs >= 1", file=sys.stderr)
        return 2
    jobs = args.jobs
    if jobs is None:
        from mambalab.device import DEVICE_TYPE
        from mambalab.lab.hunt_pool import default_jobs

        jobs = default_jobs() if DEVICE_TYPE == "cpu" else 1
    bugs = BugConfig.with_bugs(ids)
    progress = (lambda s: print(s, file=sys.stderr, flush=True)) if args.verbose else None
    result = hunt(bugs, budget=args.budget, seed=args.seed, time_limit=args.time_limit,
                  do_shrink=not args.no_shrink, shrink_runs=args.shrink_runs, attribute=not args.any_failure,
                  keep_going=args.keep_going, progress=progress, jobs=jobs)
    print(json.dumps(result.to_dict(), indent=1, default=str) if args.json else result.report())
    return result.exit_code


__all__ = ["Found", "HuntResult", "Shared", "hunt", "main"]
