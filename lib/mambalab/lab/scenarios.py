"""One replayable scenario per catalogue bug, each reaching it through its real mechanism.

Nothing here corrupts anything by hand: a scenario is only a workload (which
requests arrive when, on which DP rank, aborts, speculative settings) that
walks the engine into the situation upstream users were in. With the bug
switched on the mechanism does the damage; with the fix the same workload
matches the per-request reference. Seeds vary prompts and lengths.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from mambalab.lab.bugs import BUGS, BugConfig
from mambalab.engine.core import Abort, Add, Engine, EngineConfig, EngineCrash, Event
from mambalab.worker.model_runner import RunnerConfig, StepRecord
from mambalab.lab.reference import judge
from mambalab.lab.verdict import Crash, Verdict
from mambalab.lab.workload import VOCAB, Workload


def _tokens(rng: random.Random, n: int) -> tuple[int, ...]:
    return tuple(rng.randrange(VOCAB) for _ in range(n))


def pad_minus_one(seed: int, requests: int = 3, max_num_seqs: int = 4, cudagraph: bool = True) -> Workload:
    """Three requests decode in a FULL graph padded to 4 rows: row 3 is padding.

    The keyword arguments are the panel's knobs (their defaults: the replayed scenario)."""
    rng = random.Random(seed)
    cfg = EngineConfig(RunnerConfig(max_num_seqs=max_num_seqs, cudagraph=cudagraph), model_seed=seed)
    adds = [Add(f"r{i}", _tokens(rng, rng.randint(3, 8)), rng.randint(3, 6)) for i in range(requests)]
    return Workload(cfg, {1: adds} if adds else {})


def stale_rows(seed: int, dp: int = 2, max_num_seqs: int = 4, d_arrives: int = 10) -> Workload:
    """DP 2 with prefix caching: rank 1's request A finishes and rank 1 goes idle while rank 0
    keeps decoding, so rank 1 runs dummy batches; later D arrives on rank 1 sharing A's first
    block and starts from the cached state of that block.

    The keyword arguments are the panel's knobs (their defaults: the replayed scenario)."""
    rng = random.Random(seed)
    rc = RunnerConfig(max_num_seqs=max_num_seqs, mamba_cache_mode="all", block_size=4, num_blocks=64)
    cfg = EngineConfig(rc, data_parallel_size=dp, model_seed=seed)
    r1 = min(1, dp - 1)
    prompt_a = _tokens(rng, rng.randint(9, 12))
    # D shares A's first block only, and its own tokens after the hit are few, so the
    # state it inherits from that cached block decides its first outputs.
    prompt_d = prompt_a[:4] + tuple((t + 1) % VOCAB for t in _tokens(rng, rng.randint(1, 2)))
    events: dict[int, list[Event]] = {
        1: [Add("C", _tokens(rng, rng.randint(3, 6)), 18, rank=0), Add("A", prompt_a, 2, rank=r1)],
    }
    events.setdefault(d_arrives, []).append(Add("D", prompt_d, 5, rank=r1))
    return Workload(cfg, events)


def guard_lt_zero(seed: int, requests: int = 3, max_num_seqs: int = 4, cudagraph: bool = True) -> Workload:
    """Decodes padded to a graph size with padding 0; a request that arrives later starts from
    the null block, the zero state.

    The keyword arguments are the panel's knobs (their defaults: the replayed scenario)."""
    rng = random.Random(seed)
    cfg = EngineConfig(RunnerConfig(max_num_seqs=max_num_seqs, cudagraph=cudagraph), model_seed=seed)
    first = [Add(f"r{i}", _tokens(rng, rng.randint(3, 8)), rng.randint(4, 6)) for i in range(requests)]
    return Workload(cfg, {1: first, 4: [Add("late", _tokens(rng, rng.randint(3, 8)), 4)]})


