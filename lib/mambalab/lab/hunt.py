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

``python -m mambalab hunt [--bugs id,...] [--budget N] [--seed N] [--device cpu|cuda] [--json]``
exits 1 when it found a failure, 0 when the budget ran out clean, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import time
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Callable, Iterator

from mambalab.lab.bugs import BugConfig
from mambalab.engine.core import Abort, Add, EngineConfig, EngineDidNotFinish, Event, Preempt
from mambalab.worker.model_runner import RunnerConfig, StepRecord
from mambalab.lab.planted import Plant
from mambalab.lab.verdict import Crash, IllegalAccess, Verdict
from mambalab.lab.workload import Workload

VOCAB = 32  # the tiny model's vocabulary
BLOCK_SIZE = 4
MAX_MODEL_LEN = 32

# ---------------------------------------------------------------------------
# The generator
# ---------------------------------------------------------------------------


# The generator's main biases (random_hunt_workload says why; docs/hunt.md measures them).
P_DP2 = 0.75  # two data-parallel ranks (else one)
P_ALL = 0.75  # mamba_cache_mode "all", prefix caching (else "none")
P_FIRST_SIDE_REQUEST = 0.9  # a conversation's first turn goes out with a one-token side request
P_SIDE_REQUEST = 0.35  # the same for a later turn
TURN_GAPS = (1, 2, 2, 3)  # steps between the end of a turn's reply and the next turn


def _fresh(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(VOCAB) for _ in range(n)]


