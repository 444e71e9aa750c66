"""Shrinking a failing workload while it keeps failing the same way.

Families of smaller candidates (truncate after the failing step, drop halves,
quarters... of the events before single ones, as delta debugging does, close
gaps between steps, simplify the engine configuration, shorten prompts and
outputs) are tried greedily; a candidate is kept when
:func:`mambalab.lab.hunt_run.run` gives the same failure kind. The fixed
engine (the baseline) is run once, on the final candidate; should it fail
there, the last kept candidate it passes is taken and shrinking goes on from
it with the baseline checked at every step. Runs are memoised
(:class:`~mambalab.lab.hunt_run.RunMemo`) across the hunt, and once the
workload is at most ``TARGET_STEPS`` steps long the cosmetic families
(lengths, renames) get ``POLISH_RUNS`` runs, not the rest of the budget.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field, fields, replace
from typing import Callable, Iterator

from mambalab.lab.bugs import BugConfig
from mambalab.engine.core import Add, EngineConfig, Event
from mambalab.worker.model_runner import StepRecord
from mambalab.lab.planted import Plant
from mambalab.lab.verdict import Verdict
from mambalab.lab.hunt_run import RunMemo, failure_kind, workload_key
from mambalab.lab.workload import Workload

TARGET_STEPS = 6  # a reproduction this short is the goal; past it only POLISH_RUNS go to cosmetics
POLISH_RUNS = 20
POLISH = ("lengths", "cosmetic")

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


def requests_in(w: Workload) -> list[tuple[int, Add]]:
    """The workload's requests: its ``Add`` events with their steps."""
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


_key = workload_key