def spec_slots(seed: int, num_spec: int | str = "auto", acceptance: float | str = "schedule",
               requests: int = 2) -> Workload:
    """mamba_cache_mode='all' + speculative decoding with partial acceptance.

    ``num_spec``: ``"auto"`` is ``1 + seed % 2``; ``acceptance``: ``"schedule"`` alternates full and
    partial acceptance. The keyword arguments are the panel's knobs (their defaults: the replayed
    scenario)."""
    rng = random.Random(seed)
    ns = 1 + seed % 2 if num_spec == "auto" else int(num_spec)
    rc = RunnerConfig(max_num_seqs=4, mamba_cache_mode="all", block_size=4, num_blocks=96,
                      num_speculative_tokens=ns)
    schedule = tuple(rng.choice(range(ns)) if i % 2 else ns for i in range(8)) if ns else ()  # partial acceptances
    acc = (schedule if acceptance == "schedule" else float(acceptance)) if ns else 0.5
    cfg = EngineConfig(rc, model_seed=seed, acceptance=acc, drafter_seed=seed)
    adds = [Add(f"r{i}", _tokens(rng, rng.randint(5, 9)), rng.randint(7, 10)) for i in range(requests)]
    return Workload(cfg, {1: adds} if adds else {})


def stale_is_prefilling(seed: int, max_num_seqs: int = 4, x_len: int = 36, abort_x: bool = True,
                        cudagraph: bool = True) -> Workload:
    """A, B, D decode in a FULL graph; D finishes; C and a long X arrive; X is aborted after its
    first prefill chunk; then A, B, C decode padded to 4 rows with X's stale row as padding.

    The keyword arguments are the panel's knobs (their defaults: the replayed scenario)."""
    rng = random.Random(seed)
    cfg = EngineConfig(RunnerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=32, max_model_len=48,
                                    cudagraph=cudagraph), model_seed=seed)
    events: dict[int, list[Event]] = {
        1: [Add("A", _tokens(rng, rng.randint(3, 6)), 9), Add("B", _tokens(rng, rng.randint(3, 6)), 9),
            Add("D", _tokens(rng, rng.randint(3, 6)), 2)],
        3: [Add("C", _tokens(rng, rng.randint(3, 5)), 5), Add("X", _tokens(rng, x_len), 4)],
    }
    if abort_x:
        events[4] = [Abort("X")]
    return Workload(cfg, events)


def move_row_stale_source(seed: int) -> Workload:
    """DP 2 with prefix caching: on rank 1, A finishes first and condense moves B down into A's
    row; B finishes; rank 1 idles while rank 0 decodes two requests, so its dummy batch has two
    rows; D then arrives on rank 1 sharing B's first block."""
    rng = random.Random(seed)
    rc = RunnerConfig(max_num_seqs=4, mamba_cache_mode="all", block_size=4, num_blocks=64)
    cfg = EngineConfig(rc, data_parallel_size=2, model_seed=seed)
    prompt_b = _tokens(rng, rng.randint(9, 12))
    prompt_d = prompt_b[:4] + tuple((t + 1) % VOCAB for t in _tokens(rng, rng.randint(1, 2)))
    events: dict[int, list[Event]] = {
        1: [Add("C", _tokens(rng, rng.randint(3, 6)), 18, rank=0),
            Add("E", _tokens(rng, rng.randint(3, 6)), 18, rank=0),
            Add("A", _tokens(rng, rng.randint(3, 6)), 1, rank=1),
            Add("B", prompt_b, 3, rank=1)],
        11: [Add("D", prompt_d, 5, rank=1)],
    }
    return Workload(cfg, events)


def zero_accepted(seed: int) -> Workload:
    """Speculative decoding (GDN layers read state column ``num_accepted - 1``): requests decode
    after their prefill; a later request joins a batch that is already speculating.

    Every CUDA-graph batch has padded rows, the capture batches at start-up included. With the
    switch on, the runner gives padded rows an accepted count of 0 (upstream gives 1: the lab's
    stand-in for the zero #48475 hardens against) and the GDN kernel, unbounded as in every
    release up to 0.33, reads column -1: row 0 reads before the index tensor, at the first
    capture. The Mamba SSU clamps ``max(num_accepted - 1, 0)`` and is not involved. Fixed
    (#50021's bound): the out-of-row column skips the row, and the workload matches."""
    rng = random.Random(seed)
    rc = RunnerConfig(max_num_seqs=4, num_speculative_tokens=1, num_blocks=48)
    cfg = EngineConfig(rc, model_seed=seed, acceptance=0.5, drafter_seed=seed)
    events: dict[int, list[Event]] = {
        1: [Add("r0", _tokens(rng, rng.randint(3, 7)), 6), Add("r1", _tokens(rng, rng.randint(3, 7)), 6)],
        3: [Add("r2", _tokens(rng, rng.randint(3, 7)), 5)],
    }
    return Workload(cfg, events)


