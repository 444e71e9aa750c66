"""A workload as the hunter reports it: a step list and a runnable Python snippet."""

from __future__ import annotations

from dataclasses import fields

from mambalab.lab.bugs import BugConfig
from mambalab.engine.core import Add, EngineConfig, Event
from mambalab.worker.model_runner import RunnerConfig
from mambalab.lab.planted import Plant
from mambalab.lab.workload import Workload

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


__all__ = ["config_line", "snippet", "step_list"]
