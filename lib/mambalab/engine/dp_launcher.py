"""Data-parallel ranks as separate OS processes over ``torch.distributed``: gloo on the CPU,
NCCL on GPUs (one process per GPU).

Mirrors vLLM's DP engine cores (``vllm/v1/engine/core.py`` ``DPEngineCoreProc``
and its busy loop, ``vllm/v1/worker/dp_utils.py`` ``coordinate_batch_across_dp``):
each process hosts one rank (its own scheduler, KV-cache manager, runner, state
pools and, on a GPU, its own CUDA graphs captured at start-up) and every step

1. all-reduces (MAX) "has unfinished work" (``_has_global_unfinished_reqs``)
   over the CPU group, stopping when no rank has any (future events count as work);
2. schedules its own requests (``Engine.schedule_step``);
3. all-reduces its scheduled token count (MAX) and its own CUDA-graph mode (MIN)
   over the *device* group in one collective (``coordinate_batch_across_dp``: NCCL
   on GPUs, as vLLM's default);
4. executes padded to that count in at most that mode, or runs the dummy batch
   (through its captured FULL graph when every rank agreed on FULL) when it has
   nothing (``Engine.execute_step``, the same code the in-process engine runs).

Process groups (:class:`mambalab.engine.dp_group.DPGroup`): the default group carries the
batch all-reduce (NCCL on GPUs, gloo on the CPU), and a gloo group beside it carries the
control flags and the pickled results, as vLLM keeps a CPU group beside each device group.
On GPUs rank ``r`` binds ``cuda:{LOCAL_RANK}`` (``torch.cuda.set_device`` before any CUDA
work).

At the end every rank's results and step records are gathered to rank 0 and
judged there with :func:`mambalab.lab.reference.judge`, as the in-process engine is.
The launcher starts ``python -m mambalab.engine.dp_launcher`` once per rank on a free
loopback port (``env://`` rendezvous: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
LOCAL_RANK) and bounds the whole run: a rank that fails or hangs ends the run with
:class:`DistributedRunError`, never a hang. On a GPU a fault in a kernel (a sticky
CUDA error: the process's context is gone) ends that rank at once with the CUDA
error; the launcher stops its peers, which may be blocked in an NCCL collective
that will never complete (NCCL's own watchdog, ``TORCH_NCCL_ASYNC_ERROR_HANDLING``
and the collective ``timeout``, is the backstop if the launcher itself is gone).
"""

from __future__ import annotations

import os
import pickle
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from mambalab.lab.bugs import BugConfig
from mambalab.engine.core import Add, Engine, EngineConfig, EngineCrash, EngineDidNotFinish, Event, RequestResult
from mambalab.worker.model_runner import StepRecord
from mambalab.lab.reference import judge
from mambalab.lab.verdict import Crash, Verdict
from mambalab.lab.worker_process import child_env
from mambalab.lab.scenarios import ReplayResult, scenario_for, signatures
from mambalab.lab.workload import Workload
from mambalab.engine.dp_group import CudaFault, DPGroup, PeerLost, backend_for, cuda_broken, init_groups

_ADDR = "127.0.0.1"
_GRACE_S = 3.0  # after a rank fails: time for its peers to notice and exit by themselves
# A block id far past any pool (:func:`plant_bad_block`): on the CPU the first consumer stops it
# (a bounds check, or the sanitizer); on a GPU the first kernel to dereference it faults (a
# gather's bounds assert, or an address terabytes past the pool: slots are int64 in our kernels).
PLANTED_BLOCK = 2**31 - 1
# Kept as the machine has them (NVLink multicast off): set where absent, never overridden.
_NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}


class DistributedRunError(RuntimeError):
    """A rank process failed, or the run outlived its timeout (every rank was stopped)."""

    def __init__(self, message: str, rank: int | None = None, log: str = ""):
        self.rank, self.log = rank, log
        super().__init__(message)


