"""Data-parallel ranks as separate OS processes over ``torch.distributed`` (gloo).

Mirrors vLLM's DP engine cores (``vllm/v1/engine/core.py`` ``DPEngineCoreProc``
and its busy loop, ``vllm/v1/worker/dp_utils.py`` ``coordinate_batch_across_dp``):
each process hosts one rank (its own scheduler, KV-cache manager, runner and
state pools, as each DP rank owns a GPU) and every step

1. all-reduces (MAX) "has unfinished work" (``_has_global_unfinished_reqs``),
   stopping when no rank has any (future events count as work);
2. schedules its own requests (``Engine.schedule_step``);
3. all-reduces (MAX) its scheduled token count;
4. executes padded to that count, or runs the dummy batch when it has nothing
   (``Engine.execute_step``, the same code the in-process engine runs).

At the end every rank's results and step records are gathered to rank 0 and
judged there with :func:`mambalab.lab.reference.judge`, as the in-process engine is.
The launcher starts ``python -m mambalab.engine.dp_launcher`` once per rank on a free
loopback port and bounds the whole run: a rank that fails or hangs ends the
run with :class:`DistributedRunError`, never a hang.
"""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from mambalab.lab.bugs import BugConfig
from mambalab.engine.core import Add, Engine, EngineConfig, EngineCrash, Event, RequestResult
from mambalab.worker.model_runner import StepRecord
from mambalab.lab.reference import judge
from mambalab.lab.verdict import Crash, Verdict
from mambalab.lab.scenarios import ReplayResult, scenario_for, signatures
from mambalab.lab.workload import Workload

_ADDR = "127.0.0.1"
_GRACE_S = 3.0  # after a rank fails: time for its peers to notice and exit by themselves


class DistributedRunError(RuntimeError):
    """A rank process failed, or the run outlived its timeout (every rank was stopped)."""

    def __init__(self, message: str, rank: int | None = None, log: str = ""):
        self.rank, self.log = rank, log
        super().__init__(message)


class _PeerLost(RuntimeError):
    """A collective failed: most likely a peer died (the peer's own error is the cause)."""


@dataclass
class _Job:
    runs: list[tuple[Workload, BugConfig]]  # one after another, each on fresh engines
    max_steps: int
    timeout_s: float
    parent_pid: int
    inject_fault: tuple | None = None


@dataclass
class _RankReport:
    """What one rank sends to rank 0 at the end."""

    rank: int
    step: int = 0
    startup_error: str | None = None
    results: list[RequestResult] = field(default_factory=list)
    records: list[StepRecord] = field(default_factory=list)
    crash_step: int | None = None
    crash_verdict: Verdict | None = None  # judged where the crash happened (the error stays local)


@dataclass
class _GatheredEngine:
    """What :func:`judge` reads from an engine, assembled from every rank's report."""

    cfg: EngineConfig
    model: object
    step: int
    results: dict[str, RequestResult]


# -- routing ---------------------------------------------------------------------------

def owners(workload: Workload) -> dict[str, int]:
    """Request id -> the DP rank its ``Add`` names."""
    return {ev.req_id: ev.rank for evs in workload.events.values() for ev in evs if isinstance(ev, Add)}


def route_events(workload: Workload, rank: int) -> dict[int, list[Event]]:
    """The events rank ``rank`` applies: its ``Add``s, and aborts/preemptions of its requests."""
    own = owners(workload)
    out: dict[int, list[Event]] = {}
    for step, evs in workload.events.items():
        mine = [ev for ev in evs if (ev.rank if isinstance(ev, Add) else own.get(ev.req_id, 0)) == rank]
        if mine:
            out[step] = mine
    return out


# -- one rank (runs in its own process) -----------------------------------------------------

def _all_reduce_max(t: torch.Tensor) -> torch.Tensor:
    try:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    except Exception as e:  # noqa: BLE001
        raise _PeerLost(f"all_reduce failed (a peer is gone?): {type(e).__name__}: {e}") from e
    return t


