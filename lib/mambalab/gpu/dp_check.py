"""The DP launcher on GPUs, checked against the in-process engine on the CPU (issue 15).

One process per GPU (``cuda:0``, ``cuda:1``), NCCL for the batch all-reduce, real
CUDA graphs captured by each rank at start-up. The check runs

* the scenarios of #37728 (``stale-rows``) and #49757 (``move-row-stale-source``),
  pre-fix and fixed, on several seeds;
* random DP-2 workloads with every fix on;

once through :func:`mambalab.engine.dp_launcher.run_workloads_distributed` on the
chosen device and once with the in-process engine on the CPU (Triton's interpreter,
in separate processes with ``MAMBALAB_DEVICE=cpu``, meanwhile), and compares the
verdict (kind, diverging requests, first divergence: step, rank, request, position,
expected and got tokens), the mechanism sentences and the step records. Each rank
reports its captured graph sizes, how many are real ``torch.cuda.CUDAGraph`` objects
and how often they were replayed. Then it plants a kernel fault on rank 1
(``inject_fault=(1, step, "kernel")``), times how long the launcher takes to end the
run with :class:`~mambalab.engine.dp_launcher.DistributedRunError`, and checks that
the next run starts clean.

``python -m mambalab.gpu.dp_check --out DIR`` writes ``DIR/dp-check.json`` and
``DIR/dp-check.txt``; ``tests/test_dp_gpus.py`` asserts on the same result
(``scripts/dp_gpus.sh`` runs both on a machine with two GPUs). On the CPU
(``--device cpu``) it checks the gloo path the same way; the planted fault is then
stopped before it happens (a crash verdict, no error).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import platform
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

from mambalab.lab.bugs import BugConfig
from mambalab.lab.scenarios import scenario_for, signatures
from mambalab.lab.verdict import Verdict
from mambalab.lab.workload import Workload, random_workload
from mambalab.lab.worker_process import child_env
from mambalab.viz.text import Text

REPLAY_BUGS = ("stale-rows", "move-row-stale-source")
SEEDS = (0, 1, 2)
NUM_RANDOM = 10
RANDOM_SEED0 = 1500
FAULT = (1, 5, "kernel")  # rank 1 idles at step 5 of stale-rows(0): its dummy batch reads the plant
FAULT_LIMIT_S = 60.0


@dataclass
class Case:
    name: str
    kind: str  # "replay" | "random"
    workload: Workload
    bugs: BugConfig


def random_case(i: int) -> Case:
    """The ``i``-th random DP-2 workload: both cache modes, with and without speculative decoding."""
    seed = RANDOM_SEED0 + i
    mode = ("none", "all")[i % 2]
    spec = (0, 0, 1)[i % 3]
    w = random_workload(seed, data_parallel_size=2, mamba_cache_mode=mode, num_speculative_tokens=spec)
    return Case(f"random seed {seed} ({mode}, spec {spec})", "random", w, BugConfig())


def cases(seeds=SEEDS, num_random: int = NUM_RANDOM, bugs=REPLAY_BUGS) -> list[Case]:
    out = [Case(f"{bug} seed {seed} {'fixed' if fixed else 'pre-fix'}", "replay", scenario_for(bug)(seed),
                BugConfig() if fixed else BugConfig.with_bugs(bug))
           for bug in bugs for seed in seeds for fixed in (False, True)]
    return out + [random_case(i) for i in range(num_random)]


# -- the CPU side: the in-process engine, in processes of their own --------------------------

def _cpu_refs_main(in_path: str, out_path: str) -> int:
    """``python -m mambalab.gpu.dp_check --cpu-refs IN OUT``: run each pickled (workload, bugs)
    with the in-process engine here (this process's device; the caller sets it to the CPU)."""
    from mambalab.lab.scenarios import run_workload

    with open(in_path, "rb") as f:
        work = pickle.load(f)
    out = [run_workload(w, b) for w, b in work]
    with open(out_path + ".tmp", "wb") as f:
        pickle.dump(out, f)
    os.replace(out_path + ".tmp", out_path)
    return 0


def start_cpu_refs(work: list[tuple[Workload, BugConfig]], tmp: Path, procs: int = 8):
    """Start the in-process CPU runs in ``procs`` processes (``MAMBALAB_DEVICE=cpu``); returns a
    function that waits and gives the results in order."""
    env = child_env(MAMBALAB_DEVICE="cpu", OMP_NUM_THREADS="1")
    chunks = [list(range(i, len(work), procs)) for i in range(min(procs, len(work)))]
    running = []
    for c, idx in enumerate(chunks):
        src, dst = tmp / f"cpu-in-{c}.pkl", tmp / f"cpu-out-{c}.pkl"
        with open(src, "wb") as f:
            pickle.dump([work[i] for i in idx], f)
        log = open(tmp / f"cpu-{c}.log", "wb")
        p = subprocess.Popen([sys.executable, "-m", "mambalab.gpu.dp_check", "--cpu-refs", str(src), str(dst)],
                             env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        running.append((p, idx, dst, log))

    def wait(timeout_s: float = 240) -> list[tuple[Verdict, list]]:
        results: list = [None] * len(work)
        for p, idx, dst, log in running:
            rc = p.wait(timeout=timeout_s)
            log.close()
            if rc != 0:
                raise RuntimeError(f"CPU reference process failed (exit {rc}):\n"
                                   + Path(log.name).read_text(errors="replace")[-3000:])
            with open(dst, "rb") as f:
                for i, r in zip(idx, pickle.load(f)):
                    results[i] = r
        return results

    return wait


# -- comparing ----------------------------------------------------------------------------

def verdict_key(v: Verdict) -> dict:
    """What must agree across devices: the outcome, which requests diverge and the first
    divergence (a final-state divergence's magnitude is left out: it is a float)."""
    d = v.first
    first = None if d is None else [d.kind, d.step, d.rank, d.req_id, d.position, d.expected,
                                    d.got if d.kind == "token" else None]
    kind = "illegal" if v.illegal else "crash" if v.crash else "ok" if v.ok else "diverged"
    return dict(kind=kind, ok=v.ok, diverging=sorted({x.req_id for x in v.divergences}), first=first,
                crash=None if v.crash is None else [v.crash.kind, v.crash.step, v.crash.rank])


def compare(case: Case, cpu: tuple[Verdict, list], run) -> dict:
    """One row of the check: the CPU's and this device's verdict, and what agrees."""
    v_cpu, recs_cpu = cpu
    v_dev, recs_dev = run.verdict, run.records
    sig_cpu, sig_dev = signatures(recs_cpu, v_cpu), signatures(recs_dev, v_dev)
    dummies = sorted({r.rank for r in recs_dev if r.kind == "dummy"})
    return dict(
        name=case.name, kind=case.kind, cpu=v_cpu.summary(), device=v_dev.summary(),
        same_verdict=verdict_key(v_cpu) == verdict_key(v_dev),
        same_first=verdict_key(v_cpu)["first"] == verdict_key(v_dev)["first"],
        same_signatures=sig_cpu == sig_dev, same_records=recs_cpu == recs_dev,
        same_verdict_dict=v_cpu.to_dict() == v_dev.to_dict(),
        cpu_key=verdict_key(v_cpu), device_key=verdict_key(v_dev), signatures=sig_dev,
        num_records=len(recs_dev), dummy_ranks=dummies,
        full_dummy_replays=sum(1 for r in recs_dev if r.kind == "dummy" and r.mode == "FULL"),
        ranks=run.ranks)


def environment(device: str) -> dict:
    import torch
    import triton

    env = dict(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), host=platform.node(),
               python=platform.python_version(), torch=torch.__version__, triton=triton.__version__,
               device=device)
    if device == "cuda":
        env["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        v = torch.cuda.nccl.version()
        env["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        env.update({k: os.environ.get(k, "(unset)") for k in ("NCCL_NVLS_ENABLE", "TORCH_NCCL_ASYNC_ERROR_HANDLING")})
    return env


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:6000]


def run_check(device: str = "cuda", *, seeds=SEEDS, num_random: int = NUM_RANDOM, fault: bool = True,
              cpu_procs: int = 8, timeout_s: float = 150, log=print) -> dict:
    """The whole check (see the module docstring); returns a JSON-able dict.

    Two launches (the scenario replays, then the random workloads), then the planted fault and
    the run after it. A stage that fails is recorded (``errors``) and the others still run, so
    that one device session brings back everything it can."""
    from mambalab.engine.dp_launcher import run_workload_distributed, run_workloads_distributed
    from mambalab.lab.scenarios import stale_rows

    t0 = time.monotonic()
    all_cases = cases(seeds, num_random)
    out: dict = dict(environment=environment(device), rows=[], timings={}, errors={})
    with tempfile.TemporaryDirectory(prefix="mambalab-dpcheck-") as d:
        wait_cpu = start_cpu_refs([(c.workload, c.bugs) for c in all_cases], Path(d), cpu_procs)
        runs: list = []
        for kind in ("replay", "random"):
            part = [c for c in all_cases if c.kind == kind]
            log(f"[dp_check] {len(part)} {kind} runs on {device}, one launch of the rank processes")
            t = time.monotonic()
            try:
                runs += run_workloads_distributed([(c.workload, c.bugs) for c in part], timeout_s=timeout_s,
                                                  device=device)
            except Exception as e:  # noqa: BLE001 - recorded; the other stages still run
                out["errors"][kind] = _error(e)
                runs += [None] * len(part)
                log(f"[dp_check] {kind} launch failed: {_error(e)[:2000]}")
            out["timings"][f"{kind}_launch_s"] = round(time.monotonic() - t, 1)
        t = time.monotonic()
        try:
            cpu = wait_cpu()
        except Exception as e:  # noqa: BLE001
            out["errors"]["cpu"] = _error(e)
            cpu = [None] * len(all_cases)
        out["timings"]["cpu_wait_after_device_s"] = round(time.monotonic() - t, 1)
    for c, ref, run in zip(all_cases, cpu, runs):
        if ref is None or run is None:
            continue
        row = compare(c, ref, run)
        out["rows"].append(row)
        log(f"[dp_check] {c.name}: {'MATCH' if row['same_verdict'] and row['same_records'] else 'DIFFER'}"
            f" | {row['device']}")
    if fault:
        t = time.monotonic()
        try:
            r = run_workload_distributed(stale_rows(0), BugConfig(), inject_fault=FAULT, timeout_s=90, device=device)
            out["fault"] = dict(raised=False, verdict=r.verdict.summary(), elapsed_s=round(time.monotonic() - t, 1))
        except Exception as e:  # noqa: BLE001 - DistributedRunError expected on a GPU
            out["fault"] = dict(raised=True, error_type=type(e).__name__, rank=getattr(e, "rank", None),
                                message=str(e).splitlines()[0], log=getattr(e, "log", "")[-3000:],
                                elapsed_s=round(time.monotonic() - t, 1))
        log(f"[dp_check] planted fault {FAULT}: { {k: v for k, v in out['fault'].items() if k != 'log'} }")
        t = time.monotonic()
        try:
            r = run_workload_distributed(stale_rows(0), BugConfig(), timeout_s=90, device=device)
            out["after_fault"] = dict(ok=r.verdict.ok, verdict=r.verdict.summary(), ranks=r.ranks,
                                      elapsed_s=round(time.monotonic() - t, 1))
        except Exception as e:  # noqa: BLE001
            out["after_fault"] = dict(ok=False, verdict=_error(e), ranks=[], elapsed_s=round(time.monotonic() - t, 1))
        log(f"[dp_check] the next run: {out['after_fault']['verdict'][:300]}")
    out["timings"]["total_s"] = round(time.monotonic() - t0, 1)
    return out


# -- the record ---------------------------------------------------------------------------

def render(result: dict) -> str:
    """The check as text (``docs/results/dp-*.txt``; notebook 02 shows it)."""
    env = result["environment"]
    lines = [f"DP launcher check: {len(result['rows'])} runs on {env['device']} "
             f"({', '.join(env.get('gpus', [])) or 'CPU'}) against the in-process engine on the CPU",
             "environment: " + ", ".join(f"{k}={v}" for k, v in env.items() if k != "gpus"), ""]
    for row in result["rows"]:
        agree = [k for k in ("same_verdict", "same_first", "same_signatures", "same_records") if row[k]]
        lines.append(f"{row['name']}: {'MATCH' if len(agree) == 4 else 'DIFFER'} "
                     f"({', '.join(a.removeprefix('same_') for a in agree) or 'nothing'} agree)")
        lines.append(f"  in-process engine, cpu : {row['cpu']}")
        lines.append(f"  DP processes, {env['device']:<8} : {row['device']}")
        for g in row["ranks"]:
            lines.append(f"  rank {g['rank']} on {g['device']} ({g['backend']}): captured {g['captured']}, "
                         f"{g['cuda_graphs']} real CUDA graphs, {g['replays']} replays")
        if row["dummy_ranks"]:
            lines.append(f"  dummy batches on rank(s) {row['dummy_ranks']}, "
                         f"{row['full_dummy_replays']} of them through a FULL graph")
    if "fault" in result:
        f = result["fault"]
        lines += ["", f"planted kernel fault {list(FAULT)} (rank, step, kind): "
                      + (f"{f.get('error_type', 'error')} after {f['elapsed_s']} s naming rank {f['rank']}: {f['message']}"
                         if f["raised"] else f"no error; verdict {f['verdict']} ({f['elapsed_s']} s)")]
        a = result["after_fault"]
        lines.append(f"the next run ({a['elapsed_s']} s): {a['verdict']}")
    for stage, err in result.get("errors", {}).items():
        lines += ["", f"stage {stage} FAILED: {err[:3000]}"]
    lines += ["", "timings: " + ", ".join(f"{k} {v}" for k, v in result["timings"].items())]
    return "\n".join(lines)


def summary(result: dict) -> dict:
    """The numbers the issue's 'done when' asks for."""
    rows = result["rows"]
    replay = [r for r in rows if r["kind"] == "replay"]
    rand = [r for r in rows if r["kind"] == "random"]
    return dict(
        replays_matching=sum(r["same_verdict"] and r["same_records"] for r in replay), replays=len(replay),
        random_ok=sum(r["same_verdict"] and r["cpu_key"]["ok"] and r["device_key"]["ok"] for r in rand),
        random=len(rand),
        fault_raised=result.get("fault", {}).get("raised"), fault_s=result.get("fault", {}).get("elapsed_s"),
        after_fault_ok=result.get("after_fault", {}).get("ok"))


def write(result: dict, out_dir: str | Path, stem: str = "dp-check") -> tuple[Path, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    j, t = out / f"{stem}.json", out / f"{stem}.txt"
    j.write_text(json.dumps(result, indent=1, default=str))
    t.write_text(render(result) + "\n\nsummary: " + json.dumps(summary(result)) + "\n")
    return j, t


RECORDED = Path(__file__).resolve().parent / "recorded" / "dp-h200x2.json"


def load_recorded(path: str | Path = RECORDED) -> dict | None:
    """The recorded two-GPU check (package data), or None where none was recorded."""
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else None


def gpus_here() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _tens(seconds: float) -> int:
    """``seconds`` rounded up to a multiple of ten (8.7 -> 10): how a bound reads, not a timing."""
    return max(10, math.ceil(seconds / 10) * 10)


def beside_cpu(cpu: dict[str, Verdict], *, seed: int = 0, live: bool | None = None,
               recorded: str | Path = RECORDED, width: int = 110) -> Text:
    """Notebook 02: each bug's pre-fix verdict from the in-process engine on the CPU (``cpu``:
    bug id -> verdict, run in the notebook) beside the same scenario on two GPUs, one process per
    rank over NCCL. Live where two GPUs are here (``live=None``), else the recorded run."""
    live = gpus_here() >= 2 if live is None else live
    if live:
        from mambalab.engine.dp_launcher import replay_distributed_run

        rows, head = [], f"Measured now on {gpus_here()} GPUs: one process per rank, NCCL, real CUDA graphs."
        for bug in cpu:
            result, run = replay_distributed_run(bug, seed=seed, device="cuda")
            rows.append(dict(name=f"{bug} seed {seed} pre-fix", device=result.verdict.summary(),
                             device_key=verdict_key(result.verdict), ranks=run.ranks))
        extra: list[str] = []
    else:
        rec = load_recorded(recorded)
        if rec is None:
            return Text("No two-GPU run is recorded in this copy of mambalab (gpu/recorded/dp-h200x2.json).")
        env = rec["environment"]
        head = (f"No two GPUs here: the recorded run ({Path(recorded).name}, {env['date']}, "
                f"{' + '.join(env.get('gpus', []))}, torch {env['torch']}, NCCL {env.get('nccl', '?')}), "
                f"one process per rank over NCCL, not a run made now.")
        rows = rec["rows"]
        s = summary(rec)
        extra = [f"The whole recorded check: {s['replays_matching']}/{s['replays']} scenario replays (pre-fix and "
                 f"fixed, seeds {sorted({int(r['name'].split('seed ')[1].split()[0]) for r in rows if r['kind'] == 'replay'})}) "
                 f"give the CPU's verdict, first divergence and step records; {s['random_ok']}/{s['random']} random "
                 f"DP-2 workloads with every fix on match their reference."]
        if rec.get("fault"):
            f = rec["fault"]
            # bounded, not timed: a notebook's checked output holds no timing (the seconds are in docs/results)
            extra.append(f"A kernel fault planted on rank 1 ended the run in under {_tens(f['elapsed_s'])} seconds: "
                         + (f["message"] if f["raised"] else f["verdict"]))
    by_name = {r["name"]: r for r in rows}
    out = [head, ""]
    for bug, v in cpu.items():
        row = by_name.get(f"{bug} seed {seed} pre-fix")
        out.append(f"{bug} (pre-fix, seed {seed})")
        out.append(f"  CPU, in-process engine : {v.summary()}")
        if row is None:
            out.append("  two GPUs               : not in the record")
            continue
        out.append(f"  two GPUs, DP processes : {row['device']}")
        for g in row["ranks"]:
            out.append(f"    rank {g['rank']} on {g['device']} ({g['backend']}): {g['cuda_graphs']} real CUDA graphs "
                       f"captured (sizes {g['captured']}), {g['replays']} replays")
        same = verdict_key(v) == row["device_key"]
        out.append(f"  same verdict and first divergence: {'yes' if same else 'NO'}")
    out[0] = textwrap.fill(head, width)
    return Text("\n".join(out + [""] + [textwrap.fill(e, width) for e in extra] if extra else out))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--cpu-refs"]:
        return _cpu_refs_main(argv[1], argv[2])
    p = argparse.ArgumentParser(prog="python -m mambalab.gpu.dp_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    p.add_argument("--out", default="dp-results")
    p.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    p.add_argument("--random", type=int, default=NUM_RANDOM)
    p.add_argument("--no-fault", action="store_true")
    p.add_argument("--cpu-procs", type=int, default=8)
    args = p.parse_args(argv)
    result = run_check(args.device, seeds=[int(s) for s in args.seeds.split(",") if s],
                       num_random=args.random, fault=not args.no_fault, cpu_procs=args.cpu_procs)
    for path in write(result, args.out):
        print(f"wrote {path}")
    print(json.dumps(summary(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