@dataclass
class _Job:
    runs: list[tuple[Workload, BugConfig]]  # one after another, each on fresh engines
    max_steps: int
    timeout_s: float
    parent_pid: int
    inject_fault: tuple | None = None
    device_type: str = "cpu"
    collective_timeout_s: float = 60.0  # NCCL's per-collective timeout (its watchdog then tears down)


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
    graphs: dict = field(default_factory=dict)  # what the CUDA-graph layer did (:func:`graph_stats`)


@dataclass
class _GatheredEngine:
    """What :func:`judge` reads from an engine, assembled from every rank's report."""

    cfg: EngineConfig
    model: object
    step: int
    results: dict[str, RequestResult]


@dataclass
class DPRun:
    """One distributed run: the verdict and step records (as the in-process engine gives them)
    and, per rank, where it ran and what its graphs did (:func:`graph_stats`).

    Unpacks as ``verdict, records = run`` (the pair :func:`mambalab.lab.scenarios.run_workload`
    returns)."""

    verdict: Verdict
    records: list[StepRecord]
    ranks: list[dict] = field(default_factory=list)

    def __iter__(self):
        return iter((self.verdict, self.records))

    def describe_ranks(self) -> list[str]:
        return [describe_graphs(g) for g in self.ranks]


def graph_stats(engine: Engine | None, rank: int, device: torch.device, backend: str) -> dict:
    """Rank ``rank``'s captured sizes, how many are real ``torch.cuda.CUDAGraph`` objects, and how
    many times the steps (and dummy batches) replayed them."""
    graphs = {} if engine is None else engine.ranks[0].runner.graphs
    return dict(rank=rank, device=str(device), backend=backend, captured=sorted(graphs),
                cuda_graphs=sum(g.graph is not None for g in graphs.values()),
                replays=sum(g.num_replays for g in graphs.values()))


def describe_graphs(g: dict) -> str:
    kind = "real CUDA graphs" if g["cuda_graphs"] else "graphs (CPU closures, no CUDA)"
    return (f"rank {g['rank']} on {g['device']} ({g['backend']}): {g['cuda_graphs'] or len(g['captured'])} "
            f"{kind} captured (sizes {g['captured']}), {g['replays']} replays")


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

def plant_bad_block(engine: Engine) -> None:
    """A planted kernel fault: every CPU block-table row of this process's rank names
    :data:`PLANTED_BLOCK`, so the next commit sends it to the device and the next kernel that
    reads a row (a step's, or the dummy batch's through its FULL graph) dereferences it."""
    for rank in engine.ranks:
        for bt in rank.runner.input_batch.block_table.block_tables:
            bt.block_table.np[:] = PLANTED_BLOCK


def _fault(job: _Job, rank: int, step: int, engine: Engine) -> None:
    f = job.inject_fault
    if f is None or (f[0], f[1]) != (rank, step):
        return
    kind = f[2] if len(f) > 2 else "raise"
    if kind == "hang":
        while True:
            time.sleep(1)
    if kind == "kernel":
        plant_bad_block(engine)
        return
    raise RuntimeError(f"injected fault on rank {rank} at step {step}")