def measure(w: Workload, verdict: Verdict) -> tuple:
    """What shrinking minimises, most important first: engine steps, then the workload's size."""
    adds = requests_in(w)
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
    adds = requests_in(w)
    rc = w.cfg.runner

    def cut():
        yield "cut at the failure step", _truncate(w, verdict, records)

    def chunks():  # delta debugging: drop halves, then quarters, ... (single events: drops)
        evs = [(s, e) for s in sorted(w.events) for e in w.events[s]]
        n = len(evs)
        size = -(-n // 2)
        while size >= 2 and size < n:
            for start in range(0, n, size):
                gone = set(range(start, min(n, start + size)))
                dropped = {evs[i][1].req_id for i in gone if isinstance(evs[i][1], Add)}
                keep: dict[int, list[Event]] = {}
                for i, (s, e) in enumerate(evs):
                    if i not in gone and e.req_id not in dropped:
                        keep.setdefault(s, []).append(e)
                yield f"drop events {start + 1}-{max(gone) + 1} of {n}", _with_events(w, keep)
            size = -(-size // 2) if size > 2 else 1

    def earlier():  # close gaps: every gap at once, a whole gap, then one step
        steps = sorted(w.events)
        if steps and steps[-1] > len(steps):
            at = {s: i + 1 for i, s in enumerate(steps)}
            yield "every gap closed", _map_events(w, lambda s2, e: (at[s2], e))
        for prev, s in zip([0] + steps, steps):
            if s - prev > 2:
                d = s - prev - 1
                yield f"steps >= {s} {d} earlier", _map_events(w, lambda s2, e, s=s, d=d: (s2 - d if s2 >= s else s2, e))
        for s in steps:
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

    return [cut, chunks, earlier, drops, config, one_earlier, lengths, cosmetic]


NUM_FAMILIES = 8


class _Ahead:
    """An iterator of candidates that can be looked into ahead (:meth:`peek`) without changing what
    it yields, nor when: an exception the underlying generator raises while peeking is raised
    where the plain iteration would have met it."""

    _RAISE = object()

    def __init__(self, it: Iterator) -> None:
        self._it = it
        self._buf: list = []
        self._end = False

    def __iter__(self) -> "_Ahead":
        return self

    def __next__(self):
        if self._buf:
            item = self._buf.pop(0)
            if isinstance(item, tuple) and item and item[0] is _Ahead._RAISE:
                raise item[1]
            return item
        if self._end:
            raise StopIteration
        return next(self._it)

    def peek(self, n: int, wanted: Callable, most: int = 64) -> list:
        """Up to ``n`` of the next items for which ``wanted(item)`` holds (looking at most ``most``
        items ahead); they stay to be yielded in order."""
        out = [x for x in self._buf if not (isinstance(x, tuple) and x and x[0] is _Ahead._RAISE) and wanted(x)]
        while len(out) < n and not self._end and len(self._buf) < most:
            try:
                item = next(self._it)
            except StopIteration:
                self._end = True
                break
            except Exception as e:  # noqa: BLE001 - raised again where iteration reaches it
                self._buf.append((_Ahead._RAISE, e))
                self._end = True
                break
            self._buf.append(item)
            if wanted(item):
                out.append(item)
        return out[:n]


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
           progress: Callable[[str], None] | None = None, plant: Plant | None = None,
           memo: RunMemo | None = None, polish_runs: int = POLISH_RUNS) -> ShrinkResult:
    """Greedy shrinking: keep any smaller variant that fails the same way, until none does.

    "Smaller" is :func:`measure` (engine steps first). A variant runs with at
    most the current number of steps, so one that would take longer stops
    early. With a ``baseline`` (the fixed engine), the result is one the
    baseline passes: the reproduction stays one of *these* bugs, not of
    something the fixes share. ``runs`` counts engine runs made (memo hits
    are free); the final baseline check may pass ``max_runs`` by the runs it
    needs.
    """
    kind = failure_kind(verdict)
    assert kind is not None, "shrink() needs a failing workload"
    t0 = time.perf_counter()
    memo = memo if memo is not None else RunMemo()
    state = dict(runs=0, polish=0)
    log: list[str] = []
    kept: list[str] = []  # what made each kept candidate (chain[1:])
    chain: list[tuple[Workload, Verdict, list[StepRecord]]] = [(workload, verdict, records)]
    passed: dict[str, Verdict] = {}  # the baseline's verdicts, by workload key
    if baseline is not None and baseline_verdict is not None:
        passed[_key(workload)] = baseline_verdict

    def out_of_budget() -> bool:
        return state["runs"] >= max_runs or (time_limit is not None and time.perf_counter() - t0 > time_limit)

    def run(w: Workload, b: BugConfig, max_steps: int = 200, p: Plant | None = None):
        before = memo.misses
        out = memo.run(w, b, max_steps, p)
        state["runs"] += memo.misses - before
        return out

    def baseline_ok(w: Workload) -> Verdict:
        k = _key(w)
        if k not in passed:
            passed[k], _ = run(w, baseline)
        return passed[k]

    def greedy(strict: bool) -> None:
        seen = {_key(w) for w, _, _ in chain}
        changed = True
        while changed and not out_of_budget():
            changed = False
            for fam in range(NUM_FAMILIES):
                # Stay in a family while it makes progress (its candidates are regenerated from the
                # smaller workload), then move on; passes repeat until one changes nothing.
                improved = True
                while improved and not out_of_budget():
                    improved = False
                    cur, cur_v, cur_r = chain[-1]
                    families = _families(cur, cur_v, cur_r)
                    family = families[fam]
                    polish = family.__name__ in POLISH and cur_v.steps <= TARGET_STEPS
                    # the cut at the failure step first, every time: one run, and a kept candidate
                    # often fails earlier than the workload it came from
                    cands = _Ahead(family() if fam == 0 else itertools.chain(families[0](), family()))
                    limit = max(1, cur_v.steps)
                    for what, cand in cands:
                        if out_of_budget() or (polish and state["polish"] >= polish_runs):
                            break
                        k = _key(cand)
                        if k in seen or not cand.events:
                            continue
                        seen.add(k)
                        if memo.lookahead > 1:  # the next candidates start in the pool's other workers
                            memo.prefetch(cand, bugs, limit, plant)
                            for _, nxt in cands.peek(memo.lookahead - 1,
                                                     lambda c: c[1].events and _key(c[1]) not in seen):
                                memo.prefetch(nxt, bugs, limit, plant)
                        before = state["runs"]
                        try:
                            v, r = run(cand, bugs, limit, plant)
                        except Exception:  # noqa: BLE001 - an invalid variant (e.g. a prompt the engine refuses)
                            state["runs"] += 1
                            continue
                        finally:
                            if polish:
                                state["polish"] += state["runs"] - before
                        if failure_kind(v) != kind or not measure(cand, v) < measure(cur, cur_v):
                            continue
                        if strict and not baseline_ok(cand).ok:
                            continue
                        memo.cancel()  # the candidates started ahead were of the old workload
                        chain.append((cand, v, r))
                        kept.append(what)
                        log.append(f"{what}: {v.steps} steps")
                        if progress:
                            progress(f"  shrink: {what} -> {v.steps} steps, {len(requests_in(cand))} requests")
                        improved = changed = True
                        break

    greedy(strict=False)
    if baseline is not None:
        # The baseline once, on the final candidate; else the newest kept candidate it passes (the
        # found workload passed it: that was the hunt's control run), and shrink on from there,
        # checking it at every step.
        fell_back = False
        while len(chain) > 1 and not baseline_ok(chain[-1][0]).ok:
            chain.pop()
            undone = kept.pop()
            log.append(f"(the fixed engine fails the result of {undone}: back to {chain[-1][1].steps} steps)")
            fell_back = True
            if progress:
                progress(f"  shrink: the fixed engine fails the result of {undone}; back one candidate")
        if fell_back and not out_of_budget():
            greedy(strict=True)
    cur, cur_v, cur_r = chain[-1]
    cur_b = baseline_ok(cur) if baseline is not None else None
    return ShrinkResult(cur, cur_v, cur_r, state["runs"], time.perf_counter() - t0, log, cur_b)


__all__ = ["NUM_FAMILIES", "POLISH_RUNS", "TARGET_STEPS", "ShrinkResult", "requests_in", "drop_one_at_a_time", "measure", "shrink"]
