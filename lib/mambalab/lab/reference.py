"""The per-request reference and the verdict: does the engine match each request run alone?

A request run alone has no batch, no padding, no CUDA graph and no
neighbour: whatever it produces is what the engine owes it. The verdict
(:mod:`mambalab.lab.verdict`) names the first divergence (step, request,
output position, expected vs got), or the illegal access / crash that
stopped the engine.
"""

from __future__ import annotations

import torch

from mambalab.engine.core import Engine, EngineCrash
from mambalab.lab.verdict import STATE_ATOL, Crash, Divergence, IllegalAccess, Verdict


def reference_output(engine: Engine, prompt: list[int], max_tokens: int) -> list[int]:
    """Greedy tokens of a request run alone (capped where the engine caps it: max_model_len)."""
    room = engine.cfg.runner.max_model_len - len(prompt)
    return engine.model.greedy_ref(prompt, max(0, min(max_tokens, room)))


def judge(engine: Engine, crash: EngineCrash | None = None) -> Verdict:
    """Compare every request's output (and final state, where kept) with its reference."""
    v = Verdict(ok=True, steps=engine.step)
    if crash is not None:
        v.ok = False
        err = crash.error
        v.illegal = IllegalAccess.from_error(err, crash.step, crash.rank)
        cuda_fault = "illegal memory access" in str(err).lower() or "illegal address" in str(err).lower()
        if v.illegal is None and cuda_fault:
            # On a GPU there is no sanitizer: the hardware (or CUDA) reports the fault.
            v.illegal = IllegalAccess(step=crash.step, rank=crash.rank, message=str(err).splitlines()[0])
        elif v.illegal is None:
            v.crash = Crash.in_step(crash.step, crash.rank, err)
        return v
    for res in engine.results.values():
        expected = reference_output(engine, res.prompt, res.max_tokens)
        got = res.output
        n = len(got) if res.status == "aborted" else max(len(got), len(expected))
        for i in range(n):
            e = expected[i] if i < len(expected) else None
            g = got[i] if i < len(got) else None
            if e != g:
                step = res.token_steps[i] if i < len(res.token_steps) else engine.step
                v.divergences.append(Divergence("token", res.req_id, res.rank, step, i, e, g))
                break
        if res.final_state is not None and res.output:
            _, ref_state = engine.model.forward_ref(res.prompt + res.output[:-1])
            for key, ref in ref_state.items():
                got_t = res.final_state[key].to(ref.device, ref.dtype)
                if key.endswith("conv"):
                    width = engine.model.cfg.conv_width - 1
                    got_t, ref = got_t[..., :width], ref[..., :width]
                if not torch.allclose(got_t, ref, atol=STATE_ATOL, rtol=0, equal_nan=False):
                    err = (got_t - ref).abs().nan_to_num(float("inf")).max().item()
                    step = res.token_steps[-1] if res.token_steps else engine.step
                    v.divergences.append(Divergence("state", res.req_id, res.rank, step, -1, 0.0,
                                                    f"{key} differs by {err:.3g}"))
                    break
    v.ok = not v.divergences
    return v


def run_and_judge(engine: Engine, max_steps: int = 500) -> Verdict:
    """Run the engine's workload to the end and judge it (a crash is a verdict too)."""
    try:
        engine.run(max_steps)
    except EngineCrash as crash:
        return judge(engine, crash)
    return judge(engine)


__all__ = ["judge", "run_and_judge", "reference_output"]