def serve_rank(job: _Job, workload: Workload, bugs: BugConfig, rank: int, device: torch.device,
               group: DPGroup | None = None) -> tuple[_RankReport, Engine | None]:
    """The DP engine core's busy loop for one rank (``DPEngineCoreProc.run_busy_loop``)."""
    group = group or DPGroup(device)
    report = _RankReport(rank)
    engine: Engine | None = None
    err = None
    try:
        engine = Engine(workload.cfg, bugs, dp_ranks=[rank], device=device)
    except Exception as e:  # noqa: BLE001 - e.g. a graph that cannot be captured: a verdict
        err = f"{type(e).__name__}: {e}"
        if device.type == "cuda" and cuda_broken():
            raise CudaFault(f"CUDA error at start-up on {device}: {err}") from e
    startup = next((e for e in group.all_gather_object(err) if e), None)
    if startup is not None:
        report.startup_error = startup
        return report, None
    engine.schedule_events(route_events(workload, rank))
    crash: EngineCrash | None = None
    while True:
        has_work, crashed = group.control(crash is None and engine.has_work(), crash is not None)
        if crashed or not has_work:
            break
        if engine.step >= job.max_steps:
            raise EngineDidNotFinish(job.max_steps)
        outputs = engine.schedule_step()
        _fault(job, rank, engine.step, engine)
        local = max((o.total_num_scheduled_tokens for o in outputs), default=0)
        (local_mode,) = engine.local_cudagraph_modes(outputs)
        num_tokens_across_dp, mode_across_dp = group.coordinate_batch(local, local_mode)
        try:
            engine.execute_step(outputs, num_tokens_across_dp, mode_across_dp)
        except Exception as e:  # noqa: BLE001
            broken = cuda_broken() if device.type == "cuda" else None
            if broken:  # a real fault: no verdict can be read off a dead context; the run ends here
                raise CudaFault(f"CUDA error on {device} at step {engine.step}: {broken}") from e
            if not isinstance(e, EngineCrash):
                raise
            crash = e  # the next all-reduce stops every rank
    report.step = engine.step
    report.records = list(engine.records)
    report.graphs = graph_stats(engine, rank, device, backend_for(device.type))
    for res in engine.results.values():
        if res.final_state is not None:
            res.final_state = {k: v.detach().cpu() for k, v in res.final_state.items()}
        report.results.append(res)
    if crash is not None:
        report.crash_step = crash.step
        report.crash_verdict = judge(engine, crash)
    return report, engine


def judge_reports(workload: Workload, reports: list[_RankReport], model) -> DPRun:
    """Rank 0: one verdict over every rank's results, as the in-process engine's would be."""
    reports = sorted(reports, key=lambda r: r.rank)
    ranks = [r.graphs for r in reports if r.graphs]
    startup = next((r.startup_error for r in reports if r.startup_error), None)
    if startup is not None:
        return DPRun(Verdict(ok=False, crash=Crash.at_startup(startup)), [], ranks)
    records = sorted((rec for r in reports for rec in r.records), key=lambda rec: (rec.step, rec.rank))
    crashed = [r for r in reports if r.crash_verdict is not None]
    if crashed:  # in-process the lowest rank crashes first: of that step only what it recorded is kept
        first = crashed[0]
        return DPRun(first.crash_verdict, [rec for rec in records
                                           if rec.step != first.crash_step or rec.rank == first.rank], ranks)
    by_id = {res.req_id: res for r in reports for res in r.results}
    order = [ev.req_id for s in sorted(workload.events) for ev in workload.events[s] if isinstance(ev, Add)]
    results = {rid: by_id[rid] for rid in order if rid in by_id}
    results.update({rid: res for rid, res in by_id.items() if rid not in results})
    view = _GatheredEngine(workload.cfg, model, max(r.step for r in reports), results)
    return DPRun(judge(view), records, ranks)  # type: ignore[arg-type]


