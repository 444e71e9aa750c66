"""The tour's world (notebook 00): its engine's workload, and what one request's state is made of
in the tiny model."""

from __future__ import annotations

import random

import numpy as np

from mambalab.engine.core import EngineConfig
from mambalab.lab.workload import Workload
from mambalab.viz.text import Text


def tour_workload(seed: int = 0) -> Workload:
    """The tour's engine: three requests, FULL decode graphs of up to 4 rows, one state block each."""
    from mambalab.engine.core import Add
    from mambalab.worker.model_runner import RunnerConfig

    rng = random.Random(seed)
    cfg = EngineConfig(RunnerConfig(max_num_seqs=4, num_blocks=8), model_seed=seed)
    adds = [Add(f"r{i}", tuple(rng.randrange(32) for _ in range(rng.randint(3, 8))), 4) for i in range(3)]
    return Workload(cfg, {1: adds})


def state_table(cfg=None) -> Text:
    """What one request's state is made of in the tiny model, per state tensor (one pool slot)."""
    from mambalab.model.tiny_hybrid import TinyHybridConfig

    cfg = cfg if cfg is not None else TinyHybridConfig()
    shapes = cfg.state_shapes()
    what = {
        "mamba_conv": f"Mamba2 conv window: last {cfg.conv_state_len} inputs of {shapes['mamba_conv'][0]} channels",
        "mamba_ssm": "Mamba2 SSM state: heads x head dim x state dim",
        "gdn_conv": f"GDN conv window: last {cfg.conv_state_len} inputs of {shapes['gdn_conv'][0]} channels (q, k, v)",
        "gdn_recurrent": "GDN delta-rule matrix: value heads x V x K",
    }
    lines = []
    total = 0
    for k, shp in shapes.items():
        n = int(np.prod(shp))
        total += n
        lines.append(f"{k:<14} {str(tuple(shp)):<13} {n:>4} floats  {what[k]}")
    lines.append(f"{'one slot':<14} {'':<13} {total:>4} floats  (whatever the request's length)")
    return Text("\n".join(lines))