def single_token_extend(seed: int) -> Workload:
    """Chunked prefill under FULL graphs: A and B decode while X's prompt is split by the token
    budget so that its last chunk is one token; that step every row schedules one token, the
    shape-based dispatch replays the uniform decode graph, and X (still prefilling, with prior
    state) is the row the builder must reclassify as a decode (#42430)."""
    rng = random.Random(seed)
    budget = 8
    cfg = EngineConfig(RunnerConfig(max_num_seqs=4, max_num_batched_tokens=budget, max_model_len=48),
                       model_seed=seed)
    events: dict[int, list[Event]] = {
        1: [Add("A", _tokens(rng, rng.randint(3, 6)), 8), Add("B", _tokens(rng, rng.randint(3, 6)), 8)],
        # after A's and B's prefills, X arrives; two decodes leave budget - 2 tokens for its chunk
        4: [Add("X", _tokens(rng, budget - 2 + 1), 3)],
    }
    return Workload(cfg, events)


SCENARIOS = {
    "pad-minus-one": pad_minus_one,
    "stale-rows": stale_rows,
    "guard-lt-zero": guard_lt_zero,
    "spec-slots": spec_slots,
    "stale-is-prefilling": stale_is_prefilling,
    "single-token-extend": single_token_extend,
    "move-row-stale-source": move_row_stale_source,
    "zero-accepted": zero_accepted,
}


def scenario_for(bug_id: str):
    base = bug_id.split("/")[0]
    if base not in SCENARIOS:
        raise KeyError(f"unknown bug {bug_id!r}; valid: {', '.join(valid_bug_ids())}")
    return SCENARIOS[base]


def valid_bug_ids() -> list[str]:
    out = []
    for b in BUGS.values():
        out.append(b.id)
        out.extend(f"{b.id}/{p}" for p in b.parts)
    return out


# -- mechanism signatures: what the step records show --------------------------------

