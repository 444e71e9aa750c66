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
from mambalab.guard_band import GuardSlotWritten
from mambalab.lab.reference_pool import MISSING, POOL as _POOL
from mambalab.lab.verdict import STATE_ATOL, Crash, Divergence, IllegalAccess, Verdict


class _ReferenceMemo:
    """The reference's answers by content: a shrinker judges dozens of candidates that hold the
    same requests, each on a new engine with the same model. The key is everything the model can
    read (its tensors' bytes, its plain values; ``worker/cuda_graph.py``'s reach), the identity of
    every function of mambalab's modules (a plant or a monkeypatch is another key) and the tokens;
    the answer is what ``greedy_ref`` / ``forward_ref`` returned, copied out to each caller."""

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self._entries: dict = {}
        self.hits = 0
        self.misses = 0

    @staticmethod
    def model_key(model) -> str:
        from mambalab.worker.cuda_graph import _reach, content_key

        return content_key(*_reach(model))

    def has(self, model_key: str, what: str, tokens: tuple) -> bool:
        return (model_key, what, tokens) in self._entries

    def clear(self) -> None:
        self._entries.clear()
        self.hits = self.misses = 0
        _POOL.forget()

    def get(self, model_key: str, what: str, tokens: tuple, compute):
        key = (model_key, what, tokens)
        if key in self._entries:
            self.hits += 1
            return self._entries[key]
        self.misses += 1
        out = _POOL.take(key)  # computed beside the engine (lab/reference_pool.py), if it was asked for there
        if out is MISSING:
            out = compute()
        if len(self._entries) >= self.max_entries:
            self._entries.pop(next(iter(self._entries)))
        self._entries[key] = out
        return out


_MEMO = _ReferenceMemo()


def model_key(model) -> str:
    """The memo's key of ``model`` (its weights, plain values and the code it runs)."""
    return _MEMO.model_key(model)


def _reference_length(engine: Engine, prompt: list[int], max_tokens: int) -> int:
    """How many tokens a request gets (capped where the engine caps it: max_model_len)."""
    return max(0, min(max_tokens, engine.cfg.runner.max_model_len - len(prompt)))


def reference_memoised(engine: Engine, prompt: list[int], max_tokens: int, model_key: str) -> bool:
    """Whether :func:`reference_output` would answer this request from the memo."""
    return _MEMO.has(model_key, f"greedy {_reference_length(engine, prompt, max_tokens)}", tuple(prompt))


def clear_reference_memo() -> None:
    """Forget every memoised reference (benchmarks, tests)."""
    _MEMO.clear()


def reference_output(engine: Engine, prompt: list[int], max_tokens: int, model_key: str | None = None) -> list[int]:
    """Greedy tokens of a request run alone (capped where the engine caps it: max_model_len).
    ``model_key``: :func:`model_key` of ``engine.model``, when the caller has it (the answer then
    comes from the memo when the same model saw the same request)."""
    n = _reference_length(engine, prompt, max_tokens)
    if model_key is None:
        return engine.model.greedy_ref(prompt, n)
    return list(_MEMO.get(model_key, f"greedy {n}", tuple(prompt),
                          lambda: tuple(engine.model.greedy_ref(prompt, n))))


def reference_final_state(engine: Engine, tokens: list[int], model_key: str) -> dict[str, torch.Tensor]:
    """``forward_ref(tokens)``'s final state (from the memo: the caller gets its own copies)."""
    st = _MEMO.get(model_key, "state", tuple(tokens),
                   lambda: {k: v.clone() for k, v in engine.model.forward_ref(tokens)[1].items()})
    return {k: v.clone() for k, v in st.items()}


def _requests(workload):
    """Each request of ``workload`` (an event with a prompt and ``max_tokens``) as ``(prompt, max_tokens)``, in the
    order the workload adds them."""
    for step in sorted(workload.events):
        for ev in workload.events[step]:
            prompt = list(getattr(ev, "prompt", ()))
            if prompt and hasattr(ev, "max_tokens"):
                yield prompt, ev.max_tokens


def reference_jobs(engine: Engine, workload, model_key: str):
    """One call per request of ``workload`` whose reference is not memoised yet: it computes the reference and,
    where there is one, the reference's final state after it (what :func:`judge` compares a kept final state
    with, when the request matches its reference). Work to do ahead of a verdict (idle time, a panel's build)."""
    for prompt, max_tokens in _requests(workload):
        if not reference_memoised(engine, prompt, max_tokens, model_key):
            yield lambda prompt=prompt, n=max_tokens: _reference_and_state(engine, prompt, n, model_key)


def reference_submit(engine: Engine, workload, model_key: str) -> int:
    """Hand the references of ``workload``'s requests (as :func:`reference_jobs` computes them) to the worker
    process of ``lab/reference_pool.py``, to compute while this process runs the engine; returns how many were
    sent. Nothing is sent when the pool is not usable (not started or ready yet, another code here, CUDA) or
    the engine has a drafter (its ``greedy_ref`` calls continue from the states the reference leaves here).
    Whatever is not sent is computed here when it is needed, as before."""
    if engine.drafter is not None:
        return 0
    todo = [(tuple(prompt), _reference_length(engine, prompt, max_tokens)) for prompt, max_tokens in _requests(workload)
            if not reference_memoised(engine, prompt, max_tokens, model_key)]
    if not todo or not _POOL.usable():  # (the code check only where something would be sent)
        return 0
    return sum(_POOL.submit(engine.model, model_key, prompt, n) for prompt, n in todo)


def _reference_and_state(engine: Engine, prompt: list[int], max_tokens: int, model_key: str) -> None:
    ref = reference_output(engine, prompt, max_tokens, model_key)
    if ref:
        reference_final_state(engine, prompt + ref[:-1], model_key)


def judge(engine: Engine, crash: EngineCrash | None = None) -> Verdict:
    """Compare every request's output (and final state, where kept) with its reference."""
    v = Verdict(ok=True, steps=engine.step)
    if crash is not None:
        v.ok = False
        err = crash.error
        v.illegal = IllegalAccess.from_error(err, crash.step, crash.rank)
        cuda_fault = "illegal memory access" in str(err).lower() or "illegal address" in str(err).lower()
        if v.illegal is None and isinstance(err, GuardSlotWritten):
            # no sanitizer (a GPU, or the CPU with it off): the pool's guard slot was stored to
            v.illegal = IllegalAccess(step=crash.step, rank=crash.rank, op="store", arg=err.pools[0], slot=-1,
                                      message=str(err))
        elif v.illegal is None and cuda_fault:
            # On a GPU there is no sanitizer: the hardware (or CUDA) reports the fault.
            v.illegal = IllegalAccess(step=crash.step, rank=crash.rank, message=str(err).splitlines()[0])
        elif v.illegal is None:
            v.crash = Crash.in_step(crash.step, crash.rank, err)
        return v
    mkey = model_key(engine.model) if engine.results else None
    for res in engine.results.values():
        expected = reference_output(engine, res.prompt, res.max_tokens, mkey)
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
            ref_state = reference_final_state(engine, res.prompt + res.output[:-1], mkey)
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


__all__ = ["judge", "run_and_judge", "reference_output", "reference_final_state", "reference_memoised",
           "reference_jobs", "reference_submit",
           "model_key", "clear_reference_memo"]