def _all_gather_object(obj) -> list:
    out = [None] * dist.get_world_size()
    try:
        dist.all_gather_object(out, obj)
    except Exception as e:  # noqa: BLE001
        raise _PeerLost(f"all_gather_object failed (a peer is gone?): {type(e).__name__}: {e}") from e
    return out


def _fault(job: _Job, rank: int, step: int) -> None:
    f = job.inject_fault
    if f is None or (f[0], f[1]) != (rank, step):
        return
    if len(f) > 2 and f[2] == "hang":
        while True:
            time.sleep(1)
    raise RuntimeError(f"injected fault on rank {rank} at step {step}")


def serve_rank(job: _Job, workload: Workload, bugs: BugConfig, rank: int, device: torch.device
               ) -> tuple[_RankReport, Engine | None]:
    """The DP engine core's busy loop for one rank (``DPEngineCoreProc.run_busy_loop``)."""
    report = _RankReport(rank)
    engine: Engine | None = None
    err = None
    try:
        engine = Engine(workload.cfg, bugs, dp_ranks=[rank], device=device)
    except Exception as e:  # noqa: BLE001 - e.g. a graph that cannot be captured: a verdict
        err = f"{type(e).__name__}: {e}"
    startup = next((e for e in _all_gather_object(err) if e), None)
    if startup is not None:
        report.startup_error = startup
        return report, None
    engine.schedule_events(route_events(workload, rank))
    crash: EngineCrash | None = None
    while True:
        flags = torch.tensor([int(crash is None and engine.has_work()), int(crash is not None)])
        has_work, crashed = _all_reduce_max(flags).tolist()
        if crashed or not has_work:
            break
        if engine.step >= job.max_steps:
            raise RuntimeError(f"the workload did not finish within {job.max_steps} steps")
        outputs = engine.schedule_step()
        _fault(job, rank, engine.step)
        local = max((o.total_num_scheduled_tokens for o in outputs), default=0)
        num_tokens_across_dp = int(_all_reduce_max(torch.tensor([local]))[0])
        try:
            engine.execute_step(outputs, num_tokens_across_dp)
        except EngineCrash as c:
            crash = c  # the next all-reduce stops every rank
    report.step = engine.step
    report.records = list(engine.records)
    for res in engine.results.values():
        if res.final_state is not None:
            res.final_state = {k: v.detach().cpu() for k, v in res.final_state.items()}
        report.results.append(res)
    if crash is not None:
        report.crash_step = crash.step
        report.crash_verdict = judge(engine, crash)
    return report, engine


def judge_reports(workload: Workload, reports: list[_RankReport], model) -> tuple[Verdict, list[StepRecord]]:
    """Rank 0: one verdict over every rank's results, as the in-process engine's would be."""
    reports = sorted(reports, key=lambda r: r.rank)
    startup = next((r.startup_error for r in reports if r.startup_error), None)
    if startup is not None:
        return Verdict(ok=False, crash=Crash.at_startup(startup)), []
    records = sorted((rec for r in reports for rec in r.records), key=lambda rec: (rec.step, rec.rank))
    crashed = [r for r in reports if r.crash_verdict is not None]
    if crashed:  # in-process the lowest rank crashes first: of that step only what it recorded is kept
        first = crashed[0]
        return first.crash_verdict, [rec for rec in records
                                     if rec.step != first.crash_step or rec.rank == first.rank]
    by_id = {res.req_id: res for r in reports for res in r.results}
    order = [ev.req_id for s in sorted(workload.events) for ev in workload.events[s] if isinstance(ev, Add)]
    results = {rid: by_id[rid] for rid in order if rid in by_id}
    results.update({rid: res for rid, res in by_id.items() if rid not in results})
    view = _GatheredEngine(workload.cfg, model, max(r.step for r in reports), results)
    return judge(view), records  # type: ignore[arg-type]


def _pick_device(rank: int) -> torch.device:
    from mambalab.device import DEVICE_TYPE

    if DEVICE_TYPE == "cuda":  # one GPU per DP rank, as vLLM's DP engine cores
        idx = rank % torch.cuda.device_count()
        torch.cuda.set_device(idx)
        return torch.device("cuda", idx)
    return torch.device("cpu")