def signatures(records: list[StepRecord], verdict: Verdict) -> list[str]:
    """Sentences naming the mechanism at work, read off the engine's step records."""
    out: list[str] = []
    if verdict.illegal is not None and verdict.illegal.from_sanitizer:
        i = verdict.illegal
        if "delta_rule" in str(i.kernel) and "indices" in str(i.arg):
            what = ("the GDN kernel read column num_accepted_tokens - 1 = -1 of the state indices "
                    "(an accepted count of 0, unbounded load): before the tensor")
        elif "state" in str(i.arg) and "indices" not in str(i.arg):
            what = "a padded row's -1 reached address arithmetic"
        else:
            what = "column -1 of the index tensor was read (before its first element)"
        out.append(f"step {i.step}: {i.kernel} row {i.row} {i.op} of {i.arg} at "
                   f"slot {i.slot}: {what}")
    for r in records:
        if r.kind == "step" and r.mode == "FULL" and r.padded_rows_prefilling and not r.refreshed:
            out.append(f"step {r.step}, rank {r.rank}: padded row(s) {r.padded_rows_prefilling} classified "
                       f"as prefill (stale is_prefilling): CUDA-graph buffers not refreshed; the graph "
                       f"reads slots {r.state_slots} while this step's rows own {r.intended_slots}")
        live_pref = [i for i in range(min(r.num_reqs, len(r.state_slots)))
                     if r.kind == "step" and r.mode == "FULL" and not r.refreshed and r.num_prefills
                     and i >= r.num_decodes]
        if live_pref and not r.padded_rows_prefilling:
            out.append(f"step {r.step}, rank {r.rank}: live row(s) {live_pref} (a one-token prompt chunk with "
                       f"prior state) classified as prefill in a FULL decode-graph step: CUDA-graph buffers not "
                       f"refreshed; the graph reads slots {r.state_slots} while this step's rows own "
                       f"{r.intended_slots}")
        if r.kind == "dummy":
            live = sorted({s for row in r.state_slots for s in row if s > 0})
            if live:
                out.append(f"step {r.step}, rank {r.rank}: dummy batch rows point at blocks {live} "
                           f"(stale block-table rows of finished requests)")
        zero = [i for i, n in enumerate(r.num_accepted_in) if n <= 0]
        if r.kind == "step" and zero and r.num_decodes and not any("num_accepted_tokens" in o for o in out):
            out.append(f"step {r.step}, rank {r.rank}: row(s) {zero} decode with num_accepted_tokens = 0: "
                       f"the kernels read state column -1 (the previous row's last column)")
        minus = [i for i, row in enumerate(r.state_slots) if any(x < 0 for x in row)]
        if minus and not any("-1 in the state indices" in o for o in out):
            out.append(f"step {r.step}, rank {r.rank}: padded row(s) {minus} carry -1 in the state indices "
                       f"the kernels read: slot -1 lies before the pool (on a GPU with a caching "
                       f"allocator that is another tensor's memory, not necessarily a fault)")
        if r.null_block_dirty:
            out.append(f"step {r.step}, rank {r.rank}: the null block (0) is no longer zero: "
                       f"padded rows wrote into it")
            break
    if verdict.crash is not None and verdict.crash.kind == "startup":
        out.append("crash while capturing CUDA graphs at start-up")
        ill = verdict.crash.illegal
        if ill is not None and "delta_rule" in str(ill.kernel) and "indices" in str(ill.arg):
            out.append("the capture batch's padded rows carry num_accepted_tokens = 0; the GDN kernel "
                       "loads column num_accepted_tokens - 1 = -1 unbounded: row 0 reads before the "
                       "state-index tensor (the Mamba SSU clamps max(num_accepted - 1, 0))")
    return out


@dataclass
class ReplayResult:
    bug: str
    fixed: bool
    seed: int
    verdict: Verdict
    signatures: list[str] = field(default_factory=list)
    workload: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict.ok else 1

    def to_dict(self) -> dict:
        return dict(bug=self.bug, fixed=self.fixed, seed=self.seed, ok=self.verdict.ok,
                    verdict=self.verdict.to_dict(), signatures=self.signatures, workload=self.workload)

    def report(self) -> str:
        lines = [f"{self.bug} ({'fixed' if self.fixed else 'pre-fix'}), seed {self.seed}: {self.verdict.summary()}"]
        lines += [f"  mechanism: {s}" for s in self.signatures]
        return "\n".join(lines)


def run_workload(workload: Workload, bugs: BugConfig, max_steps: int = 200) -> tuple[Verdict, list[StepRecord]]:
    """Build an engine for the workload and judge it (a crash at start-up is a verdict too)."""
    try:
        engine = Engine(workload.cfg, bugs)
    except Exception as e:  # noqa: BLE001 - e.g. a graph that cannot be captured
        return Verdict(ok=False, crash=Crash.at_startup(e)), []
    engine.schedule_events(workload.events)
    try:
        engine.run(max_steps)
    except EngineCrash as crash:
        return judge(engine, crash), engine.records
    return judge(engine), engine.records


def replay(bug: str, *, fixed: bool = False, seed: int = 0) -> ReplayResult:
    """Run ``bug``'s scenario with the pre-fix behaviour (or the fix) and judge it."""
    make = scenario_for(bug)
    workload = make(seed)
    bugs = BugConfig() if fixed else BugConfig.with_bugs(bug)
    verdict, records = run_workload(workload, bugs)
    return ReplayResult(bug, fixed, seed, verdict, signatures(records, verdict), workload.describe())


__all__ = ["SCENARIOS", "ReplayResult", "replay", "run_workload", "signatures", "valid_bug_ids"]
