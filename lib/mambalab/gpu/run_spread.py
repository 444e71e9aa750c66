"""How issue 14's comparison with vLLM moves from one recording to the next on the same kernels.

One recording reads each row's ratio (vLLM's time over mambalab's, :func:`gpu_report.comparison_rows`) once. Two runs of
the same tree on the same card differ by a percent or two in some rows, so a row near its target can be met in one
run and missed in the next. Given several recordings of the same kernels, this reads every row in each of them: its
lowest, median and highest ratio, and in how many runs it met its target. The target is each run's own
(:func:`gpu_report.target_speedup` of that run's vLLM % of copy, which moves too). The worst run is what a claim
quotes. Not a mirror of an upstream file.

``python -m mambalab.gpu.run_spread [RUN.json RUN.json ...]`` prints the summary and the rows whose verdict is not
the same in every run, or whose lowest ratio is within 2% of its target (no files: the installed recording and its
repeats, :func:`recorded_runs`).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence

from mambalab.gpu.gpu_report import (KERNEL_NAMES, RECORDED_VLLM_BENCH, RESULTS, BenchData, batch_label,
                                     comparison_rows, load)
from mambalab.viz.text import Text

NEAR = 0.02  # a row whose lowest ratio is within this fraction of its target is listed as near its line
SAME = ("device", "torch", "triton", "vllm")  # environment fields every run of a spread shares
# The installed recording's repeats: the same bench on the same kernels, run twice back to back on one H200 about an
# hour after it (call 297, at 09c3ff2; the recording is call 294's, at 3f389b5: the commits between change no kernel
# or launch rule). A new recording is installed with its own repeats (these files, REPEATS_OF and chapter 06's
# reading of them); REPEATS_OF is the start of the sha256 of the recording they repeat, so a test notices a recording
# installed alone.
RECORDED_REPEATS = (RESULTS / "bench-h200-vllm-repeat-1.json", RESULTS / "bench-h200-vllm-repeat-2.json")
REPEATS_OF = "1894a9492b9fb30a"


def recorded_runs() -> list[BenchData]:
    """The installed recording (:data:`gpu_report.RECORDED_VLLM_BENCH`) and its repeats (:data:`RECORDED_REPEATS`)."""
    return [load(p) for p in (RECORDED_VLLM_BENCH, *RECORDED_REPEATS)]


def _keyed(data: BenchData) -> dict[tuple, dict]:
    return {(r["config"], r["batch"], r["captured"]): r for r in comparison_rows(data)}


def spread_rows(runs: Sequence[BenchData]) -> list[dict]:
    """One dict per row that every run has: the ratios in run order (``ratios``; ``after`` after a torch kernel, or
    None where a run did not time it), their ``lo`` / ``median`` / ``hi``, each run's target (``needs``), and in how
    many runs the row met its target (``met``), was ahead of vLLM (``ahead``) and was behind it after a torch kernel
    (``behind_after``)."""
    if len(runs) < 2:
        raise ValueError(f"a spread needs two runs or more, got {len(runs)}")
    for field in SAME:
        seen = [d.environment.get(field) for d in runs]
        if len(set(seen)) > 1:
            raise ValueError(f"runs of different set-ups are not a spread: {field} {seen}")
    per = [_keyed(d) for d in runs]
    keys = set(per[0]).intersection(*per[1:])
    out = []
    for key in sorted(keys, key=lambda k: (per[0][k]["kernel"], k[0], k[2], k[1])):
        rs = [p[key] for p in per]
        ratios = [r["speedup"] for r in rs]
        after = [r["speedup_after_torch"] for r in rs]
        after = None if any(a is None for a in after) else after
        out.append(dict(kernel=rs[0]["kernel"], config=key[0], batch=key[1], captured=key[2], ratios=ratios,
                        lo=min(ratios), median=statistics.median(ratios), hi=max(ratios),
                        needs=[r["need"] for r in rs], met=sum(r["met"] for r in rs),
                        ahead=sum(x >= 1.0 for x in ratios), after=after,
                        behind_after=0 if after is None else sum(a < 1.0 for a in after)))
    return out


def _verdicts(rows: list[dict], n: int, field: str) -> tuple[int, int, int]:
    """How many rows have ``field`` in every run, in some, in none."""
    every = sum(r[field] == n for r in rows)
    none = sum(r[field] == 0 for r in rows)
    return every, len(rows) - every - none, none


def spread_summary(runs: Sequence[BenchData]) -> Text:
    """Per kernel: rows met in every run, in some, in none; ahead of vLLM in every run; behind after a torch kernel in
    every run, in some; and how far a row's ratio moves between runs (highest over lowest)."""
    rows = spread_rows(runs)
    n = len(runs)
    dates = ", ".join(d.environment.get("date", "?") for d in runs)
    lines = [f"{n} runs ({dates}); {len(rows)} rows in every run"]
    for k in ("ssu", "gdn", "conv"):
        mine = [r for r in rows if r["kernel"] == k]
        if not mine:
            continue
        met = _verdicts(mine, n, "met")
        ahead = sum(r["ahead"] == n for r in mine)
        timed = [r for r in mine if r["after"] is not None]
        behind = _verdicts(timed, n, "behind_after")
        lines.append(f"{KERNEL_NAMES[k]}: {len(mine)} rows; target met in every run {met[0]}, in some {met[1]}, in "
                     f"none {met[2]}; ahead of vLLM in every run {ahead}; after a torch kernel ({len(timed)} rows) "
                     f"behind in every run {behind[0]}, in some {behind[1]}")
    moves = sorted(((r["hi"] / r["lo"] - 1.0, r) for r in rows), key=lambda m: m[0])
    if moves:
        top, worst = moves[-1]
        mid = statistics.median(m for m, _ in moves)
        lines.append(f"a row's ratio between runs (highest over lowest): median +{mid:.1%}, "
                     f"90th percentile +{moves[int(0.9 * (len(moves) - 1))][0]:.1%}, largest +{top:.1%} "
                     f"({worst['config']} at {batch_label(worst['batch'], worst['captured'])})")
    return Text("\n".join(lines))