def _pick_device(device_type: str) -> torch.device:
    """This rank's device: ``cuda:{LOCAL_RANK}``, bound before any CUDA work (one GPU per DP rank,
    as vLLM's DP engine cores), or the CPU."""
    if device_type == "cuda":
        idx = int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
        if idx >= torch.cuda.device_count():
            raise RuntimeError(f"LOCAL_RANK {idx}: this host has {torch.cuda.device_count()} visible GPU(s)")
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
    """Entry point of one rank process: ``python -m mambalab.engine.dp_launcher JOB OUTDIR``.

    On failure the error goes to ``error-{rank}.txt`` first and the process then exits at once,
    without tearing its process group down: with a broken CUDA context (or a peer gone) NCCL's
    teardown can block, and the launcher is waiting to stop the peers."""
    job_path, out_dir = (argv if argv is not None else sys.argv[1:])[:2]
    out = Path(out_dir)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    with open(job_path, "rb") as f:
        job: _Job = pickle.load(f)
    _watchdog(job.parent_pid, job.timeout_s + 10)
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    try:
        device = _pick_device(job.device_type)
        group = init_groups(job.device_type, rank, world, device, job.timeout_s, job.collective_timeout_s)
        judged = []
        for workload, bugs in job.runs:
            report, engine = serve_rank(job, workload, bugs, rank, device, group)
            gathered = group.gather_object(report, rank)
            if rank == 0:
                judged.append(judge_reports(workload, gathered, engine.model if engine else None))
            del engine
        if rank == 0:
            tmp = out / "result.pkl.tmp"
            with open(tmp, "wb") as f:
                pickle.dump(judged, f)
            tmp.rename(out / "result.pkl")
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 - reported to the launcher, then exit non-zero
        origin = "peer" if isinstance(e, PeerLost) else "origin"
        (out / f"error-{rank}.txt").write_text(f"{origin}\n{type(e).__name__}: {e}\n" + traceback.format_exc())
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    return 0


# -- the launcher ------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((_ADDR, 0))
        return s.getsockname()[1]


def rank_env(rank: int, world: int, port: int, device_type: str, base: dict | None = None) -> dict[str, str]:
    """A rank process's environment: the ``env://`` rendezvous, its device, and on GPUs NCCL's
    settings (multicast stays off; async error handling on)."""
    env = child_env(base)  # the rest is inherited
    env.update(MASTER_ADDR=_ADDR, MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
               WORLD_SIZE=str(world), MAMBALAB_DEVICE=device_type)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo0" if sys.platform == "darwin" else "lo")
    if device_type == "cuda":
        for k, v in _NCCL_ENV.items():
            env.setdefault(k, v)
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


def _launch_once(job: _Job, world: int, tmp: Path, port: int) -> list[DPRun]:
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
                    env=rank_env(r, world, port, job.device_type), stdin=subprocess.DEVNULL, stdout=log,
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
                    raise _failure(procs, logs, tmp, job.device_type)
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


_CUDA_LINE = re.compile(r"(CUDA error[^\n]*|NCCL error[^\n]*|illegal memory access[^\n]*)")


def _failure(procs: list[subprocess.Popen], logs: list[Path], tmp: Path,
             device_type: str = "cpu") -> DistributedRunError:
    """The root cause: a rank's own error before a peer's lost collective, else the lowest rank
    that died by itself. The message names the rank, its device and (on a GPU) the CUDA error."""
    errors = {}
    for r in range(len(procs)):
        f = tmp / f"error-{r}.txt"
        if f.exists():
            kind, _, text = f.read_text(errors="replace").partition("\n")
            errors[r] = (kind, text)
    origin = [r for r, (kind, _) in errors.items() if kind == "origin"]
    failed = [r for r, p in enumerate(procs) if p.returncode not in (0, None, -9)]
    rank = (origin or [r for r in failed if r not in errors] or sorted(errors) or failed or [0])[0]
    where = f" (cuda:{rank})" if device_type == "cuda" else ""
    if rank in errors:
        text = errors[rank][1]
        first = text.splitlines()[0] if text else "?"
    else:  # died without reporting (e.g. NCCL's watchdog aborted it): its log says why
        text = _tail(logs[rank])
        m = _CUDA_LINE.search(text)
        first = f"exited with code {procs[rank].returncode}" + (f": {m.group(1).strip()}" if m else "")
    return DistributedRunError(f"rank {rank}{where} failed: {first} (every rank was stopped)\n{text}", rank, text)


def _check_launch(world: int, device_type: str) -> None:
    if device_type == "cuda":
        n = torch.cuda.device_count()
        if n < world:
            raise ValueError(f"--dp {world} on CUDA needs {world} GPUs (one process per GPU); "
                             f"this host has {n} visible")