def random_hunt_workload(rng: random.Random) -> Workload:
    """One small random workload: a few conversations and bursts of requests over a few steps.

    Swarm-style: each workload first draws a configuration (DP size, cache
    mode, speculative tokens and acceptance, ``max_num_seqs`` and so the
    capture sizes, the token budget), then up to three *conversations* (turns
    pinned to a rank, each starting with the conversation's first block, its
    system prompt; the next turn one to three steps after the reply ended, as
    the user reads and types) and up to two *bursts* (a client's batch of
    chats, long prompts and one-token requests on one rank). Requests finish,
    ranks go idle and the batch changes composition between turns. Arrival
    steps, ranks, prompts and lengths are random. Biases, all bug-agnostic:

    * three workloads in four run two data-parallel ranks, and three in four
      keep prefix caching on (``"all"``): the configuration hybrid models are
      served with, and the one where most of the catalogue lives;
    * ``max_num_seqs`` is usually 4 and waves hold up to four requests, so
      decode batches of 3 are common and get padded to the 4-row graph;
    * one prompt in eight is longer than the token budget (chunked prefill),
      and aborts / preemptions land one or two steps after arrival, often
      mid-prefill;
    * almost every conversation opens with a one-token side request on the
      same rank (a safety or intent classifier on the new session), and a
      third of the later turns do too; it finishes first and leaves a hole
      that ``condense`` fills with the turn;
    * every later turn of a conversation shares its first block with the
      earlier ones (a prefix-cache hit in ``"all"`` mode), on the same rank
      (session affinity), so ranks run unequal loads and go idle while the
      other works;
    * data-parallel workloads lean to no speculation and single-rank ones to
      speculation, so both combinations with ``"all"`` stay common; with
      speculative decoding acceptance is a random rate or a random schedule of
      counts, so partial acceptance is the rule.
    """
    dp = 2 if rng.random() < P_DP2 else 1
    mode = "all" if rng.random() < P_ALL else "none"
    ns = rng.choices([0, 1, 2], weights=[75, 15, 10] if dp > 1 else [35, 40, 25])[0]
    mns = rng.choices([2, 3, 4, 8], weights=[1, 1, 8, 1])[0]
    uq = 1 + ns
    mbt = max(rng.choice([8, 12, 16, 16, 32]), uq * min(mns, 4))
    per_req = (-(-MAX_MODEL_LEN // BLOCK_SIZE) + ns) if mode == "all" else 1 + ns
    num_blocks = mns * per_req + 2 * per_req + 8  # room for the batch plus a prefix cache
    rc = RunnerConfig(max_num_seqs=mns, max_num_batched_tokens=mbt, max_model_len=MAX_MODEL_LEN,
                      block_size=BLOCK_SIZE, num_blocks=num_blocks, mamba_cache_mode=mode,
                      num_speculative_tokens=ns, cudagraph=rng.random() < 0.93)
    if ns and rng.random() < 0.5:
        acceptance: float | tuple[int, ...] = round(rng.uniform(0.2, 0.8), 2)
    elif ns:
        acceptance = tuple(rng.randint(0, ns) for _ in range(rng.randint(2, 5)))
    else:
        acceptance = 0.5
    cfg = EngineConfig(rc, data_parallel_size=dp, model_seed=rng.randrange(16), acceptance=acceptance,
                       drafter_seed=rng.randrange(1000))

    events: dict[int, list[Event]] = {}
    prompts: list[tuple[list[int], int, int]] = []  # (prompt, rank, estimated last step)
    busy_until = [0] * dp  # a rough estimate of when each rank runs out of work

    def add(step: int, prompt: list[int], max_tokens: int, rank: int, cancel_prob: float) -> None:
        max_tokens = max(1, min(max_tokens, MAX_MODEL_LEN - 2 - ns - len(prompt)))
        end = step + -(-len(prompt) // mbt) + max_tokens - 1
        busy_until[rank] = max(busy_until[rank], end)
        prompts.append((prompt, rank, end))
        rid = f"r{len(prompts) - 1}"
        events.setdefault(step, []).append(Add(rid, tuple(prompt), max_tokens, rank))
        u = rng.random()
        if u < cancel_prob:  # cancelled, often mid-prefill
            events.setdefault(step + rng.choice([1, 1, 1, 2]), []).append(Abort(rid))
        elif u < cancel_prob + 0.1:
            events.setdefault(step + rng.randint(1, 3), []).append(Preempt(rid))

    # Conversations: each pinned to a rank (session affinity), every turn starting with the
    # session's first block (its system prompt: a prefix-cache hit in "all" mode), the next turn
    # usually a few steps after the previous one ended (the user reads, then types).
    first_rank = rng.randrange(dp)
    for sess in range(rng.choices([0, 1, 2, 3], weights=[2, 4, 4, 1])[0]):
        rank = (first_rank + sess) % dp if rng.random() < 0.8 else rng.randrange(dp)  # spread over ranks
        at = rng.choice([1, 1, 2, 3])
        head = _fresh(rng, BLOCK_SIZE)
        for turn in range(rng.choices([1, 2, 3], weights=[2, 5, 3])[0]):
            if len(prompts) >= 7:
                break
            long_turn = sess == 0 and turn == 0 and rng.random() < 0.5
            max_tokens = rng.randint(6, 10) if long_turn else rng.randint(1, 5)
            if rng.random() < (P_FIRST_SIDE_REQUEST if turn == 0 else P_SIDE_REQUEST) and len(prompts) < 6:
                # A one-token side request sent with the turn (a safety or intent classifier).
                add(at, _fresh(rng, rng.randint(2, 6)), 1, rank, 0.0)
            add(at, head + _fresh(rng, rng.randint(1, 6)), max_tokens, rank, 0.1)
            end = prompts[-1][2]
            at = end + rng.choice(TURN_GAPS)
    # One-off bursts: a client's batch lands on the least busy rank, mostly: chats, long prompts
    # (chunked, often cancelled mid-prefill) and one-token requests (classification, scoring).
    for _ in range(rng.choices([0, 1, 2], weights=[1, 5, 4])[0]):
        at0 = rng.randint(1, 5)
        rank = min(range(dp), key=lambda r: busy_until[r]) if rng.random() < 0.75 else rng.randrange(dp)
        for _ in range(rng.choices([1, 2, 3, 4], weights=[1, 2, 4, 6])[0]):
            if len(prompts) >= 8:
                break
            at = at0 + rng.choice([0, 0, 0, 1])
            role = rng.choices(["chat", "long", "one-token"], weights=[40, 30, 30])[0]
            if role == "long":  # a long document takes a step longer to arrive
                add(at0 + 1, _fresh(rng, rng.randint(min(mbt + 1, 20), 20)), rng.randint(1, 3), rank, 0.6)
            elif role == "chat":
                add(at, _fresh(rng, rng.randint(2, 8)), rng.randint(3, 6), rank, 0.1)
            else:
                add(at, _fresh(rng, rng.randint(2, 8)), 1, rank, 0.0)
    if not events:
        add(1, _fresh(rng, rng.randint(2, 8)), rng.randint(1, 6), 0, 0.0)
    return Workload(cfg, {s: events[s] for s in sorted(events)})


def workload_seed(seed: int, index: int) -> int:
    """The RNG seed of workload ``index`` of a hunt started with ``seed`` (each reproducible alone)."""
    return seed * 1_000_003 + index


# ---------------------------------------------------------------------------
# Running one workload and classifying the verdict
# ---------------------------------------------------------------------------

FAILURE_KINDS = ("divergence", "illegal", "crash", "hang")


def failure_kind(verdict: Verdict) -> str | None:
    """``None`` for a passing verdict, else ``illegal`` / ``crash`` / ``hang`` / ``divergence``."""
    if verdict.ok:
        return None
    if verdict.illegal is not None:
        return "illegal"
    if verdict.crash is not None:
        return "hang" if verdict.crash.kind == "unfinished" else "crash"
    return "divergence"


def _gpu_fault(step: int, steps: int, message: str) -> Verdict:
    """A fault the GPU reported outside a step (without the step's record) as an illegal verdict;
    ``step`` 0 where the step is unknown (then ``steps`` is the run's limit)."""
    return Verdict(ok=False, steps=steps, illegal=IllegalAccess(step=step, rank=None, message=message))


def _run_in_worker(workload: Workload, bugs: BugConfig, max_steps: int) -> tuple[Verdict, list[StepRecord]]:
    """The worker's side of :func:`run`: an exception that broke the CUDA context is a verdict too."""
    from mambalab.lab.hunt_worker import context_healthy
    from mambalab.lab.scenarios import run_workload

    try:
        return run_workload(workload, bugs, max_steps=max_steps)
    except Exception as e:  # noqa: BLE001
        healthy, error = context_healthy()
        if healthy:
            raise
        return _gpu_fault(0, max_steps, f"{error} (raised outside a step: {type(e).__name__})"), []


def isolated(plant: Plant | None = None) -> bool:
    """Whether :func:`run` uses the worker process: on CUDA, unless a plant is active (a plant swaps
    a function of *this* process, and a learner's function defined in a notebook cannot be sent)."""
    from mambalab.device import DEVICE_TYPE

    return DEVICE_TYPE == "cuda" and plant is None


def run(workload: Workload, bugs: BugConfig, max_steps: int = 200,
        plant: Plant | None = None) -> tuple[Verdict, list[StepRecord]]:
    """:func:`scenarios.run_workload` (under ``plant`` when given), a workload that never
    finishes reported as a ``hang``.

    On CUDA the run happens in :func:`mambalab.lab.hunt_worker.shared_worker`'s
    process: a real fault ends that process (reported as an ``illegal``
    verdict), not the hunt.
    """
    from mambalab.lab.scenarios import run_workload

    try:
        if isolated(plant):
            from mambalab.lab.hunt_worker import WorkerDied, shared_worker

            try:
                (verdict, records), healthy, error = shared_worker().call(_run_in_worker, workload, bugs, max_steps)
            except WorkerDied as e:
                return Verdict(ok=False, crash=Crash("worker", str(e))), []
            if not healthy and verdict.ok:  # the fault surfaced only at the worker's final check
                return _gpu_fault(verdict.steps, verdict.steps, f"{error} (seen after the last step)"), records
            return verdict, records
        with plant if plant is not None else contextlib.nullcontext():
            return run_workload(workload, bugs, max_steps=max_steps)
    except EngineDidNotFinish as e:
        return Verdict(ok=False, crash=Crash.unfinished(e.max_steps), steps=max_steps), []


# ---------------------------------------------------------------------------
# Shrinking
# ---------------------------------------------------------------------------


def drop_one_at_a_time(items: list, fails: Callable[[list], bool]) -> list:
    """The core of shrinking, on a plain list: the first single removal that still fails is kept
    and the scan restarts, until no single removal fails (a 1-minimal failing list).

    :func:`shrink` is this idea over structured candidates (cut at the failure step, drop a
    request, simplify the configuration, shorten prompts), with "still fails the same way and
    the fixed engine passes" as ``fails``.
    """
    cur = list(items)
    if not fails(cur):
        raise ValueError("drop_one_at_a_time needs a failing list to start from")
    i = 0
    while i < len(cur):
        smaller = cur[:i] + cur[i + 1:]
        if fails(smaller):
            cur, i = smaller, 0
        else:
            i += 1
    return cur


def _adds(w: Workload) -> list[tuple[int, Add]]:
    return [(s, e) for s in sorted(w.events) for e in w.events[s] if isinstance(e, Add)]


def _others(w: Workload) -> list[tuple[int, Event]]:
    return [(s, e) for s in sorted(w.events) for e in w.events[s] if not isinstance(e, Add)]


def _with_events(w: Workload, events: dict[int, list[Event]], cfg: EngineConfig | None = None) -> Workload:
    return Workload(cfg or w.cfg, {s: list(evs) for s, evs in sorted(events.items()) if evs})


def _map_events(w: Workload, fn: Callable[[int, Event], tuple[int, Event] | None]) -> Workload:
    out: dict[int, list[Event]] = {}
    for s in sorted(w.events):
        for e in w.events[s]:
            r = fn(s, e)
            if r is not None:
                out.setdefault(r[0], []).append(r[1])
    return _with_events(w, out)


def _key(w: Workload) -> str:
    return repr((w.cfg, sorted((s, tuple(evs)) for s, evs in w.events.items())))


def measure(w: Workload, verdict: Verdict) -> tuple:
    """What shrinking minimises, most important first: engine steps, then the workload's size."""
    adds = _adds(w)
    rc = w.cfg.runner
    return (verdict.steps, len(adds), len(_others(w)), w.cfg.data_parallel_size, rc.num_speculative_tokens,
            rc.mamba_cache_mode != "none", rc.max_num_seqs, sum(a.max_tokens for _, a in adds),
            sum(len(a.prompt) for _, a in adds), sum(s for s in w.events), rc.max_num_batched_tokens,
            sum(int(a.req_id != f"r{i}") for i, (_, a) in enumerate(adds)))


def _truncate(w: Workload, verdict: Verdict, records: list[StepRecord]) -> Workload:
    """Cut the workload at the failure step: no later events, requests end by then."""
    S = verdict.failure_step
    if S <= 0:
        return w
    produced: dict[str, int] = {}
    for r in records:
        if r.step <= S:
            for rid, toks in r.sampled.items():
                produced[rid] = produced.get(rid, 0) + len(toks)
    live_extra = 0 if failure_kind(verdict) == "divergence" else 1  # a crash needs them scheduled at S

    def fn(s: int, e: Event):
        if s > S:
            return None
        if isinstance(e, Add):
            return s, replace(e, max_tokens=max(1, min(e.max_tokens, produced.get(e.req_id, 0) + live_extra)))
        return s, e

    return _map_events(w, fn)


def _drop_request(w: Workload, rid: str) -> Workload:
    return _map_events(w, lambda s, e: None if e.req_id == rid else (s, e))


def _set_cfg(w: Workload, **runner_changes) -> Workload:
    engine_changes = {k: runner_changes.pop(k) for k in list(runner_changes)
                      if k in {f.name for f in fields(EngineConfig)}}
    rc = replace(w.cfg.runner, **runner_changes)
    return Workload(replace(w.cfg, runner=rc, **engine_changes), {s: list(v) for s, v in w.events.items()})


def _families(w: Workload, verdict: Verdict, records: list[StepRecord]) -> list[Callable[[], Iterator[tuple[str, Workload]]]]:
    """Families of smaller variants of ``w``, the likeliest big wins first."""
    adds = _adds(w)
    rc = w.cfg.runner

    def cut():
        yield "cut at the failure step", _truncate(w, verdict, records)

    def earlier():  # close gaps (everything from a step on moves one step earlier)
        for s in sorted(w.events):
            if s > 1 and s - 1 not in w.events:
                yield f"steps >= {s} one earlier", _map_events(w, lambda s2, e, s=s: (s2 - 1 if s2 >= s else s2, e))

    def drops():
        for _, a in reversed(adds):
            yield f"drop request {a.req_id}", _drop_request(w, a.req_id)
        for s, e in _others(w):
            yield f"drop {type(e).__name__.lower()} {e.req_id}", _map_events(
                w, lambda s2, e2, e=e, s=s: None if (s2 == s and e2 == e) else (s2, e2))

    def config():
        if w.cfg.data_parallel_size > 1:
            one = _set_cfg(w, data_parallel_size=1)
            yield "one DP rank", _map_events(
                one, lambda s, e: (s, replace(e, rank=0)) if isinstance(e, Add) else (s, e))
        if rc.num_speculative_tokens:
            ns = rc.num_speculative_tokens - 1
            acc = w.cfg.acceptance
            if not isinstance(acc, (int, float)):
                acc = tuple(min(a, ns) for a in acc)
            if ns == 0:
                acc = 0.5
            yield "fewer speculative tokens", _set_cfg(w, num_speculative_tokens=ns, acceptance=acc)
        if rc.mamba_cache_mode != "none":
            yield "mamba_cache_mode none", _set_cfg(w, mamba_cache_mode="none")
        for m in (1, 2, 3, 4):
            if m < rc.max_num_seqs:
                yield f"max_num_seqs {m}", _set_cfg(w, max_num_seqs=m)

    def one_earlier():
        for s in sorted(w.events):
            for e in w.events[s]:
                if s > 1:
                    yield f"{type(e).__name__.lower()} {e.req_id} one step earlier", _map_events(
                        w, lambda s2, e2, e=e, s=s: (s2 - 1, e2) if (s2 == s and e2 == e) else (s2, e2))

    def lengths():
        for _, a in adds:
            for mt in sorted({1, a.max_tokens // 2, a.max_tokens - 1}):  # smallest first
                if 1 <= mt < a.max_tokens:
                    yield f"{a.req_id} max_tokens {mt}", _map_events(
                        w, lambda s, e, a=a, mt=mt: (s, replace(e, max_tokens=mt)) if e == a else (s, e))
        for _, a in adds:
            n = len(a.prompt)
            for cut in sorted({1, n // 4, n // 2, (3 * n) // 4, n - 1}):
                if 1 <= cut < n:
                    yield f"{a.req_id} prompt[:{cut}]", _map_events(
                        w, lambda s, e, a=a, cut=cut: (s, replace(e, prompt=e.prompt[:cut])) if e == a else (s, e))
            if n > 1:
                yield f"{a.req_id} prompt[1:]", _map_events(
                    w, lambda s, e, a=a: (s, replace(e, prompt=e.prompt[1:])) if e == a else (s, e))

    def cosmetic():
        if rc.max_num_batched_tokens > 8:
            yield "max_num_batched_tokens 8", _set_cfg(w, max_num_batched_tokens=8)
        names = {a.req_id: f"r{i}" for i, (_, a) in enumerate(adds)}
        if any(k != v for k, v in names.items()):
            yield "rename requests", _map_events(w, lambda s, e: (s, replace(e, req_id=names[e.req_id])))

    return [cut, earlier, drops, config, one_earlier, lengths, cosmetic]


NUM_FAMILIES = 7


@dataclass
class ShrinkResult:
    workload: Workload
    verdict: Verdict
    records: list[StepRecord]
    runs: int  # engine runs spent (variants with the bugs, plus their baseline runs)
    seconds: float
    log: list[str] = field(default_factory=list)
    baseline: Verdict | None = None  # the minimal workload with every fix (when a baseline was given)


def shrink(workload: Workload, bugs: BugConfig, verdict: Verdict, records: list[StepRecord], *,
           baseline: BugConfig | None = None, baseline_verdict: Verdict | None = None,
           max_runs: int = 150, time_limit: float | None = None,
           progress: Callable[[str], None] | None = None, plant: Plant | None = None) -> ShrinkResult:
    """Greedy shrinking: keep any smaller variant that fails the same way, until none does.

    "Smaller" is :func:`measure` (engine steps first). A variant runs with at
    most the current number of steps, so one that would take longer stops
    early. With a ``baseline`` (the fixed engine), a variant is kept only if
    the baseline passes it: the reproduction stays one of *these* bugs, not
    of something the fixes share.
    """
    kind = failure_kind(verdict)
    assert kind is not None, "shrink() needs a failing workload"
    t0 = time.perf_counter()
    cur, cur_v, cur_r, cur_b = workload, verdict, records, baseline_verdict
    seen = {_key(cur)}
    runs = 0
    log: list[str] = []

    def out_of_budget() -> bool:
        return runs >= max_runs or (time_limit is not None and time.perf_counter() - t0 > time_limit)

    changed = True
    while changed and not out_of_budget():
        changed = False
        for fam in range(NUM_FAMILIES):
            # Stay in a family while it makes progress (its candidates are regenerated from the
            # smaller workload), then move on; passes repeat until one changes nothing.
            improved = True
            while improved and not out_of_budget():
                improved = False
                for what, cand in _families(cur, cur_v, cur_r)[fam]():
                    if out_of_budget():
                        break
                    k = _key(cand)
                    if k in seen or not cand.events:
                        continue
                    seen.add(k)
                    runs += 1
                    try:
                        v, r = run(cand, bugs, max_steps=max(1, cur_v.steps), plant=plant)
                    except Exception:  # noqa: BLE001 - an invalid variant (e.g. a prompt the engine refuses)
                        continue
                    if failure_kind(v) != kind or not measure(cand, v) < measure(cur, cur_v):
                        continue
                    b = None
                    if baseline is not None:
                        runs += 1
                        b, _ = run(cand, baseline)
                        if not b.ok:
                            continue
                    cur, cur_v, cur_r, cur_b = cand, v, r, b
                    log.append(f"{what}: {v.steps} steps")
                    if progress:
                        progress(f"  shrink: {what} -> {v.steps} steps, {len(_adds(cur))} requests")
                    improved = changed = True
                    break
    return ShrinkResult(cur, cur_v, cur_r, runs, time.perf_counter() - t0, log, cur_b)


# ---------------------------------------------------------------------------
# Reporting: a step list and a runnable snippet
# ---------------------------------------------------------------------------


def config_line(w: Workload) -> str:
    rc, c = w.cfg.runner, w.cfg
    parts = [f"DP {c.data_parallel_size}", f"mamba_cache_mode {rc.mamba_cache_mode!r}",
             f"max_num_seqs {rc.max_num_seqs}", f"max_num_batched_tokens {rc.max_num_batched_tokens}",
             f"max_model_len {rc.max_model_len}", f"block_size {rc.block_size}", f"num_blocks {rc.num_blocks}"]
    if rc.num_speculative_tokens:
        parts.append(f"{rc.num_speculative_tokens} speculative token(s), acceptance {c.acceptance!r}, "
                     f"drafter_seed {c.drafter_seed}")
    parts.append("FULL decode graphs" if rc.cudagraph else "no CUDA graphs")
    parts.append(f"model_seed {c.model_seed}")
    return ", ".join(parts)


def step_list(w: Workload) -> list[str]:
    return [f"engine: {config_line(w)}"] + w.describe()


def _cfg_source(cfg: EngineConfig) -> str:
    default_rc, default_ec = RunnerConfig(), EngineConfig()
    rc_args = ", ".join(f"{f.name}={getattr(cfg.runner, f.name)!r}" for f in fields(RunnerConfig)
                        if getattr(cfg.runner, f.name) != getattr(default_rc, f.name))
    ec_args = "".join(f", {f.name}={getattr(cfg, f.name)!r}" for f in fields(EngineConfig)
                      if f.name != "runner" and getattr(cfg, f.name) != getattr(default_ec, f.name))
    return f"EngineConfig(RunnerConfig({rc_args}){ec_args})"


def _event_source(e: Event) -> str:
    if isinstance(e, Add):
        rank = f", rank={e.rank}" if e.rank else ""
        return f"Add({e.req_id!r}, {tuple(e.prompt)!r}, {e.max_tokens}{rank})"
    return f"{type(e).__name__}({e.req_id!r})"


_ASSERTS = {
    "divergence": "assert verdict.divergences and verdict.illegal is None and verdict.crash is None",
    "illegal": "assert verdict.illegal is not None",
    "crash": "assert verdict.crash is not None and verdict.illegal is None",
}


def snippet(w: Workload, bugs: BugConfig, kind: str, plant: Plant | None = None) -> str:
    """Python source that rebuilds the workload, runs it and asserts the failure.

    With a planted bug the run goes inside ``with plant:``, ``plant`` being the
    object the hunt was given (a learner's function cannot be printed back).
    """
    bug_ids = ",".join(sorted(b for b in bugs.enabled if "/" not in b)
                       + sorted(b for b in bugs.enabled if "/" in b and b.split("/")[0] not in bugs.enabled))
    lines = [
        "from mambalab.lab.bugs import BugConfig",
        "from mambalab.engine.core import Abort, Add, EngineConfig, Preempt"
        + (", EngineDidNotFinish" if kind == "hang" else ""),
        "from mambalab.worker.model_runner import RunnerConfig",
        "from mambalab.lab.scenarios import run_workload",
        "from mambalab.lab.workload import Workload",
        "",
        "workload = Workload(",
        f"    {_cfg_source(w.cfg)},",
        "    {",
    ]
    for s in sorted(w.events):
        lines.append(f"        {s}: [{', '.join(_event_source(e) for e in w.events[s])}],")
    lines += ["    },", ")", f"bugs = BugConfig.with_bugs({bug_ids!r})" if bug_ids else "bugs = BugConfig()  # every fix on"]
    body: list[str] = []
    if kind == "hang":
        body += [
            "try:",
            "    run_workload(workload, bugs)",
            "except EngineDidNotFinish as e:",
            "    print('HANG:', e)",
            "else:",
            "    raise AssertionError('expected the workload not to finish')",
        ]
    else:
        body += [
            "verdict, records = run_workload(workload, bugs)",
            "print(verdict.summary())",
            "assert not verdict.ok, verdict.summary()",
            f"{_ASSERTS[kind]}, verdict.summary()",
        ]
    if plant is not None:
        lines.append(f"with plant:  # {plant}: the object given to the hunt")
        body = ["    " + b for b in body]
    return "\n".join(lines + body) + "\n"


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
    worker_starts: int = 0  # on CUDA: worker processes started (the first, then one after each fault)

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
                         cpu_seconds=round(self.cpu_seconds, 2),
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
            return "\n".join(lines)
        f = self.found
        spent = f", {self.seconds:.1f} s ({self.cpu_seconds:.1f} s CPU)" if timings else ""
        lines += [
            f"{self.label}: FOUND after {f.index + 1} workload(s){spent} "
            f"(seed {self.seed}, workload seed {f.workload_seed}): {f.kind}",
            f"  {f.verdict.summary()}",
            f"  original workload: {len(_adds(f.workload))} request(s), {f.verdict.steps} engine steps",
        ]
        if f.shrunk:
            took = f", {f.shrunk.seconds:.1f} s" if timings else ""
            lines.append(f"  shrunk in {f.shrunk.runs} runs{took}, to "
                         f"{len(_adds(f.minimal))} request(s), {f.minimal_verdict.steps} engine steps:")
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
        lines.append("As Python (runs and asserts the failure):")
        lines.append("")
        lines += ["    " + s if s else "" for s in snippet(f.minimal, self.bugs, f.kind, self.plant).splitlines()]
        return "\n".join(lines)


@contextlib.contextmanager
def _without_overflow_asserts() -> Iterator[None]:
    """Triton's interpreter asserts after every 32-bit integer add and multiply that it did not
    overflow, which compiled kernels do only in debug mode; that is a fifth of a hunt's time on the
    CPU. The hunt turns the assertions off while it runs (mambalab's memory sanitizer stays on)."""
    from mambalab.device import INTERPRET

    builder = None
    if INTERPRET:
        try:
            import triton.runtime.interpreter as interpreter

            builder = interpreter.interpreter_builder
            saved = builder.options
            builder.options = replace(saved, sanitize_overflow=False)
        except (ImportError, AttributeError, TypeError):  # another Triton: leave it as it is
            builder = None
    try:
        yield
    finally:
        if builder is not None:
            builder.options = saved


@_without_overflow_asserts()
def hunt(bugs: BugConfig, *, budget: int = 200, seed: int = 0, time_limit: float | None = None,
         do_shrink: bool = True, shrink_runs: int = 150, shrink_time: float | None = None,
         attribute: bool = True, keep_going: bool = False,
         progress: Callable[[str], None] | None = None, plant: Plant | None = None) -> HuntResult:
    """Run up to ``budget`` random workloads; stop at the first failure and shrink it.

    With bugs switched on and ``attribute`` (the default), a failure counts
    only where the fixed engine passes the same workload (the differential
    between bug and fix); one the fixed engine shares is listed in
    ``shared`` and the hunt goes on. ``keep_going``: record every failing
    workload (no shrinking) and run the whole budget, to measure a rate.
    ``plant``: a planted bug (:mod:`mambalab.lab.planted`), active in the bug runs
    and absent from the control runs.
    """
    t0, c0 = time.perf_counter(), time.process_time()
    from mambalab.lab.hunt_worker import shared_worker

    starts0 = shared_worker().starts
    fixed = BugConfig()
    suspect = bool(bugs.enabled) or plant is not None
    differential = attribute and suspect
    result = HuntResult(bugs, seed, budget, 0, 0.0, plant=plant)
    for i in range(budget):
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            break
        ws = workload_seed(seed, i)
        w = random_hunt_workload(random.Random(ws))
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
        result.seconds, result.cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
        found = Found(i, ws, kind, verdict, w, control=control)
        if do_shrink:
            found.shrunk = shrink(w, bugs, verdict, records, baseline=fixed if differential else None,
                                  baseline_verdict=control, max_runs=shrink_runs, time_limit=shrink_time,
                                  progress=progress, plant=plant)
            if differential:
                found.control = found.shrunk.baseline
            elif suspect:
                found.control, _ = run(found.minimal, fixed)
        result.found = found
        result.worker_starts = shared_worker().starts - starts0
        return result
    result.seconds, result.cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    result.worker_starts = shared_worker().starts - starts0
    return result


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
    if args.budget < 1 or args.shrink_runs < 0 or (args.time_limit is not None and args.time_limit <= 0):
        print("--budget must be >= 1, --shrink-runs >= 0 and --time-limit > 0", file=sys.stderr)
        return 2
    bugs = BugConfig.with_bugs(ids)
    progress = (lambda s: print(s, file=sys.stderr, flush=True)) if args.verbose else None
    result = hunt(bugs, budget=args.budget, seed=args.seed, time_limit=args.time_limit,
                  do_shrink=not args.no_shrink, shrink_runs=args.shrink_runs, attribute=not args.any_failure,
                  keep_going=args.keep_going, progress=progress)
    print(json.dumps(result.to_dict(), indent=1, default=str) if args.json else result.report())
    return result.exit_code


__all__ = ["FAILURE_KINDS", "drop_one_at_a_time", "Found", "HuntResult", "Shared", "ShrinkResult", "failure_kind", "hunt", "isolated",
           "main", "measure", "random_hunt_workload", "run", "shrink", "snippet", "step_list",
           "workload_seed"]