def spread_table(runs: Sequence[BenchData], *, near: float = NEAR) -> Text:
    """The rows whose verdict differs between runs or that miss in every run, and those met in every run whose lowest
    ratio is within ``near`` of the target; then the rows behind vLLM after a torch kernel in any run."""
    rows = spread_rows(runs)
    n = len(runs)
    runs_head = " ".join(f"{'run ' + str(i + 1):>7}" for i in range(n))
    head = f"{'configuration':<56} {'batch':>7} {runs_head}  {'lowest':>7} {'target':>6}  met"
    lines = [head, "-" * len(head)]

    def ratios(xs):
        return " ".join(f"{x:>6.3f}x" for x in xs)
    for r in rows:
        need = max(r["needs"])
        if r["met"] == n and r["lo"] >= need * (1.0 + near):
            continue
        target = "/".join(sorted({f"{x:.1f}x" for x in r["needs"]}))
        lines.append(f"{r['config']:<56} {batch_label(r['batch'], r['captured']):>7} {ratios(r['ratios'])}  "
                     f"{r['lo']:>6.3f}x {target:>6}  {r['met']}/{n}")
    behind = [r for r in rows if r["behind_after"]]
    lines += ["", f"after a torch kernel, behind vLLM in some run ({len(behind)} rows):"]
    for r in behind:
        lines.append(f"{r['config']:<56} {batch_label(r['batch'], r['captured']):>7} {ratios(r['after'])}  "
                     f"behind in {r['behind_after']}/{n}")
    return Text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mambalab.gpu.run_spread", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="*", help="bench JSON files (python -m mambalab bench --json) of the same kernels "
                    "(none: the installed recording and its repeats)")
    ap.add_argument("--near", type=float, default=NEAR, help="list rows met in every run within this of the target")
    args = ap.parse_args(argv)
    runs = [load(p) for p in args.runs] if args.runs else recorded_runs()
    print(spread_summary(runs))
    print()
    print(spread_table(runs, near=args.near))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