def run_workload_distributed(workload: Workload, bugs: BugConfig, *, timeout_s: float = 120,
                             max_steps: int = 200, inject_fault: tuple | None = None,
                             device: str | None = None) -> DPRun:
    """Run ``workload`` with one process per DP rank and judge it on rank 0.

    The multi-process twin of :func:`mambalab.lab.scenarios.run_workload`: same verdict, same
    step records (``verdict, records = run``). ``device``: ``"cpu"`` (gloo) or ``"cuda"`` (NCCL,
    rank ``r`` on ``cuda:r``); default: where this process's kernels run. ``timeout_s`` bounds the
    whole run (start-up included); a failing or hung rank raises :class:`DistributedRunError`.
    ``inject_fault=(rank, step)`` makes that rank raise at that step; ``(rank, step, "hang")``
    hang; ``(rank, step, "kernel")`` plant a block id far past the pool (:func:`plant_bad_block`):
    an illegal-access verdict on the CPU, a real fault on a GPU. For tests.
    """
    return run_workloads_distributed([(workload, bugs)], timeout_s=timeout_s, max_steps=max_steps,
                                     inject_fault=inject_fault, device=device)[0]


def run_workloads_distributed(runs: list[tuple[Workload, BugConfig]], *, timeout_s: float = 300,
                              max_steps: int = 200, inject_fault: tuple | None = None,
                              device: str | None = None, collective_timeout_s: float = 60.0
                              ) -> list[DPRun]:
    """Several runs, one after another, in one launch of the rank processes (start-up paid
    once); every workload must have the same ``data_parallel_size``."""
    if not runs:
        return []
    if device is None:
        from mambalab.device import DEVICE_TYPE as device
    backend_for(device)  # validates
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
    _check_launch(world, device)
    job = _Job(list(runs), max_steps, float(timeout_s), os.getpid(), inject_fault, device,
               float(min(collective_timeout_s, timeout_s)))
    for attempt in range(3):
        with tempfile.TemporaryDirectory(prefix="mambalab-dp-") as d:
            try:
                return _launch_once(job, world, Path(d), _free_port())
            except DistributedRunError as e:  # the free port was taken before rank 0 bound it
                taken = any(s in e.log.lower() for s in ("address already in use", "eaddrinuse"))
                if attempt == 2 or not taken:
                    raise
    raise AssertionError("unreachable")


def replay_distributed_run(bug: str, *, fixed: bool = False, seed: int = 0, timeout_s: float = 120,
                           device: str | None = None) -> tuple[ReplayResult, DPRun]:
    """:func:`mambalab.lab.scenarios.replay` with the DP ranks as separate processes; also the
    run itself (each rank's device and graph counts)."""
    workload = scenario_for(bug)(seed)
    bugs = BugConfig() if fixed else BugConfig.with_bugs(bug)
    run = run_workload_distributed(workload, bugs, timeout_s=timeout_s, device=device)
    result = ReplayResult(bug, fixed, seed, run.verdict, signatures(run.records, run.verdict),
                          workload.describe())
    return result, run


def replay_distributed(bug: str, *, fixed: bool = False, seed: int = 0, timeout_s: float = 120,
                       device: str | None = None) -> ReplayResult:
    """:func:`mambalab.lab.scenarios.replay` with the DP ranks as separate processes."""
    return replay_distributed_run(bug, fixed=fixed, seed=seed, timeout_s=timeout_s, device=device)[0]


__all__ = ["PLANTED_BLOCK", "CudaFault", "DPGroup", "DPRun", "DistributedRunError", "backend_for",
           "describe_graphs", "graph_stats", "judge_reports", "owners", "plant_bad_block", "rank_env",
           "replay_distributed", "replay_distributed_run", "route_events", "run_workload_distributed",
           "run_workloads_distributed", "serve_rank"]


if __name__ == "__main__":  # a rank process; re-import so that pickles name mambalab.engine.dp_launcher
    from mambalab.engine.dp_launcher import _worker_main as _main

    sys.exit(_main())
