"""The bug hunter's workload generator: one distribution for every bug.

Small random workloads (random prompt and output lengths, aborts mid-prefill,
preemptions, data-parallel ranks going idle, shared prompt prefixes,
speculative decoding with random acceptance, both cache modes, several
``max_num_seqs`` and capture sizes), biased only towards what serving engines
meet (padded decode graphs, chunked prompts cut short, idle DP ranks, partial
draft acceptance) so that a few steps hold them; the biases are named
constants below and measured in docs/hunt.md. It knows nothing of the bugs.
"""

from __future__ import annotations

import random

from mambalab.engine.core import Abort, Add, EngineConfig, Event, Preempt
from mambalab.worker.model_runner import RunnerConfig
from mambalab.lab.workload import VOCAB, Workload

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
P_CHAT_BATCH = 0.5  # a burst is a batch client's chats, sent at once (else mixed; 0: the issue-8 generator)
CHAT_BATCH_TOKENS = (4, 10)  # the reply lengths of a batch client's chats


def _fresh(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(VOCAB) for _ in range(n)]


def random_hunt_workload(rng: random.Random) -> Workload:
    """One small random workload: a few conversations and bursts of requests over a few steps.

    Swarm-style: each workload first draws a configuration (DP size, cache
    mode, speculative tokens and acceptance, ``max_num_seqs`` and so the
    capture sizes, the token budget), then up to three *conversations* (turns
    pinned to a rank, each starting with the conversation's first block, its
    system prompt; the next turn one to three steps after the reply ended, as
    the user reads and types) and up to two *bursts* on one rank (a batch
    client's chats, or a mix of chats, long prompts and one-token requests).
    Requests finish, ranks go idle and the batch changes composition between turns. Arrival
    steps, ranks, prompts and lengths are random. Biases, all bug-agnostic:

    * three workloads in four run two data-parallel ranks, and three in four
      keep prefix caching on (``"all"``): the configuration hybrid models are
      served with, and the one where most of the catalogue lives;
    * ``max_num_seqs`` is usually 4 and waves hold up to four requests, so
      decode batches of 3 are common and get padded to the 4-row graph;
    * one prompt in fifteen is longer than the token budget (chunked prefill),
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
    * half the bursts are a batch client's chats (an evaluation or
      summarisation job): two to four chats sent in the same step, with
      replies of 4-10 tokens, so a rank often decodes several requests for
      a stretch with nothing prefilling. The DP ranks agree on one CUDA-graph
      mode, the minimum (as vLLM), so an idle rank's dummy batch replays its
      FULL graph only while the busy ranks run pure decodes; with mixed
      bursts alone the busy rank mostly had one row decoding, or a prefill
      arriving, when a conversation's rank went idle between turns
      (``P_CHAT_BATCH``; issue 16, measured in docs/hunt.md);
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
    # One-off bursts: a client's batch lands on the least busy rank, mostly: either a batch client's
    # chats sent together, or a mix of chats, long prompts (chunked, often cancelled mid-prefill) and
    # one-token requests (classification, scoring).
    for _ in range(rng.choices([0, 1, 2], weights=[1, 5, 4])[0]):
        at0 = rng.randint(1, 5)
        rank = min(range(dp), key=lambda r: busy_until[r]) if rng.random() < 0.75 else rng.randrange(dp)
        if P_CHAT_BATCH and rng.random() < P_CHAT_BATCH:  # a batch client's chats, sent together
            for _ in range(rng.randint(2, 4)):
                if len(prompts) >= 8:
                    break
                add(at0, _fresh(rng, rng.randint(2, 8)), rng.randint(*CHAT_BATCH_TOKENS), rank, 0.1)
            continue
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


__all__ = ["random_hunt_workload", "workload_seed", "BLOCK_SIZE", "MAX_MODEL_LEN"]
