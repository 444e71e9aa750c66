"""Panel for #37728 ``stale-rows``: an idle DP rank's dummy batch reads and writes stale block-table rows.

DP 2 with prefix caching. On rank 1, A finishes early and rank 1 goes idle
while rank 0 keeps decoding C: every step rank 1 runs a dummy batch padded
to rank 0's size with ``num_reqs == num_reqs_padded``, so no null fill masks
its rows. Pre-fix, A's finished row was never cleared and the dummy run does
not commit the table: dummy rows write A's freed, cached blocks; D later
arrives sharing A's first block and starts from that corrupted state.
Knobs: DP ranks, ``max_num_seqs``, the step D arrives.
"""

from __future__ import annotations

import random

from mambalab.lab import scenarios
from mambalab.engine.core import Add, EngineConfig, Event
from mambalab.worker.model_runner import RunnerConfig
from mambalab.lab.scenarios import VOCAB
from mambalab.lab.workload import Workload
from mambalab.widgets.bug_spec import SEED, BugSpec, tokens
from mambalab.widgets.controls import Knob

KNOBS = (
    SEED,
    Knob("dp", "DP ranks", "int", 2, 1, 4, help="data-parallel ranks; A and D go to rank 1, C to rank 0"),
    Knob("max_num_seqs", "max_num_seqs", "int", 4, 1, 8, help="the largest batch per rank"),
    Knob("d_arrives", "D arrives at step", "int", 10, 2, 16,
         help="when D (sharing A's first block) arrives on rank 1"),
)


def workload(seed: int = 0, dp: int = 2, max_num_seqs: int = 4, d_arrives: int = 10) -> Workload:
    """The scenario itself at the defaults, else :func:`recipe`."""
    if (dp, max_num_seqs, d_arrives) == (2, 4, 10):
        return scenarios.stale_rows(seed)
    return recipe(seed, dp, max_num_seqs, d_arrives)


def recipe(seed: int = 0, dp: int = 2, max_num_seqs: int = 4, d_arrives: int = 10) -> Workload:
    """``scenarios.stale_rows`` with its constants as knobs (equal to it at the defaults)."""
    rng = random.Random(seed)
    rc = RunnerConfig(max_num_seqs=max_num_seqs, mamba_cache_mode="all", block_size=4, num_blocks=64)
    cfg = EngineConfig(rc, data_parallel_size=dp, model_seed=seed)
    r1 = min(1, dp - 1)
    prompt_a = tokens(rng, rng.randint(9, 12))
    prompt_d = prompt_a[:4] + tuple((t + 1) % VOCAB for t in tokens(rng, rng.randint(1, 2)))
    events: dict[int, list[Event]] = {
        1: [Add("C", tokens(rng, rng.randint(3, 6)), 18, rank=0), Add("A", prompt_a, 2, rank=r1)],
    }
    events.setdefault(d_arrives, []).append(Add("D", prompt_d, 5, rank=r1))
    return Workload(cfg, events)


def explain(k: dict) -> list[str]:
    out = []
    if k["dp"] == 1:
        out.append("One DP rank: A, C and D share rank 0, no rank is ever idle, so no dummy batch runs and "
                   "#37728 cannot happen.")
    else:
        out.append(f"Rank 1 runs a dummy batch in every step it has no request (after A finishes, until D "
                   f"arrives at step {k['d_arrives']}) while rank 0 decodes C.")
        if k["dp"] > 2:
            who = "Rank 2 never gets a request: it runs" if k["dp"] == 3 else \
                f"Ranks 2–{k['dp'] - 1} never get a request: they run"
            out.append(f"{who} dummy batches over empty rows (null block only: harmless).")
    return out


SPEC = BugSpec(
    bug="stale-rows",
    knobs=KNOBS,
    build=workload,
    focus_rank=lambda k: min(1, k["dp"] - 1),
    views=("block_table", "metadata", "state_pool", "timeline"),
    first_view="block_table",
    lesson=("Watch <b>rank 1</b>. A finishes at step 2; from step 3 rank 1 only runs dummy batches. Pre-fix its "
            "block table still holds A's row (never cleared, never committed): the dummy row reads and writes "
            "block 1, A's freed but cached first block (Block table, State pool). At step 10 D arrives with "
            "A's first 4 tokens, hits that cached block and starts from the state the dummy batches wrote "
            "(Timeline: D diverges). With the fix the row is cleared and committed: the dummy row points at "
            "the null block."),
    explain=explain,
)
