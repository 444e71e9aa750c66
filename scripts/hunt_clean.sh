#!/usr/bin/env bash
# The clean run: every fix on, 16 shards of 125 workloads (seeds 100..115), one process each.
set -u
cd "$(dirname "$0")/.."
export OUT=${OUT:-.}
export MAMBALAB_DEVICE=cpu OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=$PWD/lib
mkdir -p /tmp/clean
for s in $(seq 100 115); do
  python3 -m mambalab hunt --budget 125 --seed $s --keep-going --json > /tmp/clean/$s.json 2> /tmp/clean/$s.err &
done
wait
python3 - <<'PY'
import glob, json, os
shards = [json.load(open(p)) for p in sorted(glob.glob("/tmp/clean/*.json"))]
total = sum(s["workloads"] for s in shards)
fails = [f for s in shards for f in s["failures"]]
out = dict(shards=[{k: s[k] for k in ("seed", "workloads", "seconds", "cpu_seconds", "found", "failures")} for s in shards],
           workloads=total, failures=fails, budget=sum(s["budget"] for s in shards),
           seconds=max(s["seconds"] for s in shards), cpu_seconds=sum(s["cpu_seconds"] for s in shards))
json.dump(out, open(os.environ["OUT"] + "/clean.json", "w"), indent=1)
print(f"clean run: {total} workloads over {len(shards)} shards, {len(fails)} failing; "
      f"{out['cpu_seconds']:.0f} s CPU in all, {out['seconds']:.0f} s wall")
for f in fails[:5]: print(f)
PY
tail -2 /tmp/clean/100.err
