"""Random, seeded workloads: requests arriving over steps, aborts and preemptions.

Used by ``python -m mambalab run``, the property tests (the fixed engine
matches the reference on every workload) and the bug hunter.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from mambalab.engine.core import Abort, Add, EngineConfig, Event, Preempt
from mambalab.model.tiny_hybrid import TinyHybridConfig
from mambalab.worker.model_runner import RunnerConfig

VOCAB = TinyHybridConfig.vocab_size  # the tiny model's vocabulary: every workload's token ids lie below it


@dataclass
class Workload:
    cfg: EngineConfig
    events: dict[int, list[Event]] = field(default_factory=dict)

    def describe(self) -> list[str]:
        out = []
        for step in sorted(self.events):
            for ev in self.events[step]:
                if isinstance(ev, Add):
                    out.append(f"step {step}: add {ev.req_id} on rank {ev.rank}, prompt {list(ev.prompt)}, "
                               f"max_tokens {ev.max_tokens}")
                else:
                    out.append(f"step {step}: {type(ev).__name__.lower()} {ev.req_id}")
        return out


def random_workload(
    seed: int,
    *,
    num_requests: int = 6,
    data_parallel_size: int = 1,
    num_speculative_tokens: int = 0,
    mamba_cache_mode: str = "none",
    acceptance: float = 0.5,
    abort_prob: float = 0.15,
    preempt_prob: float = 0.1,
    max_num_seqs: int = 4,
    max_model_len: int = 48,
    vocab_size: int = VOCAB,
    shared_prefix_prob: float = 0.4,
) -> Workload:
    rng = random.Random(seed)
    rc = RunnerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=32, max_model_len=max_model_len,
                      block_size=4, num_blocks=8 * max_num_seqs * (2 + num_speculative_tokens) + 16,
                      mamba_cache_mode=mamba_cache_mode, num_speculative_tokens=num_speculative_tokens)
    cfg = EngineConfig(rc, data_parallel_size=data_parallel_size, model_seed=seed % 7,
                       acceptance=acceptance, drafter_seed=seed)
    events: dict[int, list[Event]] = {}
    step = 1
    prompts: list[list[int]] = []
    for i in range(num_requests):
        step += rng.choice([0, 0, 1, 1, 2, 4])
        if prompts and rng.random() < shared_prefix_prob:  # prefix-cache hits in "all" mode
            base = rng.choice(prompts)
            prompt = base[: rng.randint(1, len(base))] + [rng.randrange(vocab_size) for _ in range(rng.randint(1, 6))]
        else:
            prompt = [rng.randrange(vocab_size) for _ in range(rng.randint(2, 14))]
        prompt = prompt[: max_model_len - 12]
        prompts.append(prompt)
        rid = f"r{i}"
        events.setdefault(step, []).append(
            Add(rid, tuple(prompt), rng.randint(1, 10), rng.randrange(data_parallel_size)))
        if rng.random() < abort_prob:
            events.setdefault(step + rng.randint(0, 3), []).append(Abort(rid))
        elif rng.random() < preempt_prob:
            events.setdefault(step + rng.randint(1, 4), []).append(Preempt(rid))
    return Workload(cfg, events)


__all__ = ["Workload", "random_workload"]