def _watchdog(parent_pid: int, deadline_s: float) -> None:
    """Exit if the launcher is gone or the run is far past its time (no orphaned ranks)."""
    end = time.monotonic() + deadline_s

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent_pid or time.monotonic() > end:
                os._exit(70)

    threading.Thread(target=watch, daemon=True, name="mambalab-dp-watchdog").start()


def _worker_main(argv: list[str] | None = None) -> int:
    """Entry point of one rank process: ``python -m mambalab.engine.dp_launcher JOB OUTDIR``."""
    job_path, out_dir = (argv if argv is not None else sys.argv[1:])[:2]
    out = Path(out_dir)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    with open(job_path, "rb") as f:
        job: _Job = pickle.load(f)
    _watchdog(job.parent_pid, job.timeout_s + 10)
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    try:
        device = _pick_device(rank)
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world,
                                timeout=timedelta(seconds=job.timeout_s))
        try:
            judged = []
            for workload, bugs in job.runs:
                report, engine = serve_rank(job, workload, bugs, rank, device)
                gathered = [None] * world if rank == 0 else None
                try:
                    dist.gather_object(report, gathered, dst=0)
                except Exception as e:  # noqa: BLE001
                    raise _PeerLost(f"gather_object failed (a peer is gone?): {type(e).__name__}: {e}") from e
                if rank == 0:
                    judged.append(judge_reports(workload, gathered, engine.model if engine else None))
                del engine
            if rank == 0:
                tmp = out / "result.pkl.tmp"
                with open(tmp, "wb") as f:
                    pickle.dump(judged, f)
                tmp.rename(out / "result.pkl")
        finally:
            dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 - reported to the launcher, then exit non-zero
        (out / f"error-{rank}.txt").write_text(
            ("peer\n" if isinstance(e, _PeerLost) else "origin\n")
            + f"{type(e).__name__}: {e}\n" + traceback.format_exc())
        traceback.print_exc()
        return 1
    return 0


# -- the launcher ------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((_ADDR, 0))
        return s.getsockname()[1]


def _env(rank: int, world: int, port: int) -> dict[str, str]:
    import mambalab

    env = dict(os.environ)  # MAMBALAB_DEVICE and the rest are inherited
    lib = str(Path(mambalab.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([lib] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(MASTER_ADDR=_ADDR, MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
               WORLD_SIZE=str(world))
    env.setdefault("GLOO_SOCKET_IFNAME", "lo0" if sys.platform == "darwin" else "lo")
    return env


def _tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _launch_once(job: _Job, world: int, tmp: Path, port: int) -> list[tuple[Verdict, list[StepRecord]]]:
    job_path = tmp / "job.pkl"
    with open(job_path, "wb") as f:
        pickle.dump(job, f)
    procs: list[subprocess.Popen] = []
    logs = [tmp / f"rank-{r}.log" for r in range(world)]
    try:
        for r in range(world):
            with open(logs[r], "wb") as log:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "mambalab.engine.dp_launcher", str(job_path), str(tmp)],
                    env=_env(r, world, port), stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT))
        deadline = time.monotonic() + job.timeout_s
        failed_at = None
        while True:
            rcs = [p.poll() for p in procs]
            if all(rc == 0 for rc in rcs):
                break
            if any(rc not in (None, 0) for rc in rcs):
                failed_at = failed_at or time.monotonic()
                if all(rc is not None for rc in rcs) or time.monotonic() - failed_at > _GRACE_S:
                    _stop(procs)
                    raise _failure(procs, logs, tmp)
            if time.monotonic() > deadline:
                running = [r for r, rc in enumerate(rcs) if rc is None]
                _stop(procs)
                raise DistributedRunError(
                    f"distributed run timed out after {job.timeout_s:.0f} s (rank(s) {running} still "
                    f"running; all stopped)\n" + "\n".join(f"--- rank {r} log tail:\n{_tail(logs[r], 1500)}"
                                                   for r in range(world)))
            time.sleep(0.05)
        with open(tmp / "result.pkl", "rb") as f:
            return pickle.load(f)
    finally:
        _stop(procs)


