"""The per-request reference and the verdict: does the engine match each request run alone?

A request run alone has no batch, no padding, no CUDA graph and no
neighbour: whatever it produces is what the engine owes it. The verdict
names the first divergence (step, request, output position, expected vs
got), or the illegal access / crash that stopped the engine.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from mambalab.engine.core import Engine, EngineCrash
from mambalab.lab.sanitizer import IllegalMemoryAccess

STATE_ATOL = 1e-4


@dataclass
class Divergence:
    kind: str  # "token" | "state"
    req_id: str
    rank: int
    step: int
    position: int
    expected: object
    got: object

    def describe(self) -> str:
        if self.kind == "token":
            return (f"step {self.step}: request {self.req_id} (rank {self.rank}) output token "
                    f"#{self.position}: expected {self.expected}, got {self.got}")
        return (f"request {self.req_id} (rank {self.rank}) final state: "
                f"{self.got} (expected the reference within {STATE_ATOL})")


@dataclass
class Verdict:
    ok: bool
    divergences: list[Divergence] = field(default_factory=list)
    illegal: dict | None = None
    crash: str | None = None
    steps: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def first(self) -> Divergence | None:
        return min(self.divergences, key=lambda d: (d.step, d.rank, d.req_id)) if self.divergences else None

    def summary(self) -> str:
        if self.illegal and self.illegal.get("kernel") is None:
            i = self.illegal
            return f"ILLEGAL MEMORY ACCESS at step {i['step']}, rank {i['rank']} (CUDA): {i.get('message')}"
        if self.illegal:
            i = self.illegal
            return (f"ILLEGAL MEMORY ACCESS at step {i['step']}, rank {i['rank']}: kernel {i['kernel']}, "
                    f"row {i['row']}, {i['op']} of {i['arg']} at slot {i['slot']} "
                    f"(element {i['index']}; the pool has {i['num_slots']} slots)")
        if self.crash:
            return f"CRASH: {self.crash}"
        if self.ok:
            return f"OK: every request matches its reference ({self.steps} steps)"
        d = self.first
        assert d is not None
        n = len({x.req_id for x in self.divergences})
        return f"DIVERGED: {d.describe()} ({n} request(s) differ)"

    def to_dict(self) -> dict:
        out = asdict(self)
        out["summary"] = self.summary()
        return out


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
        if isinstance(err, IllegalMemoryAccess) or isinstance(err.__cause__, IllegalMemoryAccess):
            ima = err if isinstance(err, IllegalMemoryAccess) else err.__cause__
            v.illegal = dict(step=crash.step, rank=crash.rank, kernel=ima.kernel, row=ima.row, op=ima.op,
                             arg=ima.arg, slot=ima.slot, index=ima.index, num_slots=ima.num_slots)
        elif "illegal memory access" in str(err).lower() or "illegal address" in str(err).lower():
            # On a GPU there is no sanitizer: the hardware (or CUDA) reports the fault.
            v.illegal = dict(step=crash.step, rank=crash.rank, kernel=None, row=None, op=None, arg=None,
                             slot=None, index=None, num_slots=None, message=str(err).splitlines()[0])
        else:
            v.crash = str(crash)
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


__all__ = ["Divergence", "Verdict", "judge", "run_and_judge", "reference_output"]
