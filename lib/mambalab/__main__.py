"""Command line: ``python -m mambalab bugs | replay | run | hunt | bench``.

Exit codes (replay, run): 0 everything matches the reference, 1 a divergence,
an illegal memory access or a crash, 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _cmd_bugs(args: argparse.Namespace) -> int:
    """The catalogue: id, PR, status upstream, first release with the fix, title."""
    from mambalab.lab.bugs import CATALOGUE

    width = max(len(b.id) for b in CATALOGUE)
    print(f"{'id':<{width}}  {'PR':<6}  {'status':<6}  {'fixed in':<8}  title")
    for b in CATALOGUE:
        parts = f"  (parts: {', '.join(b.parts)})" if b.parts else ""
        release = b.fixed_in if b.fixed_in is not None else "-"
        print(f"{b.id:<{width}}  #{b.pr:<5}  {b.status:<6}  {release:<8}  {b.title}{parts}")
        for r in b.related:
            rel = r.fixed_in if r.fixed_in is not None else "-"
            print(f"{'':<{width}}    see #{r.pr:<5} {r.status:<6}  {rel:<8}  {r.note}")
    print("\nThe default (every fix on) mirrors vLLM 0.33, except mamba_cache_mode='all' "
          "(kept as in 0.22-0.31) and zero-accepted (fixed as the open #50021 proposes).")
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from mambalab.lab.scenarios import replay, valid_bug_ids

    if args.bug not in valid_bug_ids():
        print(f"unknown bug {args.bug!r}; valid ids: {', '.join(valid_bug_ids())}", file=sys.stderr)
        return 2
    if args.dp_procs:
        return _replay_dp_procs(args)
    result = replay(args.bug, fixed=args.fixed, seed=args.seed)
    print(json.dumps(result.to_dict(), indent=1, default=str) if args.json else result.report())
    return result.exit_code


def _replay_dp_procs(args: argparse.Namespace) -> int:
    """``replay --dp-procs``: one OS process per DP rank (gloo on the CPU; NCCL, one GPU each, on CUDA)."""
    from mambalab.engine.dp_launcher import DistributedRunError, replay_distributed_run

    try:
        result, run = replay_distributed_run(args.bug, fixed=args.fixed, seed=args.seed)
    except ValueError as e:  # e.g. more DP ranks than GPUs
        print(str(e), file=sys.stderr)
        return 2
    except DistributedRunError as e:
        print(f"distributed run failed: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(dict(result.to_dict(), dp_ranks=run.ranks), indent=1, default=str))
    else:
        print(result.report())
        for line in run.describe_ranks():
            print(f"  {line}")
    return result.exit_code


def _cmd_run(args: argparse.Namespace) -> int:
    from mambalab.lab.bugs import BugConfig
    from mambalab.lab.scenarios import run_workload, signatures
    from mambalab.lab.workload import random_workload

    try:
        bugs = BugConfig.with_bugs(args.bugs) if args.bugs else BugConfig()
        workload = random_workload(args.seed, num_requests=args.requests, data_parallel_size=args.dp,
                                   num_speculative_tokens=args.spec, mamba_cache_mode=args.cache_mode)
    except ValueError as e:
        print(str(e), file=sys.stderr)
        return 2
    ranks: list[str] = []
    if args.dp_procs:
        from mambalab.engine.dp_launcher import DistributedRunError, run_workload_distributed

        try:
            run = run_workload_distributed(workload, bugs)
        except ValueError as e:
            print(str(e), file=sys.stderr)
            return 2
        except DistributedRunError as e:
            print(f"distributed run failed: {e}", file=sys.stderr)
            return 1
        verdict, records, ranks = run.verdict, run.records, run.describe_ranks()
    else:
        verdict, records = run_workload(workload, bugs)
    if args.json:
        out = dict(bugs=str(bugs), workload=workload.describe(), verdict=verdict.to_dict(),
                   signatures=signatures(records, verdict))
        if args.dp_procs:
            out["dp_ranks"] = ranks
        print(json.dumps(out, indent=1, default=str))
    else:
        print(f"{bugs}, seed {args.seed}: {verdict.summary()}")
        for line in signatures(records, verdict):
            print(f"  mechanism: {line}")
        for line in ranks:
            print(f"  {line}")
    return 0 if verdict.ok else 1


_DP_PROCS_HELP = ("one OS process per DP rank over torch.distributed (gloo on the CPU; NCCL on CUDA, "
                  "rank r on cuda:r, one GPU per rank)")


def _maybe_switch_device(argv: list[str]) -> None:
    """``--device``: the device module decides once, at import; re-exec when it must differ."""
    wanted = None
    for i, a in enumerate(argv):
        if a == "--device" and i + 1 < len(argv):
            wanted = argv[i + 1]
        elif a.startswith("--device="):
            wanted = a.split("=", 1)[1]
    if wanted not in ("cpu", "cuda"):
        return  # absent, or bad: argparse reports it
    from mambalab.device import DEVICE_TYPE

    if wanted == "cuda" and DEVICE_TYPE != "cuda":
        import torch

        if not torch.cuda.is_available():
            print("--device cuda: torch sees no CUDA device on this machine", file=sys.stderr)
            raise SystemExit(2)
    if wanted != DEVICE_TYPE and os.environ.get("MAMBALAB_DEVICE") != wanted:
        os.environ["MAMBALAB_DEVICE"] = wanted
        os.execv(sys.executable, [sys.executable, "-m", "mambalab", *argv])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    _maybe_switch_device(argv)
    if argv[:1] == ["bench"]:  # bench and hunt parse their own options
        from mambalab.gpu import bench

        return bench.main(argv[1:])
    if argv[:1] == ["hunt"]:
        from mambalab.lab import hunt

        return hunt.main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m mambalab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("bugs", help="list the bug catalogue: id, PR, title")
    sub.add_parser("bench", help="GPU bandwidth benchmark of the decode kernels (bench --help)")
    sub.add_parser("hunt", help="random workloads against the reference until a bug shows; shrink it (hunt --help)")
    p = sub.add_parser("replay", help="run a bug's scenario (pre-fix, or --fixed) against the reference")
    p.add_argument("bug", help="a catalogue id (python -m mambalab bugs), or a part such as spec-slots/gather")
    p.add_argument("--fixed", action="store_true", help="run with the fix instead of the pre-fix behaviour")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=["cpu", "cuda"], help="where kernels run (sets MAMBALAB_DEVICE)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--dp-procs", action="store_true", help=_DP_PROCS_HELP)
    p = sub.add_parser("run", help="a random workload compared with the reference")
    p.add_argument("--requests", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dp", type=int, default=1)
    p.add_argument("--spec", type=int, default=0, choices=[0, 1, 2, 3])
    p.add_argument("--cache-mode", default="none", choices=["none", "all"])
    p.add_argument("--bugs", default="", help="comma-separated bug ids to run with their pre-fix behaviour")
    p.add_argument("--device", choices=["cpu", "cuda"])
    p.add_argument("--json", action="store_true")
    p.add_argument("--dp-procs", action="store_true", help=_DP_PROCS_HELP)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: usage errors exit 2
        return int(e.code or 0)
    return {"bugs": _cmd_bugs, "replay": _cmd_replay, "run": _cmd_run}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
