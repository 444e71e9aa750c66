"""How often a random hunter workload catches each bug, under different generator biases.

The generator's biases are module constants of ``mambalab.lab.hunt_generator`` (``P_DP2``,
``P_ALL``, ``P_FIRST_SIDE_REQUEST``, ``P_SIDE_REQUEST``, ``TURN_GAPS``, ``P_CHAT_BATCH``, ...),
read when a workload is drawn, so setting them in a pool process changes the workloads it
draws. For each variant below and each bug, this runs workloads ``0..N-1`` of seeds 0–4
with the bug switched on and counts the *differential* failures (the bug
fails the workload, the fixed engine passes it): the rate, and per seed the
first workload that fails (what a hunt with that seed would need).

    MAMBALAB_DEVICE=cpu python scripts/hunt_generator_rates.py [variant,...]   # 16 processes; JOBS=n
    # fewer bugs or workloads: BUGS=move-row-stale-source,stale-rows N=40 (N: workloads per seed, every bug)

Writes ``$OUT/gen_rates.json`` (default ``/tmp``).
"""

import json
import os
import random
import sys
import time
from multiprocessing import Pool

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))

from mambalab.lab import hunt, hunt_generator, hunt_run  # noqa: E402
from mambalab.lab.bugs import BugConfig  # noqa: E402

VARIANTS = {
    # the generator before the retuning (the same knobs; it also sent 1 turn in 5 before the reply ended)
    "before": dict(P_DP2=0.5, P_ALL=0.6, P_FIRST_SIDE_REQUEST=0.35, P_SIDE_REQUEST=0.35, TURN_GAPS=(2, 2, 3, 4),
                   P_CHAT_BATCH=0.0),
    # issue 16's starting point: every burst mixed (chats, long prompts, one-token requests)
    "issue8": dict(P_CHAT_BATCH=0.0),
    "now": {},  # the module's defaults
}
DEFAULTS = {name: getattr(hunt_generator, name) for v in VARIANTS.values() for name in v}
N = {"move-row-stale-source": 96, "stale-is-prefilling": 24, "spec-slots/gather": 12, "stale-rows": 16}
if os.environ.get("BUGS"):
    N = {b: N.get(b, 16) for b in os.environ["BUGS"].split(",")}
if os.environ.get("N"):
    N = {b: int(os.environ["N"]) for b in N}


def job(args):
    variant, bug, seed, i = args
    for name, value in {**DEFAULTS, **VARIANTS[variant]}.items():  # a pool process runs every variant
        setattr(hunt_generator, name, value)
    t = time.process_time()
    with hunt._without_overflow_asserts():
        w = hunt_generator.random_hunt_workload(random.Random(hunt_generator.workload_seed(seed, i)))
        verdict, _ = hunt_run.run(w, BugConfig.with_bugs(bug))
        hit = not verdict.ok and hunt_run.run(w, BugConfig())[0].ok
    return variant, bug, seed, i, hit, time.process_time() - t


def main() -> None:
    variants = sys.argv[1].split(",") if len(sys.argv) > 1 else list(VARIANTS)
    jobs = [(v, b, s, i) for v in variants for b, n in N.items() for s in range(5) for i in range(n)]
    random.Random(0).shuffle(jobs)
    out: dict = {}
    with Pool(int(os.environ.get("JOBS", "16")), maxtasksperchild=50) as p:
        for v, b, s, i, hit, cpu in p.imap_unordered(job, jobs, chunksize=2):
            out.setdefault((v, b), []).append((s, i, hit, cpu))
    rows = []
    for (v, b), xs in sorted(out.items()):
        hits = sum(x[2] for x in xs)
        first = [min((i + 1 for (ss, i, h, _) in xs if ss == s and h), default=None) for s in range(5)]
        rows.append(dict(variant=v, knobs={**DEFAULTS, **VARIANTS[v]},
                         bug=b, workloads=len(xs), failing=hits, rate=round(hits / len(xs), 4),
                         cpu_per_workload=round(sum(x[3] for x in xs) / len(xs), 2), first_failing_per_seed=first))
        print(f"{v:10s} {b:24s} {len(xs):4d} workloads, {hits:3d} failing ({hits / len(xs):.3f}); "
              f"first per seed {first}", flush=True)
    path = os.path.join(os.environ.get("OUT", "/tmp"), "gen_rates.json")
    with open(path, "w") as f:
        json.dump(rows, f, indent=1, default=list)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