def _failure(procs: list[subprocess.Popen], logs: list[Path], tmp: Path) -> DistributedRunError:
    """The root cause: a rank's own error before a peer's lost collective, else the lowest rank."""
    errors = {}
    for r in range(len(procs)):
        f = tmp / f"error-{r}.txt"
        if f.exists():
            kind, _, text = f.read_text(errors="replace").partition("\n")
            errors[r] = (kind, text)
    origin = [r for r, (kind, _) in errors.items() if kind == "origin"]
    failed = [r for r, p in enumerate(procs) if p.returncode not in (0, None, -9)]
    rank = (origin or sorted(errors) or failed or [0])[0]
    if rank in errors:
        text = errors[rank][1]
        first = text.splitlines()[0] if text else "?"
    else:
        text = _tail(logs[rank])
        first = f"exited with code {procs[rank].returncode}"
    return DistributedRunError(f"rank {rank} failed: {first} (every rank was stopped)\n{text}", rank, text)


def run_workload_distributed(workload: Workload, bugs: BugConfig, *, timeout_s: float = 120,
                             max_steps: int = 200, inject_fault: tuple | None = None
                             ) -> tuple[Verdict, list[StepRecord]]:
    """Run ``workload`` with one process per DP rank and judge it on rank 0.

    The multi-process twin of :func:`mambalab.lab.scenarios.run_workload`: same verdict, same
    step records. ``timeout_s`` bounds the whole run (start-up included); a failing or hung
    rank raises :class:`DistributedRunError`. ``inject_fault=(rank, step)`` makes that rank
    raise at that step (``(rank, step, "hang")``: hang), for tests.
    """
    return run_workloads_distributed([(workload, bugs)], timeout_s=timeout_s, max_steps=max_steps,
                                     inject_fault=inject_fault)[0]


def run_workloads_distributed(runs: list[tuple[Workload, BugConfig]], *, timeout_s: float = 300,
                              max_steps: int = 200, inject_fault: tuple | None = None
                              ) -> list[tuple[Verdict, list[StepRecord]]]:
    """Several runs, one after another, in one launch of the rank processes (start-up paid
    once); every workload must have the same ``data_parallel_size``."""
    if not runs:
        return []
    world = runs[0][0].cfg.data_parallel_size
    if world < 1:
        raise ValueError(f"data_parallel_size must be >= 1, got {world}")
    for workload, _ in runs:
        if workload.cfg.data_parallel_size != world:
            raise ValueError("every workload of one launch needs the same data_parallel_size "
                             f"({workload.cfg.data_parallel_size} != {world})")
        for evs in workload.events.values():
            for ev in evs:
                if isinstance(ev, Add) and not 0 <= ev.rank < world:
                    raise ValueError(f"rank {ev.rank} out of range [0, {world})")
    job = _Job(list(runs), max_steps, float(timeout_s), os.getpid(), inject_fault)
    for attempt in range(3):
        with tempfile.TemporaryDirectory(prefix="mambalab-dp-") as d:
            try:
                return _launch_once(job, world, Path(d), _free_port())
            except DistributedRunError as e:  # the free port was taken before rank 0 bound it
                taken = any(s in e.log.lower() for s in ("address already in use", "eaddrinuse"))
                if attempt == 2 or not taken:
                    raise
    raise AssertionError("unreachable")


def replay_distributed(bug: str, *, fixed: bool = False, seed: int = 0,
                       timeout_s: float = 120) -> ReplayResult:
    """:func:`mambalab.lab.scenarios.replay` with the DP ranks as separate processes."""
    workload = scenario_for(bug)(seed)
    bugs = BugConfig() if fixed else BugConfig.with_bugs(bug)
    verdict, records = run_workload_distributed(workload, bugs, timeout_s=timeout_s)
    return ReplayResult(bug, fixed, seed, verdict, signatures(records, verdict), workload.describe())


__all__ = ["DistributedRunError", "replay_distributed", "route_events", "run_workload_distributed",
           "run_workloads_distributed", "owners", "serve_rank", "judge_reports"]


if __name__ == "__main__":  # a rank process; re-import so that pickles name mambalab.engine.dp_launcher
    from mambalab.engine.dp_launcher import _worker_main as _main

    sys.exit(_main())
